"""simulate(hardware, model, strategy) -> SimResult: time DeepSpeed's schedule with SimPy.

Scale by symmetry: every rank of a data-parallel ZeRO job runs the same ops at the same moments,
so one representative rank is simulated; what the node's ranks share (PCIe uplink, CPU Adam,
NVMe, NIC) enters at its fair share (devices.py), and collectives are analytic over NVLink and the
NIC (collectives.py). The cost is independent of the GPU count and linear in layers x micro-steps.

Each resource works through its ops in issue order (a CUDA stream, one DMA direction, one aio
handle): an op starts when the previous op of its resource has finished, its dependencies are
done and its swap buffers are free. The schedule is therefore a fixed DAG and the step time can
only grow when any op gets slower (no scheduling anomalies); it is deterministic.

The model is SimPy's: one process per resource, the NVMe drives one queue both swap streams
share, swap buffers a Container (`_timed_with_events`). It is timed without SimPy where SimPy's
answer follows from the times alone, bit for bit (issue 32; tests/test_engine_grid.py,
tests/test_engine_fast.py): a step with no shared queue and no swap buffers in one ordered pass
(`_timed_in_order`), a contended one by a queue-aware pass (`_timed_queued`) that hands a tie only
SimPy's event order can break, or a stuck step, to SimPy's events. The queue-aware pass keeps the
order it timed a workload's ops in and replays it on that workload's next seconds (a sweep's
points and a range's re-simulations share workloads) wherever it provably still holds
(`_replayed`).
"""
from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

import simpy

from tierlab.errors import ConfigError
from tierlab.profiles.layout import logits_per_token
from tierlab.profiles.schema import Hardware, Model, Software
from tierlab.sim import collectives, devices, flops, host_costs
from tierlab.sim.devices import SHARED_QUEUE, Device, SwapBuffers
from tierlab.sim.layout import n_params
from tierlab.sim.memory import plan_memory
from tierlab.sim.resources import BYTE_RESOURCES, RESOURCES
from tierlab.sim.result import SimResult
from tierlab.sim.strategy import Strategy
from tierlab.sim.workload import Op, Workload, build_workload
from tierlab.units import fmt_gib

log = logging.getLogger(__name__)

TERMS_CACHE_SIZE = 64
_terms: OrderedDict[tuple, tuple] = OrderedDict()


def _compute_terms(gpu, model: Model, strategy: Strategy) -> tuple[float, float, float, bool]:
    """(block_s, block_bwd_s, head_s, rescaled) of a Timer: the FLOP count of a layer and the
    head on this GPU, once per (GPU, model, strategy) object (a sweep's points that differ in
    other parts of the hardware share them; each kept entry holds its objects, so an id is not
    reused while it is kept)."""
    key = (id(gpu), id(model), id(strategy))
    hit = _terms.get(key)
    if hit is not None and hit[0] is gpu and hit[1] is model and hit[2] is strategy:
        _terms.move_to_end(key)
        return hit[3]
    s = strategy
    mb = s.train_micro_batch_size_per_gpu
    lf = flops.layer_forward(model, mb, s.bytes_per_param)
    block_s, block_bwd_s = flops.block_seconds(gpu, s.precision, lf)
    logits = flops.logits_forward(model, mb)
    # logits written, then read by softmax/cross-entropy: 2 x tokens x V x bytes
    ce_bytes = 2.0 * mb * model.seq_len * logits_per_token(model) * s.bytes_per_param
    head_s = flops.gemm_seconds(gpu, s.precision, logits) + ce_bytes / gpu.hbm_bandwidth_Bps
    rescaled = devices.grads_rescaled(stage=s.zero.stage, clipping=s.gradient_clipping > 0,
                                      fp16=s.precision == "fp16")
    out = (block_s, block_bwd_s, head_s, rescaled)
    _terms[key] = (gpu, model, strategy, out)
    if len(_terms) > TERMS_CACHE_SIZE:
        _terms.popitem(last=False)
    return out


@dataclass
class Timer:
    """How long each op takes on this hardware (cached per distinct op kind and size)."""

    hw: Hardware
    model: Model
    strategy: Strategy
    software: Software | None = None

    def __post_init__(self) -> None:
        self.block_s, self.block_bwd_s, self.head_s, self.rescaled = _compute_terms(
            self.hw.gpu, self.model, self.strategy)
        self._cache: dict[tuple, float] = {}

    def seconds(self, op: Op) -> float:
        key = (op.resource, op.work, op.amount, op.nbytes, op.pinned)
        t = self._cache.get(key)
        if t is None:
            t = self._cache[key] = self._compute(op)
        return t

    def _compute(self, op: Op) -> float:
        hw, s, r = self.hw, self.strategy, op.resource
        ranks = hw.gpus_per_node
        if r == "gpu_compute":
            kind, _, use = op.work.partition(".")
            if kind == "block":
                if use == "bwd":            # amount: 2 forward-equivalents per backward
                    return op.amount / 2.0 * self.block_bwd_s
                return op.amount * self.block_s
            if kind == "head":
                return op.amount * self.head_s
            if op.work == "zero12_bucket":
                return op.amount * devices.zero12_bucket_hbm_bytes_per_element(
                    bytes_per_param=s.bytes_per_param, dp=hw.world_size,
                    contiguous=s.zero.contiguous_gradients,
                    partition_copy=s.optimizer_device == "none") / hw.gpu.hbm_bandwidth_Bps
            if op.work == "adam_gpu":
                return op.amount * devices.gpu_optimizer_hbm_bytes_per_param(
                    stage=s.zero.stage, rescaled=self.rescaled) / hw.gpu.hbm_bandwidth_Bps
            return 0.0
        if r in ("gpu_comm", "network"):
            c = getattr(collectives, op.work)(hw, op.nbytes)
            return c.intra_s if r == "gpu_comm" else c.inter_s
        if r in ("pcie_h2d", "pcie_d2h"):
            return devices.pcie_seconds(hw.pcie, op.nbytes, r[-3:], op.pinned, ranks)
        if r == "cpu_adam":
            offloaded = s.param_device != "none"
            cast = (hw.cpu.cast16_params_per_s is not None and devices.optimizer_copies_to_16bit(
                params_offloaded=offloaded, stage=s.zero.stage))
            per_param = devices.optimizer_dram_bytes_per_param(
                rescaled=self.rescaled, params_offloaded=offloaded, stage=s.zero.stage,
                cast_measured=cast)
            return (devices.cpu_adam_seconds(hw.cpu, ranks, op.amount, per_param)
                    + (devices.cpu_cast16_seconds(hw.cpu, ranks, op.amount) if cast else 0.0))
        if r in ("nvme_read", "nvme_write"):
            if hw.nvme is None or hw.nvme_drives == 0:
                raise ConfigError(f"{hw.name} has no NVMe drive but the config swaps to NVMe "
                                  "(offload_*.device=nvme)")
            return devices.nvme_seconds(hw.nvme, hw.nvme_drives, s.aio, r[5:], ranks, op.nbytes)
        if r == "cpu_host":        # the Python thread: kernel dispatch, ZeRO-3 hooks, grad copies
            sw = self.software
            if sw is None:
                return 0.0
            if op.work in ("grad_copies", "grad_accum"):
                return op.amount * host_costs.grad_event_cost_s(sw, op.work == "grad_copies")
            if op.work == "ckpt_wrap":
                return op.amount * host_costs.checkpoint_cost_s(sw, s)
            if op.work == "ckpt_recompute":
                return op.amount * host_costs.checkpoint_cost_s(sw, s, "recompute")
            if op.work == "step_host":
                return op.amount * host_costs.step_cost_s(sw, s)
            if op.work == "overflow_scan":
                return op.amount * host_costs.overflow_scan_cost_s(sw, s)
            if op.work == "rank_sync":
                return op.amount * sw.multi_rank_sync_s
            if op.work == "host.fwd_unwrapped":     # a block's forward, no checkpoint wrapper
                return max(0.0, op.amount * host_costs.use_cost_s(sw, s, "fwd")
                           - host_costs.checkpoint_carried_s(sw, s))
            if op.work.startswith("host."):
                return op.amount * host_costs.use_cost_s(sw, s, op.work[5:])
            raise ValueError(f"unknown host work {op.work!r}")
        raise ValueError(f"unknown resource {r!r}")


