"""Issue 30 item 4: real inputs collected from public repositories (tests/data/hf_configs/real2,
tests/data/ds_configs/real2 and real3; `sources.json` in each names repository, path and
commit), judged by transformers and DeepSpeed themselves, in the test, against tierlab:

- every config.json: transformers' config class builds the (text) decoder on the meta device and
  its parameters are counted, total and active (MoE: top-k of n routed experts); tierlab loads it
  within 0.5 % of both, or refuses it in one line that names the file and says why;
- every ds_config: DeepSpeed 0.19.8's DeepSpeedConfig on the file with "auto" filled as the HF
  Trainer fills it (tests/_dshelp.py); where DeepSpeed refuses it, tierlab refuses it naming the
  key DeepSpeed names; where DeepSpeed accepts it, tierlab has DeepSpeed's effective values (ZeRO
  stage, offload devices, bucket sizes, gradient clipping, precision, the batch triple) or refuses
  it in one line naming the file and the key it cannot model.
The expected verdict of each file is in its sources.json entry, so a change in either library or
in tierlab that flips one shows up here."""
import importlib.util
import json
from pathlib import Path

import pytest

from tests._realcases import loaded_as_recorded
from tests._dshelp import (HIDDEN, MICRO, deepspeed_builds_optimizer, deepspeed_verdict,
                           open_as_deepspeed)
from tierlab.dsconfig.read import load_ds_config
from tierlab.errors import ConfigError
from tierlab.profiles.hf_build import COUNT_TOLERANCE
from tierlab.profiles.load import load_model
from tierlab.sim.strategy import Flags, parse_ds_config

DATA = Path(__file__).parent / "data"
HF = DATA / "hf_configs" / "real2"
DS_DIRS = [DATA / "ds_configs" / name for name in ("real2", "real3")]   # real3: a second round
HF_SOURCES = json.loads((HF / "sources.json").read_text())
DS_SOURCES = {name: entry for d in DS_DIRS
              for name, entry in json.loads((d / "sources.json").read_text()).items()}
HF_FILES = sorted(p for p in HF.glob("*.json") if p.name != "sources.json")
DS_FILES = sorted(p for d in DS_DIRS for p in d.glob("*.json") if p.name != "sources.json")
OLD = [p for p in (DATA / "hf_configs").rglob("*.json") if "real2" not in p.parts] + \
    [p for p in (DATA / "ds_configs").glob("*.json")]

N_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts")
TOP_K = ("num_experts_per_tok", "experts_per_token", "moe_topk", "top_k_experts")   # gemma4: top_k_experts


def _cited(entry: dict) -> bool:
    commit = entry.get("commit", "")
    return entry["repository"].count("/") == 1 and bool(entry["path"]) and len(commit) == 40 \
        and all(c in "0123456789abcdef" for c in commit)


def test_corpus_is_new_real_and_cited():
    assert len(HF_FILES) >= 40 and len(DS_FILES) >= 40
    assert {p.stem for p in HF_FILES} == set(HF_SOURCES)
    assert {p.name for p in DS_FILES} == set(DS_SOURCES) and len(DS_FILES) == len(DS_SOURCES)
    assert all(_cited(e) for e in (*HF_SOURCES.values(), *DS_SOURCES.values()))
    old = {json.dumps(open_as_deepspeed(p), sort_keys=True) for p in OLD
           if p.name != "sources.json"}
    for path in HF_FILES + DS_FILES:       # none is a copy of a file tests/data already has,
        text = json.dumps(open_as_deepspeed(path), sort_keys=True)    # nor of one before it
        assert text not in old, path.name
        old.add(text)


# ----------------------------------------------------------------------------------------------
# config.json: transformers' verdict


def _first(config, keys):
    return next((getattr(config, k) for k in keys if getattr(config, k, None)), None)


