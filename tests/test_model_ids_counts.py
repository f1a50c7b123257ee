"""Issue 33: the model ids people type (llama-3.1-8b, llama-3.1-70b, qwen2.5-7b) are shipped
profiles that count what transformers counts for the published config.json (the model built on
the meta device), Qwen2.5's q/k/v biases and an explicit head_dim included; a profile says
them with Model's own keys `qkv_bias` and `attn_head_dim` (profiles/schema.py)."""
from __future__ import annotations

import json

import pytest

from tierlab.errors import ConfigError
from tierlab.profiles.load import load_model

from _cli import run
from _runnerhelp import REPO

HF = REPO / "tests" / "data" / "hf_configs"

COUNTS = {"llama-3.1-8b": 8_030_261_248,
          "llama-3.1-70b": 70_553_706_496,
          "qwen2.5-7b": 7_615_616_512}
"""transformers 5.x, AutoModelForCausalLM.from_config on the meta device, of
tests/data/hf_configs/<name>.json (sum of p.numel())."""


def _transformers_count(config: dict) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = {k: v for k, v in config.items() if k not in ("model_type", "architectures")}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(config["model_type"], **cfg))
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_profile_counts_what_transformers_counts(name):
    pytest.importorskip("transformers")
    assert load_model(name).n_params == COUNTS[name]
    assert _transformers_count(json.loads((HF / f"{name}.json").read_text())) == COUNTS[name]


def test_qwen25_has_three_bias_vectors_per_block():
    m = load_model("qwen2.5-7b")
    biases = {k: v for k, v in m.layer_small_params(0).items() if k.endswith(".bias")}
    assert biases == {"q_proj.bias": 3584, "k_proj.bias": 512, "v_proj.bias": 512}
    assert m.n_params - 28 * sum(biases.values()) == 7_615_616_512 - 129_024


def test_memory_counts_the_biases():
    r = run("memory", "-m", "qwen2.5-7b", "-H", "dgx-a100", "-c", "zero3-cpu", "--seq", "2048",
            "--micro-batch", "1", "--json", "-q")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["n_params"] == COUNTS["qwen2.5-7b"]


def _profile(tmp_path, **extra) -> str:
    """A small Llama profile: hidden 256, 4 heads / 2 kv, 2 blocks."""
    lines = ["kind: model", "name: small", 'source: "test"', "n_layers: 2", "hidden: 256",
             "ffn: 512", "n_heads: 4", "n_kv_heads: 2", "vocab: 1000", "seq_len: 128"]
    lines += [f"{k}: {json.dumps(v)}" for k, v in extra.items()]
    path = tmp_path / "small.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("model_type, extra", [
    ("llama", {"attn_head_dim": 96}),                   # head_dim != hidden / heads (= 64)
    ("qwen2", {"qkv_bias": True}),
    ("qwen2", {"qkv_bias": True, "attn_head_dim": 32}),
])
def test_profile_keys_count_as_transformers(tmp_path, model_type, extra):
    pytest.importorskip("transformers")
    config = {"model_type": model_type, "num_hidden_layers": 2, "hidden_size": 256,
              "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 1000, "max_position_embeddings": 128, "tie_word_embeddings": False}
    if "attn_head_dim" in extra:
        config["head_dim"] = extra["attn_head_dim"]
    theirs = _transformers_count(config)
    assert load_model(_profile(tmp_path, **extra)).n_params == theirs
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert load_model(str(path)).n_params == theirs     # the HF reader fills the same fields


@pytest.mark.parametrize("extra, said", [
    ({"qkv_bias": "yes"}, "qkv_bias must be true or false"),
    ({"attn_head_dim": 12.5}, "attn_head_dim must be an integer"),
    ({"attn_head_dim": -1}, "attn_head_dim"),
    ({"head_dim": 64}, "head_dim"),                     # the key is Model's: attn_head_dim
])
def test_profile_keys_are_checked(tmp_path, extra, said):
    path = _profile(tmp_path, **extra)
    with pytest.raises(ConfigError, match=said) as e:
        load_model(path)
    assert path in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("hf_id, profile", [
    ("meta-llama/Llama-3.1-70B", "llama-3.1-70b"),
    ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
    ("meta-llama/Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b"),
    ("Qwen/Qwen2.5-7B", "qwen2.5-7b"),
])
def test_hugging_face_ids(hf_id, profile):
    assert load_model(hf_id) == load_model(profile)


def test_qwen25_instruct_is_not_the_base_profile():
    """Qwen2.5-7B-Instruct's config.json has 32768 positions, the base model's 131072."""
    with pytest.raises(ConfigError, match="not a Hugging Face id"):
        load_model("Qwen/Qwen2.5-7B-Instruct")


def test_profiles_lists_the_ids():
    r = run("profiles", "models")
    assert r.exit_code == 0, r.output
    for name in COUNTS:
        assert f"\n  {name} " in r.output, name
    assert "70.55 B params, 80 layers" in r.output and "7.62 B params, 28 layers" in r.output
