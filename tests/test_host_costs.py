"""Measured DeepSpeed host costs: the derivation from calibrate_ds points, the CPU profile block,
and how the engine charges them (runner/calibrate_host.py, sim/host_costs.py)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tierlab.errors import ConfigError
from tierlab.profiles.load import _cpu, load_hardware, load_software
from tierlab.profiles.schema import HOST_COST_FIELDS
from tierlab.runner.calibrate_host import TERMS, derive, zeroed
from tierlab.sim.host_costs import use_cost_s, with_host_costs

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "lab" / "cases" / "h200-g" / "h200-g-raw.json"


def _points():
    return json.loads(RAW.read_text())["results"]["deepspeed"]


@pytest.mark.lab
def test_every_term_is_derived_from_the_h200_g_points_and_checks_hold():
    values, how, problems = derive(_points(), load_hardware("h200-g"), load_software())
    # h200-g was calibrated before the zero2 (no offload) variant existed: only its term is left
    measured = {p["variant"] for p in _points()}
    assert "zero2" not in measured
    assert problems == ["zero12_step_s_per_param: zero2 not measured at two depths",
                        "zero12_hook_bwd_s_per_module: zero2 not measured at two depths"]
    assert set(values) == {t[0] for t in TERMS if t[1] in measured}
    assert all(v >= 0 for v in values.values())
    # ZeRO-3's hooks cost several times plain kernel dispatch per submodule use (narrow model)
    assert values["zero3_hook_s_per_module"] > 3 * values["host_dispatch_s_per_module"]
    # the check variants (never used to derive a term) are predicted within 20%
    for key, text in how.items():
        if key.startswith("check:"):
            pred, meas = (float(x) for x in
                          __import__("re").findall(r"([\d.]+) ms", text))
            assert pred == pytest.approx(meas, rel=0.2), text


@pytest.mark.lab
def test_a_term_without_two_depths_stays_with_the_base_and_is_listed():
    pts = [p for p in _points() if not (p["variant"] == "zero2_offload_gas2" and p["layers"] == 10)]
    values, _, problems = derive(pts, load_hardware("h200-g"), load_software())
    assert "offload_accum_s_per_param" not in values
    assert problems and "offload_accum_s_per_param" in problems[0]


@pytest.mark.lab
def test_a_term_that_comes_out_at_or_below_zero_stays_with_the_base_and_is_listed():
    """h200-m's gas2 pair ran faster than the terms from its other processes predict: the
    CPU accumulation round trip came out at -0.11 ms per tensor and micro-step, which measures
    nothing."""
    hw, sw = load_hardware("h200-m"), load_software()
    pts = json.loads((ROOT / "lab" / "cases" / "h200-m" / "h200-m-raw.json").read_text()
                     )["results"]["deepspeed"]
    values, how, problems = derive(pts, hw, sw)
    assert "offload_accum_s_per_param" not in values and "offload_accum_s_per_param" not in how
    [problem] = [p for p in problems if p.startswith("offload_accum_s_per_param")]
    assert "not above the noise" in problem and "= -114" in problem
    assert all(v > 0 for v in values.values())
    # the profile written from it leaves the term to the software profile (base value, source)
    assert "offload_accum_s_per_param" not in hw.cpu.host_costs
    merged = with_host_costs(sw, hw)
    assert merged.offload_accum_s_per_param == sw.offload_accum_s_per_param > 0
    assert merged.sources["offload_accum_s_per_param"] == sw.sources["offload_accum_s_per_param"]
    # one slow process in the gas2 pair gives a positive term, which is kept
    slow = [dict(p, backward_s=p["backward_s"] * 1.5)
            if (p["variant"], p["layers"]) == ("zero2_offload_gas2", 10) else p for p in pts]
    assert derive(slow, hw, sw)[0]["offload_accum_s_per_param"] > 0


@pytest.mark.lab
def test_forward_dispatch_is_the_median_over_the_configurations_whose_forward_is_dispatch_only():
    """stage 0 and ZeRO-1/2 (any offload_optimizer) run the same forward; each pair of processes
    gives the term and the median is kept, so one slow process does not set it."""
    from tierlab.runner.calibrate_host import POOLED

    hw, sw = load_hardware("h200-o"), load_software()
    pts = json.loads((ROOT / "lab" / "cases" / "h200-o" / "h200-o-raw.json").read_text()
                     )["results"]["deepspeed"]
    values, how, _ = derive(pts, hw, sw)
    text = how["host_dispatch_s_per_module"]
    assert text.startswith("median of 5 configurations")
    each = [float(x) * 1e-6 for x in __import__("re").findall(r"= ([\d.]+) us", text)]
    assert len(each) == len(POOLED["host_dispatch_s_per_module"]) == 5
    assert values["host_dispatch_s_per_module"] == pytest.approx(sorted(each)[2], rel=1e-3)
    # h200-o's stage-0 pair alone caught a slow 10-layer process: twice the median
    alone, _, _ = derive([p for p in pts if p["variant"] == "stage0"], hw, sw)
    assert alone["host_dispatch_s_per_module"] > 1.5 * values["host_dispatch_s_per_module"]
    # a slow process in one configuration moves the median less than it moves that one
    slow = [dict(p, forward_s=p["forward_s"] * 3) if (p["variant"], p["layers"]) == ("zero2", 10)
            else p for p in pts]
    moved, _, _ = derive(slow, hw, sw)
    assert moved["host_dispatch_s_per_module"] < 1.5 * values["host_dispatch_s_per_module"]


@pytest.mark.lab
def test_calibrated_cpu_overrides_the_software_profile_with_its_source():
    hw, sw = load_hardware("h200-g"), load_software()
    assert set(hw.cpu.host_costs) <= set(HOST_COST_FIELDS) and hw.cpu.host_costs
    merged = with_host_costs(sw, hw)
    for key, value in hw.cpu.host_costs.items():
        assert getattr(merged, key) == value
        assert "tierlab calibrate" in merged.sources[key]
    assert with_host_costs(sw, load_hardware("h200-gen5")) is sw     # nothing measured there
    # the lab's stock h200-host: no host costs, its CPU Adam a noted midpoint, not calibrate's
    assert with_host_costs(sw, load_hardware("h200-host")) is sw


def test_step_cost_without_offload_by_stage():
    """The optimizer step's per-tensor host term: stage 0 FP16_Optimizer, ZeRO-1/2 and ZeRO-3
    without offload each their own; offloaded optimizers their bookkeeping."""
    from tierlab.sim.host_costs import step_cost_s
    from tests._simhelp import scenario

    sw = replace(zeroed(load_software()), stage0_step_s_per_param=1.0, zero12_step_s_per_param=2.0,
                 zero3_step_s_per_param=3.0, offload_step_s_per_param=4.0)
    none = ["zero_optimization.offload_optimizer.device=none",
            "zero_optimization.offload_param.device=none"]
    assert step_cost_s(sw, scenario("no-offload")[2]) == 1.0
    assert step_cost_s(sw, scenario("zero2-cpu", sets=none[:1])[2]) == 2.0
    assert step_cost_s(sw, scenario("zero3-cpu", sets=none)[2]) == 3.0
    assert step_cost_s(sw, scenario("zero3-cpu")[2]) == 4.0


def test_use_cost_by_stage_offload_and_pin_memory():
    from tests._simhelp import scenario

    sw = replace(zeroed(load_software()), host_dispatch_s_per_module=1.0,
                 host_dispatch_bwd_s_per_module=2.0, zero3_hook_s_per_module=10.0,
                 zero3_offload_hook_s_per_module=20.0, zero3_offload_hook_bwd_s_per_module=40.0,
                 zero3_pageable_bwd_s_per_module=100.0)
    _, _, z3 = scenario("zero3-cpu")
    _, _, z2 = scenario("zero2-cpu")
    assert use_cost_s(sw, z2, "fwd") == 1.0 and use_cost_s(sw, z2, "bwd") == 2.0
    assert use_cost_s(sw, z3, "fwd") == 21.0 and use_cost_s(sw, z3, "recompute") == 21.0
    assert use_cost_s(sw, z3, "bwd") == 42.0
    pageable = replace(z3, zero=replace(z3.zero, offload_optimizer=replace(
        z3.zero.offload_optimizer, pin_memory=False)))
    assert use_cost_s(sw, pageable, "bwd") == 142.0


def test_cpu_profile_rejects_an_unknown_or_sourceless_host_cost():
    base = {"kind": "cpu", "name": "x", "sockets": {"value": 1, "source": "s"},
            "cores": {"value": 8, "source": "s"},
            "dram_bandwidth": {"value": "100 GB/s", "source": "s"},
            "adam_throughput": {"value": "1 Gparams/s", "source": "s"}}
    ok = _cpu({**base, "deepspeed_host_costs": {
        "zero3_hook_per_module": {"value": "0.4 ms", "source": "measured"}}}, "cpu.yaml")
    assert ok.host_costs == {"zero3_hook_s_per_module": pytest.approx(4e-4)}
    with pytest.raises(ConfigError, match="zero3_hooks_per_module: unknown term"):
        _cpu({**base, "deepspeed_host_costs": {
            "zero3_hooks_per_module": {"value": "0.4 ms", "source": "m"}}}, "cpu.yaml")
    with pytest.raises(ConfigError, match="source"):
        _cpu({**base, "deepspeed_host_costs": {
            "zero3_hook_per_module": {"value": "0.4 ms"}}}, "cpu.yaml")


def test_a_narrow_model_point_trains_through_deepspeed_on_this_host(tmp_path):
    """One real calibrate_ds point (stage 0, 2 layers) through the runner's worker process."""
    from tierlab.runner import calibrate_ds as cds

    point = cds.run_point(cds.variant_named("stage0"), 2, steps=3, warmup=1, precision="bf16",
                          timeout_s=300, workdir=tmp_path)
    assert point["status"] == "ok", point
    assert point["measured_steps"] == 2
    assert 0 < point["forward_s"] and 0 < point["backward_s"] and 0 < point["optimizer_s"]


