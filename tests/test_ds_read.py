"""ds_configs read as DeepSpeed 0.19.8 reads them (dsconfig/read.py, dsconfig/schema.py): the corpus
of real configs (tests/data/ds_configs/ORIGINS.yaml) gets DeepSpeed's verdict; the vendored
table and DeepSpeed's own config models agree; aliases, deprecations, "auto", hjson, duplicate
keys, the precision message and the activation_checkpointing block."""
import json
from dataclasses import fields, replace
from pathlib import Path

import pytest
import yaml

from tests._dshelp import hf_filled, ranks_seen_by_deepspeed

from tierlab.errors import ConfigError
from tierlab.dsconfig.read import load_ds_config
from tierlab.dsconfig import read as ds_read
from tierlab.dsconfig.schema import load_schema
from tierlab.sim.strategy import (_ZERO_PASSTHROUGH, _ZERO_UNMODELLED, Flags, OffloadOptimizer,
                                  OffloadParam, Zero, parse_ds_config, to_ds_config)

CORPUS = Path(__file__).parent / "data" / "ds_configs"
ORIGINS = yaml.safe_load((CORPUS / "ORIGINS.yaml").read_text())
HAS_DEEPSPEED = ds_read.authority() == "deepspeed"
BACKENDS = ["table"] + (["deepspeed"] if HAS_DEEPSPEED else [])


def _verdict(cfg, prefer) -> str:
    try:
        ds_read.read(cfg, "x", prefer=prefer)
    except ConfigError as e:
        return "rejected " + str(e).split(": ")[1].split(" ")[0]
    return "accepted"


def test_corpus_is_real_and_cited():
    files = sorted(p.name for p in CORPUS.glob("*.json"))
    assert len(files) >= 12 and files == sorted(ORIGINS)
    for name, origin in ORIGINS.items():
        assert origin["repo"].count("/") == 1 and origin["path"], name
        assert origin["verdict"] == "accepted" or origin["verdict"].startswith("rejected "), name


@pytest.mark.parametrize("prefer", BACKENDS)
@pytest.mark.parametrize("name", sorted(ORIGINS))
def test_corpus_verdict(name, prefer):
    cfg, _ = load_ds_config(str(CORPUS / name))
    assert _verdict(cfg, prefer) == ORIGINS[name]["verdict"]


@pytest.mark.skipif(not HAS_DEEPSPEED, reason="needs deepspeed (pip install 'tierlab[runner]')")
@pytest.mark.parametrize("name", sorted(ORIGINS))
def test_corpus_verdict_is_real_deepspeeds(name, monkeypatch):
    """DeepSpeedConfig itself, on the file as DeepSpeed opens it (hjson, duplicate keys
    refused), with "auto" filled as the HF Trainer fills it."""
    import hjson
    from deepspeed.runtime.config_utils import dict_raise_error_on_duplicate_keys

    gpus = ORIGINS[name].get("gpus", 1)
    dsc = ranks_seen_by_deepspeed(monkeypatch, gpus)
    with open(CORPUS / name) as f:
        cfg = hjson.load(f, object_pairs_hook=dict_raise_error_on_duplicate_keys)
    try:
        dsc.DeepSpeedConfig(hf_filled(cfg, gpus))
        verdict = "accepted"
    except Exception as e:   # noqa: BLE001 - DeepSpeed raises ValidationError, its own, asserts
        text = str(e)
        key = ORIGINS[name]["verdict"].split(" ")[-1]
        assert key.split(".")[-1] in text, text
        verdict = f"rejected {key}"
    assert verdict == ORIGINS[name]["verdict"]


@pytest.mark.parametrize("name", sorted(n for n, o in ORIGINS.items() if "tierlab" in o))
def test_corpus_tierlab(name):
    """An accepted config is simulated, or the feature tierlab does not model is named."""
    cfg, where = load_ds_config(str(CORPUS / name))
    flags = Flags(world_size=ORIGINS[name].get("gpus", 1), hidden=4096, default_precision="bf16")
    want = ORIGINS[name]["tierlab"]
    if want == "simulated":
        strategy, _ = parse_ds_config(cfg, flags, where=where)
        assert strategy.zero.stage == (cfg.get("zero_optimization") or {}).get("stage", 0)
    else:
        with pytest.raises(ConfigError, match=want.split(" ")[1].replace(".", r"\.")):
            parse_ds_config(cfg, flags, where=where)


