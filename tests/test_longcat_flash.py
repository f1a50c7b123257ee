"""LongCat-Flash (model_type longcat_flash; transformers 5.25.0 modeling_longcat_flash.py): each
decoder layer holds two MLA attentions, two dense MLPs and one shortcut MoE whose router also picks
zero-computation experts; tierlab reads it as two blocks per layer (profiles/hf_sublayers.py) and
counts total parameters as transformers builds them, active ones as a token uses them under
balanced routing (top-k x n / (n + zero) real experts)."""
import json
import math

import pytest

import tierlab
from tierlab.errors import ConfigError
from tierlab.profiles.load import load_model
from tierlab.sim.flops import layer_forward

SMALL = dict(model_type="longcat_flash", num_layers=2, hidden_size=64, num_attention_heads=4,
             ffn_hidden_size=96, expert_ffn_hidden_size=32, n_routed_experts=8,
             zero_expert_num=4, moe_topk=3, q_lora_rank=24, kv_lora_rank=16,
             qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, vocab_size=256,
             max_position_embeddings=64)
"""8 real experts and 4 zero-computation ones, top-3: a token runs 3 x 8 / 12 = 2 real experts."""


def _write(tmp_path, **changes):
    path = tmp_path / "longcat_flash.json"
    path.write_text(json.dumps(dict(SMALL, **changes)))
    return path


def _by_hand(c: dict) -> tuple[int, int]:
    """(total, active) of a LongCat-Flash config from modeling_longcat_flash.py's shapes: MLA
    (lines 328-348: q_a, its norm, q_b, kv_a_with_mqa, its norm, kv_b, o), MLP (lines 119-121),
    the router over n + zero experts (line 139), the 3-D experts (lines 166-167), four norms
    per layer (lines 452-457), embedding, untied head and final norm."""
    h, heads = c["hidden_size"], c["num_attention_heads"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    mla = (h * c["q_lora_rank"] + c["q_lora_rank"] + c["q_lora_rank"] * heads * qk
           + h * (c["kv_lora_rank"] + c["qk_rope_head_dim"]) + c["kv_lora_rank"]
           + c["kv_lora_rank"] * heads * (c["qk_nope_head_dim"] + c["v_head_dim"])
           + heads * c["v_head_dim"] * h)
    n, zero, k = c["n_routed_experts"], c["zero_expert_num"], c["moe_topk"]
    expert = 3 * h * c["expert_ffn_hidden_size"]
    shared = 2 * mla + 2 * 3 * h * c["ffn_hidden_size"] + 4 * h + h * (n + zero)
    outside = 2 * c["vocab_size"] * h + h
    layers = c["num_layers"]
    total = outside + layers * (shared + n * expert)
    active = outside + layers * (shared + k * n * expert // (n + zero))
    return total, active


@pytest.mark.parametrize("layers", [2, 1])     # 1: the layer's own lists of two are no decoder
def test_small_config_counts_like_transformers(tmp_path, layers):
    pytest.importorskip("transformers")
    import torch
    from transformers import AutoModelForCausalLM, LongcatFlashConfig

    config = dict(SMALL, num_layers=layers)
    with torch.device("meta"):
        hf = AutoModelForCausalLM.from_config(
            LongcatFlashConfig(**{k: v for k, v in config.items() if k != "model_type"}))
    theirs = sum(p.numel() for p in hf.parameters())
    total, active = _by_hand(config)
    assert theirs == total
    m = load_model(str(_write(tmp_path, num_layers=layers)))
    assert (m.n_params, m.active_params) == (total, active)
    # two blocks per decoder layer: the MoE (MLP 0 its shared expert) in the even ones
    assert m.n_layers == 2 * layers
    assert m.moe.dense_layers == tuple(range(1, 2 * layers, 2)) and m.moe.zero_experts == 4
    assert (m.moe.shared_ffn, m.ffn, m.moe.expert_ffn) == (96, 96, 32)


def test_without_zero_experts_a_token_runs_top_k(tmp_path):
    pytest.importorskip("transformers")
    m = load_model(str(_write(tmp_path, zero_expert_num=0)))
    total, _ = _by_hand(dict(SMALL, zero_expert_num=0))
    expert = 3 * SMALL["hidden_size"] * SMALL["expert_ffn_hidden_size"]
    assert m.n_params == total
    assert m.active_params == total - SMALL["num_layers"] * (8 - 3) * expert


def test_forward_gemm_flops_are_twice_the_active_matrices(tmp_path):
    pytest.importorskip("transformers")
    m = load_model(str(_write(tmp_path)))
    lf = layer_forward(m, 1)
    per_token = sum(f * c for f, c in zip(lf.gemms, lf.gemm_counts)) * m.n_layers / m.seq_len
    _, active = _by_hand(SMALL)
    h = SMALL["hidden_size"]
    norms = SMALL["num_layers"] * (4 * h + 2 * (24 + 16))     # block norms, q_a / kv_a norms
    matrices = active - 2 * SMALL["vocab_size"] * h - h - norms
    assert per_token == pytest.approx(2 * matrices, rel=1e-12)


def test_simulates_to_a_finite_step(tmp_path):
    pytest.importorskip("transformers")
    r = tierlab.simulate(load_model(str(_write(tmp_path))), "dgx-h100", "zero3-cpu")
    assert math.isfinite(r.step_time_s) and r.step_time_s > 0


@pytest.mark.parametrize("changes, key", [
    (dict(zero_expert_num=-1), "zero_expert_num: must be a whole number >= 0"),
    (dict(moe_topk=13), "moe_topk: 13 exceeds the 12 experts"),
])
def test_bad_values_refused_in_one_line_naming_the_key(tmp_path, changes, key):
    pytest.importorskip("transformers")
    with pytest.raises(ConfigError) as e:
        load_model(str(_write(tmp_path, **changes)))
    assert key in str(e.value) and "\n" not in str(e.value)
