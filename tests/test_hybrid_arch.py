"""State-space / short-convolution / linear-attention architectures (Model.mixer;
profiles/hf_mixer.py): real and default config.json files of Mamba, FalconMamba, Mamba-2, Jamba,
Bamba, LFM2, Qwen3-Next and Qwen3.5 (Gated DeltaNet), Falcon-H1 (attention beside Mamba-2) and
Granite 4 (Mamba-2 + MoE + shared MLP), Nemotron-H (blocks of one part each: Mamba-2, attention,
MLP or MoE) and Zamba2 (one attention + MLP block shared by several depths beside Mamba-2 blocks)
are counted exactly as transformers counts the model it builds on the meta device (total and
active), the memory and simulate verbs run on them, their FLOPs per token are what the layers
compute, and a malformed mixer key is one exit-2 line naming it."""
import json
import math
import re
from dataclasses import asdict
from pathlib import Path

import pytest

from tests._cli import assert_user_error, run
from tierlab.profiles.load import load_model
from tierlab.profiles.schema import Model
from tierlab.sim.flops import attention_spans, layer_forward, run_gemms, step_flops

DATA = Path(__file__).parent / "data" / "hf_configs"
HYBRID = DATA / "hybrid"
SOURCES = json.loads((HYBRID / "sources.json").read_text())
CONFIGS = sorted(p for p in HYBRID.glob("*.json") if p.name != "sources.json")
LFM2 = DATA / "real2" / "lfm2.5-vl-1.6b.json"
QWEN35 = [DATA / "real2" / "qwen3.5-9b.json", DATA / "real2" / "qwen3.5-18b-reap-a3b-coding.json"]
PARTS = DATA / "hybrid_parts"
PART_SOURCES = json.loads((PARTS / "sources.json").read_text())
PART_CONFIGS = sorted(p for p in PARTS.glob("*.json") if p.name != "sources.json")
COUNTED = CONFIGS + [LFM2] + QWEN35 + PART_CONFIGS
SEQ = 4096


