"""MoE routers and block layouts of transformers 5.25 text decoders read since issue 30:
Inkling (model_type `inkling_text`, modeling_inkling.py) whose router InklingTopkRouter
(lines 334-371) scores its n_shared_experts stacked shared experts (InklingSharedExperts, lines
374-398: 3-D gate/up/down) beside the routed ones, whose `hybrid` / `hybrid_sliding` layers are
full and sliding-window attention (InklingTextModel.forward line 759), and whose embedding holds
a norm (InklingNormedEmbedding, lines 628-635); Inkling2 (`inkling2_text`), whose blocks differ
in their norms, counted as most blocks are. Counted against transformers' own meta-device model,
total and active, with the gap named exactly; simulated; a bad window one line naming the key."""
import json

import pytest

from tests._cli import assert_user_error, run, simulated_step_s
from tierlab.profiles.load import load_model

SEQ = 128
INKLING = dict(model_type="inkling_text", hidden_size=256, num_hidden_layers=3,
               num_attention_heads=8, num_key_value_heads=2, head_dim=32,
               swa_num_attention_heads=8, swa_num_key_value_heads=4, swa_head_dim=32,
               sliding_window_size=16, rel_extent=32, d_rel=4, intermediate_size=512,
               moe_intermediate_size=128, n_routed_experts=8, num_experts_per_tok=2,
               n_shared_experts=2, vocab_size=1000, max_position_embeddings=4096,
               layer_types=["hybrid", "hybrid_sliding", "hybrid_sliding"])
"""A small Inkling: layer 0 `hybrid` (full), layers 1-2 `hybrid_sliding` (16 keys); every MLP
sparse: 8 routed experts of 128, top-2, 2 shared experts the router scores."""


def _write(tmp_path, name: str, data: dict):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def _transformers(data: dict) -> tuple[int, int]:
    """transformers' (total, active) of the model it builds on the meta device; active: each
    MoE layer's routed experts top-k of n (hf_build.transformers_counts)."""
    pytest.importorskip("transformers")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from tierlab.profiles.hf_build import transformers_counts

    config = AutoConfig.for_model(data["model_type"],
                                  **{k: v for k, v in data.items() if k != "model_type"})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return transformers_counts(model, config)


def _inkling_gap(data: dict) -> int:
    """What tierlab leaves out of an Inkling, per block: attn_sconv and mlp_sconv (depthwise
    convolutions of hidden x conv_kernel_size, 4 by default: InklingDecoderLayer lines 591-596),
    the router's n_shared_experts rows (hidden each) and its global_scale (1)."""
    h, layers = data["hidden_size"], data["num_hidden_layers"]
    return layers * (2 * h * data.get("conv_kernel_size", 4) + data["n_shared_experts"] * h + 1)


@pytest.mark.parametrize("data", [INKLING, dict(model_type="inkling_text")],
                         ids=["small", "default"])
def test_inkling_counted_as_transformers_but_the_named_gap(tmp_path, data):
    m = load_model(str(_write(tmp_path, "inkling", data)))
    total, active = _transformers(data)
    gap = _inkling_gap(dict(dict(hidden_size=6144, num_hidden_layers=66, n_shared_experts=2),
                            **data))
    assert (total - m.n_params, active - m.active_params) == (gap, gap)
    assert any("rows scoring the shared experts" in n for n in m.not_modelled)
    assert m.embed_norm and m.moe.n_experts == data.get("n_routed_experts", 256)


def test_inkling_default_figures_as_docs_quote(tmp_path):
    m = load_model(str(_write(tmp_path, "inkling", dict(model_type="inkling_text"))))
    assert (m.n_params, m.active_params) == (975_336_215_040, 41_054_999_040)


def test_inkling_hybrid_layers_are_full_and_sliding(tmp_path):
    m = load_model(str(_write(tmp_path, "inkling", INKLING)))
    assert m.attention_windows == (0, 16, 16)


def test_inkling2_blocks_with_other_norms_load_within_tolerance(tmp_path):
    data = dict(model_type="inkling2_text")
    m = load_model(str(_write(tmp_path, "inkling2", data)))
    total, active = _transformers(data)
    assert abs(total - m.n_params) <= 5e-3 * total
    assert abs(active - m.active_params) <= 5e-3 * active
    assert any("norms per block differ" in n for n in m.not_modelled)


def test_inkling_simulates_to_a_finite_step(tmp_path):
    simulated_step_s(_write(tmp_path, "inkling", INKLING), "dgx-a100", SEQ)


def test_a_sliding_layer_without_its_window_is_one_line_naming_the_key(tmp_path):
    path = _write(tmp_path, "inkling", dict(INKLING, sliding_window_size=None))
    assert_user_error(run("simulate", "-m", str(path)), str(path), "sliding_window")
