"""Shared look of tierlab's plots: resource names and colours, markers, wrapping, atomic save."""
from __future__ import annotations

import os
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


def save(fig: Figure, path: str | Path) -> list[Path]:
    """Save atomically; suffix .png/.svg/.pdf, or none for both PNG and SVG. Returns the paths."""
    path = Path(path)
    targets = [path] if path.suffix.lower() in (".png", ".svg", ".pdf") else \
        [path.with_name(path.name + ".png"), path.with_name(path.name + ".svg")]
    for target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            fig.savefig(tmp, format=target.suffix[1:].lower(), dpi=FIG_DPI, bbox_inches="tight",
                        metadata={"Date": None} if target.suffix.lower() == ".svg" else None)
            tmp.replace(target)
        finally:
            if tmp.exists():
                tmp.unlink()
    return targets

