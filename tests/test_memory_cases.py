"""sim/memory.py against the committed H200 runs (lab/cases/h200x2*), item by item.

Host RSS is checked net of the process baseline: the modelled offload items must match measured
RSS minus the measured RSS of the no-offload run (c-tinyllama-noofl, 2.04 GiB), so the test does
not depend on the fitted `process_baseline` of profiles/software/deepspeed-0.19.8.yaml."""
from __future__ import annotations

from pathlib import Path

import pytest

from tierlab.profiles.load import load_hardware
from tierlab.records.measurement import load_measurement
from tierlab.sim.memory import (gpu_breakdown, gpu_moments, host_breakdown, pinned_bytes,
                                plan_memory)
from tierlab.validate.compare import scenario_of

pytestmark = pytest.mark.lab      # reads the lab's data (setup.cfg)

CASES = Path(__file__).resolve().parents[1] / "lab" / "cases"
# first directory holding a case wins: the h200x2 sessions, then session 4, then session 3
SESSIONS = ("h200x2", "h200x2-b", "h200x2-s3")
GiB = 2**30


def _case(name):
    """(Measurement, scenario). Memory does not depend on the calibrated speeds, so every
    session is simulated on h200x2-host (the same machine kind)."""
    path = next((CASES / d / name for d in SESSIONS if (CASES / d / name).is_dir()), None)
    assert path is not None, f"measured case {name} is missing from lab/cases ({SESSIONS})"
    m = load_measurement(path)
    sc = scenario_of(m, load_hardware("h200x2-host"))
    return m, (sc.hardware, sc.model, sc.strategy)


def _host_items_per_rank(hw, model, strategy) -> float:
    host = host_breakdown(hw, model, strategy)
    return sum(v for k, v in host.items() if k != "pageable:process_baseline") / hw.gpus_per_node


def _measured_baseline() -> float:
    return _case("c-tinyllama-noofl")[0].summary["peak_host_rss_bytes"]


# measured RSS - no-offload RSS, vs the modelled items: within 0.1 GiB (1.05 GiB before the
# fixes for the 3B reuse case, 5.4 GiB for NVMe params)
@pytest.mark.parametrize("name", [
    "c-0.5b-z3cpu", "c-0.5b-z3cpu-dp2", "c-tinyllama-z2cpu-8g", "c-tinyllama-z3cpu-8g",
    "c-tinyllama-z3nvme-8g", "v-0.5b-z3nvme-dp2", "v-0.5b-z3nvme-params-buf", "v-0.5b-z3nvme-pipe",
    "v-0.5b-z3nvme-sg1e8-qd8", "v-0.5b-z3nvme-sg5e7-qd32", "v-3b-z3cpu-dp2", "v-3b-z3cpu-mb8",
    "v-tinyllama-z3cpu-dp2"])
def test_host_items_match_measured_rss_net_of_baseline(name):
    m, (hw, model, s) = _case(name)
    measured = m.summary["peak_host_rss_bytes"] - _measured_baseline()
    assert _host_items_per_rank(hw, model, s) == pytest.approx(measured, abs=0.1 * GiB)


@pytest.mark.parametrize("name", [
    "c-0.5b-z3cpu", "c-tinyllama-noofl", "c-tinyllama-z2cpu-8g", "c-tinyllama-z3cpu-8g",
    "c-tinyllama-z3nvme-8g", "v-0.5b-z3nvme-params-buf", "v-0.5b-z3nvme-pipe", "v-3b-z3cpu-dp2",
    "v-3b-z3cpu-mb8", "v-tinyllama-z2cpu-mb8", "v-tinyllama-z3cpu-s2048"])
def test_gpu_peak_allocated_within_5pct(name):
    m, (hw, model, s) = _case(name)
    gpu = gpu_breakdown(hw, model, s)
    allocated = sum(v for k, v in gpu.items() if k not in ("cuda_context", "allocator_slack"))
    assert allocated == pytest.approx(m.summary["peak_gpu_max_allocated_bytes"], rel=0.05)


