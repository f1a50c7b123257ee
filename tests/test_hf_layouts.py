"""Block layouts profiles/hf_blocks.py reads beside the attention + `mlp` child (issue 30): the
MLP as two Linears of the block itself (BioGPT, XGLM: fc1, fc2), CTRL's multi_head_attention +
ffn (Sequential); each built from transformers' default config at small sizes counts exactly
as transformers does, and a variant it cannot express is refused in one line."""
import pytest

from tierlab.errors import ConfigError
from tierlab.profiles.hf_arch import meta_param_count
from tierlab.profiles.load import model_from_hf_config

SMALL = {
    "biogpt": dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                   num_attention_heads=4, vocab_size=1000, max_position_embeddings=32),
    "xglm": dict(num_layers=2, d_model=64, ffn_dim=128, attention_heads=4, vocab_size=1000,
                 max_position_embeddings=32),
    "ctrl": dict(n_layer=2, n_embd=64, dff=128, n_head=4, vocab_size=1000, n_positions=32),
}


def _config(kind: str, **over) -> dict:
    return dict(SMALL[kind], model_type=kind, **over)


@pytest.mark.parametrize("kind", sorted(SMALL))
def test_layout_counts_exactly_like_transformers(kind):
    pytest.importorskip("transformers")
    cfg = _config(kind)
    model = model_from_hf_config(cfg, f"{kind}.json")
    assert model.n_params == meta_param_count(cfg) and model.n_layers == 2
    assert model.ffn == 128 and not model.gated_mlp


def test_biogpt_learned_positions_hold_the_offset_rows():
    """BioGptLearnedPositionalEmbedding: max_position_embeddings + 2 rows (its offset 2)."""
    pytest.importorskip("transformers")
    model = model_from_hf_config(_config("biogpt"), "biogpt.json")
    assert model.learned_pos_emb and model.pos_emb_rows == 34


@pytest.mark.parametrize("kind, key", [("xglm", "ffn_dim"), ("biogpt", "num_hidden_layers")])
def test_bad_variant_is_refused_in_one_line(kind, key):
    pytest.importorskip("transformers")
    with pytest.raises(ConfigError) as e:
        model_from_hf_config(_config(kind, **{key: -1}), f"{kind}.json")
    assert "\n" not in str(e.value) and f"{kind}.json" in str(e.value)
