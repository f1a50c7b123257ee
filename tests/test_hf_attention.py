"""Softmax attention read as tensors (profiles/hf_modules.py tensor_attention,
Model.attention_tensors): gated, low-rank (MLA variants), extra projections, counted exactly as transformers builds them and
timed by what they multiply; linear attention refused in one line; malformed sizes one line."""
import json
import math

import pytest

from tests._cli import assert_user_error, run, simulated_step_s
from tests.test_hybrid_arch import meta_counts
from tierlab.profiles.load import load_model
from tierlab.profiles.load import load_hardware
from tierlab.sim.flops import (block_seconds, forward_only_seconds, layer_forward,
                               logits_forward, run_gemms, step_flops)

SEQ = 256
BASE = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=1000, num_hidden_layers=2)
MLA = dict(q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
           v_head_dim=12, num_key_value_heads=4)
MOE = dict(moe_intermediate_size=32, num_experts_per_tok=2)
SMALL = {
    # MLA with q and kv LoRA (modeling_minicpm3.py MiniCPM3Attention, modeling_youtu.py)
    "minicpm3": MLA,
    "youtu": MLA,
    # MLA + MoE with a dense first layer (modeling_glm4_moe_lite.py, modeling_sarvam_mla.py)
    "glm4_moe_lite": dict(MLA, **MOE, n_routed_experts=4, first_k_dense_replace=1),
    "sarvam_mla": dict(MLA, **MOE, n_routed_experts=4, first_k_dense_replace=1),
    # a per-head output gate (gate_proj, gate_bias) beside q/k/v/o (modeling_beam.py)
    "beam": dict(MOE, head_dim=16, num_experts=4, n_group=1, topk_group=1),
}


def _write(tmp_path, kind: str, **extra):
    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps(dict(BASE, model_type=kind, **{**SMALL.get(kind, {}), **extra})))
    return path


def _counted_and_simulated(model, path) -> None:
    """transformers' meta count, total and active, and a finite simulated step."""
    assert (model.n_params, model.active_params) == meta_counts(path)
    res = run("simulate", "-m", str(path), "-H", "dgx-a100", "-c", "zero3-cpu", "--seq",
              str(SEQ), "--json")
    assert res.exit_code == 0, res.output
    step = json.loads(res.output)["step_time_s"]
    assert math.isfinite(step) and step > 0


def _known(kind: str) -> None:
    pytest.importorskip("transformers")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if kind not in CONFIG_MAPPING:
        pytest.skip(f"this transformers has no {kind!r}")


@pytest.mark.parametrize("kind", sorted(SMALL))
def test_tensor_attention_counts_like_transformers_and_simulates(tmp_path, kind):
    _known(kind)
    path = _write(tmp_path, kind)
    model = load_model(str(path))
    assert model.attention_tensors is not None
    _counted_and_simulated(model, path)


def test_an_extra_attention_projection_is_a_gemm_of_its_own(tmp_path):
    """Beam's gate_proj (hidden -> heads x head_dim) beside q, k, v, o: 2 x in x out FLOPs per
    token each, the scores 2 s (heads x (qk + v)) per token."""
    _known("beam")
    model = load_model(str(_write(tmp_path, "beam")), seq_len=SEQ)
    gemms = run_gemms(model, 0)
    attn = {n: (i, o) for n, (i, o, _) in gemms.items() if n.startswith("attn.")}
    assert attn == {"attn.q_proj": (64, 64), "attn.k_proj": (64, 32), "attn.v_proj": (64, 32),
                    "attn.o_proj": (64, 64), "attn.gate_proj": (64, 64)}
    lf = layer_forward(model, micro_batch=1)
    assert sum(f * n for f, n in zip(lf.gemms, lf.counts)) == pytest.approx(
        sum(2.0 * SEQ * i * o * share for i, o, share in gemms.values()))
    assert lf.attention == 2.0 * SEQ * SEQ * 4 * (16 + 16)
    assert "attn.gate_bias" in model.layer_small_params(0)


def test_mla_scores_take_the_modules_qk_and_v_head_widths(tmp_path):
    """MiniCPM3Attention.forward: q and k of qk_nope + qk_rope = 24, v of v_head_dim = 12; the
    low-rank projections each a GEMM (q_a 64 -> 32, q_b 32 -> 4 x 24, kv_a 64 -> 16 + 8,
    kv_b 16 -> 4 x (16 + 12), o 4 x 12 -> 64)."""
    _known("minicpm3")
    model = load_model(str(_write(tmp_path, "minicpm3")), seq_len=SEQ)
    assert (model.n_heads, model.head_dim, model.attention_tensors.v_head_dim) == (4, 24, 12)
    attn = {n: (i, o) for n, (i, o, _) in run_gemms(model, 0).items() if n.startswith("attn.")}
    assert attn == {"attn.q_a_proj": (64, 32), "attn.q_b_proj": (32, 96),
                    "attn.kv_a_proj_with_mqa": (64, 24), "attn.kv_b_proj": (16, 112),
                    "attn.o_proj": (48, 64)}
    assert layer_forward(model, micro_batch=1).attention == 2.0 * SEQ * SEQ * 4 * (24 + 12)