def meta_counts(path: Path) -> tuple[int, int]:
    """transformers' (total, active) of the decoder it builds from the file on the meta device:
    AutoModelForCausalLM.from_config (an image-text config: its decoder + LM head); active counts
    each `experts` module top-k of n."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    data = json.loads(path.read_text())
    cfg = {k: v for k, v in data.items() if k not in ("model_type", "architectures",
                                                       "_name_or_path")}
    config = AutoConfig.for_model(data["model_type"], **cfg)
    with torch.device("meta"):
        if "text_config" in data:
            full = AutoModelForImageTextToText.from_config(config)
            mods = [full.get_decoder(), full.get_output_embeddings()]
            config = config.get_text_config(decoder=True)
        else:
            mods = [AutoModelForCausalLM.from_config(config)]
    params = {id(p): p for m in mods for p in m.parameters()}
    total = sum(p.numel() for p in params.values())
    k = getattr(config, "num_experts_per_tok", None)
    n = getattr(config, "num_experts", None) or getattr(config, "num_local_experts", None)
    idle = sum(sum(p.numel() for p in m.parameters()) * (n - k) // n for mod in mods
               for name, m in mod.named_modules() if name.endswith(".experts")) if n else 0
    return total, total - idle


@pytest.mark.parametrize("configs, sources", [(CONFIGS, SOURCES), (PART_CONFIGS, PART_SOURCES)])
def test_every_file_has_a_source(configs, sources):
    assert {p.stem for p in configs} == set(sources)
    for entry in sources.values():
        assert entry["model_type"] and (entry.get("commit") or entry.get("built_from"))


@pytest.mark.parametrize("path", COUNTED, ids=lambda p: p.stem)
def test_counted_exactly_as_transformers_counts_it(path):
    pytest.importorskip("transformers")
    model = load_model(str(path))
    assert (model.n_params, model.active_params) == meta_counts(path)
    assert model.mixer is not None and model.mixer.layers


@pytest.mark.parametrize("path, kind, n_mixer, n_layers", [
    ("falcon-mamba-7b", "mamba", 64, 64), ("jamba-1.5-mini", "mamba", 28, 32),
    ("mamba-default", "mamba", 32, 32), ("mamba2-default", "mamba2", 64, 64),
    ("bamba-default-attn", "mamba2", 29, 32), ("qwen3-next-default", "gated_delta", 36, 48),
    ("falcon-h1-default", "mamba2", 32, 32), ("granite-4-default-attn", "mamba2", 28, 32)])
def test_mixer_layers_are_where_the_config_puts_them(path, kind, n_mixer, n_layers):
    model = load_model(str(HYBRID / f"{path}.json"))
    assert model.mixer.kind == kind and len(model.mixer.layers) == n_mixer
    assert model.n_layers == n_layers


def test_jamba_places_attention_every_8th_layer_from_4_and_moe_every_2nd():
    model = load_model(str(HYBRID / "jamba-1.5-mini.json"))
    attn = [i for i in range(model.n_layers) if not model.is_mixer_layer(i)]
    assert attn == [4, 12, 20, 28]
    assert [i for i in range(model.n_layers) if model.is_moe_layer(i)] == list(range(1, 32, 2))
    assert model.moe.n_experts == 16 and model.moe.experts_per_token == 2


@pytest.mark.parametrize("path", [HYBRID / "falcon-mamba-7b.json", HYBRID / "falcon-h1-default.json",
                                  HYBRID / "qwen3-next-default.json",
                                  PARTS / "nemotron-h-default.json",
                                  PARTS / "zamba2-default-2-blocks-adapters.json"],
                         ids=lambda p: p.stem)
def test_a_mixer_model_round_trips_through_json(path):
    model = load_model(str(path))
    back = Model(**json.loads(json.dumps(asdict(model))))
    assert back == model and back.n_params == model.n_params


def _per_token(model: Model) -> float:
    """Step FLOPs per token without recompute: 3 x forward (blocks + logits)."""
    return step_flops(model, 1, checkpointing=False) / model.seq_len


def _six_n(model: Model) -> float:
    """Kaplan et al. 2020 ("Scaling Laws for Neural Language Models", sec. 2.1, table 1): 6 N per
    token for the N parameters a token multiplies (active; an untied embedding is a lookup, not
    a GEMM, so it is left out; the LM head stays) + 12 s d per attending layer (scores and the
    weighted sum, no causal halving as sim/flops.py counts them; a shared block's use attends,
    an MLP alone does not). Only the mixers' conv and scan are left to differ."""
    embed = 0 if model.tie_embeddings else model.vocab * model.hidden
    uses = model.shared.layers if model.shared else ()
    attending = sum(1 for i in range(model.n_layers) if i in uses or (
        i not in model.mlp_only_layers and (not model.is_mixer_layer(i) or model.mixer.attention)))
    return 6 * (model.active_params - embed) + 12 * model.seq_len * model.q_dim * attending


# Projection-dominated: Mamba-1's scan is 7 d N (N = 16) against the 3 d h of its in/out
# projections, and LFM2's conv 2 k h against 8 h^2: within 2 % of 6 N (+ attention).
@pytest.mark.parametrize("path", [HYBRID / "falcon-mamba-7b.json", HYBRID / "jamba-1.5-mini.json",
                                  HYBRID / "mamba-default.json", LFM2], ids=lambda p: p.stem)
def test_projection_dominated_flops_per_token_are_six_times_active_params(path):
    model = load_model(str(path), seq_len=SEQ)
    assert _per_token(model) == pytest.approx(_six_n(model), rel=0.02)


# Mamba-2's SSD is not projection-dominated: per head of width P = 64, state N = 128 and chunk
# L = 256 it adds 2 L N + 2 L P + 4 N P = 131,072 FLOPs per token, x 128 heads = 16.8 MFLOP
# per layer and token beside 2 x 113 M of projections (Bamba's N = 256: 29 MFLOP): the step
# sits 3-12 % above 6 N. Falcon-H1's (128 heads of P = 8, N = 256: 18.4 MFLOP beside 466 MFLOP
# of attention, Mamba-2 and MLP GEMMs per layer and token) and Granite 4's (128 heads of 64,
# N = 256: 29.4 MFLOP) land at 3.2-3.3 %.
@pytest.mark.parametrize("path", ["mamba2-default", "bamba-default-attn", "falcon-h1-default",
                                  "granite-4-default-attn"])
def test_mamba2_flops_per_token_add_the_ssd_scan(path):
    model = load_model(str(HYBRID / f"{path}.json"), seq_len=SEQ)
    ratio = _per_token(model) / _six_n(model)
    assert 1.03 < ratio < 1.12, ratio


