"""Host speed as a measured input (issue 31 item 2): the fitted host terms follow a host's
calibrated CPU Adam rate (sim/host_costs.host_speed_factor, Software.fit_adam_params_per_s and
host_speed_share). The share is on in the shipped profile (chosen on lab/cases' runs by
lab/scripts/bench_host_scale.py); only a rate `tierlab calibrate` measured counts (a datasheet
figure or estimate, as every shipped hardware profile has, is never a host-speed input), a
profile scales only the terms its host did not measure, and applying the rule twice gives what
once does."""
from __future__ import annotations

from dataclasses import replace

import pytest

import tierlab
from tierlab.errors import ConfigError
from tierlab.profiles.fields import SCALED_BY_HOST_SPEED
from tierlab.profiles.load import load_hardware, load_software
from tierlab.sim.host_costs import host_speed_factor, host_speed_rates, with_host_costs

MEASURED = "measured 2026-12-06 by tierlab calibrate: DeepSpeedCPUAdam.step (test)"


def _host(adam_params_per_s, host_costs=None, source=MEASURED):
    hw = load_hardware("h200-gen5")
    cpu = replace(hw.cpu, adam_params_per_s=adam_params_per_s,
                  host_costs=host_costs if host_costs is not None else hw.cpu.host_costs,
                  sources={**hw.cpu.sources, "adam_params_per_s": source})
    return replace(hw, cpu=cpu)


def _share(share):
    return replace(load_software(), host_speed_share=share)


def test_the_shipped_profile_names_the_fit_machines_rate_and_a_share():
    sw = load_software()
    assert sw.fit_adam_params_per_s == pytest.approx(5.271e9)
    assert sw.host_speed_share == pytest.approx(0.35)
    assert set(SCALED_BY_HOST_SPEED) == {"host_dispatch_s_per_module", "stage0_step_s_per_param",
                                         "offload_grad_s_per_param", "zero3_hook_s_per_module",
                                         "checkpoint_carried_s_per_block"}   # dispatch's share


def test_a_stock_host_whose_rate_is_not_measured_is_not_scaled():
    sw = load_software()
    for name in ("h200-gen5", "dgx-h100", "dgx-2", "workstation-rtx4090"):
        hw = load_hardware(name)
        assert "measured" not in hw.cpu.sources["adam_params_per_s"].lower()[:10]
        assert host_speed_rates(sw, hw) is None
        assert host_speed_factor(sw, hw) == 1.0 and with_host_costs(sw, hw) is sw
    # the same rate, measured, counts
    slow = _host(sw.fit_adam_params_per_s / 2)
    assert host_speed_factor(sw, slow) > 1.0
    assert host_speed_factor(sw, _host(sw.fit_adam_params_per_s / 2, source="datasheet")) == 1.0
    # measured, but not by calibrate on this host (the lab's stock h200-host: a noted midpoint)
    noted = "measured on h200-host 2026-11, README: ~3.4-4.1 G params/s; midpoint ~3.7"
    assert host_speed_factor(sw, _host(sw.fit_adam_params_per_s / 2, source=noted)) == 1.0
    assert host_speed_factor(sw, load_hardware("h200-host")) == 1.0


def test_the_fitted_host_terms_scale_by_one_plus_share_times_the_rate_ratio_less_one():
    sw = load_software()
    share = sw.host_speed_share
    slow = _host(sw.fit_adam_params_per_s / 2)      # r = 2
    factor = 1 + share
    assert host_speed_factor(sw, slow) == pytest.approx(factor)
    assert host_speed_factor(sw, _host(sw.fit_adam_params_per_s * 2)) == \
        pytest.approx(1 - share / 2)                # a faster host: cheaper terms
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


def test_a_share_of_0_scales_nothing():
    sw = _share(0.0)
    slow = _host(sw.fit_adam_params_per_s / 2)
    assert host_speed_rates(sw, slow) is None
    assert host_speed_factor(sw, slow) == 1.0 and with_host_costs(sw, slow) is sw


