"""Shared look of tierlab's plots: resource names and colours, markers, wrapping, atomic save."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

from matplotlib.figure import Figure

# resource -> (label, colour); order = display order (sim/devices.RESOURCES)
RESOURCE_STYLE: dict[str, tuple[str, str]] = {
    "gpu_compute": ("GPU compute", "#4c72b0"),
    "gpu_comm": ("GPU collectives (NVLink)", "#64b5cd"),
    "pcie_h2d": ("PCIe host→GPU", "#55a868"),
    "pcie_d2h": ("PCIe GPU→host", "#a1d99b"),
    "cpu_adam": ("CPU Adam", "#dd8452"),
    "nvme_read": ("NVMe read", "#c44e52"),
    "nvme_write": ("NVMe write", "#f4a3a5"),
    "network": ("network (NIC)", "#8172b3"),
}
BOTTLENECK_MARKERS = {"gpu_compute": "o", "gpu_comm": "h", "pcie_h2d": "s", "pcie_d2h": "s",
                      "cpu_adam": "D", "nvme_read": "^", "nvme_write": "v", "network": "P"}
PHASE_COLOURS = {"forward": "#f2f2f2", "backward": "#e3ecf7", "optimizer": "#fbeee3"}
FIG_DPI = 130


def _style(resource: str) -> tuple[str, str]:
    return RESOURCE_STYLE.get(resource, (resource.replace("_", " "), "#999999"))


def _wrap(label: str, width: int = 12) -> str:
    """Break a tick label over lines at spaces (and after commas)."""
    return "\n".join(textwrap.wrap(re.sub(r",(?=\S)", ", ", label), width)) or label


IMAGE_SUFFIXES = (".png", ".svg", ".pdf")


def image_targets(path: str | Path) -> list[Path]:
    """The files `save` writes: PATH for .png/.svg/.pdf, PATH.png + PATH.svg without a suffix;
    any other suffix (.jpeg, .gif, ...) is a ConfigError, not a surprise file name."""
    from tierlab.errors import ConfigError

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in IMAGE_SUFFIXES:
        return [path]
    if suffix and not suffix[1:].isdigit():    # 'run-1.5' is a name, '.jpeg' a format
        raise ConfigError(f"{path}: images are .png, .svg or .pdf (no suffix: both .png and "
                          f".svg), got {path.suffix!r}")
    return [path.with_name(path.name + ".png"), path.with_name(path.name + ".svg")]


def save(fig: Figure, path: str | Path) -> list[Path]:
    """Save atomically; suffix .png/.svg/.pdf, or none for both PNG and SVG. Returns the paths."""
    from tierlab.safeio import atomic_target

    targets = image_targets(path)
    for target in targets:
        with atomic_target(target) as tmp:
            fig.savefig(tmp, format=target.suffix[1:].lower(), dpi=FIG_DPI, bbox_inches="tight",
                        metadata={"Date": None} if target.suffix.lower() == ".svg" else None)
    return targets
