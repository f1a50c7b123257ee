"""ZeRO-3's fetch waits (DeepSpeed 0.19.8 partitioned_param_coordinator.py `fetch_sub_module`):
at one rank each in-flight parameter's wait synchronises the allgather stream
(partition_parameters.py `NoGatherCoalescedHandle.wait`), prefetches included; with more ranks
the host synchronises the oldest fetch event beyond `__max_ongoing_fetch_events` (2), and each
fetch it issues copies the offloaded partition with a blocking `.to(device)`
(`_all_gather_dtype`), so it waits for that copy."""
from dataclasses import replace

from tierlab.sim import workload as wl
from tierlab.profiles.load import load_software
from tierlab.sim.engine import phase_times, run_step
from tests._simhelp import scenario


def test_one_rank_waits_for_the_whole_stream():
    assert wl.fetch_wait(1, 41, [3, 9, 17]) == (41,)
    assert wl.fetch_wait(1, None, []) == ()


def test_more_ranks_wait_for_the_event_three_waits_back():
    assert wl.MAX_ONGOING_FETCH_EVENTS == 2
    assert wl.fetch_wait(2, 41, [3, 9]) == ()          # two pending: no wait
    assert wl.fetch_wait(2, 41, [3, 9, 17]) == (3,)    # a third: the oldest is synchronised
    assert wl.fetch_wait(4, 41, [3, 9, 17, 20]) == (9,)


def _workload(gpus, sets=()):
    hw, m, s = scenario("zero3-cpu", gpus=gpus, sets=sets)
    return hw, m, s, wl.build_workload(hw, m, s, software=load_software())


def _ops(gpus, sets=()):
    *_, work = _workload(gpus, sets)
    return work.ops


def _fetch_of(ops) -> dict[int, str]:
    """Op id of each fetch's H2D copy -> the submodule use it fetches."""
    return {op.id: op.name.rsplit(".param_h2d", 1)[0] for op in ops
            if op.name.endswith(".param_h2d")}


def _waits_on_other_modules(ops):
    """Hooks that wait for a fetch of a module other than their own (a prefetch ahead)."""
    fetch = _fetch_of(ops)
    hooks = [op for op in ops if op.resource == "cpu_host" and op.name.endswith(".hooks")]
    return [h for h in hooks
            if any(d in fetch and fetch[d] != h.name.rsplit(".hooks", 1)[0] for d in h.deps)]


def _own_fetch_only(work: wl.Workload) -> wl.Workload:
    """The same workload with every submodule use (its hooks, checkpoint wrapper and kernels)
    waiting for its own fetch only: no dependency on another use's H2D copy (the schedule
    without the waits, as an input to the engine)."""
    fetch, ops = _fetch_of(work.ops), []
    for op in work.ops:
        if op.resource in ("cpu_host", "gpu_compute"):
            use = op.name.removesuffix(".hooks").removesuffix(".ckpt")
            op = replace(op, deps=tuple(d for d in op.deps if fetch.get(d, use) == use))
        ops.append(op)
    return replace(work, ops=tuple(ops))


def _forward_s(hw, m, s, work: wl.Workload) -> float:
    run = run_step(hw, m, s, software=load_software(), workload=work)
    return phase_times(run)["forward_s"]


def test_one_rank_hook_waits_for_prefetches_issued_before_it():
    assert _waits_on_other_modules(_ops(1))


def test_the_wait_lengthens_a_pcie_heavy_forward():
    hw, m, s, work = _workload(1)
    # the same schedule without the stream synchronisation: a hook waits for its own fetch only
    loose = _own_fetch_only(work)
    assert not _waits_on_other_modules(loose.ops)
    assert _forward_s(hw, m, s, work) > 1.02 * _forward_s(hw, m, s, loose)


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
    assert _waits_on_other_modules(_ops(2))


def test_the_blocking_copy_lengthens_a_two_rank_forward():
    hw, m, s, work = _workload(2)
    # at two ranks a hook's own fetch ends in its all-gather: the H2D copies of other modules
    # it depends on are the ones it issued and blocked on (fetch_issue_wait), nothing else
    loose = _own_fetch_only(work)
    assert not _waits_on_other_modules(loose.ops)
    assert _forward_s(hw, m, s, work) > 1.02 * _forward_s(hw, m, s, loose)
