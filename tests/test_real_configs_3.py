"""Issue 30: real config.json files of the model_types whose transformers 5.25.0 default config
cannot be built (tests/data/hf_configs/real3, ORIGINS.yaml names each file's source), judged by
transformers itself on the meta device, and DBRX (DbrxFFN: router `router.layer`, fused experts
`experts.mlp.w1/v1/w2` of moe_num_experts x ffn_hidden_size rows; transformers 5.25.0
modeling_dbrx.py lines 247-353; attention `norm_attn_norm.attn`, lines 355-393) read as a gated
MoE, counted against a hand computation from its config numbers, and simulated."""
import json
import math
from pathlib import Path

import pytest
import yaml

import tierlab
from tierlab.profiles.hf_build import COUNT_TOLERANCE
from tierlab.profiles.load import load_model
from tests._realcases import loaded_as_recorded

REAL3 = Path(__file__).parent / "data" / "hf_configs" / "real3"
ORIGINS = yaml.safe_load((REAL3 / "ORIGINS.yaml").read_text())["files"]
FILES = sorted(REAL3.glob("*.json"))
DBRX = REAL3 / "dbrx-instruct.json"


def test_every_file_has_an_origin():
    assert {p.stem for p in FILES} == set(ORIGINS)
    for entry in ORIGINS.values():
        commit = entry["commit"] or ""
        cited = bool(entry["repository"]) and bool(entry["path"]) and len(commit) == 40
        assert cited or len(entry["provenance"]) > 100, entry      # else say where it came from
        assert entry["verdict"] == "counted" or entry["verdict"].startswith("refused: ")


def transformers_counts(data: dict) -> tuple[int, int]:
    """(total, active) of the causal LM transformers builds from the config on the meta device,
    less the towers it builds inside its decoder (a child holding a sub-model of its own:
    Phi-4-multimodal's image and audio encoders, text decoder only as tierlab counts); active: each `experts` module's parameters top-k of n (n, k from the config, or from its
    `ffn_config` sub-config: DBRX's moe_num_experts, moe_top_k; DeepSeek-V2's n_routed_experts
    through its config class's attribute_map entry `num_experts`)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

    cfg = {k: v for k, v in data.items() if k not in ("model_type", "auto_map", "architectures")}
    config = AutoConfig.for_model(data["model_type"], **cfg)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    emb = model.get_input_embeddings()      # Phi-4-multimodal's model.embed_tokens_extend
    towers = [m for m in getattr(model, "model", model).children()
              if any(isinstance(s, PreTrainedModel) for s in m.modules())
              and not any(s is emb for s in m.modules())]
    total = sum(p.numel() for p in model.parameters()) - \
        sum(p.numel() for m in towers for p in m.parameters())
    part = getattr(config, "ffn_config", None) or config
    n = getattr(part, "moe_num_experts", None) or getattr(part, "num_local_experts", None) \
        or getattr(part, "num_experts", None)
    k = getattr(part, "moe_top_k", None) or getattr(part, "num_experts_per_tok", None)
    idle = sum(sum(p.numel() for p in m.parameters()) * (n - k) // n
               for name, m in model.named_modules() if name.endswith(".experts")) if n else 0
    return total, total - idle


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_real_config_counts_as_transformers_or_is_refused_in_one_line(path):
    pytest.importorskip("transformers")
    model = loaded_as_recorded(path, ORIGINS[path.stem]["verdict"])
    if model is None:
        return
    total, active = transformers_counts(json.loads(path.read_text()))
    assert abs(model.n_params - total) <= COUNT_TOLERANCE * total, (model.n_params, total)
    assert abs(model.active_params - active) <= COUNT_TOLERANCE * active, \
        (model.active_params, active)


def dbrx_by_hand(c: dict) -> tuple[int, int]:
    """DBRX's (total, active) from its config numbers: per block a fused Wqkv (d x (d + 2 x
    kv_heads x head_dim)), out_proj (d x d), two weight-only LayerNorms (norm_1, norm_2), a
    router (d x experts) and experts of three d x ffn matrices (w1, v1, w2), a token using
    top-k of them; the embedding and the untied head (vocab x d each) and the final norm."""
    d, heads, layers, vocab = c["d_model"], c["n_heads"], c["n_layers"], c["vocab_size"]
    kv, ffn = c["attn_config"]["kv_n_heads"], c["ffn_config"]["ffn_hidden_size"]
    n, k = c["ffn_config"]["moe_num_experts"], c["ffn_config"]["moe_top_k"]
    head_dim = d // heads                                   # 6144 / 48 = 128
    attn = d * (d + 2 * kv * head_dim) + d * d              # 6144 x 8192 + 6144^2 = 88,080,384
    expert = 3 * d * ffn                                    # 3 x 6144 x 10752 = 198,180,864
    shared = attn + 2 * d + d * n                           # + norms + router (98,304)
    outside = 2 * vocab * d + d                             # wte, lm_head, norm_f
    return layers * (shared + n * expert) + outside, layers * (shared + k * expert) + outside


def test_dbrx_counts_by_hand_total_and_active():
    c = json.loads(DBRX.read_text())
    total, active = dbrx_by_hand(c)
    assert (total, active) == (131_596_523_520, 36_469_708_800)   # issue 30: transformers' total
    m = load_model(str(DBRX))
    assert (m.n_params, m.active_params) == (total, active)
    assert m.moe.n_experts == 16 and m.moe.experts_per_token == 4 and m.gated_mlp
    assert m.ffn == 10752 and m.n_kv_heads == 8 and m.fused_qkv and m.block_norms == 2
    assert "tower" not in m.source, m.source     # attn_config / ffn_config are the decoder's


def test_dbrx_simulates_to_a_finite_step_on_dgx_h100_zero3_cpu():
    model = load_model(str(DBRX), seq_len=4096)
    r = tierlab.simulate(model, "dgx-h100", "zero3-cpu", micro_batch=1)
    assert math.isfinite(r.step_time_s) and r.step_time_s > 0
