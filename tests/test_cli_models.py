"""The model names people type resolve to shipped profiles that equal the Hugging Face configs
kept in tests/data (profiles/models/, each YAML naming its origin)."""
import dataclasses
import json

import pytest

from tierlab.profiles.load import load_model

from _cli import run

SHIPPED = {"llama-3.1-8b": 0, "mistral-7b-v0.3": 0, "qwen2.5-7b": 28 * (3584 + 2 * 512)}
"""Profile -> parameters its YAML lacks against the HF config (Qwen2.5's q/k/v biases)."""


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_profile_equals_its_hf_config(name):
    yaml_model, hf = load_model(name), load_model(f"tests/data/hf_configs/{name}.json")
    assert hf.n_params - yaml_model.n_params == SHIPPED[name]
    a, b = dataclasses.asdict(yaml_model), dataclasses.asdict(hf)
    differ = {k for k in a if a[k] != b[k]} - {"name", "source", "qkv_bias"}
    assert not differ, differ
    assert "config.json (Hugging Face)" in yaml_model.source


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_memory_on_the_shipped_name(name):
    r = run("memory", "-m", name, "-H", "dgx-a100", "-c", "zero3-cpu", "--seq", "2048",
            "--micro-batch", "1", "--json", "-q")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["model"] == load_model(name).name
