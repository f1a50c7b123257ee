"""Reformer's causal LM (ReformerModelWithLMHead, profiles/hf_reformer.py): counted exactly as
transformers counts it on the meta device and refused in one line naming what tierlab does not
model (LSH attention, reversible layers); bad values refused in one line; the default config,
is_decoder false, refused as transformers refuses it."""

import pytest

from tests._cli import assert_user_error, run
from tests._hfdefaults import default_config, written as write
from tierlab.errors import ConfigError
from tierlab.profiles.hf_arch import meta_param_count
from tierlab.profiles.hf_reformer import section_params
from tierlab.profiles.load import load_model

transformers = pytest.importorskip("transformers")

VARIANTS = {"default": dict(is_decoder=True),
            "small": dict(is_decoder=True, hidden_size=64, num_attention_heads=4,
                          attention_head_size=32, axial_pos_embds_dim=[32, 32],
                          attn_layers=["local", "lsh"], vocab_size=1000, feed_forward_size=128),
            "all-local": dict(is_decoder=True, attn_layers=["local"] * 4, num_hashes=2),
            "lsh-table": dict(is_decoder=True, attn_layers=["lsh", "lsh"], num_hashes=4,
                              axial_pos_embds=False, max_position_embeddings=2048)}
"""Keys over transformers' default ReformerConfig (hidden 256, 2 heads of 64, 6 layers
alternating local and lsh, feed-forward 512, vocab 320, axial positions 64 x 64)."""


def our_count(data: dict) -> int:
    from transformers import AutoConfig

    keys = {k: v for k, v in data.items() if k != "model_type"}
    return sum(section_params(AutoConfig.for_model("reformer", **keys)).values())


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_counts_equal_transformers(name):
    data = default_config("reformer", **VARIANTS[name])
    assert our_count(data) == meta_param_count(data)


def test_default_decoder_count():
    """5,976,192: embeddings 320 x 256 + axial 64 x 64 + 64 x 192, 3 local layers (q, k, v, o
    256 x 128) and 3 lsh (query_key, v, o), feed-forward 256 x 512 each way, the head 512 x
    320 with its bias and a second bias."""
    assert our_count(default_config("reformer", is_decoder=True)) == 5_976_192


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_simulate_refuses_in_one_line_with_the_count(tmp_path, name):
    data = default_config("reformer", **VARIANTS[name])
    res = run("simulate", "-m", str(write(tmp_path, data)), "-H", "dgx-a100")
    assert_user_error(res, "model_type 'reformer' is not a supported architecture",
                      f"tierlab counts {meta_param_count(data):,} parameters as transformers does",
                      "LSH attention", "reversible layers")


def test_keys_scored_a_query_are_named(tmp_path):
    data = default_config("reformer", **VARIANTS["lsh-table"])
    with pytest.raises(ConfigError, match=r"2 lsh \(512 keys scored a query\)"):
        load_model(str(write(tmp_path, data)))      # 4 hashes x (1 + 1 + 0) x 64


def test_default_config_is_not_a_decoder(tmp_path):
    res = run("simulate", "-m", str(write(tmp_path, default_config("reformer"))))
    assert_user_error(res, "transformers cannot build a causal LM of model_type 'reformer'",
                      "is_decoder=True")


@pytest.mark.parametrize("keys, fragment", [
    (dict(num_hashes=0), "num_hashes: must be >= 1, got 0"),
    (dict(local_attn_chunk_length=0), "local_attn_chunk_length: must be >= 1, got 0"),
    (dict(lsh_attn_chunk_length=-64), "lsh_attn_chunk_length: must be >= 1"),
    (dict(lsh_num_chunks_before=-1), "lsh_num_chunks_before: must be >= 0"),
    (dict(attn_layers=["local", "full"]), "attn_layers: expected a list of 'local' and 'lsh'"),
    (dict(axial_pos_shape=[64]), "axial_pos_shape"),
])
def test_bad_values_one_line(tmp_path, keys, fragment):
    data = default_config("reformer", is_decoder=True)
    data.update(keys)
    res = run("simulate", "-m", str(write(tmp_path, data)), "-H", "dgx-a100")
    assert_user_error(res, fragment)
