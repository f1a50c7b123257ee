"""Emu3 (model_type emu3): transformers 5.25.0's causal-LM mapping names Emu3ForCausalLM for
`emu3`, but that class takes the decoder's config (Emu3TextConfig, model_type `emu3_text_model`),
which AutoModelForCausalLM.from_config does not map; tierlab builds the class the mapping names
(profiles/hf_config.py named_causal_lm), counts it as transformers does, and simulates it. The
file is transformers' default config (tests/data/hf_configs/real3/ORIGINS.yaml says why)."""
import json
from pathlib import Path

import pytest

from tests._cli import simulated_step_s
from tierlab.errors import ConfigError
from tierlab.profiles.hf_build import COUNT_TOLERANCE
from tierlab.profiles.load import load_model

transformers = pytest.importorskip("transformers")

CONFIG = Path(__file__).parent / "data" / "hf_configs" / "real3" / "emu3-default.json"


def transformers_count() -> int:
    import torch
    from transformers import AutoConfig, Emu3ForCausalLM

    text = AutoConfig.from_pretrained(str(CONFIG)).get_text_config(decoder=True)
    with torch.device("meta"):
        model = Emu3ForCausalLM(text)
    return sum(p.numel() for p in model.parameters())


def test_auto_class_cannot_build_it_but_the_mapped_class_can():
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    text = AutoConfig.from_pretrained(str(CONFIG)).get_text_config(decoder=True)
    assert text.model_type == "emu3_text_model"
    with pytest.raises(ValueError), torch.device("meta"):
        AutoModelForCausalLM.from_config(text)      # what tierlab had refused on


def test_counts_emu3_as_transformers_builds_it():
    expected = transformers_count()
    m = load_model(str(CONFIG))
    assert abs(m.n_params - expected) <= COUNT_TOLERANCE * expected, (m.n_params, expected)
    assert m.active_params == m.n_params
    assert (m.n_layers, m.hidden, m.vocab) == (32, 4096, 184622)


def test_simulates_on_h200_gen5_zero3_cpu():
    simulated_step_s(CONFIG, "h200-gen5", 4096)


def test_remote_code_emu3_is_refused_in_one_line(tmp_path):
    """The published BAAI/Emu3 files say model_type "Emu3" with an auto_map: not transformers'."""
    data = json.loads(CONFIG.read_text())
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({**data, "model_type": "Emu3",
                               "auto_map": {"AutoModelForCausalLM": "modeling_emu3.Emu3ForCausalLM"}}))
    with pytest.raises(ConfigError, match=r"config\.json: model_type 'Emu3' is not known to "
                                          r"transformers .*trust_remote_code"):
        load_model(str(bad))
