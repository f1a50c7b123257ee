"""State-space / short-convolution / linear-attention architectures (Model.mixer;
profiles/hf_mixer.py): real and default config.json files of Mamba, FalconMamba, Mamba-2, Jamba,
Bamba, LFM2, Qwen3-Next and Qwen3.5 (Gated DeltaNet), Falcon-H1 (attention beside Mamba-2) and
Granite 4 (Mamba-2 + MoE + shared MLP) are counted exactly as transformers counts the model it
builds on the meta device (total and active), the memory and simulate verbs run on them, their
FLOPs per token are what the layers compute, and a malformed mixer key is one exit-2 line naming
it. What stays refused (Zamba2, Nemotron-H) says what is unmodelled."""
import json
import math
from dataclasses import asdict
from pathlib import Path

import pytest

from tests._cli import assert_user_error, run
from tierlab.profiles.load import load_model
from tierlab.profiles.schema import Model
from tierlab.sim.flops import layer_forward, step_flops

DATA = Path(__file__).parent / "data" / "hf_configs"
HYBRID = DATA / "hybrid"
SOURCES = json.loads((HYBRID / "sources.json").read_text())
CONFIGS = sorted(p for p in HYBRID.glob("*.json") if p.name != "sources.json")
LFM2 = DATA / "real2" / "lfm2.5-vl-1.6b.json"
QWEN35 = [DATA / "real2" / "qwen3.5-9b.json", DATA / "real2" / "qwen3.5-18b-reap-a3b-coding.json"]
COUNTED = CONFIGS + [LFM2] + QWEN35
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


def test_every_file_has_a_source():
    assert {p.stem for p in CONFIGS} == set(SOURCES)
    for entry in SOURCES.values():
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


@pytest.mark.parametrize("name", ["falcon-mamba-7b", "falcon-h1-default", "qwen3-next-default"])
def test_a_mixer_model_round_trips_through_json(name):
    model = load_model(str(HYBRID / f"{name}.json"))
    back = Model(**json.loads(json.dumps(asdict(model))))
    assert back == model and back.n_params == model.n_params


def _per_token(model: Model) -> float:
    """Step FLOPs per token without recompute: 3 x forward (blocks + logits)."""
    return step_flops(model, 1, checkpointing=False) / model.seq_len


def _six_n(model: Model) -> float:
    """Kaplan et al. 2020 ("Scaling Laws for Neural Language Models", sec. 2.1, table 1): 6 N per
    token for the N parameters a token multiplies (active; an untied embedding is a lookup, not
    a GEMM, so it is left out; the LM head stays) + 12 s d per attending layer (scores and the
    weighted sum, no causal halving as sim/flops.py counts them). Only the mixers' conv and scan
    are left to differ."""
    embed = 0 if model.tie_embeddings else model.vocab * model.hidden
    attending = sum(1 for i in range(model.n_layers)
                    if not model.is_mixer_layer(i) or model.mixer.attention)
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
    ("zamba2", "mamba_d_state", 0)])
def test_a_malformed_hybrid_key_is_one_line_naming_it(tmp_path, kind, key, value):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": kind, key: value}))
    assert_user_error(run("memory", "-m", str(path), "-H", "dgx-a100"), str(path), key)


def test_a_missing_model_type_is_one_line_naming_it(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"state_size": 16, "hidden_size": 64}))
    assert_user_error(run("memory", "-m", str(path), "-H", "dgx-a100"), str(path), "model_type")


@pytest.mark.parametrize("kind, what, why", [
    ("zamba2", "shared_transformer (Zamba2AttentionDecoderLayer)",
     "shared attention blocks: one attention + MLP block whose weights several depths reuse"),
    ("nemotron_h", "mixer (NemotronHAttention)",
     "blocks of one part each: attention without an MLP, an MLP or MoE without attention")])
def test_what_stays_refused_names_the_unmodelled_layer(tmp_path, kind, what, why):
    pytest.importorskip("transformers")
    path = tmp_path / "config.json"
    cfg = dict(model_type=kind, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
               num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)
    if kind == "zamba2":        # its layers_block_type lists the default 54 layers
        cfg.pop("num_hidden_layers")
    path.write_text(json.dumps(cfg))
    assert_user_error(run("memory", "-m", str(path), "-H", "dgx-a100"), str(path),
                      f"model_type {kind!r} is not a supported architecture", what, why)


def test_the_runner_refuses_a_mixer_model_rather_than_train_a_llama():
    from tierlab.errors import ConfigError
    from tierlab.runner.variants import check_dense

    model = load_model(str(HYBRID / "mamba-default.json"))
    with pytest.raises(ConfigError, match="32 of 32 blocks are a mamba mixer"):
        check_dense(model)
