"""Attention whose shape differs between layers (Model.layer_attention): Gemma 4's heterogeneous
per-layer config (global layers of global_head_dim, num_global_key_value_heads), MiMo-V2-Flash's
sliding layers of twice the kv heads; counted exactly as transformers builds them, each layer's
score FLOPs from its own heads x width and window; a malformed per-layer width is one line."""
import json
import math
from dataclasses import asdict

import pytest

from tests._cli import assert_user_error, run
from tests.test_hybrid_arch import meta_counts
from tierlab.profiles.load import load_model
from tierlab.profiles.schema import Model
from tierlab.sim.flops import attended_keys, layer_forward, score_spans

SEQ = 256
BASE = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=1000, num_hidden_layers=4)
GEMMA4 = dict(head_dim=16, global_head_dim=32, hidden_size_per_layer_input=0, sliding_window=32,
              layer_types=["sliding_attention"] * 3 + ["full_attention"])
SMALL = {
    # modeling_gemma4.py Gemma4TextAttention: head_dim of config.per_layer_config[layer_idx]
    "gemma4_text": GEMMA4,
    # attention_k_eq_v: the global layers' values are their keys (no v_proj), 1 kv head
    "gemma4_text-k_eq_v": dict(GEMMA4, attention_k_eq_v=True, num_global_key_value_heads=1),
    # num_kv_shared_layers: the last layers reuse earlier keys/values (q_proj, o_proj only)
    "gemma4_text-kv_shared": dict(GEMMA4, num_kv_shared_layers=2, num_hidden_layers=6,
                                  layer_types=["sliding_attention", "full_attention"] * 3),
    # modeling_mimo_v2_flash.py MiMoV2FlashAttention: sliding layers have 2 x the kv heads
    "mimo_v2_flash": dict(head_dim=16, v_head_dim=8, sliding_window=32, n_routed_experts=4,
                          num_experts_per_tok=2, moe_intermediate_size=32,
                          layer_types=["full_attention"] + ["sliding_attention"] * 3),
}


def _known(kind: str) -> None:
    pytest.importorskip("transformers")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if kind not in CONFIG_MAPPING:
        pytest.skip(f"transformers {__import__('transformers').__version__} lacks {kind}")


def _write(tmp_path, name: str, **extra):
    kind = name.split("-")[0]
    _known(kind)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(dict(BASE, model_type=kind, **{**SMALL[name], **extra})))
    return path


@pytest.mark.parametrize("name", sorted(SMALL))
def test_counted_exactly_as_transformers_counts_it(tmp_path, name):
    path = _write(tmp_path, name)
    model = load_model(str(path))
    assert model.layer_attention, "the layers' attention shapes were read as one"
    assert (model.n_params, model.active_params) == meta_counts(path)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_simulate_runs(tmp_path, name):
    path = _write(tmp_path, name)
    sim = run("simulate", "-m", str(path), "-H", "dgx-a100", "-c", "zero3-cpu", "--seq", str(SEQ))
    assert sim.exit_code == 0, sim.output
    step = next(l for l in sim.output.splitlines() if l.startswith("step"))
    assert math.isfinite(float(step.split()[1])) and float(step.split()[1]) > 0, step


def test_gemma4_global_layers_have_their_own_head_width_and_kv_heads(tmp_path):
    model = load_model(str(_write(tmp_path, "gemma4_text-k_eq_v")))
    (glob,) = model.layer_attention
    assert glob.layers == (3,) and (glob.n_heads, glob.n_kv_heads) == (4, 1)
    assert (model.head_dim, model.shaped(3).head_dim) == (16, 32)
    mats = model.layer_matrices(3)
    assert mats["attn.q_proj"] == (64, 4 * 32) and mats["attn.k_proj"] == (64, 32)
    assert "attn.v_proj" not in mats and model.layer_matrices(0)["q_proj"] == (64, 4 * 16)


def test_each_layers_score_flops_use_its_heads_times_width_and_window(tmp_path):
    model = load_model(str(_write(tmp_path, "gemma4_text", max_position_embeddings=SEQ)))
    assert model.seq_len == SEQ
    # sliding layers: 32 keys x 4 heads x (16 + 16); the global layer: 256 keys x 4 x (32 + 32)
    assert score_spans(model) == (((32, 4, 32), 3), ((SEQ, 4, 64), 1))
    assert [attended_keys(model, i) for i in range(4)] == [32, 32, 32, SEQ]
    tokens = SEQ
    expected = (2.0 * tokens * 32 * 4 * 32 * 3 + 2.0 * tokens * SEQ * 4 * 64) / 4
    assert layer_forward(model, 1).attention == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("key, value", [("global_head_dim", 0), ("global_head_dim", -4)])
def test_a_per_layer_head_width_below_1_is_one_line_naming_it(tmp_path, key, value):
    path = _write(tmp_path, "gemma4_text", **{key: value})
    assert_user_error(run("memory", "-m", str(path), "-H", "dgx-a100"), str(path),
                      "per_layer_config layer 3 head_dim")


@pytest.mark.parametrize("name", ["gemma4_text-k_eq_v", "mimo_v2_flash"])
def test_a_model_of_several_attention_shapes_round_trips_through_json(tmp_path, name):
    model = load_model(str(_write(tmp_path, name)))
    back = Model(**json.loads(json.dumps(asdict(model))))
    assert back == model and back.n_params == model.n_params
    assert layer_forward(back, 1).total == layer_forward(model, 1).total


def test_the_runner_refuses_attention_whose_shape_differs_between_layers(tmp_path):
    """runner/model.py trains LlamaForCausalLM of one head width: Gemma 4's global layers
    (head_dim 32 beside the sliding layers' 16 here) would be trained at the sliding width."""
    from tierlab.errors import ConfigError
    from tierlab.runner.variants import check_dense

    model = load_model(str(_write(tmp_path, "gemma4_text")))
    with pytest.raises(ConfigError, match="attention whose shape differs between layers"):
        check_dense(model)