def test_calibrate_lists_the_deepspeed_benchmark_when_skipped():
    from tierlab.runner.calibrate import SweepPlan, calibration_tasks, quick_plan

    _, skipped = calibration_tasks(quick_plan(), nvme_path=None, skip=set(), cuda=False,
                                   n_gpus=0, facts={})
    assert "--host-costs" in skipped["deepspeed"]          # not measured unless asked
    _, skipped = calibration_tasks(SweepPlan(), nvme_path=None, skip=set(), cuda=False,
                                   n_gpus=0, facts={})
    assert "--host-costs" in skipped["deepspeed"]          # the default too (issue 31)
    tasks, _ = calibration_tasks(SweepPlan(ds_variants=("stage0",), deepspeed=True), nvme_path=None,
                                 skip={"memcpy", "adam", "dispatch", "gpu", "pcie", "gemm",
                                       "nccl", "aio", "overflow", "cast"}, cuda=False, n_gpus=0,
                                 facts={})
    assert [t.group for t in tasks] == ["deepspeed", "deepspeed"]
    with pytest.raises(ConfigError, match="ds_variants=nope"):
        calibration_tasks(SweepPlan(ds_variants=("nope",), deepspeed=True), nvme_path=None,
                          skip=set(),
                          cuda=False, n_gpus=0, facts={})


