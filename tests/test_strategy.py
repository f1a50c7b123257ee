"""sim/strategy.py: ds_config <-> Strategy, defaults, "auto", overrides, quirks, errors."""
import pytest

from tests._dshelp import ranks_seen_by_deepspeed
from tierlab.errors import ConfigError
from tierlab.dsconfig.read import load_ds_config
from tierlab.sim.strategy import Flags, apply_overrides, parse_ds_config, to_ds_config, parse_value


def _keys_equal(given, produced, path=""):
    """Every key the input sets is in the output with the same value (recursively)."""
    for key, value in given.items():
        if key.startswith("_"):
            continue
        assert key in produced, f"{path}{key} lost"
        if isinstance(value, dict):
            _keys_equal(value, produced[key], f"{path}{key}.")
        else:
            assert produced[key] == value, f"{path}{key}: {value!r} -> {produced[key]!r}"


def test_offload_example_round_trips():
    cfg, _ = load_ds_config("offload-example")
    s, warnings = parse_ds_config(cfg)
    out = to_ds_config(s)
    _keys_equal(cfg, out)
    assert s.zero.stage == 2 and s.optimizer_device == "cpu" and s.param_device == "none"
    assert s.train_micro_batch_size_per_gpu == 2   # 8 = mb x 4 x 1
    assert s.precision == "fp16"
    assert any(w.startswith("ds_config: ZeRO stage 2 ignores offload_param") for w in warnings)
    s2, _ = parse_ds_config(out)
    assert s2 == s.__class__(**{**s.__dict__, "raw": s2.raw})


def test_deepspeed_defaults():
    s, _ = parse_ds_config({"zero_optimization": {"stage": 3}})
    z = s.zero
    assert z.stage3_prefetch_bucket_size == 50_000_000 and z.sub_group_size == 1_000_000_000
    assert z.stage3_param_persistence_threshold == 100_000 and z.reduce_bucket_size == 500_000_000
    assert z.overlap and s.aio.queue_depth == 8 and s.aio.block_size == 1 << 20
    assert z.offload_param.buffer_count == 5 and z.offload_param.max_in_cpu == 1_000_000_000
    assert z.offload_optimizer.pin_memory is True   # DeepSpeed 0.19.8 default
    s2, _ = parse_ds_config({"zero_optimization": {"stage": 2}})
    assert not s2.zero.overlap


def test_auto_resolved_from_flags():
    cfg, _ = load_ds_config("zero3-cpu")
    cfg = apply_overrides(cfg, ["zero_optimization.reduce_bucket_size=auto"])
    s, _ = parse_ds_config(cfg, Flags(micro_batch=4, grad_accum=2, world_size=8,
                                      precision="bf16", hidden=2048))
    assert (s.train_micro_batch_size_per_gpu, s.gradient_accumulation_steps,
            s.train_batch_size) == (4, 2, 64)
    assert s.precision == "bf16" and s.zero.reduce_bucket_size == 2048 * 2048
    out = to_ds_config(s)
    assert out["bf16"]["enabled"] is True and out["fp16"]["enabled"] is False
    assert out["train_batch_size"] == 64


def test_batch_identity_checked():
    with pytest.raises(ConfigError, match="train_batch_size 10 != train_micro_batch_size_per_gpu 2"):
        parse_ds_config({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 2,
                         "gradient_accumulation_steps": 4})
    with pytest.raises(ConfigError, match=r"train_batch_size 9 != train_micro_batch_size_per_gpu "
                       r"4 \(derived\) x gradient_accumulation_steps 2 \(the file\)"):
        parse_ds_config({"train_batch_size": 9, "gradient_accumulation_steps": 2})
    s, _ = parse_ds_config({"train_batch_size": 32, "gradient_accumulation_steps": 2},
                           Flags(world_size=4))
    assert s.train_micro_batch_size_per_gpu == 4


