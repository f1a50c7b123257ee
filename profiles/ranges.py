"""How sure a profile number is: the default range of a field that states none.

A profile field may carry `range: [low, high]` beside `value` and `source` (profiles/load.py
reads it). A field without one gets its range here, from the kind of its source, by ONE table
(docs/ranges.md explains each row). Every range is read as the central 80% interval of the
field (its 10th to 90th percentile): sim/ranges.py combines them into the step time's.

Which fields are uncertain at all is a property of the field, by its name (SI unit in the name):
- exact: sizes and counts a datasheet or the OS states (HBM, DRAM, drive capacity, cores, GPUs per
  node, peak FLOP/s: a datasheet peak is a definition; the achieved fraction is matmul_efficiency);
- rate: higher is faster (`*_Bps`, `*_params_per_s`, the curves matmul_efficiency and aio_points as
  a factor on every point);
- cost: higher is slower (`*_s`, `*_s_per_*`, the memory overheads `cuda_context_bytes` and
  `process_baseline_bytes`).
"""
from __future__ import annotations

import re
from typing import Any, Iterable

from tierlab.profiles.fields import EXACT_FIELDS


CURVES = frozenset({"matmul_efficiency", "aio_points"})
"""Measured curves: their range is a factor on every point (1.0 = the curve as measured)."""

OVERHEAD_FIELDS = frozenset({"cuda_context_bytes", "process_baseline_bytes"})
"""Byte fields that are overheads (costs), not capacities."""

DEFAULT_RANGES: dict[str, dict[str, tuple[float, float]]] = {
    # source kind: {field class: (low, high) as factors on the value}
    # measured by tierlab calibrate, no repeats recorded in the profile: run-to-run and
    # machine-to-machine spread of one kind (five H200 hosts: CPU Adam 5.10-5.66 G/s, ±5%;
    # pageable PCIe 9.2-15.9 GB/s) -> ±10%
    "measured": {"rate": (0.90, 1.10), "cost": (0.90, 1.10)},
    # a vendor datasheet or a published figure is a peak: achieved is below it, by up to a
    # quarter (PCIe Gen4 x16: 31.5 GB/s raw, ~25 GB/s achieved pinned); costs above it
    "datasheet": {"rate": (0.75, 1.00), "cost": (1.00, 1.50)},
    # an estimate or rule of thumb (CPU Adam from core count, DRAM from channels, PCIe
    # efficiency, "typical" latencies): wide, ±40%
    "estimate": {"rate": (0.60, 1.40), "cost": (0.60, 1.40)},
    # fitted software terms without a stated spread across machines: ±30% (the spread of the
    # stated ones, profiles/software/*.yaml, is of that order)
    "fitted": {"rate": (0.70, 1.30), "cost": (0.70, 1.30)},
}

_ESTIMATE_WORDS = ("estimate", "assumed", "placeholder", "typical", "rule of thumb", "guess")


def source_kind(source: str) -> str:
    """'measured' / 'fitted' / 'estimate' / 'datasheet' (vendor datasheets and published
    figures alike) from a source text's wording."""
    text = source.strip().lower()
    if text.startswith("measured"):
        return "measured"
    if text.startswith(("fitted", "refitted")):
        return "fitted"
    if any(w in text for w in _ESTIMATE_WORDS):
        return "estimate"
    return "datasheet"


CALIBRATED = "by tierlab calibrate"
"""How the source of a figure `tierlab calibrate` measured reads (runner/calibrate_profile.py:
'measured <date> by tierlab calibrate: ...')."""


def calibrated(source: str) -> bool:
    """A profile figure's source says `tierlab calibrate` measured it on the host."""
    return source_kind(source) == "measured" and CALIBRATED in source


def field_class(field: str) -> str | None:
    """'rate', 'cost' or None (exact) for a schema field name (`peak_flops.bf16`,
    `host_costs.zero3_hook_s_per_module` included)."""
    name = field.rpartition(".")[2] if field.startswith("host_costs.") else field
    if name in EXACT_FIELDS or field.startswith("peak_flops."):
        return None
    if name in OVERHEAD_FIELDS or name.endswith("_s") or "_s_per_" in name:
        return "cost"
    if name.endswith("_Bps") or name.endswith("_per_s") or name in CURVES:
        return "rate"
    return None


def default_range(field: str, value: float, source: str) -> tuple[float, float] | None:
    """The range of a field that states none, in its SI unit; None for an exact field."""
    cls = field_class(field)
    if cls is None:
        return None
    lo, hi = DEFAULT_RANGES[source_kind(source)][cls]
    return (value * lo, value * hi)


