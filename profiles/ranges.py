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

EXACT_FIELDS = frozenset({"hbm_bytes", "dram_bytes", "capacity_bytes", "sockets", "cores",
                          "gpus_per_node", "nvme_drives", "nodes", "gpus_per_switch",
                          "nvme_per_switch"})
"""Fields with no default range (a stated range in the profile is still honoured)."""

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
    if text.startswith("fitted"):
        return "fitted"
    if any(w in text for w in _ESTIMATE_WORDS):
        return "estimate"
    return "datasheet"


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
