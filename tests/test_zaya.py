"""Zaya (model_type `zaya`; profiles/hf_zaya.py) read off transformers 5.25.0 modeling_zaya.py:
each MoE's router (ZayaRouter: down_proj hidden -> router_hidden_size with bias, the router state
scale of every layer but the first, router_mlp's norm, fc1, fc2 and out_proj to the experts + 1
skip expert) read as tensors of its block's attention, the MoE without a router matrix. Counted
against transformers' meta-device count, total and active (top-k of the experts module), with
the gap named exactly; it simulates; a bad router key is one exit-2 line naming it."""
import json

import pytest

from tests._cli import assert_user_error, run, simulated_step_s
from tierlab.profiles.load import load_model

transformers = pytest.importorskip("transformers")

SMALL = dict(model_type="zaya", hidden_size=64, num_hidden_layers=3,
             layer_types=["hybrid", "hybrid_sliding", "hybrid"], sliding_window=32,
             moe_intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             vocab_size=1000, num_experts=4, router_hidden_size=32)
"""A small Zaya: 3 blocks (one sliding), 4 experts top-1, a router 32 wide."""


def _write(tmp_path, data: dict):
    path = tmp_path / "zaya.json"
    path.write_text(json.dumps(data))
    return path


def _default() -> dict:
    from transformers import AutoConfig

    return json.loads(AutoConfig.for_model("zaya").to_json_string())


def _transformers_counts(data: dict) -> tuple[int, int]:
    """(total, active) of the ZayaForCausalLM transformers builds on the meta device: active
    runs top-k of the n experts (`mlp.experts`, ZayaExperts' 3-D gate_up_proj and down_proj)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model("zaya", **{k: v for k, v in data.items() if k != "model_type"})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    experts = sum(p.numel() for n, p in model.named_parameters() if ".mlp.experts." in n)
    n, k = config.num_experts, config.num_experts_per_tok
    return total, total - experts * (n - k) // n


def _gap(data: dict) -> int:
    """tierlab's count minus transformers': the layout's router of hidden x n_experts per block
    (counted over: Zaya's router is read into the attention), less what tierlab leaves out, each
    block's two ZayaResidualScaling (4 x hidden each) and the model's input scale and bias
    (2 x hidden)."""
    h, layers = data["hidden_size"], data["num_hidden_layers"]
    return layers * h * data["num_experts"] - layers * 8 * h - 2 * h


@pytest.mark.parametrize("small", [False, True], ids=["default", "small"])
def test_counted_as_transformers_counts_it_with_the_gap_named(tmp_path, small):
    data = SMALL if small else _default()
    model = load_model(str(_write(tmp_path, data)))
    total, active = _transformers_counts(data)
    gap = _gap(data)
    assert (model.n_params - total, model.active_params - active) == (gap, gap)
    assert abs(gap) / active < 0.005
    if not small:       # 40 x 2048 x 16 - 40 x 8 x 2048 - 2 x 2048
        assert gap == 651_264 and (total, active) == (8_840_488_784, 1_290_741_584)
        note = next(n for n in model.not_modelled if n.startswith("Zaya's router"))
        assert "40 MoE blocks x 2048 x 16 = 1,310,720 parameters counted over" in note


def test_the_router_is_tensors_of_the_attention_and_no_zero_experts(tmp_path):
    model = load_model(str(_write(tmp_path, SMALL)))
    mats = {n: (i, o) for n, i, o in model.attention_tensors.matrices}
    assert mats["router.down_proj"] == (64, 32)
    assert mats["router.router_mlp.fc1"] == mats["router.router_mlp.fc2"] == (32, 32)
    assert mats["router.router_mlp.out_proj"] == (32, 5)        # 4 experts + the skip expert
    assert (model.moe.n_experts, model.moe.experts_per_token, model.moe.zero_experts) == (4, 1, 0)
    later = model.layer_attention[0]        # blocks 1 and 2 carry the router state's scale
    assert later.layers == (1, 2)
    assert ("router.router_states_scale", 32) in later.attention_tensors.small_params


def test_it_simulates(tmp_path):
    simulated_step_s(_write(tmp_path, SMALL), "dgx-a100", 256)


@pytest.mark.parametrize("key", ["router_hidden_size", "num_experts"])
def test_a_router_key_of_zero_is_one_line_naming_it(tmp_path, key):
    path = _write(tmp_path, dict(SMALL, **{key: 0}))
    assert_user_error(run("simulate", "-m", str(path)), str(path), f"{key}: must be >= 1")
