"""Hugging Face config.json import (profiles/hf_arch.py, profiles/layout.py) and MoE in memory
and time: counts against transformers' own (meta device), bad input, FLOPs of active experts,
ZeRO-3 expert gathering, expert parallelism refused."""
import json
from dataclasses import replace
from pathlib import Path

import pytest

from tierlab.errors import ConfigError
from tierlab.profiles.hf_arch import ARCHITECTURES, meta_param_count
from tierlab.profiles.layout import expected_experts_hit
from tierlab.profiles.load import load_model, model_from_hf_config
from tierlab.sim import flops
from tierlab.sim.memory import model_state_bytes
from tierlab.sim.modules import modules
from tierlab.sim.strategy import parse_ds_config

CORPUS = Path(__file__).parent / "data" / "hf_configs"
ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted(p for p in CORPUS.glob("*.json") if p.name != "sources.json")
TOLERANCE = 1e-3          # the issue's acceptance bound: within 0.1 % of transformers

# Small synthetic configs: one per supported model_type (and the switches that change shapes),
# for the switches and families (OLMo, OLMo-2) no real corpus file exercises. vocab 70000 keeps
# pad/eos ids in range.
BASE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=70000, max_position_embeddings=32)
GPT = dict(n_embd=64, n_layer=3, n_head=4, n_positions=32)
MLA = dict(kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8,
           n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
           first_k_dense_replace=1)
SYNTHETIC = {
    "llama": {}, "llama-biased": dict(model_type="llama", attention_bias=True, mlp_bias=True),
    "mistral": dict(head_dim=32), "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "qwen2": {}, "qwen3": dict(head_dim=32),
    "qwen2_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
                      shared_expert_intermediate_size=96, decoder_sparse_step=2,
                      mlp_only_layers=[2]),
    "qwen3_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48, head_dim=16),
    # transformers 5 writes Qwen3-MoE's num_experts as num_local_experts (its attribute_map)
    "qwen3_moe-local": dict(num_local_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
                            head_dim=16),
    "gemma": dict(head_dim=32), "gemma2": dict(head_dim=32),
    "phi": {}, "phi-qk-norm": dict(model_type="phi", qk_layernorm=True), "phi3": {},
    "gpt2": GPT, "gpt_bigcode": GPT, "gpt_bigcode-mha": dict(GPT, model_type="gpt_bigcode",
                                                              multi_query=False),
    "gpt_neox": {}, "starcoder2": {}, "starcoder2-nobias": dict(model_type="starcoder2",
                                                                use_bias=False),
    "falcon": {}, "falcon-new": dict(model_type="falcon", new_decoder_architecture=True,
                                     num_kv_heads=2),
    "falcon-sequential": dict(model_type="falcon", parallel_attn=False, multi_query=False,
                              bias=True),
    "opt": dict(ffn_dim=128), "bloom": dict(n_layer=3, n_head=4), "olmo": {}, "olmo2": {},
    "deepseek_v2": dict(MLA, q_lora_rank=None, n_shared_experts=2),
    "deepseek_v3": dict(MLA, q_lora_rank=24, n_shared_experts=1, n_group=1, topk_group=1),
}


def _synthetic(name: str) -> dict:
    cfg = dict(BASE, model_type=name.split("-")[0])
    cfg.update(SYNTHETIC[name])
    return cfg


def test_corpus_has_15_real_configs_with_sources():
    sources = json.loads((CORPUS / "sources.json").read_text())
    assert len(CONFIGS) >= 15
    assert {p.stem for p in CONFIGS} == set(sources)


def test_every_model_type_has_a_synthetic_case():
    assert set(ARCHITECTURES) <= {_synthetic(n)["model_type"] for n in SYNTHETIC}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_real_config_counts_equal_transformers(path):
    pytest.importorskip("transformers")
    ours = load_model(str(path)).n_params
    theirs = meta_param_count(json.loads(path.read_text()))
    assert abs(ours - theirs) <= TOLERANCE * theirs, (ours, theirs)


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_synthetic_config_counts_equal_transformers(name):
    pytest.importorskip("transformers")
    cfg = _synthetic(name)
    assert model_from_hf_config(cfg, name).n_params == meta_param_count(cfg)


