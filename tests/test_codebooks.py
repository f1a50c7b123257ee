"""Musicgen and Musicgen Melody (profiles/hf_codebooks.py): one token table and one LM head per
codebook (Model.codebooks), counted exactly as transformers counts them on the meta device;
the heads timed and their logits held as num_codebooks heads, each table and head hooked as its
own module by ZeRO-3; Musicgen's cross-attention counted, not run; `tierlab simulate` runs;
a bad num_codebooks is one line, exit 2."""
import json
from dataclasses import replace

import pytest

from tests._hfdefaults import default_config as hf_default, written, zero3_strategy as strategy
from tests._cli import assert_user_error, run, simulated_step_s
from tierlab.profiles.hf_arch import meta_param_count
from tierlab.profiles.load import load_model
from tierlab.sim import flops
from tierlab.sim.memory import logits_loss_bytes
from tierlab.sim.modules import modules

transformers = pytest.importorskip("transformers")

KINDS = ("musicgen", "musicgen_melody")


def default_config(kind: str, **decoder) -> dict:
    """transformers' default config of `kind` as a config.json holds it, `decoder` keys set in
    its decoder section (where Musicgen's num_codebooks lives)."""
    data = hf_default(kind)
    data["decoder"].update(decoder)
    return data


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("decoder", ({}, {"num_codebooks": 1}, {"num_codebooks": 8},
                                     {"num_codebooks": 2, "vocab_size": 1000,
                                      "hidden_size": 256, "num_hidden_layers": 2,
                                      "ffn_dim": 512, "num_attention_heads": 4}))
def test_counts_exactly_as_transformers(kind, decoder, tmp_path):
    data = default_config(kind, **decoder)
    model = load_model(str(written(tmp_path, data)))
    assert model.n_params == meta_param_count(data)
    assert model.codebooks == decoder.get("num_codebooks", 4)


def test_musicgen_fields(tmp_path):
    """Musicgen's defaults: 4 tables of 2,049 x 1,024 (vocab_size + 1), 4 heads 1,024 -> 2,048
    without bias, sinusoidal positions (a buffer: no parameter), a final LayerNorm, and every
    block's encoder_attn held, not run."""
    model = load_model(str(written(tmp_path, default_config("musicgen"))))
    assert (model.codebooks, model.vocab, model.embed_rows) == (4, 2048, 2049)
    assert not model.learned_pos_emb and not model.tie_embeddings and not model.head_bias
    assert model.final_norm and model.norm == "layernorm"
    assert model.unrun_matrices and any("cross-attention" in n for n in model.not_modelled)
    # 4 x (2,049 + 2,048) x 1,024 tables and heads + the final LayerNorm's 2 x 1,024
    assert model.embedding_params == 4 * (2049 + 2048) * 1024 + 2 * 1024 == 16_783_360


def test_melody_prepends_no_cross_attention(tmp_path):
    model = load_model(str(written(tmp_path, default_config("musicgen_melody"))))
    assert model.codebooks == 4 and model.unrun_matrices == ()
    assert any("prepends" in n for n in model.not_modelled), model.not_modelled


def test_heads_timed_and_held_per_codebook(tmp_path):
    model = load_model(str(written(tmp_path, default_config("musicgen"))))
    one = replace(model, codebooks=1, embed_rows=0)
    # the heads: 4 GEMMs hidden x vocab a token, 4 x the logits (and their loss) held
    assert flops.logits_forward(model, 1) == 4 * flops.logits_forward(one, 1) == \
        4 * 2.0 * 2048 * 1024 * 2048
    assert logits_loss_bytes(model, strategy()) == 4 * logits_loss_bytes(one, strategy())
    # the blocks are the same; ZeRO-3 hooks each table and each head (and the final norm)
    assert flops.layer_forward(model, 1).total == flops.layer_forward(one, 1).total
    embed, *_, head = modules(model, strategy())
    assert embed.own_names == tuple(f"embed_tokens.{c}" for c in range(4))
    assert embed.own_params == (2049 * 1024,) * 4 and embed.hooked == 4
    assert head.own_names == ("final_norm", *(f"lm_heads.{c}" for c in range(4)))
    assert head.hooked == 5 and head.fetch_tensors == 4
    one_embed, *_, one_head = modules(one, strategy())
    assert (one_embed.own_names, one_head.own_names) == (("embed_tokens",),
                                                        ("final_norm", "lm_head"))


def test_codebooks_field_checked():
    from tierlab.profiles.schema import Model

    base = dict(name="m", n_layers=1, hidden=64, ffn=128, n_heads=4, n_kv_heads=4, vocab=100,
                seq_len=16)
    for bad in (dict(codebooks=0), dict(codebooks=2.0), dict(codebooks=True),
                dict(embed_rows=-1), dict(codebooks=2, tie_embeddings=True)):
        with pytest.raises(ValueError, match="Model.codebooks"):
            Model(**base, **bad)


@pytest.mark.parametrize("kind", KINDS)
def test_simulate_runs(kind, tmp_path):
    simulated_step_s(written(tmp_path, default_config(kind), kind), "h200-gen5", 1024)


@pytest.mark.parametrize("value,said", ((0, "must be >= 1"), (1_000_000_000, "beyond the bound"),
                                        (1e9, "num_codebooks"), (-3, "must be >= 1")))
def test_a_bad_num_codebooks_is_one_line_exit_2(value, said, tmp_path):
    path = written(tmp_path, default_config("musicgen", num_codebooks=value))
    assert_user_error(run("simulate", "-m", str(path)), str(path), "num_codebooks", said)
