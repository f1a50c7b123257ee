"""Gemma 4's per-layer inputs (Model.per_layer_inputs; transformers modeling_gemma4.py
Gemma4TextModel.__init__ lines 1566-1580, Gemma4TextDecoderLayer lines 1345-1350 and 1408-1415):
counted exactly as transformers builds them on the meta device (total and active), the table a
parameter like any other in the layout the memory plan and ZeRO-3 read, the gate/projection
GEMMs and the model-level projection in the FLOPs, a bad per-layer width one line (exit 2)."""
import json
from dataclasses import asdict, replace

import pytest

from tests._cli import assert_user_error, run
from tests._simhelp import scenario
from tierlab.profiles.load import load_model
from tierlab.profiles.schema import Model, PerLayerInputs

transformers = pytest.importorskip("transformers")

from tests.test_hybrid_arch import meta_counts  # noqa: E402 (needs transformers)
from tierlab.sim import flops  # noqa: E402
from tierlab.sim.layout import param_layout  # noqa: E402
from tierlab.sim.memory import largest_module_params, model_state_bytes  # noqa: E402

H, L, W, V_PL, V = 64, 4, 8, 500, 1000
SMALL = dict(model_type="gemma4_text", hidden_size=H, intermediate_size=128,
             num_attention_heads=4, num_key_value_heads=2, vocab_size=V, num_hidden_layers=L,
             head_dim=16, global_head_dim=32, sliding_window=32,
             layer_types=["sliding_attention"] * 3 + ["full_attention"],
             hidden_size_per_layer_input=W, vocab_size_per_layer_input=V_PL)


def _write(tmp_path, **extra):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if "gemma4_text" not in CONFIG_MAPPING:
        pytest.skip(f"transformers {transformers.__version__} lacks gemma4_text")
    path = tmp_path / "gemma4-small.json"
    path.write_text(json.dumps({**SMALL, **extra}))
    return path


def test_counted_exactly_as_transformers_counts_it(tmp_path):
    path = _write(tmp_path)
    model = load_model(str(path))
    assert model.per_layer_inputs == PerLayerInputs(width=W, vocab=V_PL)
    assert (model.n_params, model.active_params) == meta_counts(path)
    without = load_model(str(_write(tmp_path, hidden_size_per_layer_input=0)))
    assert without.per_layer_inputs is None
    # the table V_PL x L W, the projection H x L W, its norm W; per block gate + projection
    # 2 H W and a norm H
    extra = V_PL * L * W + H * L * W + W + L * (2 * H * W + H)
    assert model.n_params - without.n_params == extra


