"""The engine's short cuts give what the full event simulation gives (issue 32): the ordered pass
of an uncontended step, the step-only re-simulation, the linear phase sum, the workload and
shape caches, the exclusive devices. tests/test_engine_grid.py holds the end results."""
from dataclasses import replace

import pytest
import simpy

from tierlab.sim import devices, engine, workload
from tierlab.sim.engine import (Timer, durations, phase_times, run_step, schedule, shape_of,
                                step_seconds)
from tierlab.sim.host_costs import software_for
from tests._simhelp import scenario

UNCONTENDED = [("no-offload", 1), ("zero2-cpu", 3), ("zero3-cpu", 2), ("zero3-cpu", 12)]


def _timed(preset, gas, **kw):
    hw, m, s = scenario(preset, grad_accum=gas, **kw)
    sw = software_for(hw, None)
    wl = workload.build_workload(hw, m, s, software=sw)
    return hw, m, s, sw, wl, durations(wl, Timer(hw, m, s, sw))


def _plain(recs, spans):
    """Records and spans as reprs: an int 0 and a float 0.0 differ here, as in the grid's digest."""
    spans = spans() if callable(spans) else spans          # the passes build spans lazily
    return ([repr((r.op.id, r.start_s, r.end_s, r.buffer_from)) for r in recs],
            [repr((x.resource, x.name, x.start_s, x.end_s)) for x in spans])


@pytest.mark.parametrize("preset,gas", UNCONTENDED)
def test_ordered_pass_is_the_event_simulation_bit_for_bit(preset, gas):
    *_, wl, seconds = _timed(preset, gas)
    assert not shape_of(wl).contended
    fast = schedule(wl, seconds)
    full = schedule(wl, seconds, with_events=True)
    assert _plain(*fast) == _plain(*full)
    assert len(fast[1]) == len(wl.ops)


def test_ordered_pass_holds_on_two_ranks_and_with_slow_ops():
    """Perturbed durations (every 7th op 3x slower, others shifted) still agree exactly."""
    *_, wl, seconds = _timed("zero3-cpu", 2, gpus=1)
    odd = [t * 3.0 if i % 7 == 0 else t + 1e-4 for i, t in enumerate(seconds)]
    assert _plain(*schedule(wl, odd)) == _plain(*schedule(wl, odd, with_events=True))


def test_contended_steps_are_timed_as_simpy_times_them():
    *_, wl, seconds = _timed("zero3-nvme", 1)
    assert shape_of(wl).contended
    assert _plain(*schedule(wl, seconds, with_events=False)) == \
        _plain(*schedule(wl, seconds, with_events=True))


@pytest.mark.parametrize("preset", ["zero2-cpu", "zero3-nvme"])
def test_step_seconds_is_run_steps_step(preset):
    hw, m, s, sw, wl, _ = _timed(preset, 2)
    slow = replace(hw, cpu=replace(hw.cpu, adam_params_per_s=hw.cpu.adam_params_per_s / 3))
    want = run_step(slow, m, s, software=sw, workload=wl).step_s
    assert step_seconds(slow, m, s, workload=wl, software=sw) == want
    assert want > run_step(hw, m, s, software=sw, workload=wl).step_s


def _phase_times_by_micro_step(run):
    """The phase sum as written before issue 32 (one filter per micro-step)."""
    fwd = bwd = 0.0
    start = 0.0
    for m in range(run.workload.micro_steps):
        mine = [r for r in run.recs if r.op.name.startswith(f"m{m}.")]
        end = max((r.end_s for r in mine if r.op.resource != "nvme_write"), default=start)
        fend = max((r.end_s for r in mine if r.op.resource == "gpu_compute"
                    and r.op.phase == "forward"), default=start)
        fwd += fend - start
        bwd += end - fend
        start = end
    return {"forward_s": fwd, "backward_s": bwd, "optimizer_s": run.step_s - start}