@pytest.mark.parametrize("name, billions", [("mixtral-8x7b", (46.70, 12.88)),
                                            ("deepseek-r1", (671.03, 37.55)),
                                            ("qwen3-30b-a3b", (30.53, 3.35))])
def test_published_totals_and_active_params(name, billions):
    # Mixtral paper: 46.7 B total, 12.9 B active; DeepSeek-V3 report: 671 B, 37 B activated
    # (main model, MTP module excluded); Qwen3-30B-A3B: 30.5 B, 3.3 B activated
    m = load_model(str(CORPUS / f"{name}.json"))
    assert (m.n_params / 1e9, m.active_params / 1e9) == pytest.approx(billions, abs=0.01)


def test_formulas_fix_the_issue_examples():
    neox = model_from_hf_config(_synthetic("gpt_neox"), "neox")
    assert not neox.gated_mlp and neox.n_kv_heads == neox.n_heads      # non-gated, MHA
    bigcode = model_from_hf_config(_synthetic("gpt_bigcode"), "bc")
    assert bigcode.n_kv_heads == 1                                       # multi-query
    gemma2 = model_from_hf_config(_synthetic("gemma2"), "g2")
    assert gemma2.tie_embeddings and gemma2.head_dim == 32 and gemma2.block_norms == 4


# ----------------------------------------------------------------------------------------------
# bad input

REFORMER = dict(model_type="reformer", is_decoder=True, hidden_size=64, num_attention_heads=4,
                attention_head_size=32, axial_pos_embds_dim=[32, 32],
                attn_layers=["local", "lsh"], vocab_size=1000, feed_forward_size=128)
"""A small Reformer causal LM: counted and refused (LSH attention and reversible layers:
profiles/hf_reformer.py)."""


def test_unknown_model_type_is_named():
    # (Mamba and RWKV, the examples here before, are counted now: tests/test_hybrid_arch.py,
    # tests/test_recurrent_mixers.py, and so is Mllama: tests/test_mllama.py, and BERT's and
    # XLM's blocks: tests/test_bert_decoders.py, and XLNet's: tests/test_xlnet.py; Reformer is
    # counted and refused: tests/test_reformer.py)
    with pytest.raises(ConfigError,
                       match="model_type 'reformer' is not a supported architecture"):
        model_from_hf_config(REFORMER, "cfg.json")


def test_missing_model_type_is_an_error_not_a_dense_guess():
    with pytest.raises(ConfigError, match="missing key 'model_type'"):
        model_from_hf_config(dict(BASE), "cfg.json")


@pytest.mark.parametrize("key", ["hidden_size", "num_hidden_layers", "vocab_size"])
def test_missing_dimension_key_is_named(key):
    cfg = dict(BASE, model_type="llama")
    del cfg[key]
    with pytest.raises(ConfigError, match=f"missing key '{key}'"):
        model_from_hf_config(cfg, "cfg.json")


def test_a_null_key_is_named_as_null_not_missing():
    # DeepseekV2Config() writes num_experts_per_tok: null (transformers 5.25's default)
    cfg = dict(BASE, model_type="deepseek_v2", num_experts_per_tok=None, moe_intermediate_size=48,
               n_routed_experts=4, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
               v_head_dim=16)
    with pytest.raises(ConfigError, match="key 'num_experts_per_tok' is null; it needs an integer"):
        model_from_hf_config(cfg, "cfg.json")


@pytest.mark.parametrize("key, value, message", [
    ("hidden_size", "4096", "hidden_size must be an integer"),
    ("num_attention_heads", 4.0, "num_attention_heads must be an integer"),
    ("tie_word_embeddings", "yes", "tie_word_embeddings must be true or false"),
    ("num_local_experts", True, "num_local_experts must be an integer")])
def test_wrong_types_are_named(key, value, message):
    cfg = dict(BASE, model_type="mixtral", **{key: value})
    with pytest.raises(ConfigError, match=message):
        model_from_hf_config(cfg, "cfg.json")


def test_unmodelled_switches_are_refused_by_name():
    with pytest.raises(ConfigError, match="attention_bias"):
        model_from_hf_config(dict(BASE, model_type="llama", attention_bias=True), "c.json")
    with pytest.raises(ConfigError, match="word_embed_proj_dim"):
        model_from_hf_config(dict(BASE, model_type="opt", ffn_dim=128, word_embed_proj_dim=32),
                             "c.json")


