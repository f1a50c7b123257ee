"""ProphetNet's causal LM (profiles/hf_prophetnet.py): counted as transformers counts it, its
blocks run 1 + ngram streams of the tokens (Model.streams), its LM head the ngram predicting
streams (Model.head_streams), its cross-attention counted and not run."""
from dataclasses import replace

import pytest

from tests._cli import assert_user_error, run, simulated_step_s
from tests._hfdefaults import default_config, written as write, zero3_strategy
from tierlab.profiles.hf_arch import meta_param_count
from tierlab.profiles.load import load_model
from tierlab.sim import flops, memory

transformers = pytest.importorskip("transformers")

SMALL = dict(hidden_size=256, num_decoder_layers=2, decoder_ffn_dim=512,
             num_decoder_attention_heads=4, num_buckets=16, vocab_size=1000)
"""A smaller decoder; the encoder's keys (12 layers, 16 heads) left at their defaults."""


@pytest.mark.parametrize("keys", ({}, {"ngram": 1}, {"ngram": 3}, SMALL))
def test_counts_as_transformers(tmp_path, keys):
    data = default_config("prophetnet", **keys)
    model = load_model(str(write(tmp_path, data)))
    n = data["ngram"]
    assert model.n_params == meta_param_count(data)
    assert (model.streams, model.head_streams) == (1 + n, n)
    assert model.embed_tensors == (("ngram_embeddings.weight", n * data["hidden_size"]),)
    assert model.n_layers == data["num_decoder_layers"]
    assert model.n_heads == data["num_decoder_attention_heads"]
    assert model.learned_pos_emb and model.pos_emb_rows == data["max_position_embeddings"]
    assert model.embed_norm and not model.final_norm
    notes = " ".join(model.not_modelled)
    assert "cross_attn, cross_attn_layer_norm" in notes and f"ngram {n}" in notes
    assert "attn.relative_pos_embeddings" in model.layer_run_matrices(0)


@pytest.mark.parametrize("ngram", (1, 2, 3))
def test_block_flops_scale_with_the_streams(tmp_path, ngram):
    """The block GEMMs run (1 + n) x the tokens; the scores s^2 (1 + 2 n) pairs where one
    stream has s^2 (modeling_prophetnet.py lines 629 and 664); the head n x the tokens."""
    model = load_model(str(write(tmp_path, default_config("prophetnet", ngram=ngram))),
                       seq_len=512)
    one = replace(model, streams=1, head_streams=1)
    a, b = flops.layer_forward(model, 2), flops.layer_forward(one, 2)
    assert a.gemm_counts == b.gemm_counts
    assert a.gemms == pytest.approx(tuple((1 + ngram) * g for g in b.gemms))
    assert a.attention == pytest.approx((1 + 2 * ngram) * b.attention)
    assert flops.logits_forward(model, 2) == pytest.approx(ngram * flops.logits_forward(one, 2))
    s = zero3_strategy()      # no activation checkpointing: every block keeps its own
    assert memory.activation_bytes(model, s)["layer_activations"] == \
        pytest.approx((1 + ngram) * memory.activation_bytes(one, s)["layer_activations"])
    assert memory.logits_loss_bytes(model, s) == \
        pytest.approx(ngram * memory.logits_loss_bytes(one, s))


def test_forward_flops_are_transformers(tmp_path):
    """The GEMM and score FLOPs of transformers' own ProphetNetForCausalLM forward (torch's
    FlopCounterMode: Linear, einsum) are tierlab's blocks plus its head, exactly."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import ProphetNetConfig, ProphetNetForCausalLM

    keys = dict(hidden_size=32, num_decoder_layers=2, num_encoder_layers=2, decoder_ffn_dim=64,
                num_decoder_attention_heads=4, num_encoder_attention_heads=4, num_buckets=8,
                vocab_size=50, max_position_embeddings=64, ngram=2)
    s = 16
    lm = ProphetNetForCausalLM(ProphetNetConfig(**keys)).eval()
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        lm(input_ids=torch.randint(3, 50, (1, s)), use_cache=False)
    model = load_model(str(write(tmp_path, default_config("prophetnet", **keys))), seq_len=s)
    ours = model.n_layers * flops.layer_forward(model, 1).total + flops.logits_forward(model, 1)
    assert counter.get_total_flops() == pytest.approx(ours)


@pytest.mark.parametrize("keys", ({}, SMALL))
def test_simulate_runs(tmp_path, keys):
    assert simulated_step_s(write(tmp_path, default_config("prophetnet", **keys)), "dgx-a100",
                            512) > 0


@pytest.mark.parametrize("ngram, said", ((0, "no predicting stream"),
                                         (10 ** 9, "ngram: 1e+09 is beyond the bound 1000"),
                                         (1e9, "'ngram'"),      # transformers: not an int
                                         (-1, "ngram: must be >= 0")))
def test_bad_ngram_is_one_line_exit_2(tmp_path, ngram, said):
    data = dict(default_config("prophetnet"), ngram=ngram)
    path = write(tmp_path, data)
    assert_user_error(run("simulate", "-m", str(path), "-H", "dgx-a100", "-c", "zero3-cpu"),
                      path.name, said)
