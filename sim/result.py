"""SimResult: what one simulated step tells, as a value; JSON and Chrome/Perfetto trace views."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from tierlab.sim.devices import Span
from tierlab.sim.memory import headroom_text
from tierlab.profiles.ranges import trust_phrase
from tierlab.sim.resources import BY_NAME, RESOURCES
from tierlab.units import fmt_gib, gib


@dataclass(frozen=True, kw_only=True)
class SimResult:
    """One representative rank's optimizer step (all ranks are alike by symmetry)."""

    step_time_s: float
    """Steady-state step (prefetch trace complete), forward + backward + optimizer."""
    first_step_time_s: float
    """Step 1 of ZeRO-3: no recorded module trace yet, so no prefetch and every use re-gathers."""
    phases: Mapping[str, float]
    """'forward_s', 'backward_s', 'optimizer_s' of the steady step (summed over micro-steps)."""
    busy_s: Mapping[str, float]
    """Seconds each resource is busy in the steady step (sim/resources.RESOURCES)."""
    exposed_s: Mapping[str, float]
    """Seconds each resource spends on the critical path; they sum to step_time_s."""
    bottleneck: str
    """Resource with the most exposed time."""
    memory: Any
    """The memory planner's MemoryPlan (tiers gpu/host/nvme)."""
    fits: bool
    binding_tier: str | None = None
    tokens_per_s: float
    """Tokens of the whole job per second: micro-batch x accumulation x seq x world / step."""
    tflops_per_gpu: float
    """Model FLOPs incl. recompute (Megatron convention, as DeepSpeed reports) / step / 1e12."""
    lower_bound_s: float
    """Roofline: max over resources of the work it must do / its capacity (= busy time)."""
    efficiency: float
    """lower_bound_s / step_time_s."""
    bytes_moved: Mapping[str, float]
    """Bytes per step of one rank per tier: pcie_h2d, pcie_d2h, nvme_read, nvme_write, and the
    full-tensor bytes of collectives on gpu_comm and network."""
    spans: tuple[Span, ...] = ()
    """Every operation of the steady step, for the trace."""
    scenario: Mapping[str, Any] = field(default_factory=dict)
    """Names and sizes that produced this result (model, hardware, world size, batch)."""
    step_range: Any = None
    """sim/ranges.StepRange: the steady step's central 80% interval and what widens it (None
    unless simulate(..., ranges=True))."""
    memory_margin: Mapping[str, Any] | None = None
    """Tiers whose fit verdict flips within the overheads' ranges (sim/ranges.memory_margin);
    None unless simulate(..., ranges=True)."""

    @property
    def step_time_range_s(self) -> tuple[float, float] | None:
        r = self.step_range
        return (r.low_s, r.high_s) if r is not None else None

    def to_dict(self, *, spans: bool = False) -> dict:
        """The JSON of `tierlab simulate --json` (keys as issue 3 lists them, plus extras)."""
        mem = self.memory
        out = {
            "step_time_s": self.step_time_s,
            "first_step_time_s": self.first_step_time_s,
            "phases": dict(self.phases),
            "exposed_s": dict(self.exposed_s),
            "busy_s": dict(self.busy_s),
            "bottleneck": self.bottleneck,
            "memory_GiB": {name: gib(t.used_bytes) for name, t in mem.tiers.items()},
            "fits": self.fits,
            "binding_tier": self.binding_tier,
            "tokens_per_s": self.tokens_per_s,
            "tflops_per_gpu": self.tflops_per_gpu,
            "lower_bound_s": self.lower_bound_s,
            "efficiency": self.efficiency,
            "bytes_moved": dict(self.bytes_moved),
            "scenario": dict(self.scenario),
            "memory_plan": mem.to_dict(),
        }
        if self.step_range is not None:
            out["step_time_range_s"] = list(self.step_time_range_s)
            out["range_drivers"] = [d.to_dict() for d in self.step_range.drivers[:5]]
            out["memory_margin"] = dict(self.memory_margin or {})
        if spans:
            out["spans"] = [[s.resource, s.name, s.start_s, s.end_s] for s in self.spans]
        return out

    def trace_events(self) -> dict:
        """Chrome trace JSON (chrome://tracing, ui.perfetto.dev): one track per resource."""
        tid = {name: i for i, name in enumerate(RESOURCES)}
        events: list[dict] = [{"name": "process_name", "ph": "M", "pid": 0, "tid": 0,
                               "args": {"name": f"tierlab rank 0 ({self.scenario.get('model', '')})"}}]
        for name, i in tid.items():
            events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": i,
                           "args": {"name": name}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": i,
                           "args": {"sort_index": i}})
        for s in self.spans:
            events.append({"name": s.name, "cat": s.resource, "ph": "X", "pid": 0,
                           "tid": tid.get(s.resource, len(tid)), "ts": s.start_s * 1e6,
                           "dur": (s.end_s - s.start_s) * 1e6})
        return {"traceEvents": events, "displayTimeUnit": "ms"}


