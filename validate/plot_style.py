"""Shared look of tierlab's plots: resource names and colours, markers, wrapping, the scenario
line every figure carries, the legend placement that keeps legends off the data, atomic save."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any, Mapping, Sequence

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


# ----------------------------------------------------------------------------------------------
# the scenario a figure shows, in words (one home: every plot's title and footer use these)

_DEVICES = {"cpu": "CPU", "nvme": "NVMe"}


def zero_text(sc: Mapping[str, Any], short: bool = False) -> str:
    """'ZeRO-3, params + optimizer on CPU', 'ZeRO-3, params on CPU, optimizer on NVMe',
    'ZeRO-0, no offload' (short: 'ZeRO-3, params CPU, optim. NVMe') of a SimResult.scenario."""
    if sc.get("zero_stage") is None:
        return ""
    p, o = (_DEVICES.get(str(sc.get(k) or "none").lower()) for k in
            ("offload_param", "offload_optimizer"))
    if short:
        parts = [f"params {p}" if p else "", f"optim. {o}" if o else ""]
        return ", ".join([f"ZeRO-{sc['zero_stage']}", *filter(None, parts)] +
                          ([] if p or o else ["no offload"]))
    if p and p == o:
        where = f"params + optimizer on {p}"
    else:
        where = ", ".join(filter(None, [f"params on {p}" if p else "",
                                        f"optimizer on {o}" if o else ""])) or "no offload"
    return f"ZeRO-{sc['zero_stage']}, {where}"


def gpus_text(sc: Mapping[str, Any]) -> str:
    """'1 node x 8 GPUs' (or 'N GPUs' where the node count is not recorded: sweep rows carry the
    world size only, sweeps/run.scenario_columns)."""
    nodes, per = sc.get("nodes"), sc.get("gpus_per_node")
    if not (nodes and per) and int(sc.get("world_size") or 0) == 1:
        nodes, per = 1, 1
    if nodes and per:
        return (f"{nodes} node{'s' if int(nodes) > 1 else ''} x {per} "
                f"GPU{'s' if int(per) > 1 else ''}")
    world = sc.get("world_size") or 1
    return f"{world} GPU{'s' if int(world) > 1 else ''}"


# field -> (prefix written once, how a scenario's value reads)
_FIELDS = {"model": ("", lambda sc: sc.get("model")),
           "hardware": ("on ", lambda sc: sc.get("hardware")),
           "gpus": ("", lambda sc: gpus_text(sc) if sc.get("hardware") else None),
           "zero": ("", zero_text),
           "micro_batch": ("micro-batch ", lambda sc: sc.get("micro_batch")),
           "grad_accum": ("grad. accum. ", lambda sc: sc.get("grad_accum")),
           "seq_len": ("seq ", lambda sc: sc.get("seq_len")),
           "precision": ("", lambda sc: sc.get("precision"))}
_MANY = {"model": "models", "hardware": "machines", "gpus": "GPU counts",
         "zero": "ZeRO setups", "micro_batch": "sizes", "grad_accum": "settings",
         "seq_len": "lengths", "precision": "precisions"}


def _values(scs: Sequence[Mapping[str, Any]], key: str) -> tuple[list[str], bool]:
    """A field's distinct values over the scenarios, and whether every scenario has the same."""
    got = [_FIELDS[key][1](sc) for sc in scs]
    texts = [str(v) for v in got if v not in (None, "")]
    distinct = list(dict.fromkeys(texts))
    return distinct, len(distinct) == 1 and len(texts) == len(got)


def scenario_line(scenarios: Sequence[Mapping[str, Any]] | Mapping[str, Any],
                  varying: str = "omit") -> str:
    """What a figure shows, in one line: 'TinyLlama-1.1B on workstation-rtx3070 (1 node x 1 GPU),
    ZeRO-3, params + optimizer on CPU, micro-batch 4, grad. accum. 1, seq 1024, bf16'. Over several
    scenarios (SimResult.scenario dicts) a field that differs is left out (`varying="omit"`: the
    plot's bars, axis or legend name it) or its values are joined with ' | ' ("join": 'micro-batch
    1 | 4 | 8'; more than four: counted, 'on 5 machines')."""
    scs = [scenarios] if isinstance(scenarios, Mapping) else [s for s in scenarios if s]
    if not scs:
        return ""
    parts: dict[str, str] = {}
    for key, (prefix, _) in _FIELDS.items():
        values, same = _values(scs, key)
        if same:
            parts[key] = prefix + values[0]
        elif values and varying == "join":
            parts[key] = prefix + (" | ".join(values) if len(values) <= 4 else
                                   f"{len(values)} {_MANY[key]}")
    head = " ".join(filter(None, (parts.pop("model", ""), parts.pop("hardware", ""))))
    gpus = parts.pop("gpus", "")
    head += f" ({gpus})" if head and gpus else gpus
    return ", ".join(p for p in [head, *parts.values()] if p)


def where_text(scenarios: Sequence[Mapping[str, Any]]) -> str:
    """'TinyLlama-1.1B on workstation-rtx3070 (1 node x 1 GPU)' for a title, when every scenario
    has that model, hardware and GPU count; '' otherwise."""
    scs = [s for s in scenarios if s]
    if not scs:
        return ""
    (model, m_same), (hw, h_same), (gpus, g_same) = (_values(scs, k) for k in
                                                     ("model", "hardware", "gpus"))
    if not (m_same and h_same and g_same):
        return ""
    return f"{model[0]} on {hw[0]} ({gpus[0]})"


def add_footer(fig: Figure, text: str, y: float = 0.005) -> None:
    """The scenario line, small and grey, at the figure's bottom left (wrapped to the width)."""
    if text:
        width = max(60, int(fig.get_figwidth() * 15.5))      # ~7.5-pt characters per inch
        fig.text(0.01, y, "\n".join(textwrap.wrap(text, width)), fontsize=7.5, color="#555555",
                 ha="left", va="bottom")


def footer_lines(text: str, fig: Figure) -> int:
    """How many lines add_footer takes for `text` on `fig` (for the room kept under the axes)."""
    return len(textwrap.wrap(text, max(60, int(fig.get_figwidth() * 15.5)))) if text else 0


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