@pytest.mark.parametrize("preset,gas", [("zero2-cpu", 12), ("zero3-nvme", 11), ("no-offload", 1)])
def test_phase_times_equal_the_per_micro_step_sum(preset, gas):
    """12 micro-steps: 'm1.' must not collect 'm10.'/'m11.' ops."""
    hw, m, s = scenario(preset, grad_accum=gas)
    run = run_step(hw, m, s, software=software_for(hw, None))
    got = phase_times(run)
    assert got == _phase_times_by_micro_step(run)
    assert got["forward_s"] > 0 and got["backward_s"] > 0


def test_micro_index_reads_only_exact_tags():
    mi = engine._micro_index
    assert [mi(n, 12) for n in ("m0.a", "m11.b", "m12.c", "m01.d", "opt.x", "m.x", "m3")] == \
        [0, 11, None, None, None, None, None]


def test_workload_is_cached_by_what_it_reads():
    hw, m, s = scenario("zero3-cpu")
    sw = software_for(hw, None)
    workload.clear_workload_cache()
    a = workload.build_workload(hw, m, s, software=sw)
    s2 = replace(s)                                    # an equal Strategy, another object
    faster = replace(hw, cpu=replace(hw.cpu, adam_params_per_s=9e9))   # rates: not read
    assert s2 is not s and workload.build_workload(faster, m, s2, software=sw) is a
    assert workload.build_workload(hw, m, s, software=sw, first_step=True) is not a
    assert workload.build_workload(hw, m, s) is not a            # no host terms
    slower_host = replace(sw, zero3_hook_s_per_module=sw.zero3_hook_s_per_module * 2)
    assert workload.build_workload(hw, m, s, software=slower_host) is not a
    hw2, m2, s2 = scenario("zero3-cpu", hardware="dgx-a100", gpus=2)
    assert workload.build_workload(hw2, m2, s2, software=sw).dp == 2
    workload.clear_workload_cache()
    fresh = workload.build_workload(hw, m, s, software=sw)
    assert fresh is not a and fresh == a


def test_workload_cache_is_bounded():
    hw, m, s = scenario("zero2-cpu")
    workload.clear_workload_cache()
    for gas in range(1, workload.WORKLOAD_CACHE_SIZE + 6):
        workload.build_workload(hw, m, replace(s, gradient_accumulation_steps=gas,
                                               train_batch_size=gas * s.train_micro_batch_size_per_gpu))
    assert len(workload._workloads) == workload.WORKLOAD_CACHE_SIZE


@pytest.mark.parametrize("preset", ["zero2-cpu", "zero3-nvme"])
def test_a_dense_models_workload_is_one_for_every_batch_and_sequence(preset):
    """Only a MoE block reads the tokens (the experts they route to): a dense model's ops are
    the same at any micro-batch and sequence length, built once and equal to a fresh build."""
    hw, m, s = scenario(preset, micro_batch=1, seq=256)
    sw = software_for(hw, None)
    workload.clear_workload_cache()
    a = workload.build_workload(hw, m, s, software=sw)
    hw2, m2, s2 = scenario(preset, micro_batch=8, seq=2048)
    assert (m2.seq_len, s2.train_micro_batch_size_per_gpu) == (2048, 8)
    assert workload.build_workload(hw2, m2, s2, software=sw) is a
    workload.clear_workload_cache()
    assert workload.build_workload(hw2, m2, s2, software=sw) == a
    _, _, s4 = scenario(preset, micro_batch=1, seq=256, grad_accum=4)   # what ops read: new
    assert workload.build_workload(hw, m, s4, software=sw) != a


