"""XLNet's causal LM (XLNetLMHeadModel, profiles/hf_xlnet.py): counted exactly as transformers
counts it on the meta device, its relative attention timed (q, k, v, o over the tokens, r over
2 s positions, scores s x s and s x 2 s), simulated, and bad values refused in one line."""

import pytest

from tests._cli import assert_user_error, run, simulated_step_s
from tests._hfdefaults import default_config, written as write
from tierlab.errors import ConfigError
from tierlab.profiles.hf_arch import meta_param_count
from tierlab.profiles.load import load_model
from tierlab.profiles.layout import block_gemms
from tierlab.sim import flops

transformers = pytest.importorskip("transformers")

VARIANTS = {"default": {},
            "small": dict(d_model=64, n_head=4, n_layer=3, d_inner=128, vocab_size=70000),
            "uni-untied": dict(d_model=256, n_head=8, n_layer=4, d_inner=1024, vocab_size=1000,
                               attn_type="uni", tie_word_embeddings=False)}
"""Keys over transformers' default XLNetConfig (xlnet-large sizes: d_model 1024, 16 heads of
64, 24 blocks, d_inner 4096, vocab 32000)."""


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_counts_equal_transformers(tmp_path, name):
    data = default_config("xlnet", **VARIANTS[name])
    model = load_model(str(write(tmp_path, data)))
    assert model.n_params == meta_param_count(data)
    assert model.norm == "layernorm" and model.bias and model.block_norms == 2
    assert not model.final_norm and model.head_bias
    assert model.tie_embeddings == VARIANTS[name].get("tie_word_embeddings", True)


def test_default_is_xlnet_large(tmp_path):
    """360,300,800 parameters (transformers' count); mask_emb 1 x 1 x 1024 beside the table;
    each block's q/k/v/o/r 1024 x 16 x 64, r_r/r_s/r_w biases 16 x 64, seg_embed 2 x 16 x 64."""
    model = load_model(str(write(tmp_path, default_config("xlnet"))))
    assert model.n_params == 360_300_800
    assert model.embed_tensors == (("mask_emb", 1024),)
    t = model.attention_tensors
    assert [n for n, _, _ in t.matrices] == ["q", "k", "v", "o", "r"]
    assert dict(t.small_params) == {"r_r_bias": 1024, "r_s_bias": 1024, "r_w_bias": 1024,
                                    "seg_embed": 2048}
    assert (model.n_heads, model.head_dim, model.ffn, model.seq_len) == (16, 64, 4096, 512)
    assert any("mems" in n for n in model.not_modelled)
    assert any("bidirectional" in n for n in model.not_modelled)


def test_block_is_timed_with_relative_positions(tmp_path):
    """One sample of s = 512, h = 1024: q, k, v, o 2 s h^2 each, r over 2 s positions 4 s h^2,
    the FFN 2 x 2 s h f; scores ac and A V 2 s^2 h each, bd 2 s (2 s) h: 8 s^2 h in all."""
    model = load_model(str(write(tmp_path, default_config("xlnet"))))
    s, h, f = 512, 1024, 4096
    assert block_gemms(model, False)["attn.r"] == (h, h, 2.0)
    layer = flops.layer_forward(model, 1)
    assert sorted(layer.gemms) == sorted([2.0 * s * h * h] * 4 + [4.0 * s * h * h] +
                                         [2.0 * s * h * f] * 2)
    assert layer.attention == 8.0 * s * s * h


def test_uni_projects_s_positions(tmp_path):
    model = load_model(str(write(tmp_path, default_config("xlnet", **VARIANTS["uni-untied"]))))
    s, h = 512, 256
    assert block_gemms(model, False)["attn.r"] == (h, h, 1.0)
    assert flops.layer_forward(model, 1).attention == 6.0 * s * s * h


def test_simulate_runs(tmp_path):
    data = default_config("xlnet", n_layer=2)
    assert simulated_step_s(write(tmp_path, data), "dgx-a100", 512) > 0


@pytest.mark.parametrize("keys, says", [
    (dict(n_head=0), "n_head: must be >= 1"),
    (dict(d_model=64, n_head=4, d_head=8), "d_head"),
    (dict(d_model=64, n_head=3), "n_head"),
    (dict(attn_type="both"), "attn_type 'both'")])
def test_bad_value_is_one_line_and_exit_2(tmp_path, keys, says):
    path = write(tmp_path, dict(default_config("xlnet"), **keys))
    assert_user_error(run("simulate", "-m", str(path), "-H", "dgx-a100", "-c", "zero3-cpu"),
                      path.name, says)
    with pytest.raises(ConfigError):
        load_model(str(path))
