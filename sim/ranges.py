"""How sure a predicted step time is: its central 80% interval and the inputs that widen it.

Every uncertain profile number has a range, read as its central 80% interval (profiles/ranges.py:
stated in the profile, or by its source kind). The step time's interval comes from corner
analysis, one input at a time, deterministic (no sampling):

1. For each uncertain input i and each end of its range, the step time's change d_i is bracketed
   without simulating. The schedule is a fixed DAG (engine.py), so the old critical path, re-timed
   with the input at that end, is still a path: `d_cp` (the change of its length) is a lower
   bound of d_i. A slower input adds at most the summed growth of all its ops (`d_busy`), and a
   faster one can only shorten the step. So d_i lies in [d_cp, d_busy] when slower and in
   [d_cp, 0] when faster.
2. The ends whose brackets are widest are re-simulated exactly (the steady step only), as many as
   the budget allows: twice the point simulation's own step simulations, so a range costs about
   3x a point. The others keep d_cp (exact when the input's ops stay on the critical path).
3. The ends are combined by root-sum-square of the one-sided changes, as for independent inputs:
   low = point - sqrt(sum of squared decreases), high = point + sqrt(sum of squared increases).
   For inputs whose changes add linearly and whose P10/P90 are the range ends, this is the
   output's P10/P90.
4. The simulator's own error enters as one more input when the software profile states it
   (`simulator_error`: a factor on the step, the 10th-90th percentile of measured / predicted
   over the runs its fitted terms were not fitted on; validate/spread.py measures it).

`range_drivers` lists the inputs by their larger one-sided change, largest first. Pure: nothing
here prints, writes or reads files.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace

from tierlab.profiles.fields import NOT_STEADY
from tierlab.profiles.ranges import CURVES, field_class
from tierlab.profiles.schema import Hardware, Model, Software
from tierlab.sim import host_costs
from tierlab.sim.engine import Timer, run_steps, step_seconds, summarize
from tierlab.sim.result import SimResult
from tierlab.sim.strategy import Strategy

PARTS = ("gpu", "cpu", "pcie", "nvme", "network")
"""Hardware parts whose ranged fields can move the step time."""


TOLERANCE = 0.005
"""A bracket narrower than this fraction of the step is taken as exact (no re-simulation)."""

TOP_DRIVERS = 5
"""How many inputs `range_drivers` lists."""


@dataclass(frozen=True, kw_only=True)
class Driver:
    """One uncertain input and what its range does to the steady step time."""

    input: str
    """'part.field' as in the schema: 'cpu.adam_params_per_s', 'software.zero3_hook_s_per_module',
    'gpu.matmul_efficiency' / 'nvme.aio_points' (a factor on the curve), 'cpu.host_costs.<term>'."""
    value: float
    low: float
    high: float
    """The input's range, SI units (the field name says which)."""
    step_at_low_s: float
    step_at_high_s: float
    how: str
    """'simulated' (both ends re-simulated), 'critical path' (neither), 'mixed', or 'validated
    error' (the software profile's simulator_error)."""

    def to_dict(self) -> dict:
        return {"input": self.input, "value": self.value, "low": self.low, "high": self.high,
                "step_at_low_s": self.step_at_low_s, "step_at_high_s": self.step_at_high_s,
                "how": self.how}


@dataclass(frozen=True, kw_only=True)
class StepRange:
    point_s: float
    low_s: float
    high_s: float
    drivers: tuple[Driver, ...]
    """Every input that moves the step, largest one-sided change first."""
    simulations: int
    """Steady-step simulations the range cost beyond the point."""

    def contains(self, seconds: float) -> bool:
        return self.low_s <= seconds <= self.high_s


# ----------------------------------------------------------------------------------------------
# the inputs

def uncertain_inputs(hw: Hardware, software: Software | None) -> list[tuple[str, float, float, float]]:
    """(input, value, low, high) of every ranged field that can move the steady step."""
    out = []
    for part in PARTS:
        obj = getattr(hw, part)
        if obj is None:
            continue
        for name, (lo, hi) in sorted(obj.ranges.items()):
            if lo < hi and name not in NOT_STEADY and field_class(name) is not None:
                out.append((f"{part}.{name}", _value(obj, name), lo, hi))
    if software is not None:
        measured = hw.cpu.host_costs          # these override the software profile's terms
        for name, (lo, hi) in sorted(software.ranges.items()):
            if lo < hi and name not in NOT_STEADY and name not in measured \
                    and getattr(software, name, None) is not None:
                out.append((f"software.{name}", getattr(software, name), lo, hi))
    return out