def _decoder(data: dict, config):
    """The text decoder and LM head transformers builds (meta device): its causal LM of the text
    config, or (a multimodal config whose text decoder has no causal-LM class: Qwen2.5-VL,
    Llama 3.2 Vision) the image-text model's decoder and LM head."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    try:
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(config)
    except ValueError as e:
        if "Unrecognized configuration class" not in str(e):
            raise
    cfg = {k: v for k, v in data.items() if k != "model_type"}
    with torch.device("meta"):
        full = AutoModelForImageTextToText.from_config(AutoConfig.for_model(data["model_type"],
                                                                            **cfg))
    return torch.nn.ModuleDict(dict(decoder=full.get_decoder(),
                                    head=full.get_output_embeddings()))


def transformers_verdict(data: dict) -> tuple[int, int] | str:
    """(total, active) parameters of the decoder transformers builds from the config on the meta
    device, or the first line of transformers' refusal. Active: each module named `experts`
    counts top-k of its n experts (n and k from the config object)."""
    from transformers import AutoConfig

    cfg = {k: v for k, v in data.items()
           if k not in ("model_type", "auto_map", "quantization_config", "architectures",
                        "_name_or_path")}
    try:
        config = AutoConfig.for_model(data["model_type"], **cfg).get_text_config(decoder=True)
        model = _decoder(dict(cfg, model_type=data["model_type"]), config)
    except Exception as e:   # noqa: BLE001 - whatever transformers raises is its verdict
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    total = sum(p.numel() for p in model.parameters())      # a tied head's weight counted once
    n, k = _first(config, N_EXPERTS), _first(config, TOP_K)
    idle = sum(sum(p.numel() for p in m.parameters()) * (n - k) // n
               for name, m in model.named_modules() if name.endswith(".experts")) if n else 0
    return total, total - idle


def _near(ours: int, theirs: int) -> bool:
    return abs(ours - theirs) <= COUNT_TOLERANCE * theirs


@pytest.mark.parametrize("path", HF_FILES, ids=lambda p: p.stem)
def test_config_json_as_transformers_counts_it(path):
    pytest.importorskip("transformers")
    theirs = transformers_verdict(json.loads(path.read_text()))
    model = loaded_as_recorded(path, HF_SOURCES[path.stem]["verdict"])   # refused as recorded,
    if model is None:                                                   # or counted
        return
    if "text decoder only" not in model.source:
        assert not any(k.endswith("_config") and k != "quantization_config"
                       for k in json.loads(path.read_text())), model.source
    assert isinstance(theirs, tuple), theirs
    assert _near(model.n_params, theirs[0]) and _near(model.active_params, theirs[1]), \
        ((model.n_params, model.active_params), theirs)


# ----------------------------------------------------------------------------------------------
# ds_config: DeepSpeed's verdict


def tierlab_flags(cfg: dict, gpus: int) -> Flags:
    """The flags that make tierlab fill "auto" as tests/_dshelp.hf_filled does: micro batch 8
    where the file leaves it to the Trainer, no precision flag (fp32 unless the file fixes one)."""
    open_micro = cfg.get("train_micro_batch_size_per_gpu") == "auto" or not any(
        k in cfg for k in ("train_batch_size", "train_micro_batch_size_per_gpu"))
    blocks = ("fp16", "bf16") if cfg.get("bf16") is not None else ("fp16", "bfloat16")
    fixed = [b for b in blocks if isinstance(cfg.get(b), dict)      # bfloat16: bf16's old name,
             and cfg[b].get("enabled") is True]                     # read when bf16 is absent
    return Flags(micro_batch=MICRO if open_micro else None, world_size=gpus, hidden=HIDDEN,
                 precision=None if fixed else "fp32")


def tierlab_values(s) -> dict:
    z = s.zero
    return dict(stage=z.stage, offload_param=s.param_device, offload_optimizer=s.optimizer_device,
                reduce_bucket_size=z.reduce_bucket_size,
                allgather_bucket_size=z.allgather_bucket_size, overlap_comm=z.overlap,
                prefetch_bucket_size=z.stage3_prefetch_bucket_size if z.stage == 3 else None,
                persistence_threshold=z.stage3_param_persistence_threshold if z.stage == 3
                else None,
                max_live_parameters=z.stage3_max_live_parameters if z.stage == 3 else None,
                sub_group_size=z.sub_group_size if z.stage == 3 else None,
                gradient_clipping=s.gradient_clipping, precision=s.precision,
                batch=(s.train_batch_size, s.train_micro_batch_size_per_gpu,
                       s.gradient_accumulation_steps))


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="needs deepspeed")
@pytest.mark.parametrize("path", DS_FILES, ids=lambda p: p.stem)
def test_ds_config_as_deepspeed_judges_it(path, monkeypatch):
    entry = DS_SOURCES[path.name]
    gpus = entry.get("gpus", 1)
    raw = open_as_deepspeed(path)
    theirs = deepspeed_verdict(raw, gpus, monkeypatch)
    cfg, where = load_ds_config(str(path))
    try:
        strategy, warnings = parse_ds_config(cfg, tierlab_flags(raw, gpus), where=where)
        ours = None
    except ConfigError as e:
        ours = str(e)
        assert "\n" not in ours and ours.startswith(str(path)), ours
    verdict, tierlab = entry["verdict"], entry["tierlab"]
    if verdict.startswith("rejected "):                 # DeepSpeed refuses it: so does tierlab
        key, said = verdict.split(" ", 2)[1:] if verdict.count(" ") > 1 else (verdict[9:], "")
        assert theirs.error is not None and said in theirs.error, theirs
        if entry.get("host") == "cuda":     # DeepSpeed's refusal is this CPU host's, not the file's
            assert ours is None, ours
            return
        assert ours is not None and key in ours, ours
        return
    assert verdict == "accepted" and theirs.error is None, theirs.error
    optimizer = (raw.get("optimizer") or {}).get("type")
    if tierlab.startswith("refused "):                  # DeepSpeed accepts, tierlab cannot model
        assert ours is not None, tierlab
        assert all(part in ours for part in tierlab[len("refused "):].split(" | ")), ours
        if optimizer and tierlab.startswith("refused optimizer.type"):
            # deepspeed.initialize builds the optimizer only if the name is its or torch's
            assert ("builds no optimizer" in ours) == (not deepspeed_builds_optimizer(optimizer))
        return
    assert tierlab == "simulated" and ours is None, ours
    assert all(any(part in w for w in warnings) for part in entry.get("warns", [])), warnings
    assert tierlab_values(strategy) == {k: v for k, v in theirs.values.items() if k != "optimizer"}
    if theirs.values["optimizer"] is None:              # no optimizer block: tierlab says so
        assert any("has no optimizer" in w for w in warnings), warnings
    else:
        assert theirs.values["optimizer"].lower() == strategy.raw["optimizer"]["type"].lower()
        assert deepspeed_builds_optimizer(optimizer)


@pytest.mark.parametrize("path", DS_FILES, ids=lambda p: p.stem)
def test_ds_config_on_the_command_line(path):
    """The collected ds_configs through `tierlab memory`: exit 2 in one line naming the file and
    the key DeepSpeed refuses or tierlab does not model, or a run."""
    from tests._cli import assert_cli_judges

    entry = DS_SOURCES[path.name]
    verdict = entry.get("cli", entry["tierlab"])
    assert_cli_judges(path, entry, *verdict[len("refused "):].split(" | "))


def test_an_unfilled_template_names_every_bad_batch_key():
    """DeepSpeedExamples' curriculum template (`"train_batch_size" : GB_SIZE,` read by hjson as
    the text 'GB_SIZE,'): DeepSpeed fails at train_batch // micro_batch (runtime/config.py:621);
    tierlab names both keys in one line, not the first only (bounds.check_ds_config)."""
    from tests._cli import assert_user_error, run

    path = DATA / "ds_configs" / "real3" / "dse_gpt2_curriculum_TEMPLATE.json"
    assert_user_error(run("memory", "-m", "tinyllama-1.1b", "-c", str(path)), path.name,
                      "train_batch_size: expected a number, got 'GB_SIZE,'",
                      "train_micro_batch_size_per_gpu: expected a number, got 'MB_SIZE,'")


def test_idle_experts_biases_are_not_active():
    """gpt-oss's experts carry biases: an idle expert's are no more used than its matrices
    (tierlab counted them active, 0.67 % over transformers on gpt-oss-120b). 5.13e9 active
    besides the 0.58e9 embedding is the gpt-oss model card's figure (arXiv:2508.10925 table 1)."""
    model = load_model(str(HF / "gpt-oss-120b.json"))
    assert round((model.active_params - model.vocab * model.hidden) / 1e9, 2) == 5.13


