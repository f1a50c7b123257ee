"""Shared look of tierlab's plots: resource names and colours, markers, wrapping, atomic save."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

from matplotlib.figure import Figure

from tierlab.sim.resources import REGISTRY

# resource -> (label, colour) and its bottleneck marker, in display order: sim/resources.py
RESOURCE_STYLE: dict[str, tuple[str, str]] = {r.name: (r.label, r.colour) for r in REGISTRY}
BOTTLENECK_MARKERS: dict[str, str] = {r.name: r.marker for r in REGISTRY}
PHASE_COLOURS = {"forward": "#f2f2f2", "backward": "#e3ecf7", "optimizer": "#fbeee3"}
FIG_DPI = 130


def resource_style(resource: str) -> tuple[str, str]:
    """(label, colour) of a resource of sim/resources.py."""
    return RESOURCE_STYLE[resource]


def wrap_title(label: str, width: int = 12) -> str:
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
