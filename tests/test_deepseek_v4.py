"""DeepSeek-V4's attention (transformers 5.25.0 models/deepseek_v4/modeling_deepseek_v4.py, read
by profiles/hf_compressed.py through hf_modules.tensor_attention): q LoRA, one shared k = v head,
a grouped low-rank output projection (o_a_proj, o_b_proj), sinks, and per layer a compressor of
the KV (CSA: every 4 tokens, with a Lightning Indexer; HCA: every 128) whose entries every query
scores beside its sliding window (AttentionTensors.compress_rate)."""
import json

import pytest

from tests._cli import assert_user_error, run, simulated_step_s
from tests.test_hybrid_arch import meta_counts
from tierlab.profiles.load import load_model
from tierlab.sim.flops import forward_only, layer_forward

SEQ = 256
HIDDEN, HEADS, HEAD_DIM, WINDOW, HC = 256, 8, 64, 32, 2
INDEX_HEADS, INDEX_DIM = 4, 32
SMALL = dict(model_type="deepseek_v4", vocab_size=16000, hidden_size=HIDDEN,
             moe_intermediate_size=128, num_hidden_layers=5, num_attention_heads=HEADS,
             num_key_value_heads=1, head_dim=HEAD_DIM, q_lora_rank=96, num_experts_per_tok=2,
             n_routed_experts=8, n_shared_experts=1, o_groups=4, o_lora_rank=48,
             index_n_heads=INDEX_HEADS, index_head_dim=INDEX_DIM, index_topk=16,
             sliding_window=WINDOW, hc_mult=HC, max_position_embeddings=4096)
# configuration_deepseek_v4.py __post_init__: 2 HCA layers, then CSA at odd i of the rest
HCA, CSA = 128, 4       # default compress_rates
RATES = (HCA, HCA, HCA, CSA, HCA)


def _write(tmp_path, **extra):
    pytest.importorskip("transformers")
    path = tmp_path / "deepseek_v4.json"
    path.write_text(json.dumps(dict(SMALL, **extra)))
    return path


def hyper_connection_params(layers: int, hidden: int, n: int) -> int:
    """mHC parameters, not modelled (Model.not_modelled): per block attn_hc and ffn_hc, each
    fn ((2 + n) n x n hidden), base ((2 + n) n), scale (3) (modeling_deepseek_v4.py
    DeepseekV4HyperConnection.__init__, lines 944-949); the model's hc_head: hc_fn (n x n hidden),
    hc_base (n), hc_scale (1) (DeepseekV4HyperHead.__init__, lines 1006-1008)."""
    mix = (2 + n) * n
    return layers * 2 * (mix * n * hidden + mix + 3) + n * n * hidden + n + 1


def test_counts_like_transformers_less_the_hyper_connections_and_simulates(tmp_path):
    path = _write(tmp_path)
    model = load_model(str(path), seq_len=SEQ)
    hc = hyper_connection_params(5, HIDDEN, HC)
    total, active = meta_counts(path)
    assert (model.n_params + hc, model.active_params + hc) == (total, active)
    assert any("attn_hc" in n for n in model.not_modelled)
    simulated_step_s(path, "dgx-h100", SEQ)


def test_grouped_output_projection_and_compressor_are_gemms(tmp_path):
    model = load_model(str(_write(tmp_path)), seq_len=SEQ)
    hca = {n: (i, o) for n, i, o in model.shaped(0).attention_tensors.matrices}
    # o_a_proj: 4 groups of 8 x 64 / 4 = 128 -> 48 each (a Linear 128 x 192); o_b_proj 192 -> 256
    assert hca["o_a_proj"] == (HEADS * HEAD_DIM // 4, 4 * 48)
    assert hca["o_b_proj"] == (4 * 48, HIDDEN)
    assert hca["compressor.kv_proj"] == (HIDDEN, HEAD_DIM)              # HCA: head_dim
    csa = {n: (i, o) for n, i, o in model.shaped(3).attention_tensors.matrices}
    assert csa["compressor.kv_proj"] == (HIDDEN, 2 * HEAD_DIM)          # CSA: Ca and Cb
    assert csa["compressor.indexer.q_b_proj"] == (96, INDEX_HEADS * INDEX_DIM)
    assert forward_only(model, 3, "attn.compressor.indexer.q_b_proj")
    assert not forward_only(model, 3, "attn.compressor.kv_proj")
    assert [model.shaped(i).attention_tensors.compress_rate for i in range(5)] == list(RATES)


def test_scores_run_over_the_window_and_the_compressed_entries(tmp_path):
    model = load_model(str(_write(tmp_path)), seq_len=SEQ)
    lf = layer_forward(model, 1)
    # per query: min(window, s) local keys + s // m compressed entries, 8 heads of k = v 64 wide
    keys = [min(WINDOW, SEQ) + SEQ // m for m in RATES]         # 34, 34, 34, 96, 34
    hand = sum(2 * SEQ * k * HEADS * (HEAD_DIM + HEAD_DIM) for k in keys) / 5
    assert lf.attention == pytest.approx(hand, rel=1e-12)
    # the CSA layer's indexer: 2 x s // 4 entries x 4 heads x (32 + 1) per token, forward only
    indexer = 2 * SEQ * (SEQ // CSA) * INDEX_HEADS * (INDEX_DIM + 1) / 5
    assert any(f * n == pytest.approx(indexer, rel=1e-12) for f, n in lf.forward_only)


@pytest.mark.parametrize("extra, fragment", [
    (dict(o_groups=3), "o_groups must divide num_attention_heads x head_dim"),
    (dict(compress_rates={"compressed_sparse_attention": 0,
                          "heavily_compressed_attention": 128}), "compress_rates"),
])
def test_a_bad_value_is_one_line_naming_the_key(tmp_path, extra, fragment):
    path = _write(tmp_path, **extra)
    assert_user_error(run("simulate", "-m", str(path)), fragment)
