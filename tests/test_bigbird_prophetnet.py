"""BigBird's block-sparse attention timed as a window (profiles/hf_bigbird.py) and BigBird-Pegasus'
decoder attending fully; ProphetNet's n-gram streams: tests/test_prophetnet.py."""

import pytest

from tests._hfdefaults import default_config, written as write
from tests._cli import assert_user_error, run, simulated_step_s
from tierlab.profiles.hf_arch import meta_param_count
from tierlab.profiles.hf_bigbird import exact_keys, sparse_window
from tierlab.profiles.load import load_model
from tierlab.sim import flops

transformers = pytest.importorskip("transformers")


def big_bird(**keys) -> dict:
    """bigbird-roberta-base's defaults (block_size 64, num_random_blocks 3, block_sparse) as a
    decoder."""
    return default_config("big_bird", is_decoder=True, **keys)


def test_block_sparse_counts_as_transformers_and_is_a_window(tmp_path):
    data = big_bird()
    model = load_model(str(write(tmp_path, data)))
    assert model.n_params == meta_param_count(data)
    assert model.attention_windows == (sparse_window(64, 3),) * 12 == (640,) * 12
    notes = " ".join(model.not_modelled)
    assert "block-sparse attention (block_size 64, num_random_blocks 3)" in notes
    assert "masks no future tokens" in notes and "704 tokens run full attention" in notes


def test_block_sparse_attention_flops_at_4096(tmp_path):
    """At s 4096 a query is timed to see (7 + 3) x 64 = 640 keys of full attention's 4096;
    the exact average, 622, is 2.9 % below; the projections and the MLP are those of full
    attention."""
    s = 4096
    sparse = load_model(str(write(tmp_path, big_bird())), seq_len=s)
    full = load_model(str(write(tmp_path, big_bird(attention_type="original_full"))), seq_len=s)
    a, b = flops.layer_forward(sparse, 1), flops.layer_forward(full, 1)
    assert a.attention / b.attention == pytest.approx(640 / s)
    assert a.gemms == b.gemms and sparse.n_params == full.n_params
    assert exact_keys(s, 64, 3) == pytest.approx(640 - 2 * 9 * 64 * 64 / s)
    assert 0 < 640 / exact_keys(s, 64, 3) - 1 < 0.03


def test_exact_keys_is_what_transformers_multiplies():
    """The score and context FLOPs of transformers' own BigBirdBlockSparseAttention forward
    (torch's FlopCounterMode, the q/k/v projections taken off) are 4 h s x exact_keys."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import BigBirdConfig
    from transformers.models.big_bird.modeling_big_bird import (BigBirdBlockSparseAttention,
                                                                 BigBirdModel)

    b, r, s, h = 4, 2, 64, 16
    cfg = BigBirdConfig(hidden_size=h, num_attention_heads=2, block_size=b, num_random_blocks=r,
                        max_position_embeddings=256)
    attn = BigBirdBlockSparseAttention(cfg).eval()
    blocked, band, from_mask, to_mask = \
        BigBirdModel.create_masks_for_block_sparse_attn(torch.ones(1, s), b)
    with FlopCounterMode(display=False) as counter:
        attn(torch.randn(1, s, h), band, from_mask, to_mask, blocked, blocked)
    assert counter.get_total_flops() - 3 * 2 * s * h * h == 4 * h * s * exact_keys(s, b, r)


def test_short_sequences_run_full_attention():
    """s <= (5 + 2 r) b: BigBirdModel.forward switches to original_full (lines 1579-1593)."""
    assert exact_keys(704, 64, 3) == 704 and exact_keys(705, 64, 3) < 705


def test_bigbird_pegasus_decoder_attends_fully(tmp_path):
    data = default_config("bigbird_pegasus")
    assert data["attention_type"] == "block_sparse"        # its encoder's, not its decoder's
    model = load_model(str(write(tmp_path, data)))
    assert model.attention_windows == () and model.n_params == meta_param_count(data)


@pytest.mark.parametrize("keys", ({}, {"block_size": 16, "num_random_blocks": 2}))
def test_simulate_runs(tmp_path, keys):
    data = dict(big_bird(**keys), num_hidden_layers=2)
    assert simulated_step_s(write(tmp_path, data), "dgx-a100", 2048) > 0


@pytest.mark.parametrize("keys, said", (({"block_size": 0}, "block_size: must be >= 1"),
                                        ({"num_random_blocks": 1e9}, "num_random_blocks"),
                                        ({"num_random_blocks": -1}, "num_random_blocks")))
def test_bad_block_sparse_values_are_one_line_exit_2(tmp_path, keys, said):
    path = write(tmp_path, dict(big_bird(), **keys))
    assert_user_error(run("simulate", "-m", str(path), "-H", "dgx-a100", "-c", "zero3-cpu"),
                      path.name, said)