@pytest.mark.parametrize("block, key", [
    ({"data_routing": {"random_ltd": {"enabled": True}}}, "data_routing.random_ltd.enabled"),
    ({"enabled": True, "data_sampling": {"enabled": True, "curriculum_learning": {
        "enabled": True}}}, "data_sampling.curriculum_learning.enabled")])
def test_data_efficiency_that_changes_a_step_is_refused_by_key(block, key):
    cfg = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2},
           "optimizer": {"type": "AdamW"}, "data_efficiency": block}
    with pytest.raises(ConfigError, match=f"my.json: data_efficiency.{key}=true"):
        parse_ds_config(cfg, where="my.json")


FIXED_BATCH = [p for p in DS_FILES if DS_SOURCES[p.name]["tierlab"] == "simulated"
               and isinstance(open_as_deepspeed(p).get("train_batch_size"), int)]


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="needs deepspeed")
@pytest.mark.parametrize("path", FIXED_BATCH, ids=lambda p: p.stem)
def test_a_micro_batch_that_breaks_a_fixed_train_batch_size_is_refused(path, monkeypatch):
    """A file that fixes train_batch_size, a --micro-batch that cannot multiply to it: DeepSpeed
    refuses the config (runtime/config.py _batch_assertion) and tierlab refuses it in one line
    naming the file and the flag, never rewriting the file's train_batch_size."""
    raw = open_as_deepspeed(path)
    micro = raw["train_batch_size"] + 1
    assert deepspeed_verdict(dict(raw, train_micro_batch_size_per_gpu=micro), 1,
                             monkeypatch).error is not None
    cfg, where = load_ds_config(str(path))
    with pytest.raises(ConfigError) as e:
        parse_ds_config(cfg, Flags(micro_batch=micro, hidden=HIDDEN), where=where)
    text = str(e.value)
    assert "\n" not in text and text.startswith(str(path)) and "--micro-batch" in text, text


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="needs deepspeed")
def test_autotuning_end_step_is_deepspeeds():
    from deepspeed.autotuning.constants import AUTOTUNING_END_PROFILE_STEP_DEFAULT

    from tierlab.dsconfig.autotuning import END_PROFILE_STEP

    assert END_PROFILE_STEP == AUTOTUNING_END_PROFILE_STEP_DEFAULT
