"""JetMoE (arXiv:2404.07413; transformers models/jetmoe/modeling_jetmoe.py): a mixture of
attention heads (JetMoeMoA: a router picks top-k of num_local_experts attention experts per
token, each with its own q projection `input_linear` and output projection `output_linear`,
beside one shared `kv_proj`) and a MoE MLP whose experts are the MoE module's own
`input_linear` (gate and up) and `output_linear`. Read as Model.attention_tensors with attention
experts (AttentionTensors.expert_matrices) and Model.moe (MoE.output_bias): counted exactly as
transformers counts the model it builds (total; active by hand from the config), the attention's
FLOPs per token are what its forward computes, it simulates, and a bad top-k is one line."""
import json

import pytest

from tests._cli import assert_user_error, run, simulated_step_s
from tierlab.profiles.load import load_model
from tierlab.sim.flops import layer_forward, run_gemms

SEQ = 256
SMALL = dict(model_type="jetmoe", hidden_size=64, intermediate_size=96, num_key_value_heads=2,
             kv_channels=16, num_local_experts=4, num_experts_per_tok=2, vocab_size=1000,
             num_hidden_layers=2)
"""A small JetMoE: 4 attention and 4 MLP experts, top-2; 2 kv heads of 16 (q: 2 x 2 = 4 heads)."""
JETMOE_8B = dict(model_type="jetmoe", num_hidden_layers=24)
"""JetMoE-8B: JetMoeConfig's defaults (configuration_jetmoe.py lines 49-58: hidden 2048, 16 kv
heads of kv_channels 128, intermediate 5632, 8 experts, top-2, vocab 32000, tied embeddings)
with the 24 layers of jetmoe/jetmoe-8b's config.json (the class default is 12)."""


def _write(tmp_path, name: str, **cfg):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    return path


def _config(data: dict):
    pytest.importorskip("transformers")
    from transformers import AutoConfig

    return AutoConfig.for_model("jetmoe", **{k: v for k, v in data.items() if k != "model_type"})