@dataclass(slots=True)
class _Rec:
    """When one op ran, and what it waited for."""

    op: Op
    start_s: float = 0.0
    end_s: float = 0.0
    buffer_from: int | None = None
    """Op whose returned buffers let this op start, if it waited on buffers."""


Times = tuple
"""(start_s, end_s, buffer_from) of a step's ops, three lists in issue order (buffer_from None
where no op waited on buffers): what the passes return, a record per op made only when asked."""


def _records(ops, times: Times) -> list[_Rec]:
    start, end, given = times
    if given is None:
        return [_Rec(op, a, e) for op, a, e in zip(ops, start, end)]
    return [_Rec(op, a, e, b) for op, a, e, b in zip(ops, start, end, given)]


@dataclass
class _Run:
    workload: Workload
    times: Times = field(repr=False)
    make_spans: Callable[[], list[devices.Span]] = field(repr=False)
    """Builds the spans (by start, resource, issue order) when first asked for: a step whose
    spans nobody reads (step 1) never builds them."""
    step_s: float
    _recs: list[_Rec] | None = field(default=None, repr=False)
    _chain: list[_Rec] | None = field(default=None, repr=False)
    _spans: list[devices.Span] | None = field(default=None, repr=False)
    _sums: tuple[dict, dict, dict, dict] | None = field(default=None, repr=False)

    @property
    def recs(self) -> list[_Rec]:
        """One record per op (issue order), made when first asked for."""
        if self._recs is None:
            self._recs = _records(self.workload.ops, self.times)
        return self._recs

    @property
    def spans(self) -> list[devices.Span]:
        if self._spans is None:
            self._spans = self.make_spans()
        return self._spans

    def chain(self) -> list[_Rec]:
        """critical_chain(self.recs), worked out once (records made for its ops only)."""
        if self._chain is None:
            ops = self.workload.ops
            start, end, given = self.times
            path = _chain_ids(ops, start, end, given, shape_of(self.workload).previous)
            if self._recs is not None:
                self._chain = [self._recs[i] for i in path]
            else:
                self._chain = [_Rec(ops[i], start[i], end[i], given[i] if given else None)
                               for i in path]
        return self._chain

    def sums(self) -> tuple[dict, dict, dict, dict]:
        """(busy, exposed, phases, bytes moved) per resource or phase, worked out once (a run
        reused from the schedule cache is summed once); copies, so a SimResult owns its dicts."""
        if self._sums is None:
            busy = dict.fromkeys(RESOURCES, 0.0)
            for span in self.spans:
                busy[span.resource] += span.end_s - span.start_s
            self._sums = (busy, critical_path([], self.chain()), phase_times(self),
                          _bytes_moved(self))
        return tuple(dict(d) for d in self._sums)        # type: ignore[return-value]


@dataclass(frozen=True)
class Shape:
    """What the engine derives from a workload once, whatever the rates: one op per distinct
    timer key (the Timer times each kind once), each op's kind and resource, and whether the
    step needs SimPy's events (`contended`)."""

    kinds: tuple[Op, ...]
    kind_of: tuple[int, ...]
    lane: tuple[int, ...]
    """Each op's index in RESOURCES."""
    contended: bool
    """Some op queues for a shared device (the NVMe drives) or waits for swap buffers."""
    previous: tuple[int, ...] = ()
    """Each op's previous op on its resource, -1 for the first (critical_chain)."""
    marks: tuple[tuple[int, int, bool, bool], ...] = ()
    """(op index, micro-step, ends the micro-step's backward, ends its forward compute) of each
    op named 'm<m>.' (phase_times, read off the names once per workload)."""
    counts: tuple[int, ...] = ()
    """Ops of each kind (sim/ranges.py re-times a kind once and weighs it by its count)."""
    by_lane: tuple[int, ...] = ()
    """The ops by resource (RESOURCES order), each resource's in issue order (`_spans`)."""


SHAPE_CACHE_SIZE = 128
_shapes: OrderedDict[int, tuple[Workload, Shape]] = OrderedDict()


