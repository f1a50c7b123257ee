"""Byte Latent Transformer (model_type 'blt', profiles/hf_blt.py): tierlab counts each part as
transformers 5.25.0 builds BltForCausalLM on the meta device, and refuses the model in one line
(exit 2) naming the count and what it does not model; a bad count in a sub-config is one line
naming it."""
import json

import pytest

from tests._cli import assert_user_error, run
from tierlab.errors import ConfigError
from tierlab.profiles.hf_arch import meta_param_count
from tierlab.profiles.load import load_model

pytest.importorskip("transformers")

SMALL = dict(hidden_size=64, num_attention_heads=4, intermediate_size=96)
CASES = {
    "default": {},
    "small": dict(encoder_config=dict(SMALL, num_hidden_layers=2, hidden_size_global=128),
                  decoder_config=dict(SMALL, num_hidden_layers=3, hidden_size_global=128),
                  global_config=dict(SMALL, hidden_size=128, num_hidden_layers=2,
                                     num_key_value_heads=2),
                  patcher_config=dict(SMALL, num_hidden_layers=2),
                  encoder_hash_byte_group_vocab=1000),
    # encoder 64 x cross_attn_k 2 = 128 is not the global width: token_embedding_projection
    "projected": dict(encoder_config=dict(SMALL, cross_attn_all_layers=True, num_hidden_layers=2),
                      decoder_config=dict(SMALL, cross_attn_all_layers=False,
                                          hidden_size_global=96),
                      global_config=dict(SMALL, hidden_size=96, num_hidden_layers=1),
                      encoder_hash_byte_group_vocab=1000,
                      encoder_hash_byte_group_nb_functions=2,
                      encoder_hash_byte_group_size=[3, 4]),
    "no-patcher": dict(patch_in_forward=False, encoder_hash_byte_group_vocab=1000),
    "tied": dict(tie_word_embeddings=True, encoder_hash_byte_group_vocab=1000),
    # tied across widths: the encoder's byte embedding takes the head's tensor (300 x 96), its
    # own 260 x 64 is gone (`_tied_weights_keys` is {target: source})
    "tied-across-widths": dict(tie_word_embeddings=True, vocab_size=300,
                               encoder_config=dict(SMALL),
                               decoder_config=dict(SMALL, hidden_size=96),
                               encoder_hash_byte_group_vocab=1000),
}


def _config(name: str) -> dict:
    return dict(CASES[name], model_type="blt")


def _refusal(cfg: dict, tmp_path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as e:
        load_model(str(path))
    return str(e.value)


@pytest.mark.parametrize("name", sorted(CASES))
def test_count_equals_transformers(name, tmp_path):
    cfg = _config(name)
    theirs = meta_param_count(cfg)
    line = _refusal(cfg, tmp_path)
    assert f"tierlab counts {theirs:,} parameters as transformers does" in line, line
    assert "\n" not in line and "not modelled: a Byte Latent Transformer" in line


def test_default_parts_and_frozen_patcher(tmp_path):
    # transformers 5.25.0 default BltConfig: 4,633,127,680 parameters, 3,072,012,288 of them
    # the hash table (500,002 x 6 rows x 1,024), 99,512,064 the frozen patcher
    line = _refusal(_config("default"), tmp_path)
    for part in ("4,633,127,680", "hash n-gram embeddings 3,072,012,288 (3,000,012 x 1,024)",
                 "global transformer 1,284,608,000 (25 layers, hidden 2,048)",
                 "entropy patcher 99,512,064 (14 layers, hidden 768; frozen: transformers "
                 "builds 99,512,064 parameters without gradients)", "patch_size 4"):
        assert part in line, line


def test_no_patcher_no_frozen_part(tmp_path):
    assert "patcher 0" not in _refusal(_config("no-patcher"), tmp_path)
    assert "entropy patcher" not in _refusal(_config("no-patcher"), tmp_path).split(
        "not modelled")[0]


def test_cli_refuses_in_one_line(tmp_path):
    path = tmp_path / "blt.json"
    path.write_text(json.dumps(_config("small")))
    assert_user_error(run("simulate", "-m", str(path)), "blt.json", "'blt'",
                      "as transformers does", "one width and one sequence length")


@pytest.mark.parametrize("change, named", [
    (dict(encoder_config=dict(num_hidden_layers=10**9)), "encoder_config: num_hidden_layers"),
    (dict(global_config=dict(hidden_size=0)), "global_config: hidden_size"),
    (dict(decoder_config=dict(num_attention_heads=-2)), "decoder_config: num_attention_heads"),
    (dict(encoder_hash_byte_group_vocab=10**12), "encoder_hash_byte_group_vocab"),
    (dict(encoder_hash_byte_group_size=[3, 0]), "encoder_hash_byte_group_size"),
    (dict(decoder_config=dict(hidden_size_global=0)), "decoder_config: hidden_size_global"),
])
def test_bad_value_is_one_line_exit_2(change, named, tmp_path):
    path = tmp_path / "blt.json"
    path.write_text(json.dumps(dict(change, model_type="blt")))
    assert_user_error(run("memory", "-m", str(path)), "blt.json", named)
