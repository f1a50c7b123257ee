"""Llama 3.2 Vision's text decoder (model_type mllama; profiles/hf_cross.py): its cross-attention
blocks counted as transformers builds them (q, k, v, o, q/k norms, the two tanh gates, the MLP),
where the config puts them, timed with k/v and scores over the vision tokens; the vision tower
left out, as for every multimodal config; a bad cross_attention_layers refused in one line."""
import json
import math

import pytest

from tests._cli import assert_user_error, run
from tests.test_hybrid_arch import meta_counts
from tierlab.profiles.load import load_model
from tierlab.profiles.schema import LayerAttention
from tierlab.sim.flops import attended_keys, layer_forward

pytest.importorskip("transformers")

HIDDEN, HEADS, KV, FFN, VOCAB = 64, 4, 2, 128, 256
TEXT = dict(hidden_size=HIDDEN, intermediate_size=FFN, num_attention_heads=HEADS,
            num_key_value_heads=KV, vocab_size=VOCAB, num_hidden_layers=5, pad_token_id=0,
            cross_attention_layers=[1, 3])
# one image of 4 tiles (MllamaVisionConfig allows no other), (56 // 14)^2 + 1 = 17 tokens a
# tile: 68 vision tokens
VISION = dict(image_size=56, patch_size=14, max_num_tiles=4, hidden_size=32,
              num_hidden_layers=1, num_global_layers=1, attention_heads=2,
              intermediate_size=64, intermediate_layers_indices=[0], vision_output_dim=64)
VISION_TOKENS = 4 * ((56 // 14) ** 2 + 1)
REAL = "tests/data/hf_configs/real2/llama-3.2-90b-vision-instruct.json"


def _write(tmp_path, text=None, vision=None):
    path = tmp_path / "mllama.json"
    path.write_text(json.dumps(dict(model_type="mllama", text_config=dict(TEXT, **(text or {})),
                                    vision_config=dict(VISION, **(vision or {})))))
    return path


def _block_counts(path) -> list[int]:
    """transformers' parameters of each decoder block (meta device)."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    data = json.loads(path.read_text() if hasattr(path, "read_text") else open(path).read())
    cfg = {k: v for k, v in data.items() if k not in ("model_type", "architectures")}
    with torch.device("meta"):
        full = AutoModelForImageTextToText.from_config(AutoConfig.for_model("mllama", **cfg))
    return [sum(p.numel() for p in layer.parameters()) for layer in full.get_decoder().layers]


def test_the_text_decoder_counts_as_transformers_builds_it(tmp_path):
    """Every block exactly as transformers counts it (a cross-attention block: q, k, v, o, two
    q/k norms of head_dim, 2 gates, 2 norms, the MLP); the total over transformers' by the
    embedding's 8 rows beyond the head's vocab_size (modeling_mllama.py line 1030), said."""
    path = _write(tmp_path)
    model = load_model(str(path))
    blocks = _block_counts(path)
    assert [model.layer_params(i) for i in range(5)] == blocks
    hd = HIDDEN // HEADS
    cross = 2 * HIDDEN * HIDDEN + 2 * HIDDEN * KV * hd + 2 * hd + 2 + 2 * HIDDEN + 3 * HIDDEN * FFN
    assert blocks[1] == cross
    theirs, _ = meta_counts(path)
    assert model.n_params == theirs + 8 * HIDDEN
    assert any("LM head has 256 rows beside the embedding's 264" in n for n in model.not_modelled)
    assert "text decoder only" in model.source


def test_cross_attention_blocks_are_where_the_config_puts_them(tmp_path):
    model = load_model(str(_write(tmp_path)))
    cross = [i for i in range(model.n_layers) if model.shaped(i).cross_attention]
    assert cross == [1, 3]
    assert model.cross_keys == VISION_TOKENS
    assert any(f"= {VISION_TOKENS:,} vision tokens" in n for n in model.not_modelled)


def test_cross_attention_flops_follow_the_forward(tmp_path):
    """q, o on the text tokens, k, v on the vision tokens, scores text x vision (no causal
    mask, the no-halving count): by hand from the config numbers."""
    seq = 128
    model = load_model(str(_write(tmp_path)), seq_len=seq)
    hd, kv = HIDDEN // HEADS, KV * HIDDEN // HEADS
    mlp = 3 * 2 * seq * HIDDEN * FFN
    attn_proj = 2 * 2 * seq * HIDDEN * HIDDEN                      # q and o per text token
    self_block = attn_proj + 2 * 2 * seq * HIDDEN * kv + mlp + 2 * seq * seq * HEADS * 2 * hd
    cross_block = attn_proj + 2 * 2 * VISION_TOKENS * HIDDEN * kv + mlp + \
        2 * seq * VISION_TOKENS * HEADS * 2 * hd
    assert attended_keys(model, 1) == VISION_TOKENS and attended_keys(model, 0) == seq
    total = layer_forward(model, micro_batch=1).total * model.n_layers
    assert total == pytest.approx(3 * self_block + 2 * cross_block, rel=1e-12)


def test_it_simulates_to_a_finite_step(tmp_path):
    res = run("simulate", "-m", str(_write(tmp_path)), "-H", "dgx-a100", "-c", "zero3-cpu",
              "--seq", "256", "--json")
    assert res.exit_code == 0, res.output
    step = json.loads(res.output)["step_time_s"]
    assert math.isfinite(step) and step > 0


def test_the_real_90b_vision_config_loads():
    """meta-llama/Llama-3.2-90B-Vision-Instruct: 20 cross-attention blocks every 5th from 3, one
    image of 4 tiles of (560 // 14)^2 + 1 tokens, every block as transformers counts it."""
    model = load_model(REAL)
    assert [i for i in range(100) if model.shaped(i).cross_attention] == list(range(3, 100, 5))
    assert model.cross_keys == 4 * (40 ** 2 + 1) == 6404
    assert [model.layer_params(i) for i in (0, 3)] == [_block_counts(REAL)[i] for i in (0, 3)]
    assert model.n_params == 87_666_865_192 + 8 * 8192


@pytest.mark.parametrize("bad", [[1, 5], [1, 1], [-1]])
def test_a_cross_attention_layer_out_of_range_is_refused_in_one_line(tmp_path, bad):
    res = run("memory", "-m", str(_write(tmp_path, text=dict(cross_attention_layers=bad))),
              "-H", "dgx-a100")
    assert_user_error(res, "cross_attention_layers", "0 to 4")


def test_a_vision_config_without_patches_is_refused_in_one_line(tmp_path):
    res = run("memory", "-m", str(_write(tmp_path, vision=dict(patch_size=112))), "-H",
              "dgx-a100")
    assert_user_error(res, "vision_config.patch_size")


def test_cross_attention_blocks_need_vision_tokens(tmp_path):
    model = load_model(str(_write(tmp_path)))
    with pytest.raises(ValueError, match="cross_keys"):
        type(model)(**{**{f: getattr(model, f) for f in model.__dataclass_fields__},
                       "cross_keys": 0})
    assert LayerAttention(layers=(1,), n_heads=4, n_kv_heads=2, cross_attention=True).fields()[
        "cross_attention"]