def shape_of(wl: Workload) -> Shape:
    """The Shape of `wl` (cached by identity: workloads are frozen and build_workload reuses
    them); raise ValueError if an op depends on a later one."""
    hit = _shapes.get(id(wl))
    if hit is not None and hit[0] is wl:
        _shapes.move_to_end(id(wl))
        return hit[1]
    index: dict[tuple, int] = {}
    kinds, kind_of, lane, contended = [], [], [], False
    for i, op in enumerate(wl.ops):
        if op.id != i or any(d >= i for d in op.deps):
            raise ValueError(f"{op.name}: ops must be numbered in issue order and depend on "
                             "earlier ops")
        k = index.setdefault((op.resource, op.work, op.amount, op.nbytes, op.pinned), len(kinds))
        if k == len(kinds):
            kinds.append(op)
        kind_of.append(k)
        lane.append(_ORDER[op.resource])
        contended = contended or (op.resource in SHARED_QUEUE or bool(op.take_buffers)
                                  or bool(op.give_buffers))
    n = wl.micro_steps
    marks = tuple((i, m, op.resource != "nvme_write",
                   op.resource == "gpu_compute" and op.phase == "forward")
                  for i, op in enumerate(wl.ops) if (m := _micro_index(op.name, n)) is not None)
    counts = [0] * len(kinds)
    for k in kind_of:
        counts[k] += 1
    by_lane = sorted(range(len(lane)), key=lane.__getitem__)       # stable: issue order within
    shape = Shape(kinds=tuple(kinds), kind_of=tuple(kind_of), lane=tuple(lane),
                  contended=contended, previous=_previous_on_resource(lane), marks=marks,
                  counts=tuple(counts), by_lane=tuple(by_lane))
    _shapes[id(wl)] = (wl, shape)
    if len(_shapes) > SHAPE_CACHE_SIZE:
        _shapes.popitem(last=False)
    return shape


def _stream(env, dev: Device, ops: list[Op], done, recs, pools, seconds: list[float]):
    """The process of one resource: its ops in issue order. On an exclusive device an op is one
    Timeout (Device.run's exclusive branch, inlined: the same events in the same order)."""
    exclusive, spans, timeout, Span = dev.exclusive, dev.spans, env.timeout, devices.Span
    for op in ops:
        rec = recs[op.id]
        for d in op.deps:
            if not done[d].processed:
                yield done[d]
        if op.take_buffers:
            pool = pools[op.pool]
            before = env.now
            yield from pool.take(op.take_buffers, op.name)
            if env.now > before:
                rec.buffer_from = pool.last_giver
        rec.start_s = start = env.now
        if exclusive:
            yield timeout(seconds[op.id])
            spans.append(Span(dev.name, op.name, start, env.now))
        else:
            yield from dev.run(op.name, seconds[op.id])
        rec.end_s = env.now
        if op.give_buffers:
            pool = pools[op.pool]
            pool.last_giver = op.id
            yield from pool.give(op.give_buffers, op.name)
        done[op.id].succeed()


def contended(wl: Workload) -> bool:
    """Whether any op of `wl` queues for a shared device (the NVMe drives) or waits for swap
    buffers: only then does the step need SimPy's events (`_timed_with_events`)."""
    return shape_of(wl).contended


def _in_order(wl: Workload, shape: Shape, seconds: list[float]) -> tuple[list, list]:
    """(start_s, end_s) of every op of a step whose every resource serves one stream: one pass
    in issue order.

    An op starts when the previous op of its resource and its dependencies have ended (all
    earlier in issue order), so start = max of those ends and end = start + duration, the very
    floats SimPy's clock takes (`Timeout` schedules at now + delay): the same schedule, bit for
    bit, without an event."""
    start: list = [0] * len(wl.ops)
    end: list = [0] * len(wl.ops)
    free: list = [0] * len(RESOURCES)        # SimPy's clock starts at the int 0, as here
    for i, (op, r) in enumerate(zip(wl.ops, shape.lane)):
        t = free[r]
        for d in op.deps:
            e = end[d]
            if e >= t:          # >=: a dependency's float end, not the clock's initial int 0
                t = e
        start[i] = t
        end[i] = free[r] = t + seconds[i]
    return start, end


def _timed_in_order(wl: Workload, shape: Shape, seconds: list[float]
                    ) -> tuple[Times, Callable[[], list[devices.Span]]]:
    """Times and spans of `_in_order`'s schedule, the spans ordered as `_timed_with_events`
    orders them: by start, then resource, then issue order (one device runs in issue order)."""
    start, end = _in_order(wl, shape, seconds)
    return (start, end, None), lambda: _spans(wl.ops, shape.by_lane, start, end)


def _spans(ops, by_lane, start, end) -> list[devices.Span]:
    """One span per op, ordered as `_timed_with_events` orders them: by start, then resource,
    then issue order (a device serves its ops in issue order). `by_lane` (Shape.by_lane) is
    already in (resource, issue) order, and the sort is stable: one key per op, and each
    resource's ops are a run already sorted by start."""
    Span, new = devices.Span, tuple.__new__
    return [new(Span, (op.resource, op.name, start[i], end[i]))
            for i in sorted(by_lane, key=start.__getitem__) for op in (ops[i],)]


class _Pool:
    """One swap-buffer pool as the queue-aware pass sees it: its count, what its one taking
    stream has taken, and the gives of its one giving stream in order (time, buffers, op)."""

    __slots__ = ("count", "taken", "gives", "left", "giver_lane", "folded", "k")

    def __init__(self, count: int, gives_total: int, giver_lane: int | None):
        self.count, self.taken, self.gives, self.left = count, 0, [], gives_total
        self.giver_lane, self.folded, self.k = giver_lane, 0, 0

    def grant(self, t, need: int):
        """(time, giver) at which a take of `need` asked for at `t` is served (giver: the op
        whose give served it, None if served at once), None while a give still to be timed could
        decide it, False if none can (the step is stuck). The taking stream asks in time order,
        so the gives up to `t` are folded into the level once."""
        gives, k = self.gives, self.k
        while k < len(gives) and gives[k][0] <= t:
            self.folded += gives[k][1]
            k += 1
        self.k = k
        level = self.count - self.taken + self.folded
        if level >= need:
            return t, None
        for time_s, n, who in gives[k:]:      # one giving stream: its gives are in time order
            level += n
            if level >= need:
                return time_s, who
        return None if self.left else False

    def give(self, e, n: int, who: int) -> bool:
        """Record a give; False if SimPy's put would block (more than the pool holds)."""
        if self.count - self.taken + sum(g[1] for g in self.gives[self.k:]) + self.folded + n \
                > self.count:
            return False
        self.gives.append((e, n, who))
        self.left -= 1
        return True