def test_mamba2_scan_flops_follow_the_ssd_count():
    model = load_model(str(HYBRID / "mamba2-default.json"), seq_len=SEQ)
    h, n, p, chunk, k, g = 128, 128, 64, 256, 4, 8      # Mamba2Config defaults
    conv = 2 * k * (h * p + 2 * g * n)                  # depthwise conv over x, B, C
    assert model.mixer.scan_flops_per_token == conv + h * (2 * chunk * n + 2 * chunk * p
                                                           + 4 * n * p) + 2 * h * p


def test_gated_deltanet_flops_follow_the_chunked_delta_rule_count():
    # Qwen3NextConfig defaults: 16 key heads and 32 value heads of 128, conv kernel 4, chunk 64
    model = load_model(str(HYBRID / "qwen3-next-default.json"), seq_len=SEQ)
    h_k, h_v, d_k, d_v, k, chunk = 16, 32, 128, 128, 4, 64
    conv = 2 * k * (2 * h_k * d_k + h_v * d_v)          # depthwise conv over q, k, v
    core = h_v * (chunk * (6 * d_k + 4 * d_v) + 6 * d_k * d_v)
    assert model.mixer.kind == "gated_delta"
    assert model.mixer.scan_flops_per_token == conv + core + h_v * d_v


# Gated DeltaNet adds 5.8 MFLOP per token and layer (mostly its chunk products) beside 67 MFLOP
# of its projections and 3 x 10 x 2 x 2048 x 512 of active experts: 2.6 % above 6 N + attention.
def test_qwen3_next_flops_per_token_add_the_delta_rule():
    model = load_model(str(HYBRID / "qwen3-next-default.json"), seq_len=SEQ)
    ratio = _per_token(model) / _six_n(model)
    assert 1.01 < ratio < 1.05, ratio


def test_qwen3_next_gates_its_attention_every_4th_block_and_routes_10_of_512():
    model = load_model(str(HYBRID / "qwen3-next-default.json"))
    attn = [i for i in range(model.n_layers) if not model.is_mixer_layer(i)]
    assert attn == list(range(3, 48, 4))
    assert model.attn_output_gate and model.layer_matrices(3)["q_proj"] == (2048, 2 * 16 * 256)
    assert (model.moe.n_experts, model.moe.experts_per_token, model.moe.shared_ffn,
            model.moe.shared_gate) == (512, 10, 512, True)


def test_falcon_h1_runs_attention_and_mamba2_side_by_side_in_every_block():
    model = load_model(str(HYBRID / "falcon-h1-default.json"), seq_len=SEQ)
    assert model.mixer.attention and model.mixer.layers == tuple(range(32))
    mats = model.layer_matrices(0)
    assert {"q_proj", "k_proj", "v_proj", "o_proj", "mixer.in_proj", "mixer.out_proj",
            "up_proj", "down_proj", "gate_proj"} <= set(mats)
    scores = 2 * SEQ * SEQ * model.n_heads * 2 * model.head_dim     # Q K^T + A V, no halving
    assert layer_forward(model, 1).attention == pytest.approx(
        scores + SEQ * model.mixer.scan_flops_per_token)


def test_granite_4_counts_its_shared_mlp_beside_the_experts():
    model = load_model(str(HYBRID / "granite-4-default-attn.json"))
    assert [i for i in range(model.n_layers) if not model.is_mixer_layer(i)] == [5, 13, 21, 29]
    assert (model.moe.n_experts, model.moe.experts_per_token, model.moe.shared_ffn) == (8, 2, 1024)
    assert model.gated_mlp and model.is_moe_layer(0) and model.is_moe_layer(5)


def test_falcon_mamba_scan_flops_follow_the_selective_scan_count():
    model = load_model(str(HYBRID / "falcon-mamba-7b.json"), seq_len=SEQ)
    d, n, k = 8192, 16, 4
    assert model.mixer.scan_flops_per_token == 2 * k * d + 7 * d * n + 3 * d


def test_mixer_blocks_have_no_attention_scores():
    model = load_model(str(HYBRID / "falcon-mamba-7b.json"), seq_len=SEQ)
    lf = layer_forward(model, 1)
    assert lf.attention == pytest.approx(SEQ * model.mixer.scan_flops_per_token)


