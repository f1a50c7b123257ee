"""Recurrent mixers read by the computation they run (profiles/hf_mixer.py): RWKV-4's time-mix
(WKV) and channel-mix, one mixer (transformers 5.25.0 modeling_rwkv.py RwkvSelfAttention,
RwkvFeedForward; Peng et al. 2023, arXiv 2305.13048), timed by hf_mixer.rwkv_flops; xLSTM's
mLSTM layer (modeling_xlstm.py xLSTMLayer and its chunkwise kernel; Beck et al. 2024, arXiv
2405.04517) beside its gated MLP (xLSTMFeedForward), timed by hf_mixer.mlstm_flops; Zamba's
multi-head Mamba-1 (modeling_zamba.py ZambaMambaMixer; arXiv 2405.16712), timed by
hf_mixer.zamba_mamba_flops, with its one shared attention + MLP block (Model.shared).
Each small config counts as transformers counts it on the meta device (total and active), runs
through memory and simulate, its mixer's FLOPs per token equal a hand count from the config,
the model round-trips through JSON, and a bad mixer key is one exit-2 line naming it."""
import json
from dataclasses import asdict
from pathlib import Path

import pytest

from tests._cli import assert_user_error, run
from tierlab.profiles.load import load_model
from tierlab.profiles.schema import Model

pytest.importorskip("transformers")

from tests._mixercases import (assert_counted_as_transformers, assert_scan_flops,  # noqa: E402
                               write_config)

CONFIGS = {
    "rwkv": dict(model_type="rwkv", hidden_size=64, attention_hidden_size=32,
                 intermediate_size=128, num_hidden_layers=2, vocab_size=1000,
                 context_length=256),
    "xlstm": dict(model_type="xlstm", hidden_size=64, num_heads=4, num_hidden_layers=2,
                  vocab_size=1000, chunk_size=16),
    "xlstm_fused": dict(model_type="xlstm", hidden_size=64, num_heads=4, num_hidden_layers=2,
                        vocab_size=1000, chunk_size=16, weight_mode="fused"),
    "zamba": dict(model_type="zamba", hidden_size=64, num_hidden_layers=6, vocab_size=1000,
                  num_attention_heads=4, num_key_value_heads=4, intermediate_size=128,
                  attn_layer_period=3, attn_layer_offset=1, n_mamba_heads=2),
}
KINDS = {"rwkv": "rwkv", "xlstm": "mlstm", "xlstm_fused": "mlstm", "zamba": "mamba_heads"}
MIXER_LAYERS = {"rwkv": (0, 1), "xlstm": (0, 1), "xlstm_fused": (0, 1),
                "zamba": (0, 1, 2, 3, 4, 5)}

# RWKV-4 per token (hf_mixer.rwkv_flops), h 64, a 32, f 128: time-mix lerps 9 x 64 = 576, WKV
# 25 x 32 = 800, receptance gate 32; channel-mix lerps 6 x 64 = 384, square 128, gate 64
# -> 16 h + 26 a + f = 1,024 + 832 + 128 = 1,984
RWKV_FLOPS = 576 + 800 + 32 + 384 + 128 + 64
# mLSTM per token (hf_mixer.mlstm_flops), H 4, qk_dim 64 x 0.5 = 32 (d_k 8), v_dim 64 (d_v 16),
# chunk L 16: per head 16 x (2 x 8 + 2 x 16 + 3) = 816, + 4 x 8 x 16 = 512, + 6 x 8 = 48, + 16
# = 1,392, x 4 = 5,568; output gate 64 -> 5,632 (single and fused weights alike)
MLSTM_FLOPS = 4 * (816 + 512 + 48 + 16) + 64
# Zamba's multi-head Mamba-1 per token (hf_mixer.zamba_mamba_flops), h 64, d 2 x 64 = 128,
# N 16, R ceil(64 / 16) = 4, k 4: conv 2 x 4 x 128 = 1,024; x_proj 2 x 128 x (4 + 32) = 9,216;
# dt_proj 2 x 128 x 4 = 1,024; scan 7 x 128 x 16 = 14,336; D skip and gate 3 x 128 = 384
ZAMBA_FLOPS = 1_024 + 9_216 + 1_024 + 14_336 + 384
SCAN_FLOPS = {"rwkv": RWKV_FLOPS, "xlstm": MLSTM_FLOPS, "xlstm_fused": MLSTM_FLOPS,
              "zamba": ZAMBA_FLOPS}


