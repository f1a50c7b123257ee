"""The decoders of encoder-decoder families built as causal LMs (profiles/hf_encdec.py): BART,
mBART, Pegasus, PLBart, MVP, Blenderbot, Blenderbot-Small, BigBird-Pegasus, TrOCR, Whisper and
Marian load from transformers 5.25.0's default config and count exactly as transformers does on
the meta device; their cross-attention is counted and held but runs no FLOPs and is never
gathered by ZeRO-3; `tierlab simulate` runs them (Musicgen: tests/test_codebooks.py; ProphetNet,
whose cross-attention is held the same way: tests/test_prophetnet.py)."""
from dataclasses import replace

import pytest

from tests._hfdefaults import default_config, written, zero3_strategy as strategy
from tests._cli import assert_user_error, run, simulated_step_s
from tierlab.profiles.hf_arch import meta_param_count
from tierlab.profiles.layout import UNRUN_PREFIX
from tierlab.profiles.load import load_model
from tierlab.sim import flops
from tierlab.sim.modules import modules

transformers = pytest.importorskip("transformers")

LOADED = ("bart", "mbart", "pegasus", "plbart", "mvp", "blenderbot", "blenderbot-small",
          "bigbird_pegasus", "trocr", "whisper", "marian")


@pytest.mark.parametrize("kind", LOADED)
def test_counts_exactly_as_transformers(kind, tmp_path):
    data = default_config(kind)
    model = load_model(str(written(tmp_path, data)))
    assert model.n_params == meta_param_count(data)
    assert model.unrun_matrices and any("cross-attention" in n for n in model.not_modelled)


def test_the_decoder_keys_are_the_decoders(tmp_path):
    """A flat encoder-decoder config whose decoder differs from its encoder: the decoder's
    layers, width and heads are built (get_text_config's copy reverted them to the defaults)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    keys = dict(decoder_layers=3, encoder_layers=5, decoder_ffn_dim=256,
                decoder_attention_heads=4, d_model=128, vocab_size=1000)
    data = dict(default_config("bart"), **keys)
    with torch.device("meta"):
        built = AutoModelForCausalLM.from_config(AutoConfig.for_model("bart", **keys))
    model = load_model(str(written(tmp_path, data)))
    assert (model.n_layers, model.ffn, model.n_heads) == (3, 256, 4)
    assert model.n_params == sum(p.numel() for p in built.parameters()) == \
        meta_param_count(data)


def test_cross_attention_is_held_not_run(tmp_path):
    model = load_model(str(written(tmp_path, default_config("bart"))))
    bare = replace(model, unrun_matrices=(), unrun_small_params=())
    unrun = sum(i * o for _, i, o in model.unrun_matrices) + \
        sum(k for _, k in model.unrun_small_params)
    # BART's defaults: q, k, v, out 1,024 x 1,024 + biases, a LayerNorm: 4,200,448 a block
    assert unrun == 4 * (1024 * 1024 + 1024) + 2 * 1024 == 4_200_448
    assert model.n_params - bare.n_params == 12 * unrun
    assert flops.layer_forward(model, 1).total == flops.layer_forward(bare, 1).total
    held, run_ = modules(model, strategy())[1], modules(bare, strategy())[1]
    assert sum(held.own_params) - sum(run_.own_params) == unrun
    assert (held.fetch_numel, held.hooked) == (run_.fetch_numel, run_.hooked)
    assert any(n.startswith(f"layers.0.{UNRUN_PREFIX}encoder_attn.") for n in held.own_names)


@pytest.mark.parametrize("kind", ("bart", "whisper", "marian"))
def test_simulate_runs(kind, tmp_path):
    simulated_step_s(written(tmp_path, default_config(kind), kind), "h200-gen5", 448)


def test_a_bad_decoder_key_is_one_line_exit_2(tmp_path):
    path = written(tmp_path, dict(default_config("bart"), decoder_layers=-1))
    assert_user_error(run("simulate", "-m", str(path)), str(path), "must be >= 1")