def _checkpoint_ops(field: str, work: str):
    """(hw, model, strategy, software with `field` at 2 ms, that field's `work` ops) for a
    checkpointed stage-0 run of 2 micro-steps; asserts there are none without checkpointing."""
    from tierlab.sim.workload import build_workload
    from tests._simhelp import scenario

    sw = replace(load_software(), **{field: 2e-3})
    hw, m, s = scenario("no-offload", hardware="h200-host", micro_batch=1, seq=256,
                        grad_accum=2, checkpointing=True)
    ops = [op for op in build_workload(hw, m, s, software=sw).ops if op.work == work]
    _, _, plain = scenario("no-offload", hardware="h200-host", micro_batch=1, seq=256,
                           grad_accum=2, checkpointing=False)
    assert not [op for op in build_workload(hw, m, plain, software=sw).ops if op.work == work]
    return hw, m, s, sw, ops


@pytest.mark.lab
def test_checkpoint_wrapper_is_one_host_op_per_block_forward_and_costs_time_when_host_bound():
    """HF gradient checkpointing's torch.utils.checkpoint wrapper: one cpu_host op per block
    forward (not recompute, not backward), none without checkpointing, and it lengthens a
    host-bound forward by about its cost per layer."""
    from tierlab.sim.engine import simulate

    hw, m, s, sw, ops = _checkpoint_ops("checkpoint_s_per_block", "ckpt_wrap")
    assert len(ops) == m.n_layers * 2 and all(op.resource == "cpu_host" for op in ops)
    assert all(op.phase == "forward" for op in ops)
    fwd0 = simulate(hw, m, s, software=replace(sw, checkpoint_s_per_block=0.0)).phases["forward_s"]
    fwd1 = simulate(hw, m, s, software=sw).phases["forward_s"]
    assert fwd1 - fwd0 == pytest.approx(2 * m.n_layers * 2e-3, rel=0.25)