def _value(obj, name: str) -> float:
    if name in CURVES:
        return 1.0
    head, _, key = name.partition(".")
    if head in ("peak_flops", "host_costs") and key:
        return getattr(obj, head)[key]
    return getattr(obj, name)


def perturbed(hw: Hardware, software: Software | None, name: str, value: float
              ) -> tuple[Hardware, Software | None]:
    """`hw` and `software` with one input set to `value` (a factor for a curve)."""
    part, _, fld = name.partition(".")
    if part == "software":
        return hw, replace(software, **{fld: value})
    obj = getattr(hw, part)
    head, _, key = fld.partition(".")
    if fld == "matmul_efficiency":
        new = replace(obj, matmul_efficiency=tuple((f, min(1.0, e * value))
                                                   for f, e in obj.matmul_efficiency))
    elif fld == "aio_points":
        new = replace(obj, aio_points=tuple((*p[:3], p[3] * value, p[4] * value)
                                            for p in obj.aio_points))
    elif head in ("peak_flops", "host_costs") and key:
        new = replace(obj, **{head: {**getattr(obj, head), key: value}})
    else:
        new = replace(obj, **{fld: value})
    return replace(hw, **{part: new}), software


# ----------------------------------------------------------------------------------------------
# brackets, re-simulation, combination

def op_kinds(ops, on_path: set[int]) -> list[tuple[object, int, int]]:
    """(a representative op, ops of its kind, of them on the critical path) per distinct op kind
    (what the engine's timer caches by): a bracket times each kind once."""
    kinds: dict[tuple, list] = {}
    for op in ops:
        k = kinds.setdefault((op.resource, op.work, op.amount, op.nbytes, op.pinned), [op, 0, 0])
        k[1] += 1
        k[2] += op.id in on_path
    return [tuple(k) for k in kinds.values()]


def retimed(timer, hw: Hardware, software: Software | None):
    """The engine's timer on perturbed inputs; its GPU block/head times (a FLOP count per layer,
    the costly part) are kept when the GPU is the same."""
    if hw.gpu is not timer.hw.gpu:
        return Timer(hw, timer.model, timer.strategy, software)
    new = copy.copy(timer)
    new.hw, new.software, new._cache = hw, software, {}
    return new


def _bracket(kinds, base: list[float], timer) -> tuple[float, float]:
    """(d_cp, d_busy) of one end: the critical path's change, the summed growth of all ops."""
    d_cp = d_busy = 0.0
    for (op, n, n_path), b in zip(kinds, base):
        d = timer.seconds(op) - b
        d_cp += n_path * d
        d_busy += n * max(0.0, d)
    return d_cp, d_busy


def step_range(hw: Hardware, model: Model, strategy: Strategy, software: Software | None,
               steady, budget: int) -> StepRange:
    """The steady step's central 80% interval from the point's steady run (engine._Run) with
    `software` (the hardware's measured host costs applied); `budget`: the steady-step
    re-simulations allowed."""
    eff = host_costs.with_host_costs(software, hw) if software is not None else None
    kinds = op_kinds(steady.workload.ops, {rec.op.id for rec in steady.chain()})
    timer = Timer(hw, model, strategy, eff)
    base = [timer.seconds(op) for op, _, _ in kinds]
    point = steady.step_s
    ends: dict[tuple[str, int], float] = {}
    width: dict[tuple[str, int], float] = {}
    inputs = uncertain_inputs(hw, software)
    for name, _, lo, hi in inputs:
        for side, value in ((0, lo), (1, hi)):
            h2, s2 = perturbed(hw, software, name, value)
            e2 = host_costs.with_host_costs(s2, h2) if s2 is not None else None
            d_cp, d_busy = _bracket(kinds, base, retimed(timer, h2, e2))
            ends[name, side] = d_cp
            width[name, side] = (d_busy - d_cp) if d_cp >= 0 else -d_cp
    error = software.ranges.get("simulator_error") if software is not None else None
    if error:         # the simulator's own validated error: a factor on the step
        inputs.append(("software.simulator_error", 1.0, *error))
        ends["software.simulator_error", 0] = (error[0] - 1.0) * point
        ends["software.simulator_error", 1] = (error[1] - 1.0) * point
    exact: set[tuple[str, int]] = set()
    for key in sorted(width, key=lambda k: (-width[k], k))[:max(0, budget)]:
        if width[key] <= TOLERANCE * point:
            break
        name, side = key
        lo_hi = next((lo, hi) for n, _, lo, hi in inputs if n == name)
        h2, s2 = perturbed(hw, software, name, lo_hi[side])
        e2 = s2 and host_costs.with_host_costs(s2, h2)
        ends[key] = step_seconds(h2, model, strategy, workload=steady.workload, software=e2,
                                 timer=retimed(timer, h2, e2)) - point
        exact.add(key)
    return combine(point, inputs, ends, exact, len(exact))


