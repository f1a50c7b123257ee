"""Llama 3.2 Vision's cross-attention blocks (model_type `mllama`, its text decoder
`mllama_text_model`) read off the built text decoder (profiles/hf_build.py).

transformers 5.25.0 models/mllama/modeling_mllama.py: MllamaTextModel.__init__ (lines 1033-1037)
builds a MllamaCrossAttentionDecoderLayer at each index of `config.cross_attention_layers`
below num_hidden_layers, a self-attention layer elsewhere. The cross-attention block (lines
672-718) holds input_layernorm, `cross_attn` (MllamaTextCrossAttention, lines 400-477: q, k, v, o
of the text model's heads and kv heads, head_dim = hidden // heads, q/k RMSNorms of head_dim),
post_attention_layernorm, an MLP (MllamaTextMLP) and two tanh gates of one element each
(cross_attn_attn_gate, cross_attn_mlp_gate). Its forward projects q from the text tokens and k,
v from the vision states (lines 439-445), attends every vision token (the cross-attention mask
masks tiles, not a causal triangle) and projects o back onto the text tokens. Read as a block
whose attention has Model's shape fields plus `cross_attention` (schema.LayerAttention); the
vision tokens per sample, Model.cross_keys, come from the vision config: one image of
max_num_tiles tiles, each (image_size // patch_size)^2 patches + 1 class token
(MllamaVisionModel.__init__ line 834, forward lines 934-941 and 995: the padding to a multiple
of 8 is cut off before the projector). The vision tower itself is not counted (text decoder
only, as every multimodal config: hf_config.notes).
"""
from __future__ import annotations

from typing import Any, Mapping

from tierlab import bounds
from tierlab.errors import ConfigError
from tierlab.profiles.hf_config import DROPPED_KEYS, first_line
from tierlab.profiles.hf_modules import (ATTENTION_NAMES, MLP_NAMES, Unmodelled,
                                         attention_fields, is_norm, linear_biases, mlp_shape,
                                         named_child, param_count)
from tierlab.profiles.layout import CROSS_GATES

CROSS_ATTENTION = "cross_attn"
"""The cross-attention child of a MllamaCrossAttentionDecoderLayer (modeling_mllama.py line 678)."""

TEXT_TYPE = "mllama_text_model"
"""The text decoder's model_type whose `cross_attention_layers` this module reads."""


def cross_block(layer: Any) -> bool:
    """The block attends the vision tower alone: a `cross_attn` child and no self-attention
    (ProphetNet's decoder blocks hold both and stay unread)."""
    kids = dict(layer.named_children())
    return CROSS_ATTENTION in kids and named_child(layer, ATTENTION_NAMES) is None


def cross_layer_fields(layer: Any, config: Any, hidden: int) -> dict:
    """hf_blocks.layer_fields' dict of a cross-attention block: its attention (Model's shape
    fields + cross_attention), its dense MLP, its norms; Unmodelled where it holds other than
    the q/k/v/o attention, a dense MLP and the two gates (CROSS_GATES)."""
    kids = dict(layer.named_children())
    attn, mlp = kids[CROSS_ATTENTION], named_child(layer, MLP_NAMES)
    gates = {n: p.numel() for n, p in layer.named_parameters(recurse=False)}
    fields = attention_fields(attn, config, hidden)
    if mlp is None or gates != dict.fromkeys(CROSS_GATES, 1) or \
            fields.get("attention_tensors") is not None or named_child(mlp[1], ("experts",)):
        raise Unmodelled(f"a cross-attention block ({type(layer).__name__}) other than q/k/v/o, "
                         f"a dense MLP and the gates {', '.join(CROSS_GATES)} (found: "
                         f"{', '.join(f'{n} {k}' for n, k in gates.items()) or 'no gates'})")
    norms = [c for c in kids.values() if is_norm(c)]
    other = [f"{n} ({type(c).__name__})" for n, c in kids.items()
             if n not in (CROSS_ATTENTION, mlp[0]) and not is_norm(c) and param_count(c)]
    return dict(other=other, n_norms=len(norms), norms=norms,
                attn=dict(fields, cross_attention=True), mlp=mlp_shape(mlp[1], hidden),
                moe=None, mixer=None, attn_bias=linear_biases(attn),
                mlp_bias=linear_biases(mlp[1])[1], part=None, per_layer=None, embed_norm=False)