def test_checkpoint_costs_come_from_host_bound_layer_points_into_the_cpu_profile():
    from tierlab.runner.calibrate_gpu import checkpoint_bwd_cost, checkpoint_cost
    from tierlab.runner.calibrate_profile import _checkpoint_cost_entries

    pts = [{"model": "a", "tokens": 2048, "fwd_s": 1.0e-3, "ckpt_fwd_s": 1.6e-3,
            "bwd_s": 2.0e-3, "ckpt_bwd_s": 4.5e-3},
           {"model": "b", "tokens": 2048, "fwd_s": 1.1e-3, "ckpt_fwd_s": 1.5e-3,
            "bwd_s": 2.2e-3, "ckpt_bwd_s": 3.0e-3},                                 # < 0: 0
           {"model": "d", "tokens": 4096, "fwd_s": 1.2e-3, "ckpt_fwd_s": 1.7e-3,
            "bwd_s": 2.4e-3, "ckpt_bwd_s": 4.6e-3},
           {"model": "c", "tokens": 8192, "fwd_s": 7.0e-3, "ckpt_fwd_s": 7.1e-3,      # GPU-bound
            "bwd_s": 14e-3, "ckpt_bwd_s": 30e-3}]
    value, how = checkpoint_cost(pts)
    assert value == pytest.approx(0.5e-3) and "c x8192" not in how
    assert checkpoint_cost([{"fwd_s": 1e-3}]) == (None, "no checkpointed layer point")
    bwd, how = checkpoint_bwd_cost(pts)         # median of 1.5, 0 (clipped), 1.0 ms
    assert bwd == pytest.approx(1.0e-3) and "c x8192" not in how and "b x2048 0.00 ms" in how
    assert checkpoint_bwd_cost([{"fwd_s": 1e-3, "ckpt_fwd_s": 2e-3}])[0] is None
    entries = _checkpoint_cost_entries(pts, "measured 2026-12-01 by tierlab calibrate")
    assert set(entries) == {"checkpoint_per_block", "checkpoint_bwd_per_block"}
    cpu = {"kind": "cpu", "name": "x", "sockets": {"value": 1, "source": "s"},
           "cores": {"value": 8, "source": "s"},
           "dram_bandwidth": {"value": "50 GB/s", "source": "s"},
           "adam_throughput": {"value": "1 Gparams/s", "source": "s"},
           "deepspeed_host_costs": entries}
    loaded = _cpu(cpu, "cpus/x.yaml")
    assert loaded.host_costs["checkpoint_s_per_block"] == pytest.approx(0.5e-3)
    assert loaded.host_costs["checkpoint_bwd_s_per_block"] == pytest.approx(1.0e-3)
    assert "layer benchmark" in loaded.sources["host_costs.checkpoint_bwd_s_per_block"]
    assert _checkpoint_cost_entries([{"fwd_s": 1e-3}], "m") == {}