def combine(point: float, inputs, ends: dict, exact: set, simulations: int) -> StepRange:
    """Root-sum-square of the one-sided changes -> StepRange (drivers largest first)."""
    drivers, down, up = [], 0.0, 0.0
    for name, value, lo, hi in inputs:
        d_lo, d_hi = ends[name, 0], ends[name, 1]
        down += min(0.0, d_lo, d_hi) ** 2
        up += max(0.0, d_lo, d_hi) ** 2
        if d_lo == 0.0 and d_hi == 0.0:
            continue
        n_exact = ((name, 0) in exact) + ((name, 1) in exact)
        how = ("validated error" if name == "software.simulator_error"
               else ("critical path", "mixed", "simulated")[n_exact])
        drivers.append(Driver(input=name, value=value, low=lo, high=hi,
                              step_at_low_s=point + d_lo, step_at_high_s=point + d_hi, how=how))
    drivers.sort(key=lambda d: (-max(abs(d.step_at_low_s - point),
                                     abs(d.step_at_high_s - point)), d.input))
    return StepRange(point_s=point, low_s=point - math.sqrt(down), high_s=point + math.sqrt(up),
                     drivers=tuple(drivers), simulations=simulations)


# ----------------------------------------------------------------------------------------------
# memory: does the verdict hold over the overheads' ranges?

def _overhead_factors(hw: Hardware, software: Software | None) -> dict[str, tuple[float, float]]:
    """Memory-plan item -> (low, high) factors on its bytes, for the uncertain overheads."""
    from tierlab.sim.memory import ALLOCATOR_SLACK, ALLOCATOR_SLACK_RANGE

    out = {"allocator_slack": (ALLOCATOR_SLACK_RANGE[0] / ALLOCATOR_SLACK,
                               ALLOCATOR_SLACK_RANGE[1] / ALLOCATOR_SLACK)}
    ctx = hw.gpu.ranges.get("cuda_context_bytes")
    if ctx:
        out["cuda_context"] = (ctx[0] / hw.gpu.cuda_context_bytes,
                               ctx[1] / hw.gpu.cuda_context_bytes)
    pb = software.ranges.get("process_baseline_bytes") if software is not None else None
    if pb:
        out["process_baseline"] = (pb[0] / software.process_baseline_bytes,
                                   pb[1] / software.process_baseline_bytes)
    return out


def memory_margin(plan, hw: Hardware, software: Software | None) -> dict[str, dict]:
    """Tiers whose verdict flips within the overheads' ranges (allocator slack, CUDA context,
    process baseline): {tier: {used_range_bytes, capacity_bytes, statement}}; {} when every
    verdict holds at both ends."""
    if plan is None:
        return {}
    factors = _overhead_factors(hw, software)
    out = {}
    for name, tier in plan.tiers.items():
        lo = hi = tier.used_bytes
        for item, nbytes in tier.breakdown.items():
            f = factors.get(item.rpartition(":")[2])
            if f:
                lo += nbytes * (f[0] - 1.0)
                hi += nbytes * (f[1] - 1.0)
        cap = tier.capacity_bytes
        if not lo <= cap < hi:
            continue
        what = ", ".join(sorted(k for k in factors if any(
            i.rpartition(":")[2] == k for i in tier.breakdown)))
        verdict = ("fits unless" if tier.fits else "does not fit unless")
        end = "high" if tier.fits else "low"
        out[name] = {"used_range_bytes": [lo, hi], "capacity_bytes": cap,
                     "statement": f"{name} {verdict} the overheads ({what}) are at the {end} "
                                  f"end: {lo / 2**30:.2f}-{hi / 2**30:.2f} GiB of "
                                  f"{cap / 2**30:.2f} GiB"}
    return out


def simulate_ranged(hardware: Hardware, model: Model, strategy: Strategy, *,
                    strict: bool = False, software: Software | None = None) -> SimResult:
    """`engine.simulate` plus the step time's central 80% interval and the fits margin (about
    3x the cost): the SimResult's step_range and memory_margin."""
    runs = run_steps(hardware, model, strategy, strict=strict, software=software)
    span = step_range(hardware, model, strategy, runs.software, runs.steady,
                      budget=2 * (1 + (runs.first is not runs.steady)))
    return summarize(hardware, model, strategy, runs, step_range=span,
                     memory_margin=memory_margin(runs.plan, hardware, runs.software))