class _QueuePlan:
    """What the queue-aware pass reads off a contended workload once, whatever the rates: each
    resource's ops in issue order, each op's lane, dependencies, buffers taken and given and
    pool, which lanes share the NVMe queue, the pools (None: a pool with more than one taking
    or giving stream, left to SimPy), whether every give follows takes of as many buffers
    (`_gives_follow_takes`), and `order`: the order in which the last full pass that answered
    timed the ops (`_replayed` tries it first)."""

    __slots__ = ("lanes", "lane_of", "by_lane", "deps", "take", "give", "pool", "is_shared",
                 "pools", "gives_safe", "order", "steps")

    def __init__(self, wl: Workload, shape: Shape):
        ops = wl.ops
        self.lane_of, self.by_lane = shape.lane, shape.by_lane
        self.lanes: list[list[int]] = [[] for _ in RESOURCES]
        for i, r in enumerate(shape.lane):
            self.lanes[r].append(i)
        self.deps = tuple(op.deps for op in ops)
        self.take = tuple(op.take_buffers for op in ops)
        self.give = tuple(op.give_buffers for op in ops)
        self.pool = tuple(op.pool for op in ops)
        self.is_shared = tuple(name in SHARED_QUEUE for name in RESOURCES)
        self.pools = _pool_specs(wl, shape)
        self.gives_safe = self.pools is not None and _gives_follow_takes(self, shape.previous)
        self.order: list[int] | None = None
        self.steps: list[tuple] | None = None
        """`order` with what `_replayed` reads of each op (made on its first replay)."""

    def new_pools(self) -> dict[str, "_Pool"]:
        return {name: _Pool(*spec) for name, spec in self.pools.items()}


_plans: OrderedDict[int, tuple[Workload, _QueuePlan]] = OrderedDict()


def _plan_of(wl: Workload, shape: Shape) -> _QueuePlan:
    """The _QueuePlan of `wl` (cached by identity, as shape_of)."""
    hit = _plans.get(id(wl))
    if hit is not None and hit[0] is wl:
        _plans.move_to_end(id(wl))
        return hit[1]
    plan = _QueuePlan(wl, shape)
    _plans[id(wl)] = (wl, plan)
    if len(_plans) > SHAPE_CACHE_SIZE:
        _plans.popitem(last=False)
    return plan


def _pool_specs(wl: Workload, shape: Shape) -> dict[str, tuple] | None:
    """(count, gives, giving lane) of each pool of a step whose every pool has one taking and
    one giving stream (as workload.py builds them), else None."""
    takers: dict[str, set] = {}
    givers: dict[str, set] = {}
    gives: dict[str, int] = {}
    for op, lane in zip(wl.ops, shape.lane):
        if op.take_buffers:
            takers.setdefault(op.pool, set()).add(lane)
        if op.give_buffers:
            givers.setdefault(op.pool, set()).add(lane)
            gives[op.pool] = gives.get(op.pool, 0) + 1
    if any(len(v) > 1 for v in (*takers.values(), *givers.values())):
        return None
    counts = {"optimizer": max(1, wl.optimizer_buffers), "param": max(1, wl.param_buffers)}
    if (set(takers) | set(givers)) - set(counts):
        return None
    return {name: (counts[name], gives.get(name, 0),
                   next(iter(givers[name])) if name in givers else None)
            for name in counts}


def _gives_follow_takes(plan: _QueuePlan, previous: tuple[int, ...]) -> bool:
    """Whether every give of a pool comes after (through dependencies and stream order) takes
    of at least as many buffers as that pool's gives up to it: then no processing order the
    pass can take makes a give overfill the pool (`_Pool.give` never refuses), and `_replayed`
    need not check. As workload.py builds them: a pinned param buffer is given by the H2D that
    depends on the read that took it; the optimizer's by the swap-out after its swap-in."""
    for name in {p for p, g in zip(plan.pool, plan.give) if g}:
        taken = [0]                   # buffers of the first j takes of this pool
        reach = [0] * len(plan.deps)  # takes of this pool that precede each op
        given = 0
        for i, deps in enumerate(plan.deps):
            r = reach[previous[i]] if previous[i] >= 0 else 0
            for d in deps:
                if reach[d] > r:
                    r = reach[d]
            if plan.take[i] and plan.pool[i] == name:
                taken.append(taken[-1] + plan.take[i])
                r = len(taken) - 1
            reach[i] = r
            if plan.give[i] and plan.pool[i] == name:
                given += plan.give[i]
                if given > taken[r]:
                    return False
    return True


def _first_of_tie(l0, c0, l1, c1, lanes, ptr):
    """Of two NVMe requests at one instant, the lane SimPy serves first where the times alone
    tell: a swap-out that frees buffers and whose stream goes straight on to its next request
    makes that request while processing its put, before the swap-in the put woke resumes (its
    get is scheduled after the put). None for any other tie."""
    for (la, ca), (lb, cb) in (((l0, c0), (l1, c1)), ((l1, c1), (l0, c0))):
        woke_by = ca[2]
        if woke_by is not None and ptr[lb] > 0 and woke_by == lanes[lb][ptr[lb] - 1] and cb[3]:
            return lb
    return None


def _timed_queued(wl: Workload, shape: Shape, seconds: list[float]):
    """The schedule of a contended step without SimPy, or None where it would depend on the
    order SimPy happens to process same-instant events (then `_timed_with_events` decides):
    the order the last full pass of this workload timed its ops in, replayed (`_replayed`),
    where it still holds; else the full queue-aware pass (`_queued_full`)."""
    plan = _plan_of(wl, shape)
    if plan.pools is None:
        return None
    if plan.order is not None and plan.gives_safe:
        timed = _replayed(wl.ops, plan, seconds)
        if timed is not None:
            return timed
    return _queued_full(wl.ops, plan, seconds)