SYNTHETIC = [{"zero_optimization": z} for z in (
    {"stage": 3, "aio": {}}, {"stage": 3, "stage3_param_persitance_threshold": 5},
    {"stage": 3, "max_live_parameters": 5, "stage3_max_reuse_distance": 7},
    {"stage": 3, "max_live_parameters": 5, "stage3_max_live_parameters": 7},
    {"cpu_offload": True, "stage": 2}, {"cpu_offload": False, "stage": 2}, {"stage": "3"},
    {"stage": 3.0}, {"stage": True}, {"stage": None}, {"stage": 4},
    {"reduce_bucket_size": "auto", "stage": 3},
    {"offload_param": {"device": "cpu", "buffer_size": "auto"}, "stage": 3},
    {"offload_param": {"device": "cpu", "foo": 1}, "stage": 3}, {"reduce_bucket_size": "5e8"},
    {"reduce_bucket_size": "12.0"}, {"reduce_bucket_size": 5e8}, {"reduce_bucket_size": 5.5},
    {"reduce_bucket_size": True}, {"reduce_bucket_size": 0}, {"contiguous_gradients": "yes"},
    {"contiguous_gradients": 1}, {"contiguous_gradients": 2}, {"overlap_comm": None},
    {"overlap_comm": False}, {"offload_optimizer": None}, {"offload_optimizer": {"device": "CPU"}},
    {"offload_optimizer": {"device": "cpu", "ratio": 0.5}, "stage": 2},
    {"offload_optimizer": {"device": "cpu", "ratio": 0.5}, "stage": 3},
    {"stage3_gather_fp16_weights_on_model_save": True}, {"cpu_offload_param": True, "stage": 3},
    {"cpu_offload_use_pin_memory": True}, {"sub_group_size": -1},
    {"cpu_offload": True, "offload_optimizer": {"device": "cpu"}},
    {"compute_grad_norm": False, "stage": 3}, {"compute_grad_norm": False, "stage": 2},
    {"round_robin_gradients": None}, {"offload_param": {"device": "nvme", "nvme_path": "/x/y/"}},
    {"zenflow": {"topk_ratio": 0.1, "bogus": 1}}, {"mics_shard_size": 4},
    {"stage3_module_granularity_threshold": -5})] + [
    {"fp16": {"enabled": True, "loss_scale_window": 0}}, {"fp16": {"enabled": True,
                                                                   "loss_scale": True}},
    {"fp16": {"enabled": "auto", "bogus": 1}}, {"bf16": {"enabled": "yes"}},
    {"amp": {"enabled": False}}, {"bfloat16": {"enabled": True}}, {"zero_optimization": True},
    {"wandb": {"enabled": True, "projct": "x"}}, {"wandb": {"enabled": "auto", "team": None}},
    {"comms_logger": {"enabled": True, "prof_ops": ["all_reduce"]}}, {"comms_logger": {"on": 1}},
    {"compile": {"deepcompile": "yes"}}, {"compile": {"free_activation_threshold": 1.5}},
    {"hybrid_engine": {"enabled": True, "max_out_tokens": 0}}, {"csv_monitor": {"job_nam": "x"}},
    {"tensorboard": {"enabled": True, "output_path": 3}}, {"comet": {"samples_log_interval": "7"}},
    {"fp16": None}, {"bf16": None}, {"zero_optimization": None},
    # several refusals at once: every one reported, in one line
    {"zero_optimization": {"stage": 3, "foo": 1, "contiguous_gradients": "x",
                           "offload_param": {"bar": 2, "buffer_count": -1}},
     "fp16": {"bogus": 1}, "amp": {}},
    {"zero_optimization": {"stage": 7, "reduce_bucket_size": 5.5, "mics_shard_size": 2},
     "wandb": {"projct": "x"}}]


