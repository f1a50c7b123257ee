"""X-MOD (profiles/hf_xmod.py): every block's per-language adapters counted exactly as
transformers counts them on the meta device, gathered by ZeRO-3 and updated as the block's
other tensors, one adapter a token timed; `tierlab simulate` runs; a bad languages list or
adapter_reduction_factor is one line, exit 2."""
from dataclasses import replace

import pytest

from tests._hfdefaults import default_config as hf_default, written, zero3_strategy as strategy
from tests._cli import assert_user_error, run, simulated_step_s
from tierlab.profiles.hf_arch import meta_param_count
from tierlab.profiles.layout import ADAPTER_PREFIX
from tierlab.profiles.load import load_model
from tierlab.sim import flops
from tierlab.sim.modules import modules

transformers = pytest.importorskip("transformers")

THREE = ["en_XX", "de_DE", "fr_XX"]


def default_config(**keys) -> dict:
    return hf_default("xmod", **keys)


@pytest.mark.parametrize("keys", ({}, {"languages": THREE}, {"languages": []},
                                  {"languages": THREE[:2], "adapter_layer_norm": True},
                                  {"languages": THREE[:2], "adapter_reduction_factor": 4,
                                   "is_decoder": True}))
def test_counts_exactly_as_transformers(keys, tmp_path):
    data = default_config(**keys)
    model = load_model(str(written(tmp_path, data)))
    assert model.n_params == meta_param_count(data)
    assert model.adapters == len(keys.get("languages", ["en_XX"]))


def test_adapters_read_off_the_modules(tmp_path):
    """xmod-base sizes: dense1 768 -> 384 (adapter_reduction_factor 2), dense2 back, both with
    bias: 590,976 parameters a language a block, named in not_modelled."""
    model = load_model(str(written(tmp_path, default_config(languages=THREE))))
    assert model.adapter_matrices == (("dense1", 768, 384), ("dense2", 384, 768))
    assert model.adapter_small_params == (("dense1.bias", 384), ("dense2.bias", 768))
    bare = replace(model, adapters=0, adapter_matrices=(), adapter_small_params=())
    assert model.n_params - bare.n_params == 12 * 3 * 590_976
    assert any("per-language adapters (3 language(s)" in n for n in model.not_modelled)


def test_one_adapter_timed_every_adapter_gathered(tmp_path):
    model = load_model(str(written(tmp_path, default_config(languages=THREE))))
    one = replace(model, adapters=1)
    bare = replace(model, adapters=0, adapter_matrices=(), adapter_small_params=())
    # a token runs one adapter: 2 x 2 x 768 x 384 FLOPs, whatever the languages held
    assert flops.layer_forward(model, 1).total == flops.layer_forward(one, 1).total
    assert flops.layer_forward(model, 1).total - flops.layer_forward(bare, 1).total == \
        2 * model.seq_len * 2 * 768 * 384
    # every language's adapter module is called (on no tokens for most): each Linear hooked,
    # each weight gathered (the biases persist under the default threshold)
    held, run_ = modules(model, strategy())[1], modules(bare, strategy())[1]
    assert held.hooked - run_.hooked == 3 * 2
    assert held.fetch_numel - run_.fetch_numel == 3 * 2 * 768 * 384
    assert sum(n.startswith(f"layers.0.{ADAPTER_PREFIX}") for n in held.own_names) == 3 * 4


def test_adapters_field_checked():
    from tierlab.profiles.schema import Model

    base = dict(name="m", n_layers=1, hidden=64, ffn=128, n_heads=4, n_kv_heads=4, vocab=100,
                seq_len=16)
    for bad in (dict(adapters=-1), dict(adapters=2), dict(adapters=True),
                dict(adapter_matrices=(("dense1", 64, 32),))):
        with pytest.raises(ValueError, match="Model.adapters"):
            Model(**base, **bad)


def test_simulate_runs(tmp_path):
    simulated_step_s(written(tmp_path, default_config(languages=THREE, is_decoder=True)),
                     "h200-gen5", 512)


@pytest.mark.parametrize("keys,said", (
        ({"adapter_reduction_factor": 0}, "must be >= 1"),
        ({"adapter_reduction_factor": 1_000_000}, "beyond the bound 768"),
        ({"languages": [str(i) for i in range(20_000)]}, "beyond the bound")))
def test_a_bad_adapter_key_is_one_line_exit_2(keys, said, tmp_path):
    path = written(tmp_path, dict(default_config(), **keys))
    assert_user_error(run("simulate", "-m", str(path)), str(path), next(iter(keys)), said)