def test_applying_the_rule_again_or_for_another_host_gives_what_once_does():
    sw = load_software()
    slow, fit = _host(sw.fit_adam_params_per_s / 1.5), _host(sw.fit_adam_params_per_s)
    once = with_host_costs(sw, slow)
    assert with_host_costs(once, slow) == once
    back = with_host_costs(once, fit)           # the fit machines' rate: factor 1
    for name in SCALED_BY_HOST_SPEED:
        assert getattr(back, name) == pytest.approx(getattr(sw, name))
    assert back.host_speed == pytest.approx(1.0)


def test_a_term_the_host_measured_itself_is_not_scaled():
    sw = load_software()
    hw = _host(sw.fit_adam_params_per_s / 2, {"host_dispatch_s_per_module": 1e-4})
    out = with_host_costs(sw, hw)
    assert out.host_dispatch_s_per_module == 1e-4
    assert out.zero3_hook_s_per_module == pytest.approx(
        sw.zero3_hook_s_per_module * (1 + sw.host_speed_share))


def test_a_slower_host_lengthens_a_host_bound_step_by_less_than_the_share():
    """TinyLlama ZeRO-3 CPU offload at micro-batch 1 (the ZeRO-3 hooks dominate). The host's
    CPU Adam rate also times the optimizer step itself, so the share's part is the difference
    between a profile with the share and one without it at the same rate: slower, by less than
    the share."""
    sw = load_software()

    def step(software):
        return tierlab.simulate("tinyllama-1.1b", _host(sw.fit_adam_params_per_s / 2),
                                "zero3-cpu", micro_batch=1, software=software).step_time_s
    off, on = step(_share(0.0)), step(sw)
    assert off < on < off * (1 + sw.host_speed_share)


def test_a_share_outside_0_to_1_is_one_line_naming_the_key(tmp_path):
    text = (load_software.__globals__["SOFTWARE_DIR"] / "deepspeed-0.19.8.yaml").read_text()
    bad = text.replace("host_speed_share: {value: 0.35,", "host_speed_share: {value: 1.5,")
    assert bad != text
    path = tmp_path / "sw.yaml"
    path.write_text(bad)
    with pytest.raises(ConfigError, match="host_speed_share"):
        load_software(str(path))


def test_the_retired_module_call_rule_keys_are_refused_by_name(tmp_path):
    text = (load_software.__globals__["SOFTWARE_DIR"] / "deepspeed-0.19.8.yaml").read_text()
    path = tmp_path / "sw.yaml"
    path.write_text(text + '\nmodule_call_share: {value: 0, source: "old"}\n')
    with pytest.raises(ConfigError, match="module_call_share"):
        load_software(str(path))


def test_calibrate_says_the_factor_only_where_the_rule_applies():
    from tierlab.runner.calibrate_paths import host_speed_line
    sw = load_software()
    slow = _host(sw.fit_adam_params_per_s / 2)
    line, = host_speed_line(slow, sw)
    assert f"x{1 + sw.host_speed_share:.3f} here" in line
    set_terms = [name for name in SCALED_BY_HOST_SPEED if getattr(sw, name)]
    assert len(set_terms) == 4 and all(name in line for name in set_terms)
    assert "checkpoint_carried_s_per_block" not in line        # 0 as shipped: not named
    assert host_speed_line(slow, _share(0.0)) == []
    assert host_speed_line(load_hardware("h200-gen5"), sw) == []   # a datasheet rate


def test_the_rule_is_an_input_of_the_host_thread_only_where_it_is_on():
    from tierlab.profiles.ranges import trust_of
    hw = _host(load_software().fit_adam_params_per_s / 2)
    off = trust_of(hw, _share(0.0), ["cpu_host"])["cpu_host"]
    on = trust_of(hw, load_software(), ["cpu_host"])["cpu_host"]
    assert off["kind"] == "fitted"
    assert "software.host_speed_share" not in off["inputs"]
    assert {"software.host_speed_share", "software.fit_adam_params_per_s"} <= set(on["inputs"])