def _outcome(cfg, prefer):
    try:
        return "ok", ds_read.read(cfg, "x", prefer=prefer)[1].blocks
    except ConfigError as e:
        return "refused", str(e)


@pytest.mark.skipif(not HAS_DEEPSPEED, reason="needs deepspeed (pip install 'tierlab[runner]')")
@pytest.mark.parametrize("cfg", SYNTHETIC + [load_ds_config(str(CORPUS / n))[0]
                                             for n in sorted(ORIGINS)], ids=repr)
def test_table_gives_deepspeeds_verdict(cfg):
    """Same blocks (canonical keys, coerced values, deprecations mapped, "auto" dropped) or the
    same keys refused in the same words, whether DeepSpeed's models or the vendored table
    judge."""
    assert _outcome(cfg, "table") == _outcome(cfg, "deepspeed")


@pytest.mark.skipif(not HAS_DEEPSPEED, reason="needs deepspeed (pip install 'tierlab[runner]')")
def test_vendored_table_is_a_fresh_dump():
    from tierlab.dsconfig.schema import schema_from_deepspeed

    assert json.loads(json.dumps(schema_from_deepspeed())) == load_schema(), \
        "run bench/vendor_ds_schema.py"


def test_strategy_defaults_are_deepspeeds():
    """Every key tierlab models has DeepSpeed 0.19.8's default; every zero_optimization key
    DeepSpeed accepts is modelled, passed through, or refused by name when on."""
    models = load_schema()["models"]
    for cls, model in ((Zero, "DeepSpeedZeroConfig"), (OffloadParam,
                                                       "DeepSpeedZeroOffloadParamConfig"),
                       (OffloadOptimizer, "DeepSpeedZeroOffloadOptimizerConfig")):
        by_key = {spec.get("alias") or name: spec for name, spec in models[model]["fields"].items()}
        for f in fields(cls):
            if f.name in ("offload_param", "offload_optimizer"):
                continue
            assert f.name in by_key, f"{cls.__name__}.{f.name}"
            ds_default = by_key[f.name].get("default")
            assert f.default == ds_default, f"{f.name}: {f.default} != DeepSpeed's {ds_default}"
    zero_keys = {spec.get("alias") or name for name, spec in
                 models["DeepSpeedZeroConfig"]["fields"].items() if not spec.get("deprecated")}
    known = {f.name for f in fields(Zero)} | _ZERO_PASSTHROUGH | _ZERO_UNMODELLED
    assert zero_keys <= known, zero_keys - known


@pytest.mark.skipif(not HAS_DEEPSPEED, reason="needs deepspeed (pip install 'tierlab[runner]')")
def test_strategy_defaults_are_installed_deepspeeds():
    """The one home of DeepSpeed's defaults (the vendored table, dsconfig/schema.ds_default) read
    by every Strategy field, held against the installed DeepSpeed's own config models and
    constants, not the table: a ds_config that sets nothing gets what DeepSpeed gives it."""
    from deepspeed.runtime import constants
    from deepspeed.runtime.swap_tensor.aio_config import AIO_DEFAULT_DICT
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.zero.offload_config import (DeepSpeedZeroOffloadOptimizerConfig,
                                                       DeepSpeedZeroOffloadParamConfig)

    from tierlab.sim.strategy import Aio, Strategy

    for cls, ds in ((Zero, DeepSpeedZeroConfig()), (OffloadParam, DeepSpeedZeroOffloadParamConfig()),
                    (OffloadOptimizer, DeepSpeedZeroOffloadOptimizerConfig())):
        by_key = {info.alias or name: name for name, info in type(ds).model_fields.items()}
        for f in fields(cls):
            if f.name in ("offload_param", "offload_optimizer"):
                continue
            value = type(ds).model_fields[by_key[f.name]].default   # declared (overlap_comm:
            assert f.default == getattr(value, "value", value), f"{cls.__name__}.{f.name}"  # None)
    assert {f.name: f.default for f in fields(Aio)} == dict(AIO_DEFAULT_DICT)
    assert Strategy().gradient_clipping == constants.GRADIENT_CLIPPING_DEFAULT == 1.0
    s, _ = parse_ds_config({"zero_optimization": {"stage": 2}})
    assert s.gradient_clipping == constants.GRADIENT_CLIPPING_DEFAULT