def test_a_moe_models_workload_is_keyed_by_its_tokens():
    from pathlib import Path

    mixtral = str(Path(__file__).parent / "data" / "hf_configs" / "mixtral-8x7b.json")
    hw, m, s = scenario("zero3-cpu", model=mixtral, hardware="dgx-a100", micro_batch=1, seq=2)
    workload.clear_workload_cache()
    few = workload.build_workload(hw, m, s)
    hw2, m2, s2 = scenario("zero3-cpu", model=mixtral, hardware="dgx-a100", micro_batch=1,
                           seq=4096)
    many = workload.build_workload(hw2, m2, s2)
    assert many is not few and many != few           # 2 tokens reach fewer of the 8 experts


def test_shape_rejects_an_op_that_waits_for_a_later_one():
    *_, wl, _ = _timed("zero2-cpu", 1)
    ops = list(wl.ops)
    ops[1] = replace(ops[1], deps=(5,))
    with pytest.raises(ValueError, match="earlier ops"):
        shape_of(replace(wl, ops=tuple(ops)))


def test_only_the_nvme_queue_is_shared():
    env = simpy.Environment()
    devs = devices.make_devices(env)
    assert {n for n, d in devs.items() if not d.exclusive} == {"nvme_read", "nvme_write"}
    env.process(devs["pcie_h2d"].run("a", 1.5))
    env.run()
    assert devs["pcie_h2d"].spans == [devices.Span("pcie_h2d", "a", 0, 1.5)]
    assert devs["pcie_h2d"].resource.count == 0 and not devs["pcie_h2d"].resource.queue


NVME_CASES = [
    ("zero3-nvme", 1, ()),
    ("zero3-nvme", 3, ("zero_optimization.offload_optimizer.pipeline_read=true",
                       "zero_optimization.offload_optimizer.pipeline_write=true",
                       "zero_optimization.offload_optimizer.buffer_count=12")),
    ("zero3-nvme", 2, ("zero_optimization.offload_param.device=nvme",
                       "zero_optimization.offload_param.nvme_path=/nvme",
                       "zero_optimization.offload_param.buffer_count=2")),
]


@pytest.mark.parametrize("preset,gas,sets", NVME_CASES)
def test_queue_aware_pass_is_the_event_simulation_bit_for_bit(preset, gas, sets):
    """Contended steps (the NVMe queue both swap streams share, swap buffers that run out),
    with their own durations and with kinds of op made 0.3-10x slower or free: wherever the
    queue-aware pass answers it answers what SimPy answers, records, buffer waits and spans;
    it answers the real durations and most perturbed ones (same-instant requests: SimPy)."""
    import random

    *_, wl, base = _timed(preset, gas, micro_batch=2, seq=512, sets=sets)
    shape = shape_of(wl)
    assert shape.contended
    rng = random.Random(32)
    answered = 0
    for trial in range(12):
        if trial == 0:
            sec = base
        elif trial < 4:
            sec = [0.0 if rng.random() < 0.2 else t for t in base]
        else:
            f = [rng.choice([0.3, 1.0, 3.0, 10.0]) for _ in shape.kinds]
            sec = [t * f[k] for t, k in zip(base, shape.kind_of)]
        fast = engine._timed_queued(wl, shape, sec)
        if trial == 0:
            assert fast is not None
        if fast is not None:
            answered += 1
            times, spans = fast
            assert _plain(engine._records(wl.ops, times), spans) == \
                _plain(*schedule(wl, sec, with_events=True))
    assert answered >= 6       # two swap streams released by one op tie: SimPy orders them
    if "buffer_count=2" in str(sets):
        assert any(r.buffer_from is not None for r in schedule(wl, base)[0])


def test_a_stuck_step_is_left_to_simpy_which_names_it():
    hw, m, s, sw, wl, sec = _timed("zero3-nvme", 1, micro_batch=2, seq=512)
    starved = replace(wl, optimizer_buffers=3)          # a swap-in needs 4
    assert engine._timed_queued(starved, shape_of(starved), sec) is None
    with pytest.raises(ValueError, match="needs 4 buffers, only 3 exist"):
        schedule(starved, sec)