def _replayed(ops, plan: _QueuePlan, seconds: list[float]):
    """The queue-aware pass's schedule by its recorded order (`plan.order`), or None where that
    order may not be the one the pass would take with these seconds.

    The times of an op follow from those of its dependencies, its stream's previous op, the
    give that served its buffers (`_Pool.grant`, the pass's own rule) and, on the NVMe queue,
    the request served before it: every one of them comes earlier in the recorded order, so one
    loop times the step. The one choice the pass makes from the times is which NVMe stream's
    request the queue serves next: the earlier request. The replayed order is that choice
    wherever the requests it serves, in order, rise strictly from one stream to the other (and
    never fall within one, as a stream asks in time order): by induction on the served
    requests, each earlier one is timed alike in both, and the pass, which times all it can
    before it chooses, finds the replayed one the earliest. A same-instant request of the two
    streams, or a take no give timed before it serves, is None: the full pass decides. Only
    tried where gives never overfill a pool (`_gives_follow_takes`), as the pass then never
    refuses one."""
    if plan.steps is None:          # what the loop reads of each op, in the recorded order
        plan.steps = [(i, plan.lane_of[i], plan.deps[i], plan.take[i], plan.give[i],
                       plan.pool[i], plan.is_shared[plan.lane_of[i]]) for i in plan.order]
    pools = plan.new_pools()
    n = len(ops)
    start: list = [0] * n
    span_start: list = [0] * n
    end: list = [0] * n
    buffer_from: list = [None] * n
    free: list = [0] * len(RESOURCES)         # SimPy's clock starts at the int 0
    server_free = last_t = None
    last_lane = -1
    for i, lane, deps, need, given, pool_name, shared in plan.steps:
        t = free[lane]
        for d in deps:
            e = end[d]
            if e >= t:
                t = e
        if need:
            pool = pools[pool_name]
            got = pool.grant(t, need)
            if not got:
                return None
            t, buffer_from[i] = got
            pool.taken += need
        if shared:
            if lane != last_lane:
                if last_lane >= 0 and not t > last_t:
                    return None               # not strictly later than the other stream's
                last_lane = lane
            last_t = t
            s = t if server_free is None or t > server_free else server_free
            e = server_free = s + seconds[i]
        else:
            s, e = t, t + seconds[i]
        start[i], span_start[i] = t, s
        end[i] = free[lane] = e
        if given:
            pool = pools[pool_name]
            pool.gives.append((e, given, i))
            pool.left -= 1
    return (start, end, buffer_from), lambda: _spans(ops, plan.by_lane, span_start, end)


def _queued_full(ops, plan: _QueuePlan, seconds: list[float]):
    """The queue-aware pass, recording the order it times the ops in (`plan.order`) when it
    answers.

    Exclusive streams are the ordered pass's max-plus, done as soon as an op's dependencies are
    timed; a take from a swap-buffer pool is served at the first instant the pool holds enough
    (its one giving stream returns buffers in time order); the NVMe streams share one FIFO
    queue, served in request order. Which stream requests first is decided from the request
    times alone: when one NVMe stream's next request is not timed yet, it waits (through its
    dependencies) on the other's candidate or later ops, so it comes after; two requests at the
    same instant are a tie the times cannot break: None. A stuck step is None too (SimPy names
    it)."""
    lane_of, lanes, is_shared = plan.lane_of, plan.lanes, plan.is_shared
    pools = plan.new_pools()
    n = len(ops)
    order: list[int] = []
    end: list = [None] * n
    start: list = [0] * n
    span_start: list = [0] * n
    buffer_from: list = [None] * n
    free: list = [0] * len(RESOURCES)         # SimPy's clock starts at the int 0
    ptr = [0] * len(RESOURCES)
    waiters: dict[int, list[int]] = {}
    candidate: dict[int, tuple] = {}
    ready = [r for r in range(len(RESOURCES)) if lanes[r]]
    queued = [True] * len(RESOURCES)
    blocked_on: list = [None] * len(RESOURCES)
    server_free = None

    def finish(i, lane, t, s, e):
        op = ops[i]
        start[i], span_start[i], end[i] = t, s, e
        order.append(i)
        free[lane] = e
        ptr[lane] += 1
        if op.give_buffers and not pools[op.pool].give(e, op.give_buffers, i):
            return False              # a put SimPy would block: leave it to SimPy
        for w in waiters.pop(i, ()):
            wake(w)
        return True

    def wake(lane):
        if not queued[lane]:
            queued[lane] = True
            ready.append(lane)

    def block(lane, on):
        if blocked_on[lane] != on:
            blocked_on[lane] = on
            waiters.setdefault(on, []).append(lane)

    while True:
        while ready:
            lane = ready.pop()
            queued[lane] = False
            mine = lanes[lane]
            while ptr[lane] < len(mine) and lane not in candidate:
                i = mine[ptr[lane]]
                op = ops[i]
                t = free[lane]
                blocked = None
                for d in op.deps:
                    e = end[d]
                    if e is None:
                        blocked = d
                        break
                    if e >= t:
                        t = e
                if blocked is not None:
                    block(lane, blocked)
                    break
                if op.take_buffers:
                    pool = pools[op.pool]
                    if op.take_buffers > pool.count:
                        return None           # SwapBuffers.take raises: SimPy's message
                    got = pool.grant(t, op.take_buffers)
                    if not got:
                        if got is None:       # wait for the giving stream's next op
                            block(lane, lanes[pool.giver_lane][ptr[pool.giver_lane]])
                            break
                        return None
                    t, buffer_from[i] = got
                    pool.taken += op.take_buffers
                if is_shared[lane]:
                    # `cont`: it asks at once on its previous op's completion (awaits nothing)
                    cont = (ptr[lane] > 0 and not op.take_buffers and t == free[lane]
                            and all(end[d] < t for d in op.deps))
                    candidate[lane] = (t, i, buffer_from[i], cont)
                    break
                e = t + seconds[i]               # an exclusive op: finish(i, lane, t, t, e)
                start[i] = span_start[i] = t
                end[i] = free[lane] = e
                order.append(i)
                ptr[lane] += 1
                if op.give_buffers and not pools[op.pool].give(e, op.give_buffers, i):
                    return None
                if i in waiters:
                    for w in waiters.pop(i):
                        wake(w)
        if not candidate:
            break
        if len(candidate) > 1:
            (l0, c0), (l1, c1) = candidate.items()
            if c0[0] == c1[0]:
                lane = _first_of_tie(l0, c0, l1, c1, lanes, ptr)
                if lane is None:
                    return None               # same-instant requests: SimPy's order decides
            else:
                lane = l0 if c0[0] < c1[0] else l1
        else:
            lane = next(iter(candidate))
        t, i = candidate.pop(lane)[:2]
        # queued behind the holder: granted at its release; else at once (the int 0 of the
        # clock's start is kept only by a request nobody held the queue before)
        s = t if server_free is None or t > server_free else server_free
        server_free = s + seconds[i]
        if not finish(i, lane, t, s, server_free):
            return None
        wake(lane)
    if any(e is None for e in end):
        return None                           # stuck on buffers: SimPy raises the ConfigError
    plan.order, plan.steps = order, None
    return (start, end, buffer_from), lambda: _spans(ops, plan.by_lane, span_start, end)