def check_cross_layers(config: Any, where: str) -> None:
    """`cross_attention_layers` (before the model is built): distinct block indices below
    num_hidden_layers. transformers builds a cross-attention block only at an index it meets
    in range(num_hidden_layers) (lines 1034-1035) and drops any other without a word."""
    if getattr(config, "model_type", None) != TEXT_TYPE:
        return
    idx, n = getattr(config, "cross_attention_layers", None) or [], config.num_hidden_layers
    if not isinstance(idx, (list, tuple)) or len(set(idx)) != len(idx) or any(
            isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n for i in idx):
        raise ConfigError(f"{where}: cross_attention_layers must list distinct blocks 0 to "
                          f"{n - 1} (num_hidden_layers {n}), got {idx!r}")


def vision_tokens(data: Mapping, config: Any, where: str) -> tuple[int, list[str]]:
    """(vision tokens per sample, what the Model's source says of them) for a text decoder with
    cross-attention layers, (0, []) otherwise: one image of max_num_tiles tiles of
    (image_size // patch_size)^2 + 1 tokens, from the file's `vision_config` (transformers'
    MllamaVisionConfig and its defaults; those alone where the file has none)."""
    if getattr(config, "model_type", None) != TEXT_TYPE or \
            not getattr(config, "cross_attention_layers", None):
        return 0, []
    from transformers import MllamaVisionConfig

    given = data.get("vision_config")
    keys = {k: v for k, v in given.items() if k not in DROPPED_KEYS and k != "model_type"} \
        if isinstance(given, Mapping) else {}
    try:
        vision = MllamaVisionConfig(**keys)
    except Exception as e:      # transformers' own validation: one line
        raise ConfigError(f"{where}: vision_config: transformers rejects it: "
                          f"{first_line(e)}") from None
    size, patch, tiles = (vision.image_size, vision.patch_size, vision.max_num_tiles)
    for key, value in (("image_size", size), ("patch_size", patch), ("max_num_tiles", tiles)):
        bounds.check(value, bounds.Bound(1, bounds.ATTENTION_WINDOW.high, why="a whole number"),
                     f"{where}: vision_config.{key}")
        if not isinstance(value, int):
            raise ConfigError(f"{where}: vision_config.{key} must be an integer, got {value!r}")
    if patch > size:
        raise ConfigError(f"{where}: vision_config.patch_size {patch} is larger than "
                          f"image_size {size}: no patch")
    n = tiles * ((size // patch) ** 2 + 1)
    bounds.check(n, bounds.ATTENTION_WINDOW, f"{where}: vision_config (vision tokens per image)")
    source = "the vision_config" if given is not None else \
        "MllamaVisionConfig's defaults: the file has no vision_config"
    return n, [f"cross-attention blocks attend one image of max_num_tiles tiles per sample, "
               f"{tiles} x ((image_size {size} // patch_size {patch})^2 + 1) = {n:,} vision "
               f"tokens ({source}): k and v project them, every text token scores all of them; "
               f"the vision tower that makes them is not counted"]


def cross_fields(model: Any, fields: dict, keys: int, said: list[str]) -> tuple[dict, list[str]]:
    """({"cross_keys": keys} and the notes `said` plus the head's, where a block read is a
    cross-attention one; ({}, []) otherwise. The head note: MllamaTextModel's embedding has
    vocab_size + 8 rows (line 1030), the LM head vocab_size; tierlab's one vocab counts the
    head as the embedding is (8 x hidden over)."""
    if not (fields.get("cross_attention") or
            any(a.cross_attention for a in fields.get("layer_attention", ()))):
        return {}, []
    emb, out = model.get_input_embeddings(), model.get_output_embeddings()
    rows = (int(emb.weight.shape[0]), int(out.weight.shape[0])) if out is not None else (0, 0)
    head = [f"the LM head has {rows[1]:,} rows beside the embedding's {rows[0]:,}: counted as "
            f"{rows[0]:,}"] if rows[0] != rows[1] and out.weight is not emb.weight else []
    return {"cross_keys": keys}, said + head