# ----------------------------------------------------------------------------------------------
# the schedule cache: a schedule depends only on the workload and each op kind's seconds

def test_a_rate_no_op_reads_reuses_the_schedule_and_one_it_reads_does_not():
    hw, m, s = scenario("no-offload")
    sw = software_for(hw, None)
    engine.clear_schedule_cache()
    a = run_step(hw, m, s, software=sw)
    slower_adam = replace(hw, cpu=replace(hw.cpu, adam_params_per_s=hw.cpu.adam_params_per_s / 3))
    assert run_step(slower_adam, m, s, software=sw) is a          # no CPU Adam op: same run
    slower_gpu = replace(hw, gpu=replace(hw.gpu, hbm_bandwidth_Bps=hw.gpu.hbm_bandwidth_Bps / 3))
    b = run_step(slower_gpu, m, s, software=sw)
    assert b is not a and b.step_s > a.step_s
    engine.clear_schedule_cache()
    fresh = run_step(hw, m, s, software=sw)
    assert fresh is not a and _plain(fresh.recs, fresh.spans) == _plain(a.recs, a.spans)
    assert fresh.step_s == a.step_s and fresh.sums() == a.sums()


@pytest.mark.parametrize("preset,gas", [("zero3-cpu", 2), ("zero3-nvme", 3)])
def test_step_seconds_cached_equals_the_run(preset, gas):
    hw, m, s, sw, wl, _ = _timed(preset, gas)
    engine.clear_schedule_cache()
    cold = step_seconds(hw, m, s, workload=wl, software=sw)       # computed
    warm = step_seconds(hw, m, s, workload=wl, software=sw)       # kept
    assert cold == warm == run_step(hw, m, s, software=sw, workload=wl).step_s
    engine.clear_schedule_cache()
    run = run_step(hw, m, s, software=sw, workload=wl)
    assert step_seconds(hw, m, s, workload=wl, software=sw) == run.step_s   # off the kept run


def test_sums_are_copies_and_the_cache_is_bounded():
    hw, m, s = scenario("zero2-cpu")
    sw = software_for(hw, None)
    engine.clear_schedule_cache()
    run = run_step(hw, m, s, software=sw)
    busy, *_ = run.sums()
    busy["gpu_compute"] = -1.0
    assert run.sums()[0]["gpu_compute"] > 0          # a SimResult owns its dicts
    for k in range(engine.SCHEDULE_CACHE_SIZE + 3):
        faster = replace(hw, pcie=replace(hw.pcie, h2d_pinned_Bps=hw.pcie.h2d_pinned_Bps * (2 + k)))
        run_step(faster, m, s, software=sw)
    assert len(engine._runs) == engine.SCHEDULE_CACHE_SIZE
    assert sum(len(w.ops) for w, _ in engine._runs.values()) <= engine.SCHEDULE_CACHE_OPS


def test_critical_chain_with_and_without_the_shape_agree():
    for preset, gas in (("zero3-nvme", 2), ("zero2-cpu", 3)):
        hw, m, s = scenario(preset, grad_accum=gas)
        run = run_step(hw, m, s, software=software_for(hw, None))
        assert engine.critical_chain(run.recs) == run.chain()


def test_timer_terms_are_shared_by_the_same_gpu_model_and_strategy():
    hw, m, s = scenario("zero3-cpu")
    other = replace(hw, cpu=replace(hw.cpu, adam_params_per_s=1e9))      # the same GPU object
    a, b = Timer(hw, m, s), Timer(other, m, s)
    assert (a.block_s, a.head_s) == (b.block_s, b.head_s)
    engine._terms.clear()
    fresh = Timer(replace(hw, gpu=replace(hw.gpu)), m, s)                # an equal GPU, new
    assert (fresh.block_s, fresh.block_bwd_s, fresh.head_s, fresh.rescaled) == \
        (a.block_s, a.block_bwd_s, a.head_s, a.rescaled)