def _timed_with_events(wl: Workload, seconds: list[float]
                       ) -> tuple[Times, Callable[[], list[devices.Span]]]:
    """The schedule of a step with shared queues or swap buffers: one SimPy process per
    resource; raise ConfigError if it cannot finish."""
    env = simpy.Environment()
    devs = devices.make_devices(env)
    pools = {"optimizer": SwapBuffers(env, max(1, wl.optimizer_buffers), "optimizer buffers"),
             "param": SwapBuffers(env, max(1, wl.param_buffers), "param buffers")}
    done = [env.event() for _ in wl.ops]
    recs = [_Rec(op) for op in wl.ops]
    by_res: dict[str, list[Op]] = {name: [] for name in RESOURCES}
    for op in wl.ops:
        by_res[op.resource].append(op)
    for name, ops in by_res.items():
        if ops:
            env.process(_stream(env, devs[name], ops, done, recs, pools, seconds))
    env.run()
    stuck = [op.name for op, ev in zip(wl.ops, done) if not ev.processed]
    if stuck:
        raise ConfigError(f"the simulated step cannot finish: {stuck[0]} waits forever for swap "
                          "buffers (zero_optimization.offload_*.buffer_count too small)")
    spans = [s for d in devs.values() for s in d.spans]
    spans.sort(key=lambda s: (s.start_s, _ORDER[s.resource]))
    times = ([r.start_s for r in recs], [r.end_s for r in recs], [r.buffer_from for r in recs])
    return times, lambda: spans


def durations(wl: Workload, timer: Timer) -> list[float]:
    """Each op's seconds, timing each distinct kind once."""
    shape = shape_of(wl)
    per_kind = [timer.seconds(op) for op in shape.kinds]
    return [per_kind[k] for k in shape.kind_of]


SCHEDULE_CACHE_SIZE = 32
"""Step schedules `run_step` keeps (least recently used dropped), by what a schedule depends on:
the workload and the seconds of each of its op kinds. Points of a sweep that differ only in
inputs the step's ops do not read (the NVMe drives of a config that swaps nothing, the CPU Adam
rate of one that updates on the GPU) and a range's re-simulations of them are scheduled once."""
SCHEDULE_CACHE_OPS = 200_000
"""At most this many ops over the kept schedules: a kept run holds its records and spans,
~0.2 KB per op (Llama-2-70B at 16 micro-steps: 17,000 ops, ~4 MB), so ~40 MB in all."""
STEP_CACHE_SIZE = 1024
"""Step times `step_seconds` keeps (a float each), keyed like the schedules."""

_runs: OrderedDict[tuple, tuple[Workload, "_Run"]] = OrderedDict()
_steps: OrderedDict[tuple, tuple[Workload, float]] = OrderedDict()


def clear_schedule_cache() -> None:
    """Forget every kept schedule, step time and queue-aware order (`_QueuePlan.order`):
    benchmarks time a cold simulation with it."""
    _runs.clear()
    _steps.clear()
    _plans.clear()


def _kept(cache: OrderedDict, key: tuple, wl: Workload):
    """The value kept for `key` if it was kept for this very workload (ids are reused once a
    workload is gone; the kept entry holds its workload, so a match is the same one), else None."""
    hit = cache.get(key)
    if hit is None or hit[0] is not wl:
        return None
    cache.move_to_end(key)
    return hit[1]


def _keep(cache: OrderedDict, key: tuple, wl: Workload, value, size: int,
          ops: int | None = None) -> None:
    """Keep `value` for `key`; drop the least recently used beyond `size` entries or, with
    `ops`, beyond that many ops over the kept workloads (the newest always stays)."""
    cache[key] = (wl, value)
    while len(cache) > size or (ops is not None and len(cache) > 1
                                and sum(len(w.ops) for w, _ in cache.values()) > ops):
        cache.popitem(last=False)


def schedule(wl: Workload, seconds: list[float], *, with_events: bool | None = None
             ) -> tuple[list[_Rec], list[devices.Span]]:
    """(records, spans) of `wl` with these op durations, the same bit for bit however timed:
    an uncontended step in one ordered pass; a contended one (NVMe queue, swap buffers) by the
    queue-aware pass, or by SimPy's events where only SimPy's event order can decide.
    `with_events`: True always SimPy; False never (ValueError where it would be needed)."""
    times, make_spans = _schedule(wl, seconds, with_events=with_events)
    return _records(wl.ops, times), make_spans()


