"""Phi-4-multimodal (model_type phi4_multimodal): transformers 5.25.0 builds its image and audio
encoders inside the decoder, in `model.embed_tokens_extend` (modeling_phi4_multimodal.py
Phi4MultimodalModel.__init__ line 1480: a Phi4MultimodalFeatureEmbedding, lines 1328-1337,
holding Phi4MultimodalImageEmbedding, lines 455-477, and Phi4MultimodalAudioEmbedding, lines
1044-1059). tierlab reads the text decoder and names that tower as left out
(profiles/hf_config.py detach_towers), as it does for towers other multimodal configs keep
beside the decoder; the count is transformers' causal LM less that module, and it simulates."""
from pathlib import Path

import pytest

from tests._cli import simulated_step_s
from tierlab.profiles.hf_build import COUNT_TOLERANCE
from tierlab.profiles.load import load_model

transformers = pytest.importorskip("transformers")

CONFIG = Path(__file__).parent / "data" / "hf_configs" / "real3" / "phi-4-multimodal-default.json"


def built():
    """(the causal LM transformers builds from the file on the meta device, its tower module)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(CONFIG))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return model, model.model.embed_tokens_extend


def numel(module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_counts_the_text_decoder_as_transformers_builds_it():
    model, tower = built()
    decoder = numel(model) - numel(tower)       # dense: total = active
    m = load_model(str(CONFIG))
    assert abs(m.n_params - decoder) <= COUNT_TOLERANCE * decoder, (m.n_params, decoder)
    assert m.active_params == m.n_params
    assert (m.n_layers, m.hidden, m.vocab, m.tie_embeddings) == (32, 3072, 200064, False)
    # transformers 5.25.0 builds no LoRA parameters (modeling_phi4_multimodal.py names none)
    assert not any("lora" in n.lower() for n, _ in model.named_parameters())


def test_names_the_tower_left_out_with_its_parameters():
    _, tower = built()
    m = load_model(str(CONFIG))
    assert f"model.embed_tokens_extend (Phi4MultimodalFeatureEmbedding, {numel(tower):,} " \
           "parameters), a tower inside the decoder, left out" in m.not_modelled
    assert "text decoder only: the audio/vision tower is left out" in m.source


def test_simulates_on_h200_gen5_zero3_cpu():
    simulated_step_s(CONFIG, "h200-gen5", 4096)
