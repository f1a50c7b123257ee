"""XLNet's blocks read as a decoder (profiles/hf_build.py): relative attention held as tensors.

transformers 5.25.0 modeling_xlnet.py XLNetLMHeadModel (lines 1215-1224) holds an XLNetModel
(`transformer`: `word_embedding`, `mask_emb` of 1 x 1 x d_model, `layer`, lines 863-866) and
`lm_loss`, a Linear d_model -> vocab with a bias, its weight tied to the word embedding
(`_tied_weights_keys`, line 1216; tie_word_embeddings true by default, configuration_xlnet.py).
Each XLNetLayer (lines 309-316) holds:
- `rel_attn`, an XLNetRelativeAttention (lines 39-65): q, k, v, o and r as d_model x n_head x
  d_head parameters, not Linear modules (lines 54-58), r_r_bias, r_s_bias, r_w_bias (n_head x
  d_head, lines 60-62), seg_embed (2 x n_head x d_head, line 63) and the post-LN `layer_norm`
  after o and the residual (post_attention, lines 143-153);
- `ff`, an XLNetFeedForward (lines 286-306): layer_1 d_model -> d_inner, layer_2 back (biases),
  its LayerNorm after the residual.
A plain causal-LM training call (input_ids, labels; no perm_mask, no target_mapping, no mems)
runs the content stream h only: the query stream g exists only with target_mapping (lines
1119-1125; XLNetRelativeAttention.forward lines 166-240 only where g is not None, the one-stream
branch lines 246-277 otherwise). Per block (lines 254-260): q, k, v of the s tokens
(einsum "ibh,hnd->ibnd", a GEMM d_model x n_head d_head each), r of the relative positional
encoding (pos_emb, lines 938-975, 1142: positions klen + qlen = 2 s for attn_type "bi",
klen + 1 = s + 1 for "uni", expanded over the batch), then rel_attn_core (lines 96-141):
content scores ac = (q + r_w_bias) k^T (s x s, line 109), position scores bd = (q + r_r_bias)
k_r^T (s x 2 s, line 112) shifted by rel_shift_bnij (a reshape, a slice and an index_select
copy, lines 82-94), the segment term ef only with token_type_ids (lines 116-120), softmax, A V
(line 136), then o (line 146).
tierlab times: the q, k, v, o GEMMs over the tokens and the r GEMM over positions_per_token x s
positions (AttentionTensors.position_matrix, positions_per_token), the scores over s keys (ac,
A V) plus positions_per_token x s for bd (sim/flops.py), the FFN, two norms. Neither mask
skips work: attn_type "bi", the default, attends both ways (attn_mask None, lines 1066-1070);
"uni" masks the future (create_mask, lines 878-904), counted in full as every causal LM.
"""
from __future__ import annotations

from typing import Any

from tierlab import bounds
from tierlab.errors import ConfigError
from tierlab.profiles.schema import AttentionTensors

PROJECTIONS = ("q", "k", "v", "o", "r")
"""XLNetRelativeAttention's d_model x n_head x d_head parameters (lines 54-58)."""

SMALL = ("r_r_bias", "r_s_bias", "r_w_bias", "seg_embed")
"""Its per-head biases and segment embedding (lines 60-63): small parameters."""

POSITIONS = {"bi": 2, "uni": 1}
"""attn_type -> relative positions per token of the encoding (relative_positional_encoding,
lines 943-948: arange(klen, -qlen) = 2 s positions for "bi", arange(klen, -1) = s + 1 for
"uni", timed as s)."""

TRAINED_SEQ_LEN = 512
"""XLNet has no position limit (configuration_xlnet.py max_position_embeddings returns -1): the
sequence length tierlab simulates by default, XLNet's pretraining length (Yang et al. 2019,
"XLNet", sec. 3.1: "we always use a full sequence length of 512")."""


def is_relative_attention(attn: Any) -> bool:
    """An XLNetRelativeAttention-shaped module: 3-D q, k, v, o, r and the per-head biases."""
    own = dict(attn.named_parameters(recurse=False))
    return all(n in own and own[n].dim() == 3 for n in PROJECTIONS) and \
        all(n in own for n in SMALL)


def relative_fields(attn: Any, config: Any, hidden: int) -> tuple[dict, str]:
    """(Model attention fields, '') of an XLNetRelativeAttention: q, k, v, r as hidden ->
    n_head x d_head GEMMs, o back (einsum "ibnd,hnd->ibh", line 146), the SMALL tensors, r over
    POSITIONS[attn_type] positions a token; ({}, what is wrong) where the shapes disagree."""
    own = dict(attn.named_parameters(recurse=False))
    shapes = {tuple(own[n].shape) for n in PROJECTIONS}
    if len(shapes) != 1 or next(iter(shapes))[0] != hidden:
        return {}, (f"relative attention q/k/v/o/r of shapes "
                    f"{sorted(tuple(own[n].shape) for n in PROJECTIONS)} for d_model {hidden} "
                    f"in {type(attn).__name__}")
    _, heads, width = next(iter(shapes))
    inner = heads * width
    mats = tuple((n, inner, hidden) if n == "o" else (n, hidden, inner) for n in PROJECTIONS)
    return dict(n_heads=heads, n_kv_heads=heads, attn_head_dim=width, fused_qkv=False,
                qk_norm="none", attn_output_gate=False,
                attention_tensors=AttentionTensors(
                    matrices=mats, small_params=tuple((n, own[n].numel()) for n in SMALL),
                    v_head_dim=width, position_matrix="r",
                    positions_per_token=POSITIONS[config.attn_type])), ""


