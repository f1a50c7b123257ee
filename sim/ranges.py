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
   the budget allows: twice the point simulation's own step simulations, so a range costs at
   most about 3x a point (about 1.7x over a sweep's points, which share their ends' op-time
   changes: `_group`). The others keep d_cp (exact when the input's ops stay on the critical
   path).
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
from collections import OrderedDict
from dataclasses import dataclass, replace

from tierlab.profiles.fields import NOT_STEADY
from tierlab.profiles.ranges import CURVES, field_class
from tierlab.profiles.schema import Hardware, Model, Software
from tierlab.sim import host_costs
from tierlab.sim.engine import Timer, run_steps, shape_of, step_seconds, summarize
from tierlab.sim.resources import READS
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


def _bracket(shape, moved, on_path: list[int], deltas: list[float]) -> tuple[float, float]:
    """(d_cp, d_busy) of one end: the critical path's change, the summed growth of all ops,
    from the change `deltas` of each kind `moved` (in kind order: a kind left out adds +0.0 to
    either sum)."""
    d_cp = d_busy = 0.0
    counts = shape.counts
    for k, d in zip(moved, deltas):
        d_cp += on_path[k] * d
        d_busy += counts[k] * max(0.0, d)
    return d_cp, d_busy


DELTA_CACHE_SIZE = 512
"""Groups of ends whose op-time changes `_group` keeps. An end's changes (new - base seconds
of each kind it moves) depend on the op kinds (the Shape), the input and its value, and what
times those kinds: the profile parts or fields their resources read (resources.READS), the
node's GPU, node and drive counts, the model and the strategy. A sweep's points that differ
elsewhere (a CPU Adam rate, when the end moves PCIe ops) share them, so each is computed once.
An entry holds the objects whose ids key it, so an id is not reused while it is kept."""
_deltas: OrderedDict[tuple, tuple] = OrderedDict()


def clear_range_cache() -> None:
    """Forget every kept end change and perturbed part (benchmarks time a new point with it)."""
    _deltas.clear()
    _parts.clear()


def _part_of(hw: Hardware, software: Software | None, path: str):
    """The object a READS entry names: 'software', a part ('pcie') or a part's field."""
    head, _, field = path.partition(".")
    obj = software if head == "software" else getattr(hw, head)
    return getattr(obj, field) if field else obj


PART_CACHE_SIZE = 256
"""Perturbed profile parts `_perturbed_cached` keeps: a sweep's points share their GPU, PCIe...
objects, so an end's perturbed part is made once and the engine's per-GPU FLOP terms, keyed by
the GPU object, are computed once for it."""
_parts: OrderedDict[tuple, tuple] = OrderedDict()


def _perturbed_cached(hw: Hardware, software: Software | None, name: str, value: float
                      ) -> tuple[Hardware, Software | None]:
    """`perturbed`, its new hardware part (or software profile) kept by (the object it
    replaces, input, value): the same values, one object per part and end."""
    part = name.partition(".")[0]
    obj = software if part == "software" else getattr(hw, part)
    key = (id(obj), name, value)
    hit = _parts.get(key)
    if hit is not None and hit[0] is obj:
        _parts.move_to_end(key)
        new = hit[1]
    else:
        h2, s2 = perturbed(hw, software, name, value)
        new = s2 if part == "software" else getattr(h2, part)
        _parts[key] = (obj, new)
        if len(_parts) > PART_CACHE_SIZE:
            _parts.popitem(last=False)
        return h2, s2
    if part == "software":
        return hw, new
    return replace(hw, **{part: new}), software


class _Base:
    """The point's timer and per-kind seconds, made when first needed (an end whose changes
    are kept needs neither)."""

    def __init__(self, hw, model, strategy, software, shape):
        self.hw, self.model, self.strategy, self.software = hw, model, strategy, software
        self.shape = shape
        self._timer = self._seconds = self._eff = None

    @property
    def eff(self):
        """The software profile with the hardware's measured host costs."""
        if self._eff is None and self.software is not None:
            self._eff = host_costs.with_host_costs(self.software, self.hw)
        return self._eff

    @property
    def timer(self) -> Timer:
        if self._timer is None:
            self._timer = Timer(self.hw, self.model, self.strategy, self.eff)
        return self._timer

    @property
    def seconds(self) -> list[float]:
        if self._seconds is None:
            self._seconds = [self.timer.seconds(op) for op in self.shape.kinds]
        return self._seconds


