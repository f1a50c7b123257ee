"""The queue-aware pass's recorded order, replayed (issue 32): where the replay answers, it answers
what the full pass and SimPy answer, bit for bit; where its order may not hold (same-instant NVMe
requests, a take no earlier give serves, gives that could overfill a pool) the full pass decides."""
import random
from dataclasses import replace

import pytest

from tierlab.sim import engine, workload
from tierlab.sim.engine import Timer, durations, schedule, shape_of
from tierlab.sim.host_costs import software_for
from tests._simhelp import scenario

PIPELINED = ("zero_optimization.offload_optimizer.pipeline_read=true",
             "zero_optimization.offload_optimizer.pipeline_write=true",
             "zero_optimization.offload_optimizer.buffer_count=12")
PARAM_NVME = ("zero_optimization.offload_param.device=nvme",
              "zero_optimization.offload_param.nvme_path=/nvme",
              "zero_optimization.offload_param.buffer_count=2")
CASES = [(1, ()), (3, ()), (3, PIPELINED), (2, PARAM_NVME), (4, PARAM_NVME + PIPELINED)]


def _workload(gas, sets):
    hw, m, s = scenario("zero3-nvme", grad_accum=gas, micro_batch=2, seq=512, sets=sets)
    sw = software_for(hw, None)
    wl = workload.build_workload(hw, m, s, software=sw)
    return wl, durations(wl, Timer(hw, m, s, sw))


def _plain(times, spans):
    start, end, given = times
    return ([repr(x) for x in zip(start, end, given)],
            [repr((x.resource, x.name, x.start_s, x.end_s)) for x in spans()])


def _full(wl, sec):
    """The full pass on a fresh plan (no recorded order)."""
    return engine._queued_full(wl.ops, engine._QueuePlan(wl, shape_of(wl)), sec)


@pytest.mark.parametrize("gas,sets", CASES)
def test_a_replay_that_answers_is_the_full_pass_and_simpy(gas, sets):
    wl, base = _workload(gas, sets)
    shape = shape_of(wl)
    plan = engine._QueuePlan(wl, shape)
    assert plan.gives_safe and engine._queued_full(wl.ops, plan, base) is not None
    recorded = plan.order
    assert sorted(recorded) == list(range(len(wl.ops)))
    rng = random.Random(gas * 7 + len(sets))
    replayed = 0
    for trial in range(40):
        if trial < 10:           # rates a sweep moves: one or two kinds of op slower or faster
            f = [1.0] * len(shape.kinds)
            for k in rng.sample(range(len(shape.kinds)), rng.choice([1, 2])):
                f[k] = rng.choice([0.5, 0.9, 1.1, 2.0])
        else:
            f = [rng.choice([0.3, 1.0, 3.0, 10.0]) for _ in shape.kinds]
        sec = [t * f[k] for t, k in zip(base, shape.kind_of)]
        plan.order = recorded
        fast = engine._replayed(wl.ops, plan, sec)
        full = _full(wl, sec)
        if fast is None:
            continue
        replayed += 1
        assert full is not None and _plain(*fast) == _plain(*full)
        if trial % 8 == 0:
            recs, spans = schedule(wl, sec, with_events=True)
            assert _plain(*fast)[1] == [repr((x.resource, x.name, x.start_s, x.end_s))
                                        for x in spans]
            assert [r.buffer_from for r in recs] == list(fast[0][2])
    assert replayed >= 10


def test_the_entry_replays_the_last_order_and_falls_back_to_the_full_pass():
    wl, base = _workload(3, PIPELINED)
    engine._plans.clear()
    first = engine._timed_queued(wl, shape_of(wl), base)
    plan = engine._plan_of(wl, shape_of(wl))
    assert plan.order is not None
    again = engine._timed_queued(wl, shape_of(wl), [t * 1.5 for t in base])
    assert _plain(*again) == _plain(*_full(wl, [t * 1.5 for t in base]))
    assert _plain(*engine._timed_queued(wl, shape_of(wl), base)) == _plain(*first)
    plan.order = None                                # no order kept: the full pass, which keeps one
    assert _plain(*engine._timed_queued(wl, shape_of(wl), base)) == _plain(*first)
    assert plan.order is not None


def test_gives_that_could_overfill_a_pool_are_never_replayed():
    wl, base = _workload(1, ())
    ops = list(wl.ops)
    i = next(i for i, op in enumerate(ops) if op.give_buffers)
    ops[i] = replace(ops[i], give_buffers=ops[i].give_buffers + 1)   # gives more than it took
    bad = replace(wl, ops=tuple(ops))
    plan = engine._QueuePlan(bad, shape_of(bad))
    assert not plan.gives_safe
    assert engine._QueuePlan(wl, shape_of(wl)).gives_safe