def test_the_table_is_a_parameter_of_the_layout_zero3_partitions(tmp_path):
    model = load_model(str(_write(tmp_path)))
    _, _, s = scenario("zero3-cpu", model="tinyllama-1.1b")
    lay = param_layout(model, s, 8)
    named = dict(zip(lay.names, lay.numels))
    assert named["embed_tokens_per_layer"] == V_PL * L * W
    assert named["per_layer_model_projection"] == H * L * W
    assert named["layers.0.per_layer_input_gate"] == H * W
    assert named["layers.3.per_layer_projection"] == W * H
    assert sum(lay.numels) == model.n_params         # a tied head listed once
    i = lay.names.index("embed_tokens_per_layer")
    assert lay.parts[i] == -(-V_PL * L * W // 8)        # ZeRO-3: ceil(numel / dp)
    states = model_state_bytes(model, s)
    assert sum(states.values()) == 16 * model.n_params    # 2 + 2 + 4 + 4 + 4 B per parameter
    # the largest module ZeRO-3 gathers: the table, where it outgrows the token embedding
    wide = replace(model, per_layer_inputs=PerLayerInputs(width=W, vocab=10 * V))
    assert largest_module_params(model) == V * H
    assert largest_module_params(wide) == 10 * V * L * W


def test_the_per_layer_gemm_flops_per_token_match_a_hand_count(tmp_path):
    model = load_model(str(_write(tmp_path)))
    # per block: gate H -> W and projection W -> H, 2 x in x out each = 4 x 64 x 8 = 2048;
    # once per forward: the model-level projection H -> L W, 2 x 64 x 32 = 4096
    assert flops.per_layer_input_forward(model) == (2048.0, 4096.0)
    gemms = flops.run_gemms(model, 0)
    assert gemms["per_layer_input_gate"] == (H, W, 1.0)
    assert gemms["per_layer_projection"] == (W, H, 1.0)
    assert flops.logits_forward(model, 1) == model.seq_len * (2.0 * H * V + 4096.0)
    # the step: blocks 4 x forward with checkpointing (forward, recompute, 2 x backward), the
    # model-level projection 3 x forward (with the head: never recomputed)
    plain = replace(model, per_layer_inputs=None)
    tokens = model.seq_len
    diff = flops.step_flops(model, 1) - flops.step_flops(plain, 1)
    assert diff == pytest.approx(tokens * (4 * L * 2048 + 3 * 4096), rel=1e-12)
    assert flops.layer_forward(model, 1).hbm_bytes > flops.layer_forward(plain, 1).hbm_bytes


def test_memory_and_simulate_run(tmp_path):
    path = _write(tmp_path)
    mem = run("memory", "-m", str(path), "-H", "dgx-a100", "--seq", "256")
    assert mem.exit_code == 0, mem.output
    sim = run("simulate", "-m", str(path), "-H", "dgx-a100", "--seq", "256")
    assert sim.exit_code == 0, sim.output
    assert any(l.startswith("step") for l in sim.output.splitlines()), sim.output


def test_a_model_with_per_layer_inputs_round_trips_through_json(tmp_path):
    model = load_model(str(_write(tmp_path)))
    back = Model(**json.loads(json.dumps(asdict(model))))
    assert back == model and back.n_params == model.n_params


@pytest.mark.parametrize("key, value", [("hidden_size_per_layer_input", -4),
                                        ("hidden_size_per_layer_input", 2.5),
                                        ("vocab_size_per_layer_input", 0),
                                        ("vocab_size_per_layer_input", -3)])
def test_a_bad_per_layer_key_is_one_line_naming_it(tmp_path, key, value):
    path = _write(tmp_path, **{key: value})
    assert_user_error(run("memory", "-m", str(path), "-H", "dgx-a100"), str(path), key)


def test_a_per_layer_width_of_0_is_transformers_none(tmp_path):
    """modeling_gemma4.py line 1346 `if self.hidden_size_per_layer_input:` builds no per-layer
    inputs for 0: neither does tierlab (the vocab key is then unused)."""
    path = _write(tmp_path, hidden_size_per_layer_input=0, vocab_size_per_layer_input=0)
    model = load_model(str(path))
    assert model.per_layer_inputs is None and model.n_params == meta_counts(path)[0]


def _gemma4_counts(path) -> tuple[int, int]:
    """transformers' (total, active) of a Gemma 4 built on the meta device, each `experts`
    module top_k_experts of num_experts (Gemma4TextConfig's own keys)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    data = json.loads(path.read_text())
    config = AutoConfig.for_model(data.pop("model_type"), **data)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    n, k = config.num_experts, config.top_k_experts
    idle = sum(sum(p.numel() for p in m.parameters()) * (n - k) // n
               for name, m in model.named_modules() if name.endswith(".experts"))
    return total, total - idle


def test_the_gemma4_moe_block_counts_as_transformers_counts_it(tmp_path):
    """enable_moe_block (modeling_gemma4.py lines 1352-1358, 1391-1403): router and 3-D experts
    beside the dense MLP, read as a MoE whose shared expert is that MLP; seven norms a block."""
    path = _write(tmp_path, enable_moe_block=True, num_experts=4, top_k_experts=2,
                  moe_intermediate_size=32)
    model = load_model(str(path))
    assert (model.moe.n_experts, model.moe.experts_per_token, model.moe.expert_ffn,
            model.moe.shared_ffn, model.moe.router_scales) == (4, 2, 32, 128, True)
    assert model.block_norms == 7 and model.per_layer_inputs is not None
    assert (model.n_params, model.active_params) == _gemma4_counts(path)
    sim = run("simulate", "-m", str(path), "-H", "dgx-a100", "--seq", "256")
    assert sim.exit_code == 0, sim.output


def test_the_runner_refuses_per_layer_inputs(tmp_path):
    from tierlab.runner.variants import unlike_llama

    model = load_model(str(_write(tmp_path)))
    assert any("per-layer inputs" in why for why in unlike_llama(model))
