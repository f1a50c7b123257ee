"""The fp32 -> 16-bit host copy of the offloaded optimizer step (sim/devices.py
optimizer_copies_to_16bit, cpu_cast16_seconds): charged its 6 bytes at the DRAM rate, or, where
`tierlab calibrate` measured the host's cast rate (CPU.cast16_params_per_s), that rate's time;
only where DeepSpeed 0.19.8 makes the copy (ZeRO-1/2 offload always, ZeRO-3 with offloaded
parameters)."""
from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

import tierlab
from tierlab.errors import ConfigError
from tierlab.profiles.load import load_hardware, load_model, load_part
from tierlab.sim import devices


def _host(cast_params_per_s=None):
    """h200-gen5 with its DRAM at exactly CPU Adam's traffic (28 B a parameter, as calibrate
    writes it), so the optimizer step is DRAM-bound and the byte rule's copy costs 6 / DRAM."""
    hw = load_hardware("h200-gen5")
    cpu = replace(hw.cpu, dram_bandwidth_Bps=hw.cpu.adam_params_per_s * 28,
                  cast16_params_per_s=cast_params_per_s)
    return replace(hw, cpu=cpu)


def _optimizer_s(hw, strategy):
    return tierlab.simulate("tinyllama-1.1b", hw, strategy, micro_batch=1).phases["optimizer_s"]


def test_deepspeed_copies_to_16_bits_at_zero12_offload_and_zero3_with_offloaded_params():
    assert devices.optimizer_copies_to_16bit(params_offloaded=False, stage=2)
    assert devices.optimizer_copies_to_16bit(params_offloaded=False, stage=1)
    assert devices.optimizer_copies_to_16bit(params_offloaded=True, stage=3)
    assert not devices.optimizer_copies_to_16bit(params_offloaded=False, stage=3)
    kw = dict(rescaled=True, params_offloaded=False, stage=2)
    assert devices.optimizer_dram_bytes_per_param(**kw) == 42
    assert devices.optimizer_dram_bytes_per_param(**kw, cast_measured=True) == 36


def test_a_cast_rate_equal_to_the_byte_rule_gives_the_same_step():
    byte_rule = _host()
    same = _host(byte_rule.cpu.dram_bandwidth_Bps / 6)
    for strategy in ("zero2-cpu", "zero3-cpu"):
        assert _optimizer_s(same, strategy) == pytest.approx(_optimizer_s(byte_rule, strategy),
                                                             rel=1e-9), strategy


def test_a_slower_measured_cast_lengthens_the_offloaded_step_by_its_time():
    byte_rule = _host()
    slow_rate = byte_rule.cpu.dram_bandwidth_Bps / 6 / 2           # half the byte rule's rate
    slow = _host(slow_rate)
    longer = _optimizer_s(slow, "zero2-cpu") - _optimizer_s(byte_rule, "zero2-cpu")
    params = load_model("tinyllama-1.1b").n_params
    # the copy's extra time on the optimizer's critical path: params / rate minus its bytes' time
    # (8 ranks: each copies an eighth at an eighth of the node's rate)
    assert longer == pytest.approx(params / slow_rate - params * 6 / byte_rule.cpu.dram_bandwidth_Bps,
                                   rel=0.05)
    assert longer > 0


def test_zero3_without_offloaded_params_makes_no_copy_so_the_rate_changes_nothing():
    # an offloaded optimizer with the parameters on the GPU: no 16-bit host buffer
    spec = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}},
            "bf16": {"enabled": True}, "train_micro_batch_size_per_gpu": 1}
    a = tierlab.simulate("tinyllama-1.1b", _host(), spec).phases["optimizer_s"]
    b = tierlab.simulate("tinyllama-1.1b", _host(1e6), spec).phases["optimizer_s"]
    assert a == b


@pytest.mark.parametrize("value", ["0 Gparams/s", "-3 Gparams/s", "fast"])
def test_a_bad_cast_rate_in_a_cpu_profile_is_one_line_naming_the_key(tmp_path, value):
    from tierlab.profiles.load import find_part, read_data
    data = dict(read_data(find_part("cpus", "2x-xeon-platinum-8480plus")))
    data["cast16_throughput"] = {"value": value, "source": "measured (test)"}
    path = tmp_path / "cpu.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="cast16") as e:
        load_part("cpus", str(path))
    assert "\n" not in str(e.value)
