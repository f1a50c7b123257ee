"""simulate(): invariants of the timed schedule on the built-in scenario and small cases."""
import json
import subprocess
import sys
from dataclasses import replace

import pytest

from tierlab.errors import ConfigError
from tierlab.sim import simulate, workload
from tierlab.sim.engine import run_step
from tests._simhelp import PRESETS, scenario


@pytest.fixture(scope="module")
def results():
    return {p: simulate(*scenario(p)) for p in PRESETS}


@pytest.mark.parametrize("preset", PRESETS)
def test_step_invariants(results, preset):
    r = results[preset]
    assert r.step_time_s >= r.lower_bound_s - 1e-12
    assert sum(r.exposed_s.values()) == pytest.approx(r.step_time_s, rel=1e-9)
    assert sum(r.phases.values()) == pytest.approx(r.step_time_s, rel=1e-9)
    assert r.bottleneck == max(r.exposed_s, key=r.exposed_s.get)
    assert r.first_step_time_s >= r.step_time_s - 1e-12
    assert 0 < r.efficiency <= 1
    assert r.memory is not None and r.fits == r.memory.fits
    assert set(r.to_dict()) >= {"step_time_s", "first_step_time_s", "phases", "exposed_s",
                                "bottleneck", "memory_GiB", "fits", "tokens_per_s",
                                "tflops_per_gpu", "lower_bound_s"}


def test_builtin_scenario_orders_as_expected(results):
    t = {p: r.step_time_s for p, r in results.items()}
    assert t["no-offload"] < t["zero2-cpu"] < t["zero3-nvme"]
    assert results["zero3-nvme"].bottleneck.startswith("nvme")
    assert results["zero2-cpu"].bottleneck in ("cpu_adam", "gpu_compute")
    assert not results["no-offload"].fits and results["no-offload"].binding_tier == "gpu"
    assert results["zero3-cpu"].first_step_time_s > results["zero3-cpu"].step_time_s


@pytest.mark.parametrize("preset", PRESETS)
def test_bytes_moved_equal_the_closed_form(results, preset):
    hw, m, s = scenario(preset)
    want = workload.expected_bytes(hw, m, s)
    for key, value in want.items():
        assert results[preset].bytes_moved[key] == pytest.approx(value, rel=1e-9, abs=1e-6)


def test_deterministic_bit_for_bit():
    a = simulate(*scenario("zero3-nvme")).to_dict(spans=True)
    b = simulate(*scenario("zero3-nvme")).to_dict(spans=True)
    assert json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def test_tiny_event_log_is_exact():
    """2-layer model, ZeRO-2 CPU offload, dp 1: the stream order DeepSpeed issues."""
    hw, m, s = scenario("zero2-cpu", micro_batch=1, seq=128)
    m = replace(m, n_layers=2)
    run = run_step(hw, m, s)
    names = [(sp.resource, sp.name) for sp in run.spans]
    assert names == [
        ("gpu_compute", "m0.fwd.embed"), ("gpu_compute", "m0.fwd.L0"),
        ("gpu_compute", "m0.fwd.L1"), ("gpu_compute", "m0.fwd.head"),
        ("gpu_compute", "m0.bwd.head"), ("gpu_compute", "m0.recompute.L1"),
        ("gpu_compute", "m0.bwd.L1"), ("gpu_compute", "m0.recompute.L0"),
        ("gpu_compute", "m0.bwd.L0"), ("gpu_compute", "m0.bwd.embed"),
        ("gpu_compute", "m0.grads.embed.bucket_copies"),   # IPG copy + div_ (one bucket)
        ("pcie_d2h", "m0.grads.embed.grad32_d2h"), ("cpu_adam", "opt.sg0.adam"),
        ("pcie_h2d", "opt.sg0.param_h2d")]
    ends = {sp.name: sp for sp in run.spans}
    assert ends["m0.grads.embed.grad32_d2h"].start_s == ends["m0.grads.embed.bucket_copies"].end_s
    assert ends["opt.sg0.adam"].start_s == ends["m0.grads.embed.grad32_d2h"].end_s
    assert ends["opt.sg0.param_h2d"].start_s == ends["opt.sg0.adam"].end_s


def test_multi_node_uses_network_and_one_gpu_does_not():
    one = simulate(*scenario("zero3-cpu", hardware="dgx-2", gpus=1, model="llama-0.5b"))
    many = simulate(*scenario("zero3-cpu", hardware="dgx-2", nodes=4, model="llama-0.5b"))
    assert one.busy_s["network"] == 0 and one.busy_s["gpu_comm"] == 0
    assert many.busy_s["network"] > 0 and many.busy_s["gpu_comm"] > 0


def test_strict_names_the_binding_tier():
    with pytest.raises(ConfigError, match="gpu tier"):
        simulate(*scenario("no-offload"), strict=True)


def test_nvme_config_on_hardware_without_nvme():
    hw, m, s = scenario("zero3-nvme")
    with pytest.raises(ConfigError, match="NVMe"):
        simulate(replace(hw, nvme=None, nvme_drives=0), m, s)


def test_trace_events_one_track_per_resource():
    r = simulate(*scenario("zero3-cpu"))
    tr = r.trace_events()
    names = {e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "thread_name"}
    assert {"gpu_compute", "pcie_h2d", "cpu_adam", "nvme_read"} <= names
    xs = [e for e in tr["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(r.spans) and all(e["dur"] >= 0 for e in xs)
    json.dumps(tr)


def test_import_does_not_pull_torch_or_deepspeed():
    code = ("import sys, tierlab.sim; tierlab.sim.simulate; "
            "print('torch' in sys.modules, 'deepspeed' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
