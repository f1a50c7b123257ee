"""FLOP counts against Megatron-LM's closed form and the efficiency curve."""
from dataclasses import replace

import pytest

from tierlab.profiles.schema import GPU, Model
from tierlab.sim import flops

GPT = Model(name="gpt", n_layers=4, hidden=1024, ffn=4096, n_heads=16, n_kv_heads=16, vocab=5000,
            seq_len=512, gated_mlp=False, norm="layernorm", bias=True)


def test_layer_gemms_are_24_h2_per_token():
    lf = flops.layer_forward(GPT, micro_batch=2)
    tokens, h = 2 * 512, 1024
    assert sum(lf.gemms) == pytest.approx(24 * tokens * h * h)
    assert lf.attention == pytest.approx(4 * tokens * 512 * h)


def test_step_flops_match_megatron_formula():
    # Narayanan et al. 2021 eq. 3: 96 B s l h^2 (1 + s / 6h + V / (16 l h)) with recompute
    B, s, l, h, V = 2, 512, 4, 1024, 5000
    megatron = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    assert flops.step_flops(GPT, 2, 1, checkpointing=True) == pytest.approx(megatron)


def test_no_checkpointing_is_three_forwards_and_accumulation_scales():
    fwd = flops.layer_forward(GPT, 1).total * GPT.n_layers + flops.logits_forward(GPT, 1)
    assert flops.step_flops(GPT, 1, 1, checkpointing=False) == pytest.approx(3 * fwd)
    assert flops.step_flops(GPT, 1, 3) == pytest.approx(3 * flops.step_flops(GPT, 1, 1))


def test_gqa_shrinks_kv_projections_not_attention():
    llama = replace(GPT, gated_mlp=True, n_kv_heads=16)
    gqa = replace(llama, n_kv_heads=4)
    a, b = flops.layer_forward(llama, 1), flops.layer_forward(gqa, 1)
    assert a.attention == b.attention
    # k and v: h x h -> h x h/4: saves 2 x 2 x tokens x h x 3h/4
    assert a.total - b.total == pytest.approx(2 * 2 * 512 * 1024 * 768)


def test_efficiency_curve_interpolates_in_log_and_clamps():
    gpu = GPU(name="g", hbm_bytes=1e9, hbm_bandwidth_Bps=1e12, peak_flops={"fp32": 1e12},
              matmul_efficiency=((1e8, 0.2), (1e10, 0.6)), cuda_context_bytes=1e8)
    assert flops.matmul_efficiency(gpu, 1e6) == 0.2
    assert flops.matmul_efficiency(gpu, 1e9) == pytest.approx(0.4)
    assert flops.matmul_efficiency(gpu, 1e13) == 0.6
    assert flops.gemm_seconds(gpu, "fp16", 1e10) == pytest.approx(1e10 / (1e12 * 0.6))