def test_aliases_deprecations_and_auto():
    flags = Flags(hidden=2048)
    s, w = parse_ds_config({"zero_optimization": {"stage": 3, "max_live_parameters": 0,
                                                  "max_reuse_distance": 7}}, flags)
    assert s.zero.stage3_max_live_parameters == 0 and s.zero.stage3_max_reuse_distance == 7
    s, w = parse_ds_config({"zero_optimization": {"stage": 2, "cpu_offload": True}}, flags)
    assert s.optimizer_device == "cpu"      # not "switched off"
    assert any("cpu_offload is deprecated" in x and "offload_optimizer={'device': 'cpu'}" in x
               for x in w)
    # "auto" where HF does not fill it: DeepSpeed drops it to its default
    s, _ = parse_ds_config({"zero_optimization": {
        "stage": 3, "stage3_max_live_parameters": "auto", "sub_group_size": "auto",
        "offload_param": {"device": "nvme", "nvme_path": "/n", "buffer_size": "auto"}}}, flags)
    assert (s.zero.stage3_max_live_parameters, s.zero.sub_group_size,
            s.zero.offload_param.buffer_size) == (1_000_000_000, 1_000_000_000, 100_000_000)
    # "auto" HF fills: from the hidden size (the stage3_* pair at stage 3 only)
    s, _ = parse_ds_config({"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
                                                  "stage3_prefetch_bucket_size": "auto"}}, flags)
    assert (s.zero.reduce_bucket_size, s.zero.stage3_prefetch_bucket_size) == (
        2048 * 2048, int(0.9 * 2048 * 2048))
    s, _ = parse_ds_config({"zero_optimization": {"stage": 2,
                                                  "stage3_prefetch_bucket_size": "auto"}}, flags)
    assert s.zero.stage3_prefetch_bucket_size == 50_000_000


def test_unknown_keys_name_the_closest():
    with pytest.raises(ConfigError, match=r"zero_optimization\.stage3_param_persitance_threshold "
                       r"is not a key .*did you mean 'stage3_param_persistence_threshold'"):
        parse_ds_config({"zero_optimization": {"stage": 3,
                                               "stage3_param_persitance_threshold": 10}})
    with pytest.raises(ConfigError, match=r"offload_param\.pin_memroy is not a key .*did you "
                       r"mean 'pin_memory'"):
        parse_ds_config({"zero_optimization": {"stage": 3, "offload_param": {
            "device": "cpu", "pin_memroy": True}}})
    _, w = parse_ds_config({"zero_optimization": {"stage": 2}, "gradient_clippping": 1.0,
                            "aio": {"queue_dept": 8}})
    assert any("gradient_clippping is not a key DeepSpeed 0.19.8 reads; it ignores it (did you "
               "mean 'gradient_clipping'?)" in x for x in w)
    assert any("aio.queue_dept" in x and "'queue_depth'" in x for x in w)


def test_hjson_and_duplicates(tmp_path, caplog):
    p = tmp_path / "c.json"
    p.write_text('\ufeff{\n // ZeRO-2\n "zero_optimization": {"stage": 2,},\n}', encoding="utf-8")
    cfg = load_ds_config(str(p))[0]
    note = cfg.pop(ds_read.HJSON_ONLY)
    assert cfg == {"zero_optimization": {"stage": 2}}
    # accelerate's HfDeepSpeedConfig (the HF Trainer's) opens the file with json.load: one
    # warning among parse_ds_config's, not a log record of its own format
    assert "the HF Trainer and accelerate load a ds_config file with json.load" in note
    assert not caplog.records
    _, w = parse_ds_config(load_ds_config(str(p))[0])
    assert w[0] == note and sum("json.load" in x for x in w) == 1
    p.write_text('{"zero_optimization": {"stage": 2}}', encoding="utf-8")
    assert ds_read.HJSON_ONLY not in load_ds_config(str(p))[0]
    p.write_text('{"zero_optimization": {"stage": 2, "stage": 3}}')
    with pytest.raises(ConfigError, match=r"c\.json: duplicate key 'stage' \(DeepSpeed 0\.19\.8 "
                       r"refuses"):
        load_ds_config(str(p))