_write = write_config


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_counted_exactly_as_transformers_counts_it(tmp_path, kind):
    assert_counted_as_transformers(write_config(tmp_path, CONFIGS[kind]), KINDS[kind],
                                   MIXER_LAYERS[kind])


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_mixer_flops_per_token_are_the_hand_count(tmp_path, kind):
    assert_scan_flops(write_config(tmp_path, CONFIGS[kind]), SCAN_FLOPS[kind])


def test_rwkv_mixer_holds_time_mix_and_channel_mix(tmp_path):
    """RwkvSelfAttention.__init__: key, value, receptance h -> a, output a -> h, time_decay and
    time_first of a, time_mix_key/value/receptance of h; RwkvFeedForward: key h -> f,
    receptance h -> h, value f -> h, time_mix_key/receptance of h. No MLP beside the mixer;
    layer 0's pre_ln is the embedding norm (RwkvBlock.forward)."""
    model = load_model(str(_write(tmp_path, CONFIGS["rwkv"])))
    assert dict((n, (i, o)) for n, i, o in model.mixer.matrices) == {
        "attention.key": (64, 32), "attention.value": (64, 32),
        "attention.receptance": (64, 32), "attention.output": (32, 64),
        "feed_forward.key": (64, 128), "feed_forward.receptance": (64, 64),
        "feed_forward.value": (128, 64)}
    assert sum(n for _, n in model.mixer.small_params) == 2 * 32 + 5 * 64
    assert not model.mixer.mlp and model.embed_norm and model.block_norms == 2


def test_xlstm_mixer_is_the_mlstm_layer_beside_a_gated_mlp(tmp_path):
    """xLSTMLayer.__init__ (weight_mode single): q, k h -> qk_dim, v, ogate_preact h -> v_dim,
    igate_preact, fgate_preact h -> H with biases, multihead_norm of v_dim, out_proj back;
    xLSTMFeedForward: proj_up_gate, proj_up h -> round_up(2.667 h, 64) = 192, proj_down."""
    model = load_model(str(_write(tmp_path, CONFIGS["xlstm"])))
    assert model.mixer.matrices == (("q", 64, 32), ("k", 64, 32), ("v", 64, 64),
                                    ("ogate_preact", 64, 64), ("igate_preact", 64, 4),
                                    ("fgate_preact", 64, 4), ("out_proj", 64, 64))
    assert model.mixer.small_params == (("igate_preact.bias", 4), ("fgate_preact.bias", 4),
                                        ("multihead_norm.weight", 64))
    assert model.mixer.mlp and model.gated_mlp and model.ffn == 192


def test_zamba_shares_one_attention_block_across_its_hybrid_layers(tmp_path):
    """ZambaConfig's layers_block_type: hybrid at i % attn_layer_period == attn_layer_offset
    from the offset on (2 and 4 of 6); ZambaModel.__init__ ties every hybrid layer's
    shared_transf to the first's (one block): q, k, v on 2 h = 128, o back to h, gate, up,
    down apart; each use its own `linear` h x h."""
    model = load_model(str(_write(tmp_path, CONFIGS["zamba"])))
    assert model.shared.layers == (2, 4) and model.shared.blocks == 1
    assert model.shared.use_matrices == (("linear", 64, 64),)
    assert (model.n_heads, model.attn_head_dim, model.ffn, model.fused_gate_up) == \
        (4, 32, 128, False)


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_json_round_trip(tmp_path, kind):
    model = load_model(str(_write(tmp_path, CONFIGS[kind])))
    back = Model(**json.loads(json.dumps(asdict(model))))
    assert back == model and back.n_params == model.n_params


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_memory_and_simulate_run(tmp_path, kind):
    path = _write(tmp_path, CONFIGS[kind])
    mem = run("memory", "-m", str(path), "-H", "dgx-a100", "--seq", "256")
    assert mem.exit_code == 0, mem.output
    sim = run("simulate", "-m", str(path), "-H", "dgx-a100", "-c", "zero3-cpu", "--seq", "256")
    assert sim.exit_code == 0, sim.output


@pytest.mark.parametrize("kind, key, value", [("rwkv", "attention_hidden_size", 0),
                                              ("xlstm", "num_heads", 0),
                                              ("xlstm", "chunk_size", -1),
                                              ("zamba", "n_mamba_heads", 0)])
def test_a_bad_mixer_key_is_one_line_naming_it(tmp_path, kind, key, value):
    path = _write(tmp_path, dict(CONFIGS[kind], **{key: value}))
    assert_user_error(run("memory", "-m", str(path), "-H", "dgx-a100"), str(path), key)