def test_nemotron_h_blocks_hold_the_one_part_its_pattern_names():
    # NemotronHConfig's default layers_block_type: Mamba-2, MoE, attention, MLP
    model = load_model(str(PARTS / "nemotron-h-default.json"))
    assert (model.mixer.layers, model.mixer.mlp) == ((0,), False)
    assert (model.mlp_only_layers, model.attention_only_layers) == ((1, 3), (2,))
    assert [model.is_moe_layer(i) for i in range(4)] == [False, True, False, False]
    assert (model.moe.n_experts, model.moe.experts_per_token, model.moe.expert_ffn,
            model.moe.shared_ffn, model.gated_mlp, model.block_norms) == (8, 2, 7688, 7688,
                                                                          False, 1)
    assert set(model.layer_matrices(2)) == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert set(model.layer_matrices(3)) == {"up_proj", "down_proj"}
    assert set(model.layer_small_params(2)) == set(model.layer_small_params(3)) == {"input_norm"}
    eight = load_model(str(PARTS / "nemotron-h-default-8b-pattern.json"))
    pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
    assert eight.mixer.layers == tuple(i for i, c in enumerate(pattern) if c == "M")
    assert eight.attention_only_layers == tuple(i for i, c in enumerate(pattern) if c == "*")
    assert eight.mlp_only_layers == tuple(i for i, c in enumerate(pattern) if c == "-")
    assert eight.moe is None and eight.n_layers == 52


def test_a_single_part_block_computes_only_its_part():
    """An attention block runs q, k, v, o and the scores, no MLP; an MLP or MoE block its
    MLP, no attention and no scores: only the 1 attention block of the 4 attends."""
    model = load_model(str(PARTS / "nemotron-h-default.json"), seq_len=SEQ)
    assert set(run_gemms(model, 2)) == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert set(run_gemms(model, 3)) == {"up_proj", "down_proj"}
    assert not any(n.endswith("_proj") and not n.startswith(("experts.", "shared_experts."))
                   for n in run_gemms(model, 1))
    assert attention_spans(model) == ((SEQ, 1),)
    eight = load_model(str(PARTS / "nemotron-h-default-8b-pattern.json"), seq_len=SEQ)
    assert attention_spans(eight) == ((SEQ, 4),)


def test_zamba2_counts_a_shared_block_once_and_runs_it_at_every_use():
    model = load_model(str(PARTS / "zamba2-default.json"), seq_len=SEQ)
    shared = model.shared
    assert shared.layers == (6, 12, 18, 24, 30, 36, 42, 47, 51) and shared.blocks == 1
    assert model.mixer.layers == tuple(range(54)) and not model.mixer.mlp
    weights = {f"shared.{n}" for n, *_ in shared.matrices}
    assert {"shared.self_attn.q_proj", "shared.feed_forward.gate_up_proj"} <= weights
    assert dict(model.layer_matrices(6))["shared.self_attn.q_proj"] == (5120, 5120)  # 2 x hidden
    assert not weights & set(model.layer_matrices(12))          # stored once, in its first use
    assert weights <= set(run_gemms(model, 12))                 # multiplied at every use
    assert run_gemms(model, 12) == run_gemms(model, 6)
    own = {f"shared.use.{n}" for n, *_ in shared.use_matrices}
    assert own == {"shared.use.feed_forward.gate_up_proj_adapter.0",
                   "shared.use.feed_forward.gate_up_proj_adapter.1", "shared.use.linear"}
    assert own <= set(model.layer_matrices(12))                 # each use's own adapters
    assert attention_spans(model) == ((SEQ, 9),)


def test_zamba2_uses_its_shared_blocks_in_turn_with_adapters_on_q_k_v():
    model = load_model(str(PARTS / "zamba2-default-2-blocks-adapters.json"))
    assert model.shared.blocks == 2
    owners = [i for i in model.shared.layers if model.shared.owner(i)]
    assert owners == [6, 12]
    assert {f"shared.use.self_attn.linear_{x}_adapter.{k}" for x in "qkv" for k in (0, 1)} <= \
        set(model.layer_matrices(18))


