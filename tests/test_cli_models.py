"""The model names people type resolve to shipped profiles that equal the Hugging Face configs
kept in tests/data (profiles/models/, each YAML naming its origin)."""
import dataclasses
import json

import pytest

from tierlab.profiles.load import load_model

from _cli import run

SHIPPED = ("llama-3.1-8b", "llama-3.1-70b", "mistral-7b-v0.3", "qwen2.5-7b")
"""Profiles that equal their HF config field by field (Qwen2.5's q/k/v biases: `qkv_bias`)."""


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_profile_equals_its_hf_config(name):
    yaml_model, hf = load_model(name), load_model(f"tests/data/hf_configs/{name}.json")
    assert hf.n_params == yaml_model.n_params
    a, b = dataclasses.asdict(yaml_model), dataclasses.asdict(hf)
    differ = {k for k in a if a[k] != b[k]} - {"name", "source"}
    assert not differ, differ
    assert "config.json (Hugging Face)" in yaml_model.source


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_memory_on_the_shipped_name(name):
    r = run("memory", "-m", name, "-H", "dgx-a100", "-c", "zero3-cpu", "--seq", "2048",
            "--micro-batch", "1", "--json", "-q")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["model"] == load_model(name).name


def test_seq_beyond_the_models_positions():
    """A RoPE model is simulated at a longer --seq with a note; a learned position table has no
    rows past its last one, so GPT-2 is refused in one line (exit 2)."""
    from click.testing import CliRunner

    from tierlab.cli import main

    r = CliRunner().invoke(main, ["simulate", "-m", "llama-2-7b", "-H", "dgx-a100", "-c",
                                  "zero3-cpu", "--seq", "8192"])
    assert r.exit_code == 0 and "beyond Llama-2-7B's 4,096 positions" in r.output
    r = CliRunner().invoke(main, ["memory", "-m", "gpt2-10b", "-H", "dgx-a100", "--seq", "2048"])
    assert r.exit_code == 2 and "--seq 2,048 is beyond GPT-2-10B's 1,024 positions" in r.output
    r = CliRunner().invoke(main, ["memory", "-m", "gpt2-10b", "-H", "dgx-a100", "--seq", "512"])
    assert r.exit_code == 0 and "beyond" not in r.output


def test_hugging_face_ids_resolve_to_the_shipped_profiles():
    from click.testing import CliRunner

    from tierlab.cli import main
    from tierlab.profiles.load import HF_IDS_FILE, MODELS_DIR, load_model, read_data

    ids = read_data(HF_IDS_FILE)
    assert len(ids) >= 20 and all((MODELS_DIR / f"{p}.yaml").is_file() for p in ids.values())
    assert load_model("meta-llama/Llama-3.1-8B") == load_model("llama-3.1-8b")
    assert load_model("TINYLLAMA/tinyllama-1.1b-chat-v1.0").name == "TinyLlama-1.1B"  # any case
    r = CliRunner().invoke(main, ["memory", "-m", "mistralai/Mistral-7B-v0.3", "--seq", "1024"])
    assert r.exit_code == 0 and r.output.startswith("Mistral-7B")
    r = CliRunner().invoke(main, ["memory", "-m", "meta-llama/Llama-3.1-7B"])
    assert r.exit_code == 2 and "not a Hugging Face id" in r.output
    assert "(closest: meta-llama/llama-3.1-70b, meta-llama/llama-3.1-8b," in r.output
    assert len(r.output.splitlines()) == 1


def test_a_config_json_is_judged_by_its_model_type_and_the_fields_read(tmp_path):
    """Infinity in a field tierlab does not read is no concern (transformers loads it); an
    unknown model_type is refused as such, not as 'not finite'; a non-finite field it reads is
    refused naming it (issue 30)."""
    import json

    from tierlab.errors import ConfigError
    from tierlab.profiles.load import load_model

    base = json.loads(open("tests/data/hf_configs/llama-3.1-8b.json").read())
    for name, change, expect in (
            ("ok", {"some_unrelated_threshold": float("inf")}, None),
            ("arch", {"model_type": "no_such_arch", "x": float("inf")}, "model_type 'no_such_arch'"),
            ("hidden", {"hidden_size": float("inf")}, "hidden_size")):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({**base, **change}))
        if expect is None:
            assert load_model(str(path)).n_params == load_model("llama-3.1-8b").n_params
        else:
            with pytest.raises(ConfigError, match=expect):
                load_model(str(path))