def step_range(hw: Hardware, model: Model, strategy: Strategy, software: Software | None,
               steady, budget: int, *, fast: bool = True) -> StepRange:
    """The steady step's central 80% interval from the point's steady run (engine._Run) with
    `software` (the hardware's measured host costs applied); `budget`: the steady-step
    re-simulations allowed. `fast` (the default) brackets an end by re-timing only the op
    kinds whose resource reads the part it moves (resources.READS: the others' times do not
    change, so their terms are +0.0), keeps an end's changes for the points that share what
    times them (`_group`) and perturbed parts for the points that share them; off, every kind
    of every end is re-timed as the method states. Both give the same range bit for bit
    (tests/test_ranges_fast.py)."""
    shape = shape_of(steady.workload)
    on_path = [0] * len(shape.kinds)
    for rec in steady.chain():
        on_path[shape.kind_of[rec.op.id]] += 1
    base = _Base(hw, model, strategy, software, shape)
    point = steady.step_s
    inputs = uncertain_inputs(hw, software)
    ends, width = _brackets(base, inputs, on_path, fast)
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
        h2, s2 = (_perturbed_cached if fast else perturbed)(hw, software, name, lo_hi[side])
        e2 = s2 and host_costs.with_host_costs(s2, h2)
        ends[key] = step_seconds(h2, model, strategy, workload=steady.workload, software=e2,
                                 timer=retimed(base.timer, h2, e2)) - point
        exact.add(key)
    return combine(point, inputs, ends, exact, len(exact))


def _brackets(base: _Base, inputs, on_path: list[int], fast: bool
              ) -> tuple[dict[tuple[str, int], float], dict[tuple[str, int], float]]:
    """(d_cp, bracket width) of every end (input, 0 low / 1 high)."""
    hw, software, shape = base.hw, base.software, base.shape
    ends: dict[tuple[str, int], float] = {}
    width: dict[tuple[str, int], float] = {}
    by_res: dict[str, list[int]] = {}
    for k, op in enumerate(shape.kinds):
        by_res.setdefault(op.resource, []).append(k)
    groups: dict[tuple[str, ...], tuple] = {}
    for name, _, lo, hi in inputs:
        res = _resources_read(tuple(by_res), name) if fast else tuple(by_res)
        group = groups.get(res)
        if group is None:
            group = groups[res] = _group(base, res, by_res, fast)
        moved, kept = group
        part = name.partition(".")[0]
        for side, value in ((0, lo), (1, hi)):
            if not moved:            # no op reads this input: the step cannot move
                ends[name, side] = width[name, side] = 0.0
                continue
            deltas = kept.get((name, value)) if kept is not None else None
            if deltas is None:
                h2, s2 = (_perturbed_cached if fast else perturbed)(hw, software, name, value)
                e2 = (base.eff if fast and part not in ("cpu", "software") else
                      host_costs.with_host_costs(s2, h2) if s2 is not None else None)
                t2, was = retimed(base.timer, h2, e2), base.seconds
                deltas = [t2.seconds(shape.kinds[k]) - was[k] for k in moved]
                if kept is not None:
                    kept[name, value] = deltas
            d_cp, d_busy = _bracket(shape, moved, on_path, deltas)
            ends[name, side] = d_cp
            width[name, side] = (d_busy - d_cp) if d_cp >= 0 else -d_cp
    return ends, width


def _resources_read(resources: tuple[str, ...], name: str) -> tuple[str, ...]:
    """Those of `resources` whose ops' times read input `name` ('cpu.adam_params_per_s'): a
    READS entry that is the input or a part or field holding it."""
    key = (resources, name)
    hit = _READERS.get(key)
    if hit is None:
        hit = _READERS[key] = tuple(r for r in resources if any(
            name == p or name.startswith(p + ".") for p in READS[r]))
    return hit


_READERS: dict[tuple, tuple[str, ...]] = {}
"""(resources, input) -> those that read it: a closed set of names, a few hundred entries."""


def _group(base: _Base, res: tuple[str, ...], by_res, fast: bool):
    """(the kinds of these resources in kind order, the changes kept for the ends that move
    only them; None off `fast`)."""
    moved = sorted(k for r in res for k in by_res[r])
    if not fast or not moved:
        return moved, None
    hw = base.hw
    paths = sorted({p for r in res for p in READS[r]})
    objs = (base.shape, base.model, base.strategy,
            *(_part_of(hw, base.software, p) for p in paths))
    key = (hw.gpus_per_node, hw.nodes, hw.nvme_drives, *map(id, objs))
    hit = _deltas.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], objs)):
        _deltas.move_to_end(key)
        return moved, hit[1]
    kept: dict = {}
    _deltas[key] = (objs, kept)
    if len(_deltas) > DELTA_CACHE_SIZE:
        _deltas.popitem(last=False)
    return moved, kept


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
        cap = tier.limit_bytes           # capacity - headroom (sim/headroom.py)
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
                    strict: bool = False, software: Software | None = None,
                    headroom=None) -> SimResult:
    """`engine.simulate` plus the step time's central 80% interval and the fits margin (about
    3x the cost): the SimResult's step_range and memory_margin."""
    runs = run_steps(hardware, model, strategy, strict=strict, software=software,
                     headroom=headroom)
    span = step_range(hardware, model, strategy, runs.software, runs.steady,
                      budget=2 * (1 + (runs.first is not runs.steady)))
    return summarize(hardware, model, strategy, runs, step_range=span,
                     memory_margin=memory_margin(runs.plan, hardware, runs.software))