@pytest.mark.lab
def test_checkpoint_recompute_is_one_host_op_per_block_backward_and_costs_time_when_host_bound():
    """torch.utils.checkpoint's recompute machinery in backward: one cpu_host op per checkpointed
    block per micro-step, in the backward phase; none without checkpointing or without the term;
    it lengthens a host-bound backward by about its cost per layer and leaves forward alone."""
    from tierlab.sim.engine import simulate

    hw, m, s, sw, ops = _checkpoint_ops("checkpoint_bwd_s_per_block", "ckpt_recompute")
    assert len(ops) == m.n_layers * 2 and all(op.resource == "cpu_host" for op in ops)
    assert all(op.phase == "backward" for op in ops)
    base = simulate(hw, m, s, software=replace(sw, checkpoint_bwd_s_per_block=0.0)).phases
    with_term = simulate(hw, m, s, software=sw).phases
    assert with_term["backward_s"] - base["backward_s"] == pytest.approx(
        2 * m.n_layers * 2e-3, rel=0.25)
    assert with_term["forward_s"] == pytest.approx(base["forward_s"])


@pytest.mark.lab
def test_fp16_zero3_offload_pays_the_overflow_scan_over_its_gradient_partition():
    """stage3.py has_overflow: isinf/isnan over the host gradient partition, fp16 only, ZeRO-3
    with the optimizer offloaded; one cpu_host op of n_params elements before the sub-groups."""
    from dataclasses import replace

    from tierlab.profiles.load import load_hardware, load_model
    from tierlab.scenario import resolve
    from tierlab.sim.host_costs import default_software
    from tierlab.sim.workload import build_workload

    hw, model = load_hardware("h200-host"), load_model("tinyllama-1.1b")
    sw = replace(default_software(), overflow_scan_s_per_element=1e-9)
    steps = {}
    for precision in ("fp16", "bf16"):
        for config in ("zero3-cpu", "zero2-cpu"):
            sc = resolve(model, hw, config, micro_batch=4, seq=1024, precision=precision,
                         software=sw)
            w = build_workload(hw, sc.model, sc.strategy, software=sw)
            scans = [op for op in w.ops if op.work == "overflow_scan"]
            if (precision, config) == ("fp16", "zero3-cpu"):
                assert len(scans) == 1 and scans[0].amount == pytest.approx(model.n_params)
            else:
                assert scans == []
            steps[precision, config] = sc.simulate().phases["optimizer_s"]
    # the scan is on the optimizer's critical path: n_params x 1 ns longer than bf16
    assert steps["fp16", "zero3-cpu"] - steps["bf16", "zero3-cpu"] == pytest.approx(
        model.n_params * 1e-9, rel=0.1)


def test_the_calibrate_overflow_benchmark_times_the_scan_per_element():
    from tierlab.runner.calibrate import overflow_scan_time
    from tierlab.runner.calibrate_profile import _overflow_scan_entry

    points = overflow_scan_time(2**20, repeats=3)
    assert len(points) == 3 and all(0 < p["s_per_element"] < 1e-6 for p in points)
    # the buffer has the gradient-accumulation dtype, the model's: fp16 is the one that pays
    assert {p["dtype"] for p in points} == {"float16"}
    entry = _overflow_scan_entry(points, "measured today")
    assert entry["value"].endswith(" ns") and "has_overflow" in entry["source"]
    assert "float16 host elements" in entry["source"]
    assert _overflow_scan_entry([], "m") is None