def _schedule(wl: Workload, seconds: list[float], *, with_events: bool | None = None
             ) -> tuple[Times, Callable[[], list[devices.Span]]]:
    """`schedule` with the spans still to build."""
    shape = shape_of(wl)
    if with_events:
        return _timed_with_events(wl, seconds)
    if not shape.contended:
        return _timed_in_order(wl, shape, seconds)
    timed = _timed_queued(wl, shape, seconds)
    if timed is None and with_events is False:
        raise ValueError("this contended step (NVMe queue, swap buffers) needs SimPy's events: "
                         "same-instant requests or buffers that never come")
    if timed is None:
        log.debug("%d-op step: same-instant NVMe requests or stuck buffers, timed by SimPy",
                  len(wl.ops))
        return _timed_with_events(wl, seconds)
    return timed


def run_step(hw: Hardware, model: Model, strategy: Strategy, *, first_step: bool = False,
             software: Software | None = None, workload: Workload | None = None,
             timer: Timer | None = None) -> _Run:
    """Build the workload of one step (or take `workload`, built for the same scenario: it does
    not depend on the hardware's rates) and time it (with `timer`, made for these inputs, if
    given); raise ConfigError if it cannot finish."""
    wl = workload or build_workload(hw, model, strategy, first_step=first_step, software=software)
    shape = shape_of(wl)
    timer = timer or Timer(hw, model, strategy, software)
    per_kind = tuple(timer.seconds(op) for op in shape.kinds)
    key = (id(wl), per_kind)
    run = _kept(_runs, key, wl)
    if run is not None:       # the same ops with the same seconds: the same schedule
        return run
    times, make_spans = _schedule(wl, [per_kind[k] for k in shape.kind_of])
    run = _Run(workload=wl, times=times, make_spans=make_spans,
               step_s=max(times[1], default=0.0))
    _keep(_runs, key, wl, run, SCHEDULE_CACHE_SIZE, SCHEDULE_CACHE_OPS)
    return run


def step_seconds(hw: Hardware, model: Model, strategy: Strategy, *, workload: Workload,
                 software: Software | None = None, timer: Timer | None = None) -> float:
    """`run_step(...).step_s` without the records and spans (a range's re-simulations)."""
    shape = shape_of(workload)
    timer = timer or Timer(hw, model, strategy, software)
    per_kind = tuple(timer.seconds(op) for op in shape.kinds)
    key = (id(workload), per_kind)
    step = _kept(_steps, key, workload)
    if step is None:
        run = _kept(_runs, key, workload)
        step = run.step_s if run is not None else _step_s(workload, shape, per_kind)
        _keep(_steps, key, workload, step, STEP_CACHE_SIZE)
    return step


def _step_s(wl: Workload, shape: Shape, per_kind: tuple[float, ...]) -> float:
    seconds = [per_kind[k] for k in shape.kind_of]
    if shape.contended:
        return max(_schedule(wl, seconds)[0][1], default=0.0)
    return max(_in_order(wl, shape, seconds)[1], default=0.0)


_ORDER = {name: i for i, name in enumerate(RESOURCES)}


def critical_path(recs: list[_Rec], chain: list[_Rec] | None = None) -> dict[str, float]:
    """Seconds each resource spends on the critical path (critical_chain, or `chain`)."""
    exposed = dict.fromkeys(RESOURCES, 0.0)
    for rec in (critical_chain(recs) if chain is None else chain):
        exposed[rec.op.resource] += rec.end_s - rec.start_s
    return exposed


def critical_chain(recs: list[_Rec], prev: tuple[int, ...] | None = None) -> list[_Rec]:
    """The ops of the critical path, last first, walking back from the last op.

    An op started when the last of (its resource's previous op, its dependencies, the op that
    returned its swap buffers) ended; that one is its predecessor on the path. `prev`: each
    op's previous op on its resource (Shape.previous), worked out here if not given.
    """
    if not recs:
        return []
    if prev is None:
        prev = _previous_on_resource([r.op.resource for r in recs])
    path = _chain_ids([r.op for r in recs], [r.start_s for r in recs], [r.end_s for r in recs],
                      [r.buffer_from for r in recs], prev)
    return [recs[i] for i in path]


def _chain_ids(ops, start, end, given, prev) -> list[int]:
    """critical_chain's walk over the times (op indices, last first)."""
    top = max(end)
    cur = max(i for i, e in enumerate(end) if e == top)          # the latest end, last id
    path = []
    while cur >= 0:
        path.append(cur)
        limit = start[cur] + 1e-12
        cands = ops[cur].deps
        p = prev[cur]
        b = given[cur] if given is not None else None
        if p >= 0 or b is not None:
            cands = (*cands, *((p,) if p >= 0 else ()), *((b,) if b is not None else ()))
        best, best_end = -1, None
        for c in cands:       # the candidate that ended last (the larger id on a tie)
            e = end[c]
            if e <= limit and (best < 0 or e > best_end or (e == best_end and c > best)):
                best, best_end = c, e
        cur = best
    return path


def _previous_on_resource(resources) -> tuple[int, ...]:
    """Each op's previous op on its resource (issue order), -1 for the first."""
    last: dict[str, int] = {}
    out = []
    for i, r in enumerate(resources):
        out.append(last.get(r, -1))
        last[r] = i
    return tuple(out)


def _micro_index(name: str, micro_steps: int) -> int | None:
    """m for an op named 'm<m>.<...>' with 0 <= m < micro_steps, else None."""
    if not name.startswith("m"):
        return None
    head, dot, _ = name[1:].partition(".")
    if not dot or not head.isascii() or not head.isdigit() or (head[0] == "0" and head != "0"):
        return None
    m = int(head)
    return m if m < micro_steps else None


def phase_times(run: _Run) -> dict[str, float]:
    """forward_s / backward_s summed over micro-steps, optimizer_s after the last backward.

    One pass over the records (linear in micro-steps): each micro-step's last backward end and
    last forward compute end, then the phases in micro-step order."""
    n = run.workload.micro_steps
    ends: list = [None] * n
    fends: list = [None] * n
    end = run.times[1]
    # gradient swap-out writes are asynchronous aio writes (async_swapper.py
    # `_swap_out_ready_buffers`): backward() returns without them and the optimizer's first
    # swap-in waits for them, so they count to the optimizer phase; the blocking copies into
    # the swap buffers, and a copy that first waited for the writes in flight (no free
    # buffer), count to backward (sim/grad_swap.py): Shape.marks says which op ends what
    for i, m, bwd, fwd in shape_of(run.workload).marks:
        e = end[i]
        if bwd and (ends[m] is None or e > ends[m]):
            ends[m] = e
        if fwd and (fends[m] is None or e > fends[m]):
            fends[m] = e
    fwd = bwd = 0.0
    start = 0.0
    for end, fend in zip(ends, fends):
        end = start if end is None else end
        fend = start if fend is None else fend
        fwd += fend - start
        bwd += end - fend
        start = end
    return {"forward_s": fwd, "backward_s": bwd, "optimizer_s": run.step_s - start}


