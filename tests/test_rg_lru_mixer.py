"""RecurrentGemma (Griffin: De et al. 2024, arXiv 2402.19427) read off transformers 5.25.0
modeling_recurrent_gemma.py: its recurrent blocks (RecurrentGemmaRecurrentBlock: linear_y,
linear_x, conv_1d, the RG-LRU, linear_out) as the mixer "rg_lru" (profiles/hf_rglru.py,
hf_mixer.is_rglru), its attention blocks as sliding-window softmax attention over
attention_window_size (read as tensors: o_proj alone carries a bias), the gated MLP with biases
in every block (RecurrentGemmaMlp: intermediate_size // 2 wide), the block pattern from
block_types. Each config counts as transformers counts it on the meta device, the RG-LRU's
FLOPs per token are a hand count from the config, the model simulates, and a bad key is one
exit-2 line naming it."""
import json
import math
from dataclasses import asdict

import pytest

import tierlab
from tests._cli import assert_user_error, run
from tierlab.profiles.load import load_model
from tierlab.profiles.schema import Model

pytest.importorskip("transformers")

from tests._mixercases import (assert_counted_as_transformers, assert_scan_flops,  # noqa: E402
                               write_config)
from tests.test_hybrid_arch import meta_counts  # noqa: E402

# h 64, 4 heads of 16 (head_dim = h // heads, RecurrentGemmaConfig.__post_init__), 1 kv head,
# RG-LRU width w 96 (lru_width != h), conv k 4, MLP 192 // 2 = 96, 5 blocks of the default
# pattern recurrent, recurrent, attention -> attention in block 2 only
GRIFFIN = dict(model_type="recurrent_gemma", hidden_size=64, num_hidden_layers=5,
               num_attention_heads=4, num_key_value_heads=1, intermediate_size=192,
               vocab_size=1000, attention_window_size=128, lru_width=96, conv1d_width=4)
CONFIGS = {
    "griffin": GRIFFIN,
    "hawk": dict(GRIFFIN, block_types=["recurrent"]),           # no attention block at all
    "untied_biased": dict(GRIFFIN, tie_word_embeddings=False, attention_bias=True,
                          block_types=["attention", "recurrent"]),
}
MIXER_LAYERS = {"griffin": (0, 1, 3, 4), "hawk": (0, 1, 2, 3, 4), "untied_biased": (1, 3)}

# RG-LRU per token (hf_rglru.rglru_flops), w 96, H 4 -> b 24, k 4: conv 2 x 4 x 96 = 768; the
# two block-diagonal gates 2 x (2 x 24 x 24 x 4) = 9,216 and their baddbmm biases 2 x 96 = 192;
# the recurrence's elementwise work 15 x 96 = 1,440 -> 11,616 = 96 x (2 x 4 + 4 x 24 + 17)
RG_LRU_FLOPS = 768 + 9_216 + 192 + 1_440

# google/recurrentgemma-2b's config.json: transformers' own count on the meta device
RECURRENTGEMMA_2B = dict(model_type="recurrent_gemma", hidden_size=2560, num_hidden_layers=26,
                         num_attention_heads=10, num_key_value_heads=1, vocab_size=256000,
                         intermediate_size=15360, attention_window_size=2048, lru_width=2560,
                         conv1d_width=4, block_types=["recurrent", "recurrent", "attention"],
                         logits_soft_cap=30.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                         hidden_activation="gelu_pytorch_tanh", attention_bias=False)
RECURRENTGEMMA_2B_PARAMS = 2_682_862_080


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_counted_exactly_as_transformers_counts_it(tmp_path, name):
    assert_counted_as_transformers(write_config(tmp_path, CONFIGS[name]), "rg_lru",
                                   MIXER_LAYERS[name])


def test_recurrentgemma_2b_counts_as_transformers(tmp_path):
    path = write_config(tmp_path, RECURRENTGEMMA_2B)
    model = load_model(str(path))
    assert meta_counts(path) == (RECURRENTGEMMA_2B_PARAMS, RECURRENTGEMMA_2B_PARAMS)
    assert model.n_params == RECURRENTGEMMA_2B_PARAMS
    assert len(model.mixer.layers) == 18 and model.ffn == 15360 // 2 and model.n_kv_heads == 1


def test_attention_blocks_slide_over_the_window(tmp_path):
    """RecurrentGemmaAttention (sliding_window = attention_window_size) in block 2 only; the
    recurrent blocks attend nothing; q, k, v without biases (attention_bias false), o_proj with
    one (line 217), read as tensors; the MLP's three biases (Model.bias)."""
    model = load_model(str(write_config(tmp_path, GRIFFIN)))
    assert model.attention_windows == (0, 0, 128, 0, 0)
    tensors = model.attention_tensors
    assert [(n, i, o) for n, i, o in tensors.matrices] == [
        ("q_proj", 64, 64), ("k_proj", 64, 16), ("v_proj", 64, 16), ("o_proj", 64, 64)]
    assert tensors.small_params == (("o_proj.bias", 64),)
    assert (model.n_heads, model.n_kv_heads, model.bias, model.gated_mlp, model.ffn) == \
        (4, 1, True, True, 96)


def test_rg_lru_tensors_are_the_recurrent_blocks(tmp_path):
    """RecurrentGemmaRecurrentBlock.__init__: linear_y, linear_x h -> w, linear_out w -> h
    (GEMMs); their biases, the depthwise conv (w x 1 x k, bias w) and the RG-LRU's
    recurrent_param w, two gates H x b x b and their biases H x b (small parameters)."""
    model = load_model(str(write_config(tmp_path, GRIFFIN)))
    assert model.mixer.matrices == (("linear_y", 64, 96), ("linear_x", 64, 96),
                                    ("linear_out", 96, 64))
    assert dict(model.mixer.small_params) == {
        "linear_y.bias": 96, "linear_x.bias": 96, "linear_out.bias": 64,
        "conv_1d.weight": 96 * 4, "conv_1d.bias": 96, "rg_lru.recurrent_param": 96,
        "rg_lru.input_gate_weight": 4 * 24 * 24, "rg_lru.input_gate_bias": 96,
        "rg_lru.recurrent_gate_weight": 4 * 24 * 24, "rg_lru.recurrent_gate_bias": 96}
    assert model.mixer.mlp and not model.mixer.attention


def test_rg_lru_flops_per_token_are_the_hand_count(tmp_path):
    assert_scan_flops(write_config(tmp_path, GRIFFIN), RG_LRU_FLOPS)


def test_json_round_trip(tmp_path):
    model = load_model(str(write_config(tmp_path, GRIFFIN)))
    back = Model(**json.loads(json.dumps(asdict(model))))
    assert back == model and back.n_params == model.n_params


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_simulates_a_finite_step(tmp_path, name):
    result = tierlab.simulate(str(write_config(tmp_path, CONFIGS[name])), "h200-gen5",
                              "zero3-cpu", seq=256, ranges=False)
    assert math.isfinite(result.step_time_s) and result.step_time_s > 0


@pytest.mark.parametrize("key, value", [("block_types", ["recurrent", "mamba"]),
                                        ("block_types", []),
                                        ("layer_types", ["linear_attention"] * 5),
                                        ("lru_width", -4),
                                        ("lru_width", 90),
                                        ("conv1d_width", 0),
                                        ("attention_window_size", -1)])
def test_a_bad_key_is_one_line_naming_it(tmp_path, key, value):
    path = write_config(tmp_path, dict(GRIFFIN, **{key: value}))
    assert_user_error(run("memory", "-m", str(path), "-H", "dgx-a100"), str(path), f"{key}:")