def test_zero12_gradient_hook_is_charged_in_backward_without_offload_only():
    """stage_1_and_2.py's gradient hook (bucket copy, reduce walk) is a per-use backward host
    cost at ZeRO-1/2 without offload_optimizer; with it the offload copy term applies instead,
    and stage 0 and ZeRO-3 never pay it."""
    from tests._simhelp import scenario

    sw = replace(zeroed(load_software()), host_dispatch_s_per_module=1.0,
                 host_dispatch_bwd_s_per_module=2.0, zero12_hook_bwd_s_per_module=5.0)
    none = ["zero_optimization.offload_optimizer.device=none",
            "zero_optimization.offload_param.device=none"]
    z2 = scenario("zero2-cpu", sets=none[:1])[2]
    assert use_cost_s(sw, z2, "bwd") == 7.0 and use_cost_s(sw, z2, "fwd") == 1.0
    z1 = replace(z2, zero=replace(z2.zero, stage=1))
    assert use_cost_s(sw, z1, "bwd") == 7.0
    assert use_cost_s(sw, scenario("zero2-cpu")[2], "bwd") == 2.0       # offloaded optimizer
    assert use_cost_s(sw, scenario("no-offload")[2], "bwd") == 2.0
    assert use_cost_s(sw, scenario("zero3-cpu", sets=none)[2], "bwd") == 2.0


def test_zero12_gradient_hook_lengthens_the_simulated_backward():
    from tierlab.sim.engine import phase_times, run_step
    from tests._simhelp import scenario

    hw, model, s = scenario("zero2-cpu", sets=["zero_optimization.offload_optimizer.device=none"])
    sw = load_software()
    base = phase_times(run_step(hw, model, s, software=replace(sw, zero12_hook_bwd_s_per_module=0.0)))
    # 10 ms per use puts the host behind the GPU (below it the hook hides under the kernels)
    more = phase_times(run_step(hw, model, s, software=replace(sw, zero12_hook_bwd_s_per_module=1e-2)))
    assert more["backward_s"] > base["backward_s"] + 0.5
    assert abs(more["forward_s"] - base["forward_s"]) < 1e-9


def test_the_partitioned_optimizers_walk_only_their_ranks_tensors():
    """ZeRO-1/2/3's per-tensor step work covers this rank's partition (tensors / dp); stage 0's
    FP16_Optimizer walks every tensor on every rank."""
    from tierlab.sim.workload import build_workload
    from tests._simhelp import scenario

    sw = replace(zeroed(load_software()), stage0_step_s_per_param=1e-4,
                 zero12_step_s_per_param=1e-4)
    none = ["zero_optimization.offload_optimizer.device=none"]

    def loop(config, gpus, sets=()):
        hw, model, s = scenario(config, gpus=gpus, sets=list(sets))
        ops = [o for o in build_workload(hw, model, s, software=sw).ops if o.work == "step_host"]
        return ops[0].amount

    assert loop("zero2-cpu", 2, none) == pytest.approx(loop("zero2-cpu", 1, none) / 2)
    assert loop("no-offload", 2) == pytest.approx(loop("no-offload", 1))


@pytest.mark.lab
def test_measured_checkpoint_costs_apply_only_beside_a_measured_dispatch():
    """The software profile's dispatch term was fitted on checkpointed runs with the checkpoint
    terms at 0, so it carries them. h200-r measured the checkpoint terms (layer benchmark) but not
    DeepSpeed's host costs: its runs keep the software profile's pair (0), else the machinery is
    charged twice (its forward went 26% -> 10% MAPE). h200-p measured both: its own are used."""
    from tierlab.sim.host_costs import CARRIED_BY_DISPATCH

    sw = load_software()
    assert all(getattr(sw, k) == 0 for k in CARRIED_BY_DISPATCH)
    r = load_hardware("h200-r")
    assert set(CARRIED_BY_DISPATCH) <= set(r.cpu.host_costs)
    assert "host_dispatch_s_per_module" not in r.cpu.host_costs
    merged = with_host_costs(sw, r)
    assert all(getattr(merged, k) == 0 for k in CARRIED_BY_DISPATCH)
    assert merged.overflow_scan_s_per_element == r.cpu.host_costs["overflow_scan_s_per_element"]
    p = load_hardware("h200-p")
    mp = with_host_costs(sw, p)
    assert all(getattr(mp, k) == p.cpu.host_costs[k] > 0 for k in CARRIED_BY_DISPATCH)