def _shared_reuse(model: Model) -> int:
    """Weights of the shared blocks multiplied beyond their first use (Zamba2: 9 uses of one)."""
    if model.shared is None:
        return 0
    return (len(model.shared.layers) - model.shared.blocks) * \
        sum(i * o for _, i, o in model.shared.matrices)


# Nemotron-H and Zamba2 per token: 6 N (+ 6 x the shared block's weights at each use after
# its first: Zamba2-2.7B-style defaults run 197 M shared weights 9 times, so the step is 1.75 x
# 6 N alone) + 12 s d per attending block + 3 x the Mamba-2 scan; the rest (norms, conv and
# A_log, D, dt_bias: parameters that are no GEMM) is within 0.1 %. Nemotron-H's SSD (128 heads
# of 64, N = 128, chunk 128: 10.6 MFLOP per token and Mamba-2 block) lands 0.5-1.7 % above,
# Zamba2's (8 heads of 640, N = 64, chunk 256: 4.2 MFLOP) 2.7 %.
@pytest.mark.parametrize("path", PART_CONFIGS, ids=lambda p: p.stem)
def test_single_part_and_shared_block_flops_per_token(path):
    model = load_model(str(path), seq_len=SEQ)
    expected = _six_n(model) + 6 * _shared_reuse(model)
    scan = 3 * model.mixer.scan_flops_per_token * len(model.mixer.layers)
    assert _per_token(model) - scan == pytest.approx(expected, rel=1e-3)
    assert 1.0 < _per_token(model) / expected < 1.03


@pytest.mark.parametrize("path", COUNTED, ids=lambda p: p.stem)
def test_memory_and_simulate_run(path):
    mem = run("memory", "-m", str(path), "-H", "dgx-a100", "-c", "zero3-cpu", "--seq", "2048")
    assert mem.exit_code == 0, mem.output
    sim = run("simulate", "-m", str(path), "-H", "dgx-a100", "-c", "zero3-cpu", "--seq", "2048")
    assert sim.exit_code == 0, sim.output
    step = next(l for l in sim.output.splitlines() if l.startswith("step"))
    seconds = float(step.split()[1])
    assert math.isfinite(seconds) and 0 < seconds < 600, step


@pytest.mark.parametrize("key, value", [
    ("state_size", -4), ("conv_kernel", 0), ("time_step_rank", "x"), ("expand", 1.5)])
def test_a_malformed_mamba_key_is_one_line_naming_it(tmp_path, key, value):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "mamba", "hidden_size": 64, "vocab_size": 1000,
                                "num_hidden_layers": 2, key: value}))
    assert_user_error(run("memory", "-m", str(path), "-H", "dgx-a100"), str(path), key)


@pytest.mark.parametrize("kind, key, value", [
    ("jamba", "mamba_d_state", -1), ("bamba", "mamba_n_heads", 0),
    ("mamba2", "n_groups", -2), ("lfm2", "conv_L_cache", 0),
    ("qwen3_next", "linear_num_value_heads", 0), ("qwen3_next", "linear_conv_kernel_dim", -4),
    ("falcon_h1", "mamba_d_ssm", -1), ("granitemoehybrid", "mamba_d_head", "x"),
    ("zamba2", "mamba_d_state", 0), ("zamba2", "num_mem_blocks", 0),
    ("zamba2", "num_mem_blocks", -2), ("zamba2", "adapter_rank", 0),
    ("nemotron_h", "mamba_num_heads", 0), ("nemotron_h", "hybrid_override_pattern", "M*X-"),
    ("nemotron_h", "hybrid_override_pattern", ""), ("nemotron_h", "hybrid_override_pattern", 7),
    ("nemotron_h", "layers_block_type", ["foo", "moe"])])
def test_a_malformed_hybrid_key_is_one_line_naming_it(tmp_path, kind, key, value):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": kind, key: value}))
    assert_user_error(run("memory", "-m", str(path), "-H", "dgx-a100"), str(path), key)


def test_a_missing_model_type_is_one_line_naming_it(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"state_size": 16, "hidden_size": 64}))
    assert_user_error(run("memory", "-m", str(path), "-H", "dgx-a100"), str(path), "model_type")


def _small(kind: str, **extra) -> dict:
    cfg = dict(model_type=kind, hidden_size=64, intermediate_size=128, num_attention_heads=4,
               num_key_value_heads=2, vocab_size=1000, **extra)
    if kind == "nemotron_h":
        cfg.update(head_dim=16, mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=16,
                   n_groups=2, n_routed_experts=4, moe_intermediate_size=32,
                   moe_shared_expert_intermediate_size=32)
    return cfg


