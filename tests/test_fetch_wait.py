"""ZeRO-3's fetch waits (DeepSpeed 0.19.8 partitioned_param_coordinator.py `fetch_sub_module`):
at one rank each in-flight parameter's wait synchronises the allgather stream
(partition_parameters.py `NoGatherCoalescedHandle.wait`), prefetches included; with more ranks
the host synchronises the oldest fetch event beyond `__max_ongoing_fetch_events` (2), and each
fetch it issues copies the offloaded partition with a blocking `.to(device)`
(`_all_gather_dtype`), so it waits for that copy."""
import pytest

from tierlab.sim import workload as wl
from tierlab.profiles.load import load_software
from tierlab.sim.engine import simulate
from tests._simhelp import scenario


def test_one_rank_waits_for_the_whole_stream():
    assert wl.fetch_wait(1, 41, [3, 9, 17]) == (41,)
    assert wl.fetch_wait(1, None, []) == ()


def test_more_ranks_wait_for_the_event_three_waits_back():
    assert wl.MAX_ONGOING_FETCH_EVENTS == 2
    assert wl.fetch_wait(2, 41, [3, 9]) == ()          # two pending: no wait
    assert wl.fetch_wait(2, 41, [3, 9, 17]) == (3,)    # a third: the oldest is synchronised
    assert wl.fetch_wait(4, 41, [3, 9, 17, 20]) == (9,)


def _ops(gpus, sets=()):
    hw, m, s = scenario("zero3-cpu", gpus=gpus, sets=sets)
    return hw, m, s, wl.build_workload(hw, m, s, software=load_software()).ops


def _waits_on_other_modules(ops):
    """Hooks that wait for a fetch of a module other than their own (a prefetch ahead)."""
    fetch = {op.id: op.name.rsplit(".param_h2d", 1)[0] for op in ops
             if op.name.endswith(".param_h2d")}
    hooks = [op for op in ops if op.resource == "cpu_host" and op.name.endswith(".hooks")]
    return [h for h in hooks
            if any(d in fetch and fetch[d] != h.name.rsplit(".hooks", 1)[0] for d in h.deps)]


def test_one_rank_hook_waits_for_prefetches_issued_before_it():
    *_, ops = _ops(1)
    assert _waits_on_other_modules(ops)


def test_the_wait_lengthens_a_pcie_heavy_forward(monkeypatch):
    hw, m, s, _ = _ops(1)
    base = simulate(hw, m, s)
    # the same schedule without the stream synchronisation: a hook waits for its own fetch only
    monkeypatch.setattr(wl, "fetch_wait", lambda dp, tail, events: ())
    loose = simulate(hw, m, s)
    assert base.phases["forward_s"] > 1.02 * loose.phases["forward_s"]


def test_no_offload_one_rank_has_nothing_to_wait_for():
    sets = ("zero_optimization.offload_param.device=none",
            "zero_optimization.offload_optimizer.device=none")
    hw, m, s = scenario("zero3-cpu", gpus=1, sets=sets)
    ops = wl.build_workload(hw, m, s).ops
    assert not [op for op in ops if op.resource in ("pcie_h2d", "gpu_comm")
                and op.phase == "forward"]


def test_fetch_issue_blocks_on_the_copy_only_with_more_ranks():
    # _all_gather_dtype's `.to(device)` of an offloaded partition is blocking (dp > 1); at one
    # rank _no_gather_coalesced copies with non_blocking=True
    assert wl.fetch_issue_wait(2, 7) == (7,)
    assert wl.fetch_issue_wait(1, 7) == ()
    assert wl.fetch_issue_wait(2, None) == ()       # parameters on the GPU: nothing copied


def test_more_ranks_hook_waits_for_the_copies_it_issued():
    *_, ops = _ops(2)
    assert _waits_on_other_modules(ops)


def test_the_blocking_copy_lengthens_a_two_rank_forward(monkeypatch):
    hw, m, s, _ = _ops(2)
    base = simulate(hw, m, s)
    monkeypatch.setattr(wl, "fetch_issue_wait", lambda dp, h2d: ())
    loose = simulate(hw, m, s)
    assert base.phases["forward_s"] > 1.02 * loose.phases["forward_s"]