def format_result(r: SimResult, title: str) -> str:
    """`tierlab simulate`'s text: step and phases, throughput, busy/exposed time per resource,
    bottleneck, memory per tier (GiB) and the verdict."""
    p = r.phases
    lines = [title,
             f"step {step_text(r)} (step 1: {r.first_step_time_s:.3f} s): forward "
             f"{p['forward_s']:.3f} s, backward {p['backward_s']:.3f} s, optimizer "
             f"{p['optimizer_s']:.3f} s",
             f"{r.tokens_per_s:,.0f} tokens/s, {r.tflops_per_gpu:.1f} TFLOP/s per GPU, "
             f"roofline {r.lower_bound_s:.3f} s (efficiency {r.efficiency:.0%})",
             "resource       busy s   exposed s"]
    for name, busy in r.busy_s.items():
        if busy or r.exposed_s[name]:
            lines.append(f"{name:13s} {busy:8.3f}  {r.exposed_s[name]:9.3f}")
    lines.append(f"bottleneck: {r.bottleneck}")
    for name, t in r.memory.tiers.items():
        lines.append(f"memory {name:5s} {fmt_gib(t.used_bytes)} of {fmt_gib(t.capacity_bytes)}"
                     f"{'' if t.fits else '  DOES NOT FIT'}")
    lines.append(f"fits: {'yes' if r.fits else 'no (' + str(r.binding_tier) + ')'}")
    lines += [f"  margin: {m['statement']}" for m in (r.memory_margin or {}).values()]
    lines.append(f"headroom kept free: {headroom_text(r.memory)}")
    if r.step_range is not None and r.step_range.drivers:
        lines.append("range drivers (step at the input's low / high end): " + "; ".join(
            f"{d.input} {d.step_at_low_s:.3f} / {d.step_at_high_s:.3f} s"
            for d in r.step_range.drivers[:3]))
    return "\n".join(lines)


def step_text(r: SimResult) -> str:
    """'1.310 s (1.10-2.60)': the steady step and its central 80% range when it has one."""
    span = r.step_time_range_s
    return f"{r.step_time_s:.3f} s" + (f" ({span[0]:.2f}-{span[1]:.2f})" if span else "")


def table_row(name: str, r: SimResult) -> dict:
    """One row of the comparison table (memory in GiB)."""
    tiers = r.memory.tiers
    return {"config": name, "gpu_mem": fmt_gib(tiers["gpu"].used_bytes),
            "host_mem": fmt_gib(tiers["host"].used_bytes),
            "nvme": fmt_gib(tiers["nvme"].used_bytes), "step (80% range)": step_text(r),
            "tokens/s": f"{r.tokens_per_s:,.0f}", "bottleneck": r.bottleneck,
            "fits": "yes" if r.fits else f"NO ({r.binding_tier})"}


def format_table(results: list[tuple[str, SimResult]], title: str) -> str:
    """Several results side by side, one row each (`tierlab simulate`'s built-in comparison)."""
    rows = [table_row(name, r) for name, r in results]
    cols = list(rows[0])
    width = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    lines = [title, "  ".join(c.ljust(width[c]) for c in cols).rstrip()]
    lines += ["  ".join(str(r[c]).ljust(width[c]) for c in cols).rstrip() for r in rows]
    return "\n".join(lines)


def trust_line(trust: dict) -> str:
    """'inputs: GPU compute, CPU Adam: estimate, never calibrated; NVMe read: datasheet, ...':
    where a prediction's inputs come from, grouped by how sure they are (profiles/ranges.py)."""
    groups: dict[str, list[str]] = {}
    for name, entry in trust.items():
        groups.setdefault(trust_phrase(entry), []).append(
            BY_NAME[name].label if name in BY_NAME else name)
    return "inputs: " + "; ".join(f"{', '.join(v)}: {k}" for k, v in groups.items())
