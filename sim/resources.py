"""The resources of a simulated step, declared once: name, label, colour, plot marker, the unit of
the work queued on it, and the profile part whose numbers time it.

The engine makes one SimPy device per entry (sim/devices.py), SimResult reports busy and exposed
seconds per entry, the plots draw each in its colour (validate/plot_style.py), sweep rows get
`busy_<name>_s` / `exposed_<name>_s` columns, and docs/simulator.md quotes `markdown_table()`.
Order is display order.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    name: str
    """Key of SimResult.busy_s / exposed_s and of trace tracks."""
    label: str
    """What a plot or table calls it."""
    colour: str
    """Matplotlib colour of its bars and lanes."""
    marker: str
    """Matplotlib marker when it binds a sweep point."""
    unit: str
    """What the work queued on it is measured in."""
    reads: str
    """The profile numbers that say how fast it serves that work."""
    parts: tuple[str, ...] = ()
    """The profile parts (Hardware fields, 'software' for the software profile, a dotted name
    for one field of a part) whose numbers the engine's Timer reads to time its ops: a range's
    corner that moves one part re-times only the ops of the resources that read it
    (sim/ranges.py; tests/test_ranges_fast.py holds it)."""
    moves_bytes: bool = False
    """Its ops carry bytes (SimResult.bytes_moved reports them per step)."""


REGISTRY: tuple[Resource, ...] = (
    Resource("gpu_compute", "GPU compute", "#4c72b0", "o", "FLOP",
             "gpu.peak_flops x the GEMM efficiency curve; gpu.hbm_bandwidth_Bps",
             parts=("gpu",)),
    Resource("gpu_comm", "GPU collectives (NVLink)", "#64b5cd", "h", "bytes",
             "gpu.nvlink_bandwidth_Bps", parts=("gpu", "pcie", "network"),
             moves_bytes=True),
    Resource("pcie_h2d", "PCIe host→GPU", "#55a868", "s", "bytes",
             "pcie.h2d_pinned_Bps / h2d_pageable_Bps, pcie.switch_uplink_Bps",
             parts=("pcie",), moves_bytes=True),
    Resource("pcie_d2h", "PCIe GPU→host", "#a1d99b", "s", "bytes",
             "pcie.d2h_pinned_Bps / d2h_pageable_Bps, pcie.switch_uplink_Bps",
             parts=("pcie",), moves_bytes=True),
    Resource("cpu_adam", "CPU Adam", "#dd8452", "D", "parameters",
             "cpu.adam_params_per_s, cpu.dram_bandwidth_Bps", parts=("cpu",)),
    Resource("nvme_read", "NVMe read", "#c44e52", "^", "bytes",
             "nvme.read_bandwidth_Bps x drives, latency_s, aio_points", parts=("nvme",),
             moves_bytes=True),
    Resource("nvme_write", "NVMe write", "#f4a3a5", "v", "bytes",
             "nvme.write_bandwidth_Bps x drives, latency_s, aio_points", parts=("nvme",),
             moves_bytes=True),
    Resource("network", "network (NIC)", "#8172b3", "P", "bytes",
             "network.nic_bandwidth_Bps, latency_s", parts=("gpu", "pcie", "network"),
             moves_bytes=True),
    Resource("cpu_host", "CPU host thread (dispatch, ZeRO hooks)", "#937860", "X", "events",
             "software profile host costs, cpu.host_costs (measured by calibrate)",
             parts=("software", "cpu.host_costs")),
)

RESOURCES: tuple[str, ...] = tuple(r.name for r in REGISTRY)
"""Resource names in display order."""
BY_NAME: dict[str, Resource] = {r.name: r for r in REGISTRY}
READS: dict[str, frozenset[str]] = {r.name: frozenset(r.parts) for r in REGISTRY}
"""Resource name -> the profile parts its ops' times read."""
BYTE_RESOURCES: tuple[str, ...] = tuple(r.name for r in REGISTRY if r.moves_bytes)
"""The resources whose bytes per step SimResult.bytes_moved reports."""


def markdown_table() -> str:
    """The registry as a Markdown table (docs/simulator.md quotes it; tests/test_docs.py checks)."""
    lines = ["| resource | label | work in | timed by |", "|---|---|---|---|"]
    lines += [f"| `{r.name}` | {r.label} | {r.unit} | {r.reads} |" for r in REGISTRY]
    return "\n".join(lines)
