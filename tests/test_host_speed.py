"""Host speed as a measured input (issue 31 item 2): the fitted host terms can follow a host's
calibrated module call (sim/host_costs.host_speed_factor, Software.fit_module_call_s and
module_call_share). The shipped profile's share is 0 (off: it breaks issue 5's targets on the
lab's paired runs, profiles/software/deepspeed-0.19.8.yaml); a profile with a share scales the
terms its host did not measure, a stock hardware profile (no module call) is never scaled, and
applying the rule twice gives what once does."""
from __future__ import annotations

from dataclasses import replace

import pytest

import tierlab
from tierlab.errors import ConfigError
from tierlab.profiles.fields import SCALED_BY_HOST_SPEED
from tierlab.profiles.load import load_hardware, load_software
from tierlab.sim.host_costs import host_speed_factor, with_host_costs

SHARE = 0.3
"""The share lab/scripts/bench_host_scale.py finds best over lab/cases' machines."""


def _host(module_call_s, host_costs=None):
    hw = load_hardware("h200-host")
    cpu = replace(hw.cpu, module_call_s=module_call_s,
                  host_costs=host_costs if host_costs is not None else hw.cpu.host_costs)
    return replace(hw, cpu=cpu)


def _scaled():
    return replace(load_software(), module_call_share=SHARE)


def test_the_shipped_profile_names_the_fit_machines_module_call_and_scales_nothing():
    sw = load_software()
    assert sw.fit_module_call_s == pytest.approx(19.22e-6)
    assert sw.module_call_share == 0
    slow = _host(2 * sw.fit_module_call_s)
    assert host_speed_factor(sw, slow) == 1.0 and with_host_costs(sw, slow) is sw
    assert set(SCALED_BY_HOST_SPEED) == {"host_dispatch_s_per_module", "stage0_step_s_per_param",
                                         "offload_grad_s_per_param", "zero3_hook_s_per_module"}


def test_a_stock_host_without_a_module_call_is_not_scaled():
    sw = _scaled()
    hw = load_hardware("h200-host")
    assert hw.cpu.module_call_s is None
    assert host_speed_factor(sw, hw) == 1.0 and with_host_costs(sw, hw) is sw


def test_the_fitted_host_terms_scale_by_one_plus_share_times_the_module_call_ratio_less_one():
    sw = _scaled()
    slow = _host(2 * sw.fit_module_call_s)
    factor = 1 + SHARE            # r = 2
    assert host_speed_factor(sw, slow) == pytest.approx(factor)
    out = with_host_costs(sw, slow)
    assert out.host_speed == pytest.approx(factor)
    for name in SCALED_BY_HOST_SPEED:
        assert getattr(out, name) == pytest.approx(getattr(sw, name) * factor)
        if name in sw.ranges:
            assert out.ranges[name] == pytest.approx(tuple(x * factor for x in sw.ranges[name]))
    # everything else as the profile says: measured terms, memory terms, the error factor
    for name in ("zero3_hook_bwd_s_per_module", "offload_accum_s_per_param",
                 "process_baseline_bytes", "first_step_fixed_s"):
        assert getattr(out, name) == getattr(sw, name)


def test_applying_the_rule_again_or_for_another_host_gives_what_once_does():
    sw = _scaled()
    slow, fit = _host(1.5 * sw.fit_module_call_s), _host(sw.fit_module_call_s)
    once = with_host_costs(sw, slow)
    assert with_host_costs(once, slow) == once
    back = with_host_costs(once, fit)           # the fit machines' module call: factor 1
    for name in SCALED_BY_HOST_SPEED:
        assert getattr(back, name) == pytest.approx(getattr(sw, name))
    assert back.host_speed == pytest.approx(1.0)


def test_a_term_the_host_measured_itself_is_not_scaled():
    sw = _scaled()
    hw = _host(2 * sw.fit_module_call_s, {"host_dispatch_s_per_module": 1e-4})
    out = with_host_costs(sw, hw)
    assert out.host_dispatch_s_per_module == 1e-4
    assert out.zero3_hook_s_per_module == pytest.approx(sw.zero3_hook_s_per_module * (1 + SHARE))


def test_a_slower_module_call_lengthens_a_host_bound_step_only_with_a_share():
    """TinyLlama ZeRO-3 CPU offload at micro-batch 1 (the ZeRO-3 hooks dominate): with a share a
    host with twice the fit machines' module call steps slower than one with theirs, by less
    than the share; with the shipped profile (share 0) the two step alike."""
    sw = _scaled()

    def step(k, software):
        return tierlab.simulate("tinyllama-1.1b", _host(k * sw.fit_module_call_s), "zero3-cpu",
                                micro_batch=1, software=software).step_time_s
    fast, slow = step(1, sw), step(2, sw)
    assert fast < slow < fast * (1 + SHARE)
    assert step(1, load_software()) == step(2, load_software())


def test_a_share_outside_0_to_1_is_one_line_naming_the_key(tmp_path):
    text = (load_software.__globals__["SOFTWARE_DIR"] / "deepspeed-0.19.8.yaml").read_text()
    bad = text.replace("module_call_share: {value: 0,", "module_call_share: {value: 1.5,")
    assert bad != text
    path = tmp_path / "sw.yaml"
    path.write_text(bad)
    with pytest.raises(ConfigError, match="module_call_share"):
        load_software(str(path))


def test_calibrate_says_the_factor_only_where_the_profile_scales():
    from tierlab.runner.calibrate_paths import host_speed_line
    sw = load_software()
    slow = _host(2 * sw.fit_module_call_s)
    assert host_speed_line(slow, sw) == []                      # shipped: share 0
    line, = host_speed_line(slow, _scaled())
    assert f"x{1 + SHARE:.3f} here" in line
    assert all(name in line for name in SCALED_BY_HOST_SPEED)
    assert host_speed_line(load_hardware("h200-host"), _scaled()) == []


def test_the_rule_is_an_input_of_the_host_thread_only_where_it_is_on():
    from tierlab.profiles.ranges import trust_of
    hw = _host(2 * load_software().fit_module_call_s)
    off = trust_of(hw, load_software(), ["cpu_host"])["cpu_host"]
    on = trust_of(hw, _scaled(), ["cpu_host"])["cpu_host"]
    assert off["kind"] == "fitted"
    assert "software.module_call_share" not in off["inputs"]
    assert {"software.module_call_share", "software.fit_module_call_s"} <= set(on["inputs"])