def test_cli_exits_2_naming_the_model_type(tmp_path):
    from click.testing import CliRunner

    from tierlab.cli import main

    p = tmp_path / "config.json"
    p.write_text(json.dumps(REFORMER))
    res = CliRunner().invoke(main, ["simulate", "-m", str(p)])
    assert res.exit_code == 2 and "'reformer'" in res.output


# ----------------------------------------------------------------------------------------------
# MoE in memory and time

MIXTRAL = load_model(str(CORPUS / "mixtral-8x7b.json"), seq_len=4096)


def _strategy(stage=3, mb=1):
    return parse_ds_config({"train_micro_batch_size_per_gpu": mb, "bf16": {"enabled": True},
                            "zero_optimization": {"stage": stage}})[0]


def test_memory_stores_every_expert():
    # 46.7 B params x 16 B (2 + 2 + 4 + 4 + 4) = 747 GB of model states
    states = model_state_bytes(MIXTRAL, _strategy())
    assert sum(states.values()) == pytest.approx(16 * 46.70e9, rel=1e-3)
    assert sum(sum(m.own_params) for m in modules(MIXTRAL, _strategy())) == MIXTRAL.n_params


def test_flops_use_top_k_experts_only():
    dense = replace(MIXTRAL, moe=None)          # the same model with one expert-wide MLP
    lf, lf_dense = flops.layer_forward(MIXTRAL, 1), flops.layer_forward(dense, 1)
    # top-2 experts: the MLP GEMMs cost twice a dense MLP's; router 2 x 4096 x 8 per token
    mlp = 3 * 2 * 4096 * 4096 * 14336
    router = 2 * 4096 * 4096 * 8
    assert lf.total - lf_dense.total == pytest.approx(mlp + router)


def test_zero3_gathers_the_experts_the_tokens_reach():
    s = _strategy()
    block = modules(MIXTRAL, s)[1]
    assert block.fetch_tensors == 4 + 8 * 3             # 4096 tokens: q, k, v, o + all 8 experts
    b1 = modules(replace(MIXTRAL, seq_len=1), s)[1]     # 1 token: its top-2 experts only
    assert block.fetch_numel - b1.fetch_numel == 6 * 3 * 4096 * 14336
    assert b1.hooked == block.hooked - 6 * 3
    assert expected_experts_hit(8, 2, 16) == pytest.approx(8 * (1 - 0.75 ** 16))


def test_deepseek_dense_and_moe_layers_differ():
    m = load_model(str(CORPUS / "deepseek-r1.json"))
    assert [m.is_moe_layer(i) for i in (0, 2, 3, 60)] == [False, False, True, True]
    assert m.layer_groups() == ((0, 3), (3, 58))


@pytest.mark.parametrize("key", ["moe", "expert_parallel_size"])
def test_expert_parallelism_is_refused_by_name(key):
    with pytest.raises(ConfigError, match=key):
        parse_ds_config({"train_micro_batch_size_per_gpu": 1, key: 2})


def test_ep_size_in_the_model_config_is_refused():
    cfg = dict(_synthetic("deepseek_v3"), ep_size=8)
    with pytest.raises(ConfigError, match="ep_size"):
        model_from_hf_config(cfg, "c.json")


def test_mixtral_plan_needs_offload_on_dgx_a100():
    # the issue's acceptance: Mixtral-8x7B (46.7 B) no longer "fits without offload"
    from click.testing import CliRunner

    from tierlab.cli import main

    res = CliRunner().invoke(main, ["plan", "-m", str(CORPUS / "mixtral-8x7b.json"),
                                    "-H", "dgx-a100", "--seq", "4096"])
    assert res.exit_code == 0, res.output
    assert "Needs offload: without it, gpu needs 102 GiB > 80 GiB per GPU" in res.output  # docs/models.md
    best = next(l for l in res.output.splitlines() if "best: fastest" in l)
    assert best in (ROOT / "docs" / "models.md").read_text()    # the row docs/models.md quotes


def test_docs_models_examples_run(monkeypatch):
    import doctest

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)
    result = doctest.testfile(str(root / "docs" / "models.md"), module_relative=False)
    assert result.failed == 0 and result.attempted >= 4