def _forward_s(checkpointing: bool, software) -> tuple[float, int]:
    """(simulated forward seconds, blocks) of a host-bound TinyLlama ZeRO-3 offload step."""
    from tierlab.sim.engine import simulate
    from tests._simhelp import scenario

    hw, m, s = scenario("zero3-cpu", hardware="h200-host", micro_batch=4, seq=1024,
                        checkpointing=checkpointing)
    return simulate(hw, m, s, software=software).phases["forward_s"], m.n_layers


@pytest.mark.lab
def test_without_checkpointing_a_block_forward_sheds_the_wrapper_the_dispatch_term_carries():
    """The fitted dispatch term was fitted on checkpointed runs, so it carries the checkpoint
    wrapper's cost: with checkpoint_carried_s_per_block set, a forward without checkpointing is
    charged that much less per block. Checkpointed runs are unchanged; a host that measured its
    own dispatch (on runs without checkpointing) sheds nothing. The shipped profile keeps it at 0
    (not adopted: the published ZenFlow control moved past 20%), saying why."""
    from tierlab.sim.host_costs import checkpoint_carried_s

    shipped = load_software()
    assert shipped.checkpoint_carried_s_per_block == 0.0
    assert "checkpoint_carried_s_per_block" not in shipped.sources     # the profile leaves it
    sw = replace(shipped, checkpoint_carried_s_per_block=0.762e-3)
    off = replace(sw, checkpoint_carried_s_per_block=0.0)
    ckpt_with, _ = _forward_s(True, sw)
    assert ckpt_with == _forward_s(True, off)[0]                  # checkpointed: unchanged
    plain_with, blocks = _forward_s(False, sw)
    plain_off, _ = _forward_s(False, off)
    assert plain_off - plain_with == pytest.approx(blocks * sw.checkpoint_carried_s_per_block,
                                                   rel=0.02)
    p = load_hardware("h200-p")                 # measured DeepSpeed's host costs itself
    assert "host_dispatch_s_per_module" in p.cpu.host_costs
    merged = with_host_costs(sw, p)
    assert merged.checkpoint_carried_s_per_block == 0.0
    assert "measured on this host" in merged.sources["checkpoint_carried_s_per_block"]
    from tests._simhelp import scenario

    _, _, s = scenario("zero3-cpu", hardware="h200-host", checkpointing=False)
    assert checkpoint_carried_s(merged, s) == 0.0 < checkpoint_carried_s(sw, s)
    _, _, s = scenario("zero3-cpu", hardware="h200-host", checkpointing=True)
    assert checkpoint_carried_s(sw, s) == 0.0


@pytest.mark.lab
def test_the_carried_checkpoint_wrapper_follows_the_host_speed_rule():
    """It is a part of the dispatch term, so it scales with it on a slower or faster host."""
    from tierlab.profiles.fields import SCALED_BY_HOST_SPEED

    assert "checkpoint_carried_s_per_block" in SCALED_BY_HOST_SPEED
    sw = replace(load_software(), checkpoint_carried_s_per_block=0.762e-3)
    hw = load_hardware(str(ROOT / "lab" / "fresh" / "h100-j-profiles" / "hardware" / "systems"
                           / "h100-j.yaml"))    # calibrated: CPU Adam measured, dispatch not
    merged = with_host_costs(sw, hw)
    ratio = merged.host_dispatch_s_per_module / sw.host_dispatch_s_per_module
    assert ratio != 1.0
    assert merged.checkpoint_carried_s_per_block == pytest.approx(
        sw.checkpoint_carried_s_per_block * ratio)
