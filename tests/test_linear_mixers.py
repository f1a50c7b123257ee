"""Linear-attention mixers read by the computation they run, not by their class name
(profiles/hf_mixer.py mixer_kind): OLMo Hybrid's and Lara Mini's Gated DeltaNets call the same
`torch_chunk_gated_delta_rule` as Qwen3-Next's (transformers 5.25.0 modeling_olmo_hybrid.py,
modeling_lara_mini.py) on tensors of its shapes, so they are counted and timed as Qwen3-Next's
mixer is; LFM3's short conv (modeling_lfm3.py Lfm3ShortConv) runs LFM2's forward, timed as
LFM2's; Kimi Linear's KDA (modeling_kimi_linear.py KimiLinearDeltaAttention, in the self_attn
slot) and Bailing-hybrid's copy of it are timed by their chunked rule (hf_mixer.kda_flops),
MiniMax's lightning attention (modeling_minimax.py MiniMaxLightningAttention) by its blocked
products (hf_mixer.lightning_flops).
Each small config counts as transformers counts it on the meta device (total and active), runs
through memory and simulate, its mixer's FLOPs per token equal a hand count from the config,
and a bad mixer key is one exit-2 line naming it."""
import json
from pathlib import Path

import pytest

from tests._cli import assert_user_error, run
from tierlab.errors import ConfigError
from tierlab.profiles.load import load_model
from tierlab.runner.variants import check_dense

pytest.importorskip("transformers")

from tests._mixercases import (assert_counted_as_transformers, assert_scan_flops,  # noqa: E402
                               write_config)

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=1000, linear_num_key_heads=2,
             linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=32,
             linear_conv_kernel_dim=4)
CONFIGS = {
    "olmo_hybrid": dict(SMALL, model_type="olmo_hybrid", pad_token_id=0),
    "lara_mini": dict(SMALL, model_type="lara_mini", head_dim=16, num_experts=4,
                      num_experts_per_tok=2, moe_intermediate_size=32,
                      shared_expert_intermediate_size=32, num_hidden_layers=5),
    "lfm3": dict(model_type="lfm3", hidden_size=64, intermediate_size=128, num_hidden_layers=6,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=1000, conv_L_cache=3,
                 sliding_window=32, pad_token_id=0),
    "kimi_linear": dict(SMALL, model_type="kimi_linear", num_hidden_layers=5, kv_lora_rank=16,
                        qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
                        num_local_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                        n_group=1, topk_group=1, linear_num_heads=4, linear_head_dim=16,
                        pad_token_id=0),
    "bailing_hybrid": dict(SMALL, model_type="bailing_hybrid", num_hidden_layers=6,
                           num_key_value_heads=4, head_dim=16, short_conv_kernel_size=4,
                           layer_group_size=3, first_k_dense_replace=1, kv_lora_rank=16,
                           qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
                           num_local_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                           n_group=1, topk_group=1, pad_token_id=0),
    "minimax": dict(model_type="minimax", hidden_size=64, intermediate_size=128,
                    num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                    head_dim=16, vocab_size=1000, num_local_experts=4, num_experts_per_tok=2,
                    block_size=32),
}
MIXER_LAYERS = {"olmo_hybrid": (0, 1, 2), "lara_mini": (0, 2), "lfm3": (0, 1, 3, 5),
                "kimi_linear": (0, 1, 2, 3), "bailing_hybrid": (0, 1, 3, 4), "minimax": (1, 3)}
"""OlmoHybridConfig.__post_init__: full attention every 4th layer; LaraMiniConfig's period-5
pattern: linear, sliding, linear, full, sliding; Lfm3Config's: full at i % 4 == 2, sliding at
i % 4 == 0 from 4 on, else conv; KimiLinearConfig's: full at i % 4 == 0 from 4 on;
BailingHybridConfig's: full at (i + 1) % layer_group_size == 0; MiniMaxConfig's: full at the
even blocks, lightning at the odd ones."""
KINDS = {"olmo_hybrid": "gated_delta", "lara_mini": "gated_delta", "lfm3": "short_conv",
         "kimi_linear": "kda", "bailing_hybrid": "kda", "minimax": "lightning"}

# Gated DeltaNet per token (hf_mixer.gated_delta_flops), from SMALL: H_k 2, H_v 4, d_k 16,
# d_v 32, k 4, chunk L 64: conv 2 x 4 x (2 x 2 x 16 + 4 x 32 = 192) = 1,536; per value head
# 64 x (6 x 16 + 4 x 32) + 6 x 16 x 32 = 14,336 + 3,072 = 17,408, x 4 = 69,632; gate 4 x 32 = 128
GATED_DELTA_FLOPS = 1_536 + 69_632 + 128
# LFM2's short conv per token (hf_mixer.short_conv_flops), h 64, k 3: B x 64 + conv 2 x 3 x 64
# + C y 64 = 512
SHORT_CONV_FLOPS = 64 + 384 + 64
# KDA per token (hf_mixer.kda_flops), H 4 heads of d 16, k 4, chunk L 64: conv 2 x 4 x
# (3 x 4 x 16 = 192) = 1,536; per head 12 x 64 x 16 + 6 x 16 x 16 = 12,288 + 1,536 = 13,824,
# x 4 = 55,296; gate 4 x 16 = 64
KDA_FLOPS = 1_536 + 55_296 + 64
# lightning attention per token (hf_mixer.lightning_flops), H 4 heads of d 16, block B 32:
# per head 4 x 32 x 16 + 4 x 16 x 16 = 2,048 + 1,024 = 3,072, x 4 = 12,288; gate 4 x 16 = 64
LIGHTNING_FLOPS = 12_288 + 64
SCAN_FLOPS = {"olmo_hybrid": GATED_DELTA_FLOPS, "lara_mini": GATED_DELTA_FLOPS,
              "lfm3": SHORT_CONV_FLOPS, "kimi_linear": KDA_FLOPS, "bailing_hybrid": KDA_FLOPS,
              "minimax": LIGHTNING_FLOPS}