def _bytes_moved(run: _Run) -> dict[str, float]:
    out = dict.fromkeys(BYTE_RESOURCES, 0.0)
    for op in run.workload.ops:
        if op.nbytes and op.resource in out:
            out[op.resource] += op.nbytes
    return out


def _scenario(hw: Hardware, model: Model, s: Strategy) -> dict:
    return {"model": model.name, "hardware": hw.name, "gpus_per_node": hw.gpus_per_node,
            "nodes": hw.nodes, "world_size": hw.world_size,
            "micro_batch": s.train_micro_batch_size_per_gpu,
            "grad_accum": s.gradient_accumulation_steps, "seq_len": model.seq_len,
            "precision": s.precision, "zero_stage": s.zero.stage,
            "offload_param": s.param_device, "offload_optimizer": s.optimizer_device,
            "activation_checkpointing": s.activation_checkpointing}


def first_step_extra_s(hw: Hardware, model: Model, strategy: Strategy,
                       software: Software | None) -> float:
    """What step 1 costs beyond its (un-prefetched) schedule: the fixed warm-up (cuBLAS/CUDA
    handles, caching-allocator growth) plus DeepSpeedCPUAdam's lazy state creation — `step()`
    builds m and v with torch.zeros_like on the first call (ops/adam/cpu_adam.py), so 8 B per
    element of this node's CPU-resident optimizer partition are page-faulted and zeroed once.
    E.g. Llama-3B on CPU: 3.2e9 x 8 B = 25.7 GB at the fitted first-touch rate."""
    if software is None:
        return 0.0
    touch = 0.0
    if strategy.optimizer_device == "cpu":
        touch = 8.0 * n_params(model) / strategy.data_parallel_size * hw.gpus_per_node
    return software.first_step_fixed_s + touch / software.first_touch_Bps


@dataclass(frozen=True)
class StepRuns:
    """What one simulation computed before it is summed up: the steady step's and step 1's
    schedules, the memory plan and the software profile used (sim/ranges.py re-times them)."""

    steady: Any
    first: Any
    plan: Any
    software: Software


def run_steps(hardware: Hardware, model: Model, strategy: Strategy, *, strict: bool = False,
              software: Software | None = None, headroom=None) -> StepRuns:
    """The memory plan (with `headroom`, sim/headroom.py; None: the default) and the two step
    schedules of `simulate` (strict: ConfigError when the config does not fit)."""
    software = host_costs.software_for(hardware, software)
    plan = plan_memory(hardware, model, strategy, software=software, headroom=headroom)
    if strict and not plan.fits:
        t = plan.tiers[plan.binding_tier]
        raise ConfigError(f"does not fit: {plan.binding_tier} tier needs "
                          f"{fmt_gib(t.used_bytes)} of {fmt_gib(t.limit_bytes)} (capacity "
                          f"{fmt_gib(t.capacity_bytes)} less {fmt_gib(t.headroom_bytes)} headroom)")
    timer = Timer(hardware, model, strategy, software)      # both steps' ops, timed once each
    steady = run_step(hardware, model, strategy, first_step=False, software=software,
                      timer=timer)
    first = (run_step(hardware, model, strategy, first_step=True, software=software,
                      timer=timer) if strategy.zero.stage == 3 else steady)
    return StepRuns(steady=steady, first=first, plan=plan, software=software)


def simulate(hardware: Hardware, model: Model, strategy: Strategy, *,
             strict: bool = False, software: Software | None = None,
             headroom=None) -> SimResult:
    """Simulate one steady-state step (and step 1) of DeepSpeed on `hardware`.

    A config that does not fit memory is still simulated (fits=False, binding_tier named) unless
    `strict`, which raises ConfigError naming the binding tier. Configs the engine does not
    model raise ConfigError naming the key. `software` (default: profiles/software/
    deepspeed-0.19.8.yaml) supplies the fitted host-side terms: ZeRO-3 hook time, step-1 warm-up.
    sim/ranges.py `simulate_ranged` adds the step time's central 80% interval and the fits
    margin (about 3x the cost).
    """
    return summarize(hardware, model, strategy,
                     run_steps(hardware, model, strategy, strict=strict, software=software,
                               headroom=headroom))


def summarize(hardware: Hardware, model: Model, strategy: Strategy, runs: StepRuns, *,
              step_range=None, memory_margin=None) -> SimResult:
    """The SimResult of a simulation's step runs (with its range and margin, when computed)."""
    steady, plan = runs.steady, runs.plan
    first_s = runs.first.step_s + first_step_extra_s(hardware, model, strategy, runs.software)
    busy, exposed, phases, moved = steady.sums()
    step = steady.step_s
    s = strategy
    tokens = (s.train_micro_batch_size_per_gpu * s.gradient_accumulation_steps * model.seq_len
              * hardware.world_size)
    work = flops.step_flops(model, s.train_micro_batch_size_per_gpu,
                            s.gradient_accumulation_steps, s.activation_checkpointing)
    lower = max(busy.values())
    return SimResult(
        step_time_s=step, first_step_time_s=first_s, phases=phases,
        busy_s=busy, exposed_s=exposed, bottleneck=max(RESOURCES, key=lambda r: exposed[r]),
        memory=plan, fits=plan.fits, binding_tier=plan.binding_tier,
        tokens_per_s=tokens / step if step else 0.0,
        tflops_per_gpu=work / step / 1e12 if step else 0.0,
        lower_bound_s=lower, efficiency=lower / step if step else 1.0,
        bytes_moved=moved, spans=tuple(steady.spans),
        scenario=_scenario(hardware, model, strategy), step_range=step_range,
        memory_margin=memory_margin)
