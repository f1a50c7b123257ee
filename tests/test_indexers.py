"""Sparse attention indexers beyond DeepSeek-V3.2's (profiles/hf_indexer.py), transformers 5.25.0:
HY-V4 (`hy_v4`: DeepSeek-V3.2's indexer in the layers config.indexer_types calls "full", the
"shared" ones reusing the last full one's top-k), dots3-note (`dots3_note`, its text decoder
`dots3_note_text`: the indexer only in `indexed_attention` layers, MLA of other sizes in the
sliding ones) and Kolibri 1.1 (`kolibri1_1`: a weightless indexer scoring the attention's own
first index_num_heads query heads, in `indexed_attention` layers, some of which read another
layer's keys and values). Counted as transformers counts them on the meta device (HY-V4 less its
hyper-connections, named), each layer's indexer read, its scores timed forward only, a simulated
step, and a malformed key one line naming it."""
import json
from pathlib import Path

import pytest

from tests._cli import assert_user_error, run, simulated_step_s
from tests.test_hybrid_arch import meta_counts
from tierlab.profiles.load import load_model

transformers = pytest.importorskip("transformers")

from tierlab.sim.flops import layer_forward  # noqa: E402

FILLED = Path(__file__).parent / "data" / "hf_configs" / "filled"
SEQ = 256
BASE = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, vocab_size=1000,
            pad_token_id=0)
MLA = dict(q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
           v_head_dim=12, moe_intermediate_size=32, num_experts_per_tok=2, n_routed_experts=4,
           index_n_heads=4, index_head_dim=16, index_topk=32)
SMALL = {
    # 3 blocks: indexer_types full, full, shared (configuration_hy_v4.py: layer 0 and every
    # (i - 1) % 4 == 0); a vocabulary of 32,000 keeps the hyper-connections below 0.5 %
    "hy_v4": dict(BASE, **MLA, num_hidden_layers=3, vocab_size=32000),
    # 4 blocks: indexed_attention 0, 1, sliding_attention 2, 3 (configuration_dots3_note.py:
    # i < 2 or i % 4 == 1), the sliding ones MLA of 2 heads (the swa_ keys)
    "dots3_note_text": dict(BASE, **MLA, num_hidden_layers=4, num_key_value_heads=4,
                            shared_experts_intermediate_size=32, head_dim=24, sliding_window=32,
                            swa_num_attention_heads=2, swa_num_key_value_heads=2,
                            swa_q_lora_rank=32, swa_kv_lora_rank=16, swa_head_dim=24,
                            swa_qk_nope_head_dim=16, swa_v_head_dim=12),
    # 10 blocks: indexed_attention 4 and 9 ((i + 1) % 5 == 0), 9 reading 4's keys and values
    # (configuration_kolibri1_1.py's default kv_source_layers); 2 index heads of 16
    "kolibri1_1": dict(BASE, num_hidden_layers=10, num_key_value_heads=2, head_dim=16,
                       index_num_heads=2, index_topk=32, index_pool_size=64,
                       index_compression=16, mlp_only_intermediate_size=128,
                       moe_intermediate_size=32, shared_expert_intermediate_size=32,
                       num_experts=4, num_experts_per_tok=2, sliding_window=32),
}
INDEXERS = {"hy_v4": {0: (4, 16, 32), 1: (4, 16, 32)},
            "dots3_note_text": {0: (4, 16, 32), 1: (4, 16, 32)},
            "kolibri1_1": {4: (2, 16, 32), 9: (2, 16, 32)}}
"""Block -> AttentionTensors.indexer (heads, head width, top-k); every other block has none."""


def _write(tmp_path, kind: str, **extra):
    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps(dict(SMALL[kind], model_type=kind, **extra)))
    return path


def _default(tmp_path, kind: str):
    from transformers import AutoConfig

    path = tmp_path / f"{kind}.json"
    path.write_text(AutoConfig.for_model(kind).to_json_string())
    return path


def hyper_connections(config: dict) -> int:
    """HY-V4's hyper-connections, which tierlab neither counts nor times (named in
    not_modelled): per block attn_hc and ffn_hc (modeling_hy_v4.py HYV4HyperConnection lines
    601-611: fn 2n x n h, base 2n, scale 2), the model's hc_head (HYV4HyperHead lines 639-646:
    hc_fn n x n h, hc_base n, hc_scale 1); n = hc_mult, h = hidden_size."""
    n, h = config.get("hc_mult", 4), config["hidden_size"]
    return config["num_hidden_layers"] * 2 * (2 * n * n * h + 2 * n + 2) + n * n * h + n + 1