@pytest.mark.parametrize("cfg", [
    _small("nemotron_h", hybrid_override_pattern="M-ME*-"),
    _small("nemotron_h", layers_block_type=["full_attention", "mlp", "moe", "full_attention"]),
    _small("zamba2", num_hidden_layers=6, num_mem_blocks=2, use_shared_attention_adapter=True,
           layers_block_type=["mamba", "hybrid"] * 3, mamba_d_state=16, n_mamba_heads=4)],
    ids=["nemotron-h-pattern", "nemotron-h-no-mamba", "zamba2-small"])
def test_small_single_part_and_shared_block_configs_count_like_transformers(tmp_path, cfg):
    pytest.importorskip("transformers")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    model = load_model(str(path))
    assert (model.n_params, model.active_params) == meta_counts(path)
    res = run("simulate", "-m", str(path), "-H", "dgx-a100", "-c", "zero3-cpu", "--seq", "256")
    assert res.exit_code == 0, res.output


def test_nemotron_h_latent_experts_are_refused_naming_them(tmp_path):
    """moe_latent_size: the experts run on a narrower input between fc1_latent_proj and
    fc2_latent_proj (modeling_nemotron_h.py NemotronHMoE), which tierlab's MoE does not hold."""
    pytest.importorskip("transformers")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_small("nemotron_h", moe_latent_size=16,
                                      hybrid_override_pattern="ME*-")))
    assert_user_error(run("memory", "-m", str(path), "-H", "dgx-a100"), str(path),
                      "model_type 'nemotron_h' is not a supported architecture",
                      "latent expert projections (fc1_latent_proj, fc2_latent_proj)")


def test_the_runner_refuses_a_mixer_model_rather_than_train_a_llama():
    from tierlab.errors import ConfigError
    from tierlab.runner.variants import check_dense

    model = load_model(str(HYBRID / "mamba-default.json"))
    with pytest.raises(ConfigError, match="32 of 32 blocks are a mamba mixer"):
        check_dense(model)
    for name, what in [("nemotron-h-default-8b-pattern", "24 of 52 blocks are a mamba2 mixer"),
                       ("zamba2-default", "54 of 54 blocks are a mamba2 mixer")]:
        with pytest.raises(ConfigError, match=what):
            check_dense(load_model(str(PARTS / f"{name}.json")))


def test_the_runner_refuses_single_part_blocks_without_a_mixer(tmp_path):
    """A Nemotron-H of attention-only and MLP-only blocks has neither MoE nor a mixer: the runner
    would have trained a dense Llama of attention + MLP blocks under its name."""
    pytest.importorskip("transformers")
    from tierlab.errors import ConfigError
    from tierlab.runner.variants import check_dense

    path = tmp_path / "config.json"
    path.write_text(json.dumps(_small("nemotron_h", layers_block_type=[
        "attention", "mlp", "attention", "mlp"])))
    with pytest.raises(ConfigError, match="2 attention-only and 2 MLP-only blocks of 4"):
        check_dense(load_model(str(path)))


@pytest.mark.parametrize("extra, what", [
    (dict(qk_norm="head"), "q/k norms (head)"),
    (dict(attention_windows=(4096, 0)), "sliding-window or chunked attention"),
    (dict(attn_head_dim=128), "8 heads of 128 on a hidden size of 512"),
    (dict(qkv_bias=True), "biases on q/k/v alone")])
def test_the_runner_refuses_what_its_llama_would_not_have(extra, what):
    """runner/model.py trains LlamaForCausalLM of the model's sizes: a Qwen3-like q/k norm, a
    Mistral-like window, a head width beside hidden / heads or Qwen2-like q/k/v biases would
    be dropped from what it trains."""
    from tierlab.errors import ConfigError
    from tierlab.profiles.schema import Model
    from tierlab.runner.variants import check_dense

    base = dict(name="tiny", n_layers=2, hidden=512, ffn=1024, n_heads=8, n_kv_heads=8,
                vocab=1000, seq_len=256)
    check_dense(Model(**base))
    with pytest.raises(ConfigError, match=re.escape(what)):
        check_dense(Model(**base, **extra))