def is_xlnet_layer(layer: Any) -> bool:
    """An XLNetLayer: `rel_attn` (is_relative_attention) and `ff` with layer_1, layer_2 and
    layer_norm."""
    attn, ff = getattr(layer, "rel_attn", None), getattr(layer, "ff", None)
    return attn is not None and is_relative_attention(attn) and \
        all(hasattr(ff, n) for n in ("layer_1", "layer_2", "layer_norm"))


def xlnet_blocks(blocks: Any) -> tuple[Any, bool]:
    """(the blocks as hf_blocks.layer_fields reads them, True) where every block is an
    XLNetLayer: `attention` (the rel_attn module, read by relative_fields), `mlp` (fc1 =
    ff.layer_1, fc2 = ff.layer_2), the two post-LN norms; (blocks, False) otherwise."""
    import torch

    if not len(blocks) or not all(is_xlnet_layer(b) for b in blocks):
        return blocks, False
    return [torch.nn.ModuleDict({
        "attention": b.rel_attn,
        "mlp": torch.nn.ModuleDict({"fc1": b.ff.layer_1, "fc2": b.ff.layer_2}),
        "norm_attn": b.rel_attn.layer_norm, "norm_ff": b.ff.layer_norm}) for b in blocks], True


COUNT_KEYS = (("n_head", "n_heads"), ("d_head", "attn_head_dim"), ("d_model", "hidden"),
              ("n_layer", "n_layers"), ("d_inner", "ffn"))
"""XLNetConfig's own count keys (configuration_xlnet.py; hf_config.COUNT_ATTRIBUTES reads the
names its attribute_map gives) -> the Model field whose bound (tierlab.bounds) they meet."""


def check_xlnet(data: Any, where: str) -> None:
    """One ConfigError line, before transformers reads the config (XLNetConfig.__post_init__
    divides d_model by n_head), for a COUNT_KEYS value outside its bound or an attn_type the
    forward refuses (modeling_xlnet.py lines 943-950, 1066-1072: "bi" or "uni")."""
    if data.get("model_type") != "xlnet":
        return
    for key, field in COUNT_KEYS:
        if data.get(key) is not None:
            bounds.check(data[key], bounds.MODEL[field], f"{where}: {key}")
    kind = data.get("attn_type", "bi")
    if kind not in POSITIONS:
        raise ConfigError(f"{where}: attn_type {kind!r} is not one XLNet runs "
                          f"({' or '.join(repr(k) for k in POSITIONS)})")


def xlnet_fields(model: Any, config: Any) -> tuple[dict, list, list[str]]:
    """(Model fields, the modules they take: mask_emb held in a ParameterDict, notes) of what
    XLNet holds around its blocks: mask_emb (Model.embed_tensors: counted, used only with
    target_mapping, line 1120), no final norm (post-LN blocks), TRAINED_SEQ_LEN."""
    import torch

    mask = model.transformer.mask_emb
    fields = dict(embed_tensors=(("mask_emb", mask.numel()),), final_norm=False,
                  max_seq_len=TRAINED_SEQ_LEN)
    return fields, [torch.nn.ParameterDict({"mask_emb": mask})], xlnet_notes(config)


def xlnet_notes(config: Any) -> list[str]:
    """What timing XLNet's one-stream training call leaves out or approximates."""
    notes = [
        "XLNet's one-stream call is timed (input_ids, labels): the query stream g, perm_mask and "
        "target_mapping (modeling_xlnet.py lines 1119-1125, 166-240) are not; mask_emb is "
        "counted, used only by g",
        f"attn_type {config.attn_type!r}: " + (
            "bidirectional attention, XLNet's default (attn_mask None, lines 1066-1070): every "
            "token sees every other, and lm_loss compares logits with labels unshifted "
            "(lines 1436-1442)" if config.attn_type == "bi" else
            "a causal mask (create_mask, lines 878-904), counted in full"),
        "the relative positional encoding's r GEMM and position scores bd are timed over "
        f"{POSITIONS[config.attn_type]} x s positions (2 s for 'bi', s + 1 for 'uni', lines "
        "943-948); rel_shift_bnij's reshape and index_select copy of the position "
        "scores (lines 82-94) and the sinusoid table are not timed",
        "the segment term ef (seg_embed, r_s_bias; lines 116-120) runs only with "
        "token_type_ids: counted, not timed",
        "mems (Transformer-XL recurrence: mem_len, use_mems_train, lines 906-926, 1154-1156) "
        "are not modelled: a call without mems attends its own s tokens only"]
    return notes