@pytest.mark.parametrize("kind", ["hy_v4", "dots3_note", "dots3_note_text", "kolibri1_1"])
def test_the_default_configs_count_as_transformers(tmp_path, kind):
    """Defaults, total and active: dots3-note and Kolibri 1.1 exactly; HY-V4 less exactly its
    hyper-connections (58,278,193,133 - 6,173,357; -0.011 %, active -0.12 %), named."""
    path = _default(tmp_path, kind)
    model = load_model(str(path))
    total, active = meta_counts(path)
    gap = hyper_connections(json.loads(path.read_text())) if kind == "hy_v4" else 0
    assert (model.n_params, model.active_params) == (total - gap, active - gap)
    assert gap < 5e-3 * active
    if kind == "hy_v4":
        assert gap == 6_173_357
        assert any("attn_hc" in n for n in model.not_modelled)
        assert any("hc_head" in n for n in model.not_modelled)


@pytest.mark.parametrize("kind", sorted(SMALL))
def test_each_indexed_layer_is_read_with_its_indexer(tmp_path, kind):
    model = load_model(str(_write(tmp_path, kind)))
    read = {i: model.shaped(i).attention_tensors.indexer for i in range(model.n_layers)
            if model.shaped(i).attention_tensors is not None and
            model.shaped(i).attention_tensors.indexer}
    assert read == INDEXERS[kind]


@pytest.mark.parametrize("kind", sorted(SMALL))
def test_small_configs_count_as_transformers_and_simulate(tmp_path, kind):
    path = _write(tmp_path, kind)
    model = load_model(str(path))
    total, active = meta_counts(path)
    gap = hyper_connections(SMALL[kind]) if kind == "hy_v4" else 0
    assert (model.n_params, model.active_params) == (total - gap, active - gap)
    simulated_step_s(path, "dgx-a100", SEQ)


def test_hy_v4_runs_its_indexer_only_in_full_layers(tmp_path):
    """Blocks 0 and 1 run HYV4Indexer under torch.no_grad (modeling_hy_v4.py line 193): its GEMMs
    wq_b (q_lora 32 -> 4 x 16), wk (64 -> 16), weights_proj (64 -> 4) and its scores, 2 x s x 4
    heads x (16 + 1) per token (lines 246-256); block 2 ("shared") reuses block 1's top-k."""
    model = load_model(str(_write(tmp_path, "hy_v4")), seq_len=SEQ)
    gemms = 2.0 * SEQ * (32 * 64 + 64 * 16 + 64 * 4)
    scores = 2.0 * SEQ * SEQ * 4 * (16 + 1)
    assert layer_forward(model, 1).forward_only_flops == \
        pytest.approx((gemms + scores) * 2 / 3, rel=1e-12)


def test_kolibri_scores_with_the_attentions_heads_forward_only(tmp_path):
    """Kolibri1_1Indexer holds no weights (modeling_kolibri1_1.py lines 77-88): no indexer GEMM;
    its scores run in blocks 4 and 9 of 10, index_num_heads 2 query heads of head_dim 16
    against every key, timed as DeepSeek-V3.2's (2 x s x 2 x (16 + 1) per token), and what it
    selects beyond that is named."""
    model = load_model(str(_write(tmp_path, "kolibri1_1")), seq_len=SEQ)
    lf = layer_forward(model, 1)
    assert lf.forward_only == ((2.0 * SEQ * SEQ * 2 * (16 + 1), 2 / 10),)
    assert any("index_pool_size = 64" in n for n in model.not_modelled)


@pytest.mark.parametrize("kind, key, value, said", [
    ("hy_v4", "indexer_types", ["shared", "full", "full"], "indexer_types: layer 0 is 'shared'"),
    ("kolibri1_1", "index_num_heads", 0, "index_num_heads: must be >= 1"),
])
def test_a_malformed_indexer_key_is_one_line_naming_it(tmp_path, kind, key, value, said):
    path = _write(tmp_path, kind, **{key: value})
    assert_user_error(run("simulate", "-m", str(path)), str(path), said)