def _transformers_total(data: dict) -> int:
    """Every parameter of the JetMoeForCausalLM transformers builds on the meta device."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(_config(data))
    return sum(p.numel() for p in model.parameters())


def _by_hand(c) -> tuple[int, int]:
    """(total, active) from the config: per layer two RMSNorms; attention (JetMoeAttention,
    modeling_jetmoe.py lines 447-449, JetMoeMoA lines 283-292): kv_proj h -> 2 x kv heads x
    kv_channels, router h -> E, a bias of h, E experts' input_linear h -> kv x kv_channels and
    output_linear back; MLP (JetMoeMoE lines 224-232): a bias of h, E experts' input_linear
    h -> 2 x intermediate and output_linear intermediate -> h, router h -> E. Active: top-k of the
    E experts of each, routers and biases always."""
    h, f, e, k = c.hidden_size, c.intermediate_size, c.num_local_experts, c.num_experts_per_tok
    d = c.num_key_value_heads * c.kv_channels
    attn_expert, mlp_expert = 2 * h * d, 3 * h * f
    layer = 2 * h + (h * 2 * d + h * e + h + e * attn_expert) + (h + e * mlp_expert + h * e)
    total = c.vocab_size * h + h + c.num_hidden_layers * layer     # tied head, final norm
    idle = c.num_hidden_layers * (e - k) * (attn_expert + mlp_expert)
    return total, total - idle


@pytest.mark.parametrize("data", [SMALL, JETMOE_8B], ids=["small", "jetmoe-8b"])
def test_counted_exactly_as_transformers_total_and_active(tmp_path, data):
    config = _config(data)
    model = load_model(str(_write(tmp_path, "jetmoe", **data)))
    total, active = _by_hand(config)
    assert total == _transformers_total(data)
    assert (model.n_params, model.active_params) == (total, active)
    t = model.attention_tensors
    assert (t.n_experts, t.experts_per_token) == (config.num_local_experts,
                                                  config.num_experts_per_tok)
    assert (model.moe.n_experts, model.moe.experts_per_token, model.moe.expert_ffn) == \
        (config.num_local_experts, config.num_experts_per_tok, config.intermediate_size)
    assert model.moe.output_bias and model.gated_mlp and model.fused_gate_up


def test_jetmoe_8b_counts_as_docs_quote(tmp_path):
    """The figures docs/models.md quotes: JetMoE-8B (24 layers) and JetMoeConfig's defaults
    (12 layers)."""
    for name, data, want in (("8b", JETMOE_8B, (8_522_237_952, 2_331_445_248)),
                             ("defaults", dict(model_type="jetmoe"),
                              (4_293_888_000, 1_198_491_648))):
        model = load_model(str(_write(tmp_path, name, **data)))
        assert (model.n_params, model.active_params) == want


def test_attention_flops_per_token(tmp_path):
    """Per token (JetMoeAttention.forward, modeling_jetmoe.py lines 463-497): kv_proj 2 x h x
    2 d for every token; router 2 x h x E; top-k experts' q (input_linear, 2 x h x d) and o
    (output_linear, 2 x d x h) projections; the scores over top-k x kv heads (the query viewed
    as (-1, head_dim) from top-k x d, k and v repeated top-k times, lines 466, 482-483) of
    kv_channels: Q K^T + A V = 2 x s x 4 heads x (16 + 16)."""
    model = load_model(str(_write(tmp_path, "jetmoe", **SMALL)), seq_len=SEQ)
    h, d, e, k, heads, hd = 64, 2 * 16, 4, 2, 2 * 2, 16
    assert (model.n_heads, model.head_dim) == (heads, hd)
    gemms = run_gemms(model, 0)
    attn = {n: (i, o, s) for n, (i, o, s) in gemms.items() if n.startswith("attn.")}
    per_token = sum(2.0 * i * o * s for i, o, s in attn.values())
    assert per_token == pytest.approx(2 * h * 2 * d + 2 * h * e + k * (2 * h * d + 2 * d * h))
    assert sum(1 for n in attn if n.startswith("attn.experts.input_linear.")) == e
    lf = layer_forward(model, micro_batch=1)
    assert lf.attention == 2.0 * SEQ * SEQ * heads * (hd + hd)
    f = 96      # the MoE MLP: router + top-k experts (gate and up h -> 2 f, down f -> h)
    mlp = 2 * h * e + k * (2 * h * 2 * f + 2 * f * h)
    assert sum(g * n for g, n in zip(lf.gemms, lf.counts)) == pytest.approx(
        SEQ * (per_token + mlp))


def test_simulates_to_a_finite_step(tmp_path):
    path = _write(tmp_path, "jetmoe", **SMALL)
    simulated_step_s(path, "dgx-a100", SEQ)


def test_a_top_k_above_the_experts_is_one_line_naming_the_key(tmp_path):
    """num_experts_per_tok above num_local_experts: transformers' JetMoeConfig refuses it
    (configuration_jetmoe.py lines 75-78), one line naming the key; the same config with a
    top-k it allows loads."""
    load_model(str(_write(tmp_path, "ok", **SMALL)))
    path = _write(tmp_path, "bad", **dict(SMALL, num_experts_per_tok=5))
    assert_user_error(run("simulate", "-m", str(path)), str(path), "num_experts_per_tok")


def test_a_top_k_of_zero_is_one_line(tmp_path):
    """num_experts_per_tok 0: JetMoeConfig.__post_init__ sets num_attention_heads =
    num_key_value_heads x num_experts_per_tok = 0 (line 72), refused in one line naming it; a
    top-k of 1 loads, with 2 heads."""
    assert load_model(str(_write(tmp_path, "one", **dict(SMALL, num_experts_per_tok=1)))
                      ).n_heads == 2
    path = _write(tmp_path, "zero", **dict(SMALL, num_experts_per_tok=0))
    assert_user_error(run("simulate", "-m", str(path)), "num_attention_heads: must be >= 1")