def test_overrides():
    out = apply_overrides({"zero_optimization": {"stage": 2}},
                          ["zero_optimization.stage=3", "zero_optimization.sub_group_size=1e8",
                           "aio.overlap_events=false", "zero_optimization.offload_optimizer.device=cpu"])
    assert out["zero_optimization"]["stage"] == 3
    assert out["zero_optimization"]["sub_group_size"] == 100_000_000
    assert out["aio"]["overlap_events"] is False
    assert out["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert parse_value("1.5") == 1.5 and parse_value("cpu") == "cpu"
    with pytest.raises(ConfigError, match="expected dotted.key=value"):
        apply_overrides({}, ["zero_optimization.stage"])
    with pytest.raises(ConfigError, match="'stage' is not an object"):
        apply_overrides({"zero_optimization": {"stage": 3}}, ["zero_optimization.stage.x=1"])


def test_quirk_warnings():
    _, w = parse_ds_config({"zero_optimization": {"stage": 3}, "aio": {"thread_count": 4}})
    assert any("thread_count is ignored" in x for x in w)
    # DeepSpeedZeroConfig forbids unknown keys: an aio block or a typo inside
    # zero_optimization is refused by DeepSpeed 0.19.8, not ignored
    with pytest.raises(ConfigError, match=r"zero_optimization\.aio is not a key DeepSpeed"):
        parse_ds_config({"zero_optimization": {"stage": 3, "aio": {}}})
    with pytest.raises(ConfigError, match=r"stage3_prefetch_bucket is not a key DeepSpeed 0\.19\.8 "
                       r"accepts .*did you mean 'stage3_prefetch_bucket_size'"):
        parse_ds_config({"zero_optimization": {"stage": 3, "stage3_prefetch_bucket": 5}})


@pytest.mark.parametrize("cfg,match", [
    ({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}},
     "offload_optimizer.device=nvme needs zero_optimization.offload_optimizer.nvme_path"),
    ({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}},
     "offload_param.device=nvme needs"),
    ({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/x"}}},
     "needs stage 3"),
    ({"zero_optimization": {"stage": "three"}}, "stage: expected an integer"),
    ({"zero_optimization": {"stage": 4}}, r"stage: must be one of 0, 1, 2, 3, got 4"),
    ({"zero_optimization": {"stage": 3, "offload_param": {"device": "gpu"}}},
     "offload_param.device: must be one of none, cpu, nvme, got 'gpu'"),
    ({"zero_optimization": {"stage": 3, "sub_group_size": -1}}, "sub_group_size: must be >= 0"),
    ({"zero_optimization": {"stage": 3, "zero_quantized_weights": True}},
     "zero_quantized_weights=True: DeepSpeed accepts it, but tierlab does not model it"),
    ({"fp16": {"enabled": True}, "bf16": {"enabled": True}}, "both true"),
    ({"train_micro_batch_size_per_gpu": 0}, "positive integer"),
    ([1, 2], "top level must be a JSON object"),
])
def test_bad_configs(cfg, match):
    with pytest.raises(ConfigError, match=match):
        parse_ds_config(cfg)


@pytest.mark.parametrize("seed", ["1", "2"])
def test_every_unmodelled_key_is_named_in_one_line_whatever_the_hash_seed(tmp_path, seed):
    """Two unmodelled ZeRO++ switches: both named, in the same order under any PYTHONHASHSEED
    (DeepSpeed's pydantic model_fields_set is a set: dsconfig/read.py sorts it; the line names
    them sorted)."""
    import json
    import os
    import subprocess
    import sys

    path = tmp_path / "zpp.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {
        "stage": 3, "zero_quantized_weights": True, "zero_quantized_gradients": True}}))
    r = subprocess.run([sys.executable, "-m", "tierlab.cli", "simulate", "-m", "tinyllama-1.1b",
                        "-H", "h200-gen5", "-c", str(path)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONHASHSEED": seed}, timeout=300)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert ("zero_optimization.zero_quantized_gradients=True, "
            "zero_optimization.zero_quantized_weights=True: DeepSpeed accepts them, but tierlab "
            "does not model them") in r.stderr, r.stderr


def test_gradient_clipping_left_out_is_deepspeeds_default():
    """DeepSpeed 0.19.8 clips at 1.0 when a config says nothing (runtime/constants.py
    GRADIENT_CLIPPING_DEFAULT); tierlab read 0.0 until 2026-12-02."""
    from deepspeed.runtime.constants import GRADIENT_CLIPPING_DEFAULT

    from tierlab.sim.strategy import Flags, parse_ds_config

    s, _ = parse_ds_config({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}},
                           Flags(micro_batch=1))
    assert s.gradient_clipping == GRADIENT_CLIPPING_DEFAULT == 1.0
    s, _ = parse_ds_config({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0.0},
                           Flags(micro_batch=1))
    assert s.gradient_clipping == 0.0