def test_qwen4_exp_indexer_top_k_is_the_tokens_its_selection_keeps():
    """Qwen4-Exp's QSA indexer (modeling_qwen4_exp.py Qwen4ExpTextQSAIndexer, lines 769-886),
    built from the filled config's figures (tests/data/hf_configs/filled/qwen4_exp_text.json)
    and run on CPU at a budget of 8 tokens in blocks of 4: a query that sees 32 keys (8
    complete blocks) keeps block_topk = 8 // 4 = 2 blocks, 8 keys; one that sees 34 keeps them
    plus its incomplete tail of 2 (lines 868-874). indexer_of's top-k is that budget."""
    import torch
    from transformers import AutoConfig
    from transformers.models.qwen4_exp.modeling_qwen4_exp import Qwen4ExpTextQSAIndexer

    from tierlab.profiles.hf_indexer import indexer_of

    filled = json.loads((FILLED / "qwen4_exp_text.json").read_text())
    config = AutoConfig.for_model("qwen4_exp_text", **{
        k: v for k, v in filled.items() if k not in ("model_type", "architectures")})
    with torch.device("meta"):
        full = Qwen4ExpTextQSAIndexer(config, layer_idx=3)
    assert indexer_of(full, config.head_dim) == ((4, 128, 2048), "")
    assert full.block_topk * full.compress_ratio == config.indexer_budget

    config.hidden_size, config.indexer_budget, config.indexer_head_dim = 32, 8, 16
    small = Qwen4ExpTextQSAIndexer(config, layer_idx=3)
    heads, width, top_k = indexer_of(small, config.head_dim)[0]
    s = 34
    causal = torch.ones(s, s, dtype=torch.bool).tril()[None, None]
    rope = (torch.ones(1, s, width), torch.zeros(1, s, width))
    with torch.no_grad():
        mask = small(torch.randn(1, s, config.hidden_size), rope, causal, None)
    kept = mask[0, 0].sum(-1)
    assert (heads, width, top_k) == (4, 16, 8)
    assert kept[31] == top_k and kept[33] == top_k + 34 % 4


def test_qwen4_exp_counts_its_gated_residuals_in_the_blocks():
    """Qwen4-Exp's blocks hold no input / post-attention norm: before the attention and the MLP
    a gated residual (Qwen4ExpTextGatedResidual, modeling_qwen4_exp.py lines 1112-1140,
    1390-1391) of hc_count = 4 streams and rank hc_lowrank = 320 over the 4 x 2,048 wide
    residual: its hc_norm (8,192) is one of the block's two norms, its down (8,192 x 320), up
    (320 x 8,192) and inject (8,192 x 4) are GEMMs of the block; the model's
    hyper_connection_mixer (line 1496: no inject) is the head's, its hc_norm the final norm."""
    model = load_model(str(FILLED / "qwen4_exp_text.json"))
    wide = 4 * 2048
    assert model.hyper_connections == (4, 320) and model.block_norms == 2
    mats, small = model.layer_matrices(0), model.layer_small_params(0)
    for side in ("attn", "mlp"):
        assert mats[f"{side}_hyper_connection.input_mix_weight_down"] == (wide, 320)
        assert mats[f"{side}_hyper_connection.input_mix_weight_up"] == (320, wide)
        assert mats[f"{side}_hyper_connection.block_inject_weight"] == (wide, 4)
        assert small[f"{side}_hyper_connection.hc_norm"] == wide
    per_block = sum(i * o for n, (i, o) in mats.items() if "hyper_connection" in n) + \
        sum(k for n, k in small.items() if "hyper_connection" in n)
    assert per_block == 2 * (2 * wide * 320 + wide * 4 + wide) == 10_567_680
    assert not any(n in small for n in ("input_norm", "post_attention_norm"))
    # transformers' count, as tests/test_filled_defaults.py builds it: 67,334,739,072 total,
    # 4,168,520,832 active; 40 blocks x 10,567,680 + the mixer's 5,251,072 are 0.64 % of it
    assert (model.n_params, model.active_params) == (67_334_739_072, 4_168_520_832)
    assert any(n.startswith("hyper-connections (Qwen4ExpTextGatedResidual")
               for n in model.not_modelled)