# ----------------------------------------------------------------------------------------------
# trust: where the inputs of an answer come from

KIND_ORDER = ("measured", "fitted", "datasheet", "estimate")
"""Source kinds, most certain first: a group of inputs is as sure as its least certain one."""
TRUST_INPUTS: dict[str, tuple[str, tuple[str, ...]]] = {
    # resource (sim/resources.py) -> (profile part, the fields that time its work)
    "gpu_compute": ("gpu", ("matmul_efficiency",)),     # peak_flops is a definition (exact)
    "gpu_comm": ("gpu", ("nvlink_bandwidth_Bps",)),
    "pcie_h2d": ("pcie", ("h2d_pinned_Bps", "h2d_pageable_Bps")),
    "pcie_d2h": ("pcie", ("d2h_pinned_Bps", "d2h_pageable_Bps")),
    "cpu_adam": ("cpu", ("adam_params_per_s",)),
    "nvme_read": ("nvme", ("read_bandwidth_Bps",)),
    "nvme_write": ("nvme", ("write_bandwidth_Bps",)),
    "network": ("network", ("nic_bandwidth_Bps",)),
    "cpu_host": ("software", ()),                       # every term of the software profile
}
"""What each resource's speed is read from, for the trust line of a prediction."""
MEMORY_INPUTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "GPU memory overhead": ("gpu", ("cuda_context_bytes",)),
    "host process baseline": ("software", ("process_baseline_bytes",)),
}
"""The memory plan's uncertain inputs (capacities are exact: a datasheet or the OS states them)."""


HOST_SPEED_TERMS = ("fit_adam_params_per_s", "host_speed_share")
"""The host-speed rule's inputs (sim/host_costs.host_speed_factor): inputs of a prediction only
where the software profile's host_speed_share is above 0."""


def _sources(hardware: Any, software: Any, part: str) -> dict:
    if part == "software":
        sources = dict(getattr(software, "sources", None) or {})
        if not getattr(software, "host_speed_share", 0):
            for key in HOST_SPEED_TERMS:
                sources.pop(key, None)
        return sources
    obj = getattr(hardware, part, None)
    return dict(getattr(obj, "sources", None) or {})


def trust_entry(hardware: Any, software: Any, part: str, fields: Iterable[str]) -> dict:
    """{kind, calibrated, measured_on, date, inputs: {part.field: kind}} of one group of inputs;
    kind is the least certain of them; measured_on names the system the measured ones came
    with (the profile `tierlab calibrate` wrote on that machine)."""
    sources = _sources(hardware, software, part)
    names = list(fields) or sorted(sources)
    inputs = {f"{part}.{f}": source_kind(sources[f]) for f in names if f in sources}
    if not inputs:
        return {"kind": "estimate", "calibrated": False, "measured_on": None, "date": None,
                "inputs": {}}
    kind = max(inputs.values(), key=KIND_ORDER.index)
    dates = sorted({m.group(0) for f in names if f in sources and inputs[f"{part}.{f}"] ==
                    "measured" for m in [re.search(r"\d{4}-\d{2}-\d{2}", sources[f])] if m})
    # the software profile's terms were fitted and measured on the project's test hosts, never
    # on this hardware: they are not a calibration of it
    measured = "measured" in inputs.values() and part != "software"
    return {"kind": kind, "calibrated": measured,
            "measured_on": getattr(hardware, "name", None) if measured else None,
            "date": dates[-1] if dates else None, "inputs": inputs}


def trust_of(hardware: Any, software: Any = None, resources: Iterable[str] | None = None,
             memory: bool = False) -> dict[str, dict]:
    """Where a prediction's inputs come from: resource -> trust_entry, for `resources` (default:
    all of TRUST_INPUTS), plus MEMORY_INPUTS' groups with `memory`."""
    names = TRUST_INPUTS if resources is None else resources
    groups = {r: TRUST_INPUTS[r] for r in names if r in TRUST_INPUTS}
    if memory:
        groups = {**groups, **MEMORY_INPUTS}
    return {name: trust_entry(hardware, software, part, fields)
            for name, (part, fields) in groups.items()}


def trust_phrase(entry: dict) -> str:
    """'datasheet, never calibrated', 'measured 2026-11-30 on h200x2-host', 'fitted'."""
    kind = entry["kind"]
    if entry["calibrated"]:
        when = f" {entry['date']}" if entry["date"] else ""
        head = kind if kind == "measured" else f"{kind} (partly measured{when})"
        return f"{head}{when if kind == 'measured' else ''} on {entry['measured_on']}"
    return kind if kind == "fitted" else f"{kind}, never calibrated"
