import json

import pytest

from _runnerhelp import SAMPLE, TINY
from tierlab.errors import ConfigError
from tierlab.profiles.load import load_model
from tierlab.runner import data
from tierlab.runner.make_alpaca_sample import generate
from tierlab.runner.model import llama_config


def test_sample_is_what_the_generator_writes():
    lines = [json.loads(x) for x in open(SAMPLE)]
    assert lines == generate()                    # committed file == generator output
    assert all(set(r) == {"instruction", "input", "output"} for r in lines)


def test_alpaca_json_and_jsonl_load_and_pack(tmp_path):
    recs = data.load_alpaca(SAMPLE)
    arr = tmp_path / "a.json"
    arr.write_text(json.dumps(recs[:5]))
    assert data.load_alpaca(arr) == recs[:5]
    batches = data.make_batches(vocab=8192, micro_batch=2, seq=64, dataset=SAMPLE)
    b = next(batches)
    assert tuple(b.shape) == (2, 64) and int(b.max()) < 258      # byte-level ids
    assert int(b[0, 0]) == data.ByteTokenizer().bos_token_id


@pytest.mark.parametrize("text,msg", [("", "no records"), ('{"instruction": "x"}\n', "needs"),
                                      ('{"instruction": "x", "output": "y", "z": 1}', "unknown"),
                                      ("{not json", "malformed")])
def test_alpaca_errors_name_the_file(tmp_path, text, msg):
    f = tmp_path / "bad.jsonl"
    f.write_text(text)
    with pytest.raises(ConfigError, match=msg):
        data.load_alpaca(f)


def test_byte_tokenizer_needs_vocab():
    with pytest.raises(ConfigError, match="vocab"):
        data.make_batches(vocab=100, micro_batch=1, seq=8, dataset=SAMPLE)


def test_synthetic_is_reproducible():
    a = next(data.synthetic_batches(1000, 2, 16, seed=3))
    b = next(data.synthetic_batches(1000, 2, 16, seed=3))
    assert (a == b).all() and int(a.max()) < 1000


def test_llama_config_matches_the_profile_param_count():
    from transformers import LlamaForCausalLM

    m = load_model(TINY)
    net = LlamaForCausalLM(llama_config(m))
    assert sum(p.numel() for p in net.parameters()) == m.n_params
    tl = llama_config(load_model("tinyllama-1.1b"))
    assert (tl.num_key_value_heads, tl.intermediate_size, tl.num_hidden_layers) == (4, 5632, 22)