HJSON = """{
  # a ds_config as DeepSpeed's hjson reads it: comments, unquoted keys, no commas
  zero_optimization: {
    stage: 3
    offload_param: { device: "cpu" }
    /* the optimizer state on the host too */
    offload_optimizer: {
      device: cpu
      pin_memory: true
    }
  }
  // quoted and unquoted keys mix
  "train_micro_batch_size_per_gpu": 2
  gradient_accumulation_steps: 1
  bf16: { enabled: true }
  optimizer: { type: "AdamW", params: { lr: 1e-4 } }
}
"""


def test_hjson_config_on_the_command_line(tmp_path, monkeypatch):
    """A real hjson ds_config is read as DeepSpeed reads it (hjson.load with its duplicate-key
    hook), by path or as a bare .hjson name; a broken one is exit 2, one line naming the file."""
    import hjson
    from deepspeed.runtime.config_utils import dict_raise_error_on_duplicate_keys

    from _cli import assert_user_error, run

    monkeypatch.chdir(tmp_path)
    (tmp_path / "zero3.hjson").write_text(HJSON)
    cfg, where = load_ds_config("zero3.hjson")
    assert "json.load" in cfg.pop(ds_read.HJSON_ONLY)
    assert cfg == json.loads(json.dumps(hjson.loads(
        HJSON, object_pairs_hook=dict_raise_error_on_duplicate_keys)))       # DeepSpeed's reading
    assert cfg["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    args = ["memory", "-m", "tinyllama-1.1b", "-H", "dgx-a100", "--gpus", "1", "--json"]
    r = run(*args, "-c", "zero3.hjson")
    assert r.exit_code == 0, r.output
    (tmp_path / "zero3.json").write_text(json.dumps(cfg))
    as_json = run(*args, "-c", str(tmp_path / "zero3.json"))
    assert json.loads(r.stdout)["tiers"] == json.loads(as_json.stdout)["tiers"]
    for bad, what in (("{\n  zero_optimization: {\n    stage: 3\n", "zero3-bad.hjson"),
                      ("{\n zero_optimization: {stage: 3}\n}}\n", "zero3-bad.json")):
        (tmp_path / what).write_text(bad)
        assert_user_error(run(*args, "-c", what), f"{what}: malformed JSON at line",
                          "read as hjson")
    # 1e400: hjson itself raises OverflowError on it; one line, the key named where it can be
    (tmp_path / "big.json").write_text('{"zero_optimization": {"stage": 3, '
                                       '"sub_group_size": 1e400}}')
    assert_user_error(run(*args, "-c", "big.json"),
                      "big.json: zero_optimization.sub_group_size = inf is not a finite number")
    (tmp_path / "big.hjson").write_text("{\n  zero_optimization: {\n    sub_group_size: 1e400\n"
                                        "  }\n}\n")
    assert_user_error(run(*args, "-c", "big.hjson"), "big.hjson: a number too large for a float")


def test_hjson_missing_is_one_line(tmp_path, monkeypatch):
    """Without the hjson package a plain JSON ds_config still reads; an hjson one is one line
    saying what is missing."""
    import sys

    from _cli import assert_user_error, run

    monkeypatch.setitem(sys.modules, "hjson", None)
    p = tmp_path / "c.json"
    p.write_text('{"zero_optimization": {"stage": 2}}')
    assert load_ds_config(str(p))[0] == {"zero_optimization": {"stage": 2}}
    p.write_text('{"zero_optimization": {"stage": 2, "stage": 3}}')
    with pytest.raises(ConfigError, match="duplicate key 'stage'"):
        load_ds_config(str(p))
    p.write_text(HJSON)
    assert_user_error(run("memory", "-m", "tinyllama-1.1b", "-c", str(p)), f"{p}: not JSON",
                      "the hjson package is not installed: pip install hjson")


def test_precision_message_says_what_the_config_implies():
    cfg = {"fp16": {"enabled": "auto"}, "zero_optimization": {"stage": 2}}
    # tierlab's default (bf16 on this GPU) is no flag the user passed
    s, w = parse_ds_config(cfg, Flags(default_precision="bf16"))
    assert s.precision == "fp16" and not any("--precision" in x for x in w)
    assert any('fp16.enabled is "auto", and it has no bf16 block: simulating fp16' in x
               for x in w)
    with pytest.raises(ConfigError, match=r'--precision bf16 contradicts the config, which trains '
                       r'in fp16 or fp32 \(fp16\.enabled is "auto", and it has no bf16 block\)'):
        parse_ds_config(cfg, Flags(precision="bf16"))
    s, _ = parse_ds_config(cfg, Flags(precision="fp16"))
    assert s.precision == "fp16"
    s, w = parse_ds_config({"zero_optimization": {"stage": 2}}, Flags(default_precision="bf16"))
    assert s.precision == "fp32" and any("DeepSpeed trains in fp32" in x for x in w)


@pytest.mark.parametrize("blocks", [{}, {"fp16": {}}, {"bf16": {"enabled": False}},
                                    {"fp16": {"loss_scale": 0}}, {"bfloat16": {"enabled": True}},
                                    {"bf16": None, "bfloat16": {"enabled": True}},
                                    {"fp16": {"enabled": False}, "bfloat16": {"enabled": False}}])
def test_precision_is_deepspeeds_when_the_config_has_no_enabled_block(blocks):
    """What DeepSpeed 0.19.8 trains in (precision_config.py: get_float16_config and
    get_bfloat16_config, which reads the old `bfloat16` name when `bf16` is absent or null) is
    what tierlab simulates under its default precision, with a warning when that is fp32."""
    from deepspeed.runtime.precision_config import get_bfloat16_config, get_float16_config

    cfg = {"zero_optimization": {"stage": 2}, **blocks}
    ds = ("fp16" if get_float16_config(cfg).enabled else
          "bf16" if get_bfloat16_config(cfg).enabled else "fp32")
    for default in ("bf16", "fp16"):
        s, w = parse_ds_config(cfg, Flags(default_precision=default))
        assert s.precision == ds
        assert any("DeepSpeed trains in fp32" in x for x in w) == (ds == "fp32")
        assert ds_read.read(to_ds_config(s), "round trip")[0].get("bf16", {}).get(
            "enabled", False) == (ds == "bf16")


@pytest.mark.lab
def test_no_precision_block_on_the_command_line(tmp_path):
    """`simulate -c FILE` without fp16/bf16 on an H200 (tierlab's default there: bf16) simulates
    fp32 as DeepSpeed trains it and says so; --precision fp32 agrees silently, --precision bf16
    is one error line."""
    from _cli import assert_user_error, run

    p = tmp_path / "noprec.json"
    p.write_text(json.dumps({"zero_optimization": {"stage": 2, "offload_optimizer":
                                                   {"device": "cpu"}},
                             "train_micro_batch_size_per_gpu": 1,
                             "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}))
    args = ["simulate", "-m", "tinyllama-1.1b", "-H", "h200-host", "-c", str(p)]
    r = run(*args)
    assert r.exit_code == 0, r.output
    assert f"warning: {p}: neither fp16 nor bf16 is enabled: DeepSpeed trains in fp32" in r.output
    assert "seq 2048, fp32" in r.output
    r32 = run(*args, "--precision", "fp32")
    assert r32.exit_code == 0 and "warning" not in r32.output
    assert r32.output.splitlines()[0] == [x for x in r.output.splitlines()
                                          if not x.startswith("warning")][0]
    assert_user_error(run(*args, "--precision", "bf16"), str(p), "--precision bf16 contradicts "
                      "the config, which trains in fp32 (neither fp16 nor bf16 is enabled)")


@pytest.mark.parametrize("key", ["partition_activations", "cpu_checkpointing",
                                 "contiguous_memory_optimization"])
def test_activation_checkpointing_block_refused_by_name(key):
    cfg = {"zero_optimization": {"stage": 2}, "activation_checkpointing": {key: True}}
    with pytest.raises(ConfigError, match=rf"activation_checkpointing\.{key}=true is not modelled"):
        parse_ds_config(cfg)
    cfg["activation_checkpointing"][key] = False
    parse_ds_config(cfg)


@pytest.mark.parametrize("name", sorted(ORIGINS))
def test_corpus_on_the_command_line(name):
    """`tierlab memory -c FILE`: DeepSpeed's refusal is exit 2 naming its key; an accepted config
    is simulated, or the feature tierlab does not model is exit 2 naming it."""
    from _cli import assert_cli_judges

    origin = ORIGINS[name]
    verdict = origin.get("cli", origin.get("tierlab", ""))
    assert_cli_judges(CORPUS / name, origin, *verdict.split(" ")[1:2], "DeepSpeed accepts it")


@pytest.mark.parametrize("name", sorted(n for n, o in ORIGINS.items()
                                        if o.get("tierlab") == "simulated"))
def test_corpus_round_trip(name):
    """Strategy -> to_ds_config -> DeepSpeed accepts it (deprecated keys written as their new
    ones, aliases as DeepSpeed's documented names) and parses back to the same Strategy."""
    from tierlab.sim.strategy import to_ds_config

    cfg, where = load_ds_config(str(CORPUS / name))
    flags = Flags(world_size=ORIGINS[name].get("gpus", 1), hidden=4096, default_precision="bf16")
    s, _ = parse_ds_config(cfg, flags, where=where)
    out = to_ds_config(s)
    for prefer in BACKENDS:
        ds_read.read(out, "round trip", prefer=prefer)
    back, _ = parse_ds_config(out, Flags(world_size=flags.world_size))

    def meaning(z):     # overlap_comm None is DeepSpeed's stage-dependent default, written out
        return replace(z, overlap_comm=z.overlap)
    assert (meaning(back.zero), back.aio, back.precision, back.train_batch_size) == (
        meaning(s.zero), s.aio, s.precision, s.train_batch_size)


@pytest.mark.parametrize("name", ["hf_tests_zero3.json", "self_control_deepspeed_config.json",
                                  "axolotl_zero3_bf16_cpuoffload_all.json",
                                  "dse_zero3_nvme_offload_annotated.json"])
def test_core_install_says_the_same(name):
    """Without deepspeed (the core install: the vendored table decides) `tierlab memory` prints
    the same lines as with it."""
    import os
    import subprocess
    import sys

    from _cli import run

    args = ["memory", "-m", "tinyllama-1.1b", "-H", "dgx-a100", "--gpus", "1", "--micro-batch",
            "1", "-c", str(CORPUS / name)]
    code = ("import sys; sys.modules['deepspeed'] = None; from tierlab.cli import main; "
            "main()")
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "DS_ACCELERATOR": "cpu"})
    core = [l for l in (p.stdout + p.stderr).splitlines() if not l.startswith("WARNING ")]
    full = [l for l in run(*args).output.splitlines() if not l.startswith("WARNING ")]
    assert sorted(core) == sorted(full) and core, (core, full)


def test_every_refused_key_in_one_pass():
    """Each key DeepSpeed refuses is named in the one error line, not the first only."""
    cfg = SYNTHETIC[-2]
    for prefer in BACKENDS:
        with pytest.raises(ConfigError) as e:
            ds_read.read(cfg, "mine.json", prefer=prefer)
        text = str(e.value)
        assert "\n" not in text and text.startswith("mine.json: amp: DeepSpeed 0.19.8 refuses")
        for key in ("fp16.bogus", "zero_optimization.foo", "zero_optimization.contiguous_gradients",
                    "zero_optimization.offload_param.bar",
                    "zero_optimization.offload_param.buffer_count"):
            assert key in text, (prefer, key, text)
