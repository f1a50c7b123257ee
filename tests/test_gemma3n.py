"""Gemma 3n's text decoder (model_types gemma3n_text and gemma3n; profiles/hf_altup.py) read off
transformers 5.25.0 modeling_gemma3n.py: each block's AltUp (Gemma3nTextAltUp: router,
prediction and correction coefficients, output scale, router norm) and laurel (two low-rank
Linears and a norm) read as tensors of its attention, the model's altup_projections with the
first block and altup_unembed_projections with the last, the kv-sharing layers' attention
without k and v (none are built), Gemma 4's per-layer inputs. Counted exactly as transformers
counts the text decoder on the meta device (default and a real E2B config), the GEMMs per token
a hand count, it simulates, and a bad key is one exit-2 line naming it."""
import json
import math
from dataclasses import asdict

import pytest
import yaml

import tierlab
from tests._cli import assert_user_error, run, simulated_step_s
from tests._simhelp import scenario
from tierlab.profiles.load import load_model
from tierlab.profiles.schema import Model, PerLayerInputs

transformers = pytest.importorskip("transformers")

from tierlab.profiles.hf_arch import meta_param_count  # noqa: E402 (needs transformers)
from tierlab.sim import flops  # noqa: E402
from tierlab.sim.layout import param_layout  # noqa: E402

# h 64, n 4 AltUp streams (the default), laurel rank r 4, 6 blocks (full attention in 2 and 5),
# the last 2 reuse the keys and values of blocks 1 (sliding) and 2 (full)
H, N, R, L, W = 64, 4, 4, 6, 8
SMALL = dict(model_type="gemma3n_text", hidden_size=H, intermediate_size=128,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=1000,
             vocab_size_per_layer_input=500, hidden_size_per_layer_input=W, num_hidden_layers=L,
             num_kv_shared_layers=2, laurel_rank=R, sliding_window=32,
             layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2)
# per block: AltUp h + n^2 + n^3 + h n + h = 464, laurel 2 h r + h = 576; the model's
# projections 2 (n - 1) h^2 = 24,576 -> 6 x 1,040 + 24,576 = 30,816 beside what Gemma 4's
# reading counts (attention, MLP, norms, per-layer inputs, embedding)
ALTUP_PARAMS = L * ((H + N * N + N ** 3 + H * N + H) + (2 * H * R + H)) + 2 * (N - 1) * H * H
REAL = "tests/data/hf_configs/gemma3n/gemma-3n-e2b-it.json"
ORIGINS = "tests/data/hf_configs/gemma3n/ORIGINS.yaml"
# transformers 5.25.0's Gemma3nForCausalLM of the file's text_config, meta device
E2B_PARAMS = 4_435_182_688
# Gemma3nTextConfig's defaults (the E4B's sizes: 35 blocks, MLP 16,384, 15 kv-sharing layers)
DEFAULT_PARAMS = 6_835_235_568


def _write(tmp_path, **extra):
    path = tmp_path / "gemma3n-small.json"
    path.write_text(json.dumps({**SMALL, **extra}))
    return path


def _default(tmp_path, kind):
    from transformers import AutoConfig

    path = tmp_path / f"{kind}.json"
    path.write_text(AutoConfig.for_model(kind).to_json_string())
    return path


@pytest.mark.parametrize("kind", ["gemma3n_text", "gemma3n"])
def test_the_default_config_counts_as_transformers_counts_it(tmp_path, kind):
    path = _default(tmp_path, kind)
    model = load_model(str(path))
    theirs = meta_param_count(json.loads(path.read_text()))
    assert (model.n_params, model.active_params) == (theirs, theirs) == (DEFAULT_PARAMS,) * 2


def test_the_small_config_counts_exactly_with_altup_and_laurel(tmp_path):
    path = _write(tmp_path)
    model = load_model(str(path))
    assert model.n_params == model.active_params == meta_param_count(SMALL)
    assert model.per_layer_inputs == PerLayerInputs(width=W, vocab=500)
    without = meta_param_count(dict(SMALL, altup_num_inputs=1, laurel_rank=1))
    # altup_num_inputs 1: no projections, AltUp h + 1 + 1 + h + h; laurel rank 1: 2 h + h
    assert model.n_params - without == ALTUP_PARAMS - L * (3 * H + 2 + 3 * H)