def test_cpu_params_flat_buffer_is_not_capped_by_max_in_cpu():
    _, (hw, model, s) = _case("v-3b-z3cpu-mb8")
    assert s.zero.offload_param.max_in_cpu < model.n_params
    host = host_breakdown(hw, model, s)
    # 3.21 G params x 2 B = 6.4 GB -> 2^33 B pinned (min(1e9, n) x 2 B would give 2^31)
    assert host["pinned:params_16bit"] == pinned_bytes(2 * model.n_params)


def test_locked_swap_buffers_are_exact_not_power_of_two():
    _, (hw, model, s) = _case("v-0.5b-z3nvme-params-buf")
    host = host_breakdown(hw, model, s)
    # 5 x 1.5e8 x 2 B (one new_cpu_locked_tensor), 4 x 136.1 M (embedding group) x 4 B
    assert host["pinned:param_swap_buffers"] == pytest.approx(5 * 1.5e8 * 2, rel=1e-4)
    assert host["pinned:optimizer_swap_buffers"] == pytest.approx(
        4 * 4 * model.vocab * model.hidden, rel=1e-4)
    # partitions >= 1 MiB went to the swapper during zero.Init: only small ones are cached
    assert host["pinned:zero_init_partitions_cached"] < 0.02 * GiB
    assert host["pinned:params_16bit"] == pinned_bytes(2 * 1e8)


def test_tied_head_leaves_a_cached_pinned_block():
    _, (hw, model, s) = _case("c-0.5b-z3cpu")
    tied = host_breakdown(hw, model, s)["pinned:zero_init_partitions_cached"]
    from dataclasses import replace
    untied = host_breakdown(hw, replace(model, tie_embeddings=False), s)
    # untying adds the head to own_params (cached as well): same blocks either way
    assert tied == pytest.approx(untied["pinned:zero_init_partitions_cached"])
    assert tied > 2.2 * GiB          # 1.73 GiB of partitions + the dropped head's 2^29 B


def test_cache_block_reused_by_an_equal_power_of_two_request():
    _, (hw, model, s) = _case("v-3b-z3cpu-mb8")
    host = host_breakdown(hw, model, s)
    # embedding and dropped head: two 2^30 blocks; the 192 M-element last sub-group's fp32
    # grads (2^30) take one back
    assert host["pinned:zero_init_partitions_cached"] == pytest.approx(8.44 * GiB, rel=0.01)


def test_pipelined_swapper_keeps_first_step_moments():
    _, (hw, model, s) = _case("v-0.5b-z3nvme-pipe")
    assert host_breakdown(hw, model, s)["pageable:adam_m_v_first_step"] == \
        pytest.approx(8 * model.n_params)
    _, (hw, model, s) = _case("v-0.5b-z3nvme-sg1e8-qd8")
    assert "pageable:adam_m_v_first_step" not in host_breakdown(hw, model, s)


def test_stage0_bf16_peaks_in_the_optimizer_step_at_24_bytes_per_param():
    _, (hw, model, s) = _case("c-tinyllama-noofl")
    gpu = gpu_breakdown(hw, model, s)
    assert "step_fp32_grad_copies" in gpu and "logits" not in gpu
    states = gpu["params"] + gpu["grads"] + gpu["optimizer_states"] + gpu["step_fp32_grad_copies"]
    assert states == pytest.approx(24 * model.n_params)


def test_reuse_distance_zero_gathers_one_module_and_a_bucket():
    _, (hw, model, s) = _case("v-0.5b-z3nvme-params-buf")
    loss = gpu_moments(hw, model, s)["loss"]
    assert loss["gathered_params"] == pytest.approx(
        2 * (model.vocab * model.hidden + s.zero.stage3_prefetch_bucket_size))


def test_plan_fits_every_measured_run():
    for name in ("c-0.5b-z3cpu", "v-0.5b-z3nvme-params-buf", "v-3b-z3cpu-mb8"):
        _, (hw, model, s) = _case(name)
        assert plan_memory(hw, model, s).fits