def test_linear_attention_is_never_timed_as_softmax(tmp_path):
    """RWKV's time mixing (modeling_rwkv.py RwkvSelfAttention) keeps a recurrent state, no score
    matrix: it is read as the mixer whose computation it runs (hf_mixer.is_rwkv; its counts and
    FLOPs in tests/test_recurrent_mixers.py), and a module of a linear-attention class that no
    mixer matches (an edited copy) is refused in one line naming it, never taken for softmax."""
    from tierlab.profiles.hf_modules import Unmodelled, not_softmax

    _known("rwkv")
    path = tmp_path / "rwkv.json"
    path.write_text(json.dumps(dict(model_type="rwkv", hidden_size=64, num_hidden_layers=2,
                                    vocab_size=1000, attention_hidden_size=64,
                                    intermediate_size=128)))
    model = load_model(str(path), seq_len=SEQ)
    assert model.mixer.kind == "rwkv" and model.mixer.layers == (0, 1)

    class RwkvSelfAttention:        # the class name alone: no forward any mixer matches
        pass

    with pytest.raises(Unmodelled, match=r"linear attention \(RwkvSelfAttention: a recurrent"):
        not_softmax(RwkvSelfAttention())


@pytest.mark.parametrize("kind, key, value, fragment", [
    ("minicpm3", "v_head_dim", 0, "v_head_dim = 0"),
    ("beam", "head_dim", -4, "head_dim"),
    ("minicpm3", "v_head_dim", -1, "v_head_dim"),
    ("youtu", "qk_rope_head_dim", -8, "qk_rope_head_dim"),
])
def test_malformed_attention_sizes_are_one_line_naming_the_key(tmp_path, kind, key, value,
                                                                fragment):
    _known(kind)
    path = _write(tmp_path, kind, **{key: value})
    assert_user_error(run("simulate", "-m", str(path)), fragment)


def test_blocks_run_in_loops_are_read_as_loops(tmp_path):
    """Dory runs its recurrent layers n_recurrent_loops times (modeling_dory.py DoryModel.forward:
    `for loop_idx in range(n_loops)`): read as Model.loops, each block's weights counted once
    and timed per pass (tests/test_looped_blocks.py). Hidden 256: Dory's per-block nGPT scales
    (lambda_1/2, suv_gate/up), which no field holds, stay within the count check."""
    _known("dory")
    path = _write(tmp_path, "dory", hidden_size=256, intermediate_size=512, head_dim=64,
                  num_hidden_layers=3, n_input_layers=1, n_output_layers=1,
                  n_recurrent_layers=1, n_recurrent_loops=2)
    model = load_model(str(path))
    assert [(l.layers, l.passes) for l in model.loops] == [((1,), 2)]
    assert model.forward_order == ((0, True), (1, True), (1, True), (2, True))
    total, _ = meta_counts(path)
    assert total - model.n_params == 3 * (2 * 256 + 2 * 512) + 1000     # + lm_head.logit_scale
    simulated_step_s(path, "dgx-a100", SEQ)


DSA = dict(MLA, **MOE, n_routed_experts=4, first_k_dense_replace=1, n_group=1, topk_group=1,
           index_n_heads=4, index_head_dim=16, index_topk=32)
"""DeepSeek sparse attention (modeling_deepseek_v32.py DeepseekV32Indexer and its copy in
modeling_glm_moe_dsa.py): MLA + a top-k indexer of 4 heads of 16. (AXK2's copy loads from its
default config within 0.5 %, not exactly: its norms hold small MLPs tierlab does not list.)"""


@pytest.mark.parametrize("kind", ["deepseek_v32", "glm_moe_dsa"])
def test_sparse_attention_counts_like_transformers_and_simulates(tmp_path, kind):
    _known(kind)
    path = _write(tmp_path, kind, **DSA)
    model = load_model(str(path))
    assert model.attention_tensors.indexer == (4, 16, 32)
    _counted_and_simulated(model, path)


def test_the_indexer_runs_forward_only(tmp_path):
    """DeepseekV32Indexer.forward runs under torch.no_grad: its GEMMs (wq_b q_lora 32 -> 4 x 16,
    wk 64 -> 16, weights_proj 64 -> 4) and its scores (2 s x 4 heads x (16 + 1) per token) are
    forward work with no backward; the MLA attention's are trained as before."""
    _known("deepseek_v32")
    model = load_model(str(_write(tmp_path, "deepseek_v32", **DSA)), seq_len=SEQ)
    lf = layer_forward(model, micro_batch=1)
    gemms = 2.0 * SEQ * (32 * 64 + 64 * 16 + 64 * 4)
    scores = 2.0 * SEQ * SEQ * 4 * (16 + 1)
    assert lf.forward_only_flops == pytest.approx(gemms + scores, rel=1e-12)
    from_step = step_flops(model, 1, checkpointing=False) - 3.0 * (
        lf.total - lf.forward_only_flops) * model.n_layers - 3.0 * logits_forward(model, 1)
    assert from_step == pytest.approx(lf.forward_only_flops * model.n_layers, rel=1e-9)
    fwd, bwd = block_seconds(load_hardware("dgx-a100").gpu, "bf16", lf)
    kernels = forward_only_seconds(load_hardware("dgx-a100").gpu, "bf16", lf)
    assert kernels > 0 and bwd == pytest.approx(2.0 * (fwd - kernels), rel=1e-9)


@pytest.mark.parametrize("key, value", [("index_n_heads", 0), ("index_head_dim", -4),
                                        ("index_topk", 0)])
def test_a_malformed_indexer_size_is_one_line_naming_the_key(tmp_path, key, value):
    _known("deepseek_v32")
    path = _write(tmp_path, "deepseek_v32", **dict(DSA, **{key: value}))
    assert_user_error(run("simulate", "-m", str(path)), str(path), f"{key}: must be >= 1")