def test_altup_and_laurel_are_tensors_of_the_attention_zero3_partitions(tmp_path):
    model = load_model(str(_write(tmp_path)))
    _, _, s = scenario("zero3-cpu", model="tinyllama-1.1b")
    lay = param_layout(model, s, 8)
    named = dict(zip(lay.names, lay.numels))
    assert named["layers.0.attn.altup_projections.2"] == H * H
    assert named["layers.5.attn.altup_unembed_projections.0"] == H * H
    assert not any("altup_projections" in n for n in named if not n.startswith("layers.0."))
    assert named["layers.3.attn.altup.prediction_coefs"] == N * N * N
    assert named["layers.3.attn.altup.modality_router"] == H * N
    assert named["layers.3.attn.laurel.linear_left"] == H * R
    assert named["layers.3.attn.altup.correct_output_scale"] == H
    # the kv-sharing blocks 4 and 5 hold no k_proj / v_proj (modeling_gemma3n.py line 1174)
    assert "layers.3.attn.k_proj" in named and "layers.4.attn.k_proj" not in named
    assert sum(named.values()) == model.n_params


def test_the_gemms_per_token_are_the_hand_count(tmp_path):
    model = load_model(str(_write(tmp_path)))
    altup = {"attn.altup.correction_coefs": (N, N, 1.0),
             "attn.altup.prediction_coefs": (N, N * N, 1.0),
             "attn.altup.modality_router": (H, N, 1.0),
             "attn.laurel.linear_left": (H, R, 1.0), "attn.laurel.linear_right": (R, H, 1.0)}
    gemms = [flops.run_gemms(model, i) for i in range(L)]
    assert all(altup.items() <= g.items() for g in gemms)
    # 2 x (n^2 + n^3 + h n + 2 h r) = 2 x 848 per token and block
    assert sum(2 * i * o for i, o, _ in altup.values()) == 1_696
    assert gemms[0]["attn.altup_projections.1"] == (H, H, 1.0)
    assert gemms[5]["attn.altup_unembed_projections.1"] == (H, H, 1.0)
    assert "attn.k_proj" in gemms[3] and "attn.k_proj" not in gemms[4]
    assert [flops.attends(model, i) for i in range(L)] == [True] * L   # shared kv still scores
    assert model.attention_windows == (32, 32, 0, 32, 32, 0)


def test_the_real_e2b_config_counts_as_transformers_and_says_what_is_left_out():
    origins = yaml.safe_load(open(ORIGINS).read())["files"]
    assert origins["gemma-3n-e2b-it"]["verdict"] == "counted"       # its origin said
    model = load_model(REAL)
    theirs = meta_param_count(json.loads(open(REAL).read()))
    assert model.n_params == model.active_params == theirs == E2B_PARAMS
    assert model.n_layers == 30 and model.ffn == 8192
    notes = " ".join(model.not_modelled)
    assert "activation sparsity (layers 0-9" in notes and "65,536 FLOPs per token" in notes
    assert "text decoder only" in model.source


def test_json_round_trip(tmp_path):
    model = load_model(str(_write(tmp_path)))
    back = Model(**json.loads(json.dumps(asdict(model))))
    assert back == model and back.n_params == model.n_params


def test_it_simulates_to_a_finite_step(tmp_path):
    result = tierlab.simulate(REAL, "h200-gen5", "zero3-cpu", seq=256, ranges=False)
    assert math.isfinite(result.step_time_s) and result.step_time_s > 0
    simulated_step_s(_write(tmp_path), "dgx-a100", 256)


@pytest.mark.parametrize("key, value", [("altup_num_inputs", 0),
                                        ("altup_active_idx", 4),
                                        ("laurel_rank", 0),
                                        ("hidden_size_per_layer_input", 0),
                                        ("num_kv_shared_layers", 6),
                                        ("num_kv_shared_layers", 4),
                                        ("intermediate_size", [128, 128, 64, 64, 64, 64])])
def test_a_bad_key_is_one_line_naming_it(tmp_path, key, value):
    path = _write(tmp_path, **{key: value})
    assert_user_error(run("memory", "-m", str(path), "-H", "dgx-a100"), str(path), f"{key}:")