_write = write_config


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_counted_exactly_as_transformers_counts_it(tmp_path, kind):
    assert_counted_as_transformers(write_config(tmp_path, CONFIGS[kind]), KINDS[kind],
                                   MIXER_LAYERS[kind])


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_mixer_flops_per_token_are_the_hand_count(tmp_path, kind):
    assert_scan_flops(write_config(tmp_path, CONFIGS[kind]), SCAN_FLOPS[kind])


def test_lfm3_short_conv_is_lfm2s_on_its_sizes(tmp_path):
    """Lfm3ShortConv.__init__: in_proj h -> 3 h (B, C, x), out_proj h -> h, a depthwise conv of
    conv_L_cache taps, no biases (conv_bias false)."""
    mixer = load_model(str(_write(tmp_path, CONFIGS["lfm3"]))).mixer
    assert mixer.matrices == (("in_proj", 64, 192), ("out_proj", 64, 64))
    assert mixer.small_params == (("conv.weight", 64 * 3),)


def test_olmo_hybrid_projections_are_its_separate_q_k_v_a_b_g_o():
    """OlmoHybridGatedDeltaNet.__init__: q/k/v/a/b/g projections from hidden, o_proj back."""
    import tempfile

    path = _write(Path(tempfile.mkdtemp()), CONFIGS["olmo_hybrid"])
    mats = load_model(str(path)).mixer.matrices
    assert mats == (("q_proj", 64, 32), ("k_proj", 64, 32), ("v_proj", 64, 128),
                    ("a_proj", 64, 4), ("b_proj", 64, 4), ("g_proj", 64, 128),
                    ("o_proj", 128, 64))


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_memory_and_simulate_run(tmp_path, kind):
    path = _write(tmp_path, CONFIGS[kind])
    mem = run("memory", "-m", str(path), "-H", "dgx-a100", "--seq", "256")
    assert mem.exit_code == 0, mem.output
    sim = run("simulate", "-m", str(path), "-H", "dgx-a100", "-c", "zero3-cpu", "--seq", "256")
    assert sim.exit_code == 0, sim.output


@pytest.mark.parametrize("kind, key, value", [
    ("olmo_hybrid", "linear_num_value_heads", 0), ("lara_mini", "linear_key_head_dim", -1),
    ("lfm3", "conv_L_cache", 0), ("kimi_linear", "linear_num_heads", 0),
    ("bailing_hybrid", "short_conv_kernel_size", -2), ("minimax", "block_size", 0)])
def test_a_bad_mixer_key_is_one_line_naming_it(tmp_path, kind, key, value):
    path = _write(tmp_path, dict(CONFIGS[kind], **{key: value}))
    assert_user_error(run("memory", "-m", str(path), "-H", "dgx-a100"), str(path), key)


@pytest.mark.parametrize("kind, what", [("olmo_hybrid", "3 of 4 blocks are a gated_delta mixer"),
                                        ("lara_mini", "Mixture-of-Experts"),
                                        ("lfm3", "4 of 6 blocks are a short_conv mixer"),
                                        ("kimi_linear", "Mixture-of-Experts"),
                                        ("bailing_hybrid", "Mixture-of-Experts"),
                                        ("minimax", "Mixture-of-Experts")])
def test_the_runner_refuses_them(tmp_path, kind, what):
    with pytest.raises(ConfigError, match=what):
        check_dense(load_model(str(_write(tmp_path, CONFIGS[kind]))))


def test_kimi_linear_attends_in_its_full_attention_blocks_only(tmp_path):
    """The KDA blocks take the self_attn slot (KimiLinearDecoderLayer.__init__): no scores there;
    the full_attention block keeps its MLA (read as tensors)."""
    from tierlab.sim.flops import attention_spans

    model = load_model(str(_write(tmp_path, CONFIGS["kimi_linear"])), seq_len=256)
    assert model.attention_tensors is not None
    assert attention_spans(model) == ((256, 1),)


def test_a_bad_nested_kimi_linear_key_is_one_line_naming_it(tmp_path):
    """Kimi Linear's checkpoints nest num_heads / head_dim in linear_attn_config."""
    path = _write(tmp_path, dict(CONFIGS["kimi_linear"], linear_attn_config={"head_dim": -3}))
    assert_user_error(run("memory", "-m", str(path), "-H", "dgx-a100"), str(path),
                      "linear_attn_config.head_dim")


def test_minimax_lightning_blocks_hold_qkv_gate_and_out_projections(tmp_path):
    """MiniMaxLightningAttention.__init__: qkv_proj h -> 3 H d, out_proj H d -> h, output_gate
    h -> H d, an RMSNorm over H d; its decay buffers are no parameters."""
    mixer = load_model(str(_write(tmp_path, CONFIGS["minimax"]))).mixer
    assert mixer.matrices == (("qkv_proj", 64, 192), ("out_proj", 64, 64),
                              ("output_gate", 64, 64))
    assert mixer.small_params == (("norm.weight", 64),)


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_a_new_mixer_model_round_trips_through_json(tmp_path, kind):
    from dataclasses import asdict

    from tierlab.profiles.schema import Model

    model = load_model(str(_write(tmp_path, CONFIGS[kind])))
    back = Model(**json.loads(json.dumps(asdict(model))))
    assert back == model and back.n_params == model.n_params