BATCHES = [  # (file's batch keys, --micro-batch, --grad-accum, GPUs)
    ({"train_batch_size": 32, "gradient_accumulation_steps": 2}, None, None, 4),
    ({"train_batch_size": 32, "gradient_accumulation_steps": 2}, 4, None, 4),
    ({"train_batch_size": 32, "gradient_accumulation_steps": 2}, 2, None, 4),
    ({"train_batch_size": 32, "gradient_accumulation_steps": 4}, None, 2, 4),
    ({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2}, None, None, 4),
    ({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4}, None, None, 4),
    ({"train_batch_size": 32}, 8, None, 4), ({"train_batch_size": 32}, 3, None, 4),
    ({"train_batch_size": 6}, None, None, 4), ({"train_batch_size": 8}, None, None, 4),
    ({"train_micro_batch_size_per_gpu": 2}, None, 3, 2),
    ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
      "gradient_accumulation_steps": 4}, None, None, 8),
    ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
      "gradient_accumulation_steps": 4}, 4, None, 8),
    ({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
      "gradient_accumulation_steps": 2}, 3, None, 2),
]


def _deepspeed_batch(cfg: dict, world: int, monkeypatch):
    """DeepSpeedConfig's own (train_batch_size, micro, accumulation), or None where it refuses."""
    dsc = ranks_seen_by_deepspeed(monkeypatch, world)
    try:
        c = dsc.DeepSpeedConfig(cfg)
    except AssertionError:
        return None
    return c.train_batch_size, c.train_micro_batch_size_per_gpu, c.gradient_accumulation_steps


@pytest.mark.parametrize("keys, mb, gas, gpus", BATCHES, ids=repr)
def test_batch_is_deepspeeds(keys, mb, gas, gpus, monkeypatch):
    """The batch DeepSpeed 0.19.8 trains with the file's values and the flags' (a flag replaces
    or fills its key, as the HF Trainer's arguments do) is tierlab's; where DeepSpeed refuses it,
    tierlab refuses it naming the file and every flag given, never rewriting train_batch_size."""
    cfg = {**keys, "zero_optimization": {"stage": 2}}
    given = {k: v for k, v in keys.items() if v != "auto"}
    if mb is not None:
        given["train_micro_batch_size_per_gpu"] = mb
    if gas is not None:
        given["gradient_accumulation_steps"] = gas
    if "train_batch_size" not in given and "train_micro_batch_size_per_gpu" not in given:
        given["train_micro_batch_size_per_gpu"] = 1
    ds = _deepspeed_batch(given, gpus, monkeypatch)
    flags = Flags(micro_batch=mb, grad_accum=gas, world_size=gpus)
    if ds is None:
        with pytest.raises(ConfigError) as e:
            parse_ds_config(cfg, flags, where="mine.json")
        text = str(e.value)
        assert text.startswith("mine.json: train_batch_size ") and "\n" not in text
        for flag, value in (("--micro-batch", mb), ("--grad-accum", gas)):
            assert (f"({flag})" in text) == (value is not None), text
    else:
        s, _ = parse_ds_config(cfg, flags, where="mine.json")
        assert (s.train_batch_size, s.train_micro_batch_size_per_gpu,
                s.gradient_accumulation_steps) == ds


@pytest.mark.parametrize("value, match", [
    ("[" * 5000 + "]" * 5000, "--set optimizer.params.lr: JSON nested too deep"),
    ("1" * 5000, "--set optimizer.params.lr: a number of 5000 characters is beyond")])
def test_a_set_value_json_cannot_hold_is_a_config_error(value, match):
    with pytest.raises(ConfigError, match=match):
        apply_overrides({}, [f"optimizer.params.lr={value}"])
    assert parse_value("[[1]]") == [[1]] and parse_value("12345678901234567890") == \
        12345678901234567890
