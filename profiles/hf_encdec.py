"""The decoder of an encoder-decoder family built as a causal LM (profiles/hf_build.py): BART,
mBART, Pegasus, PLBart, MVP, Blenderbot, Blenderbot-Small, BigBird-Pegasus, TrOCR, Whisper,
Marian. Their `*ForCausalLM` is the decoder alone (transformers 5.25.0 modeling_bart.py
BartForCausalLM wraps BartDecoderWrapper -> BartDecoder), whose blocks are OPT-like (self_attn,
fc1/fc2, LayerNorms) plus a cross-attention to the encoder's states: `encoder_attn` and
`encoder_attn_layer_norm` (BartDecoderLayer.__init__ lines 330-338).

Trained as a causal LM the caller passes no encoder_hidden_states, and every block skips its
cross-attention: `if encoder_hidden_states is not None:` (modeling_bart.py line 368; mbart 392,
pegasus 382, plbart 459, mvp 375, blenderbot 372, blenderbot_small 343, bigbird_pegasus 1389,
trocr 358, whisper 488, marian 364). Its parameters exist all the same: transformers counts them,
they require grad, so DeepSpeed puts them in the optimizer's partitions (DeepSpeed 0.19.8
runtime/utils.py is_optimized_parameter, line 815: every trainable parameter, frozen ones left
out; stage_1_and_2.py lines 428-434, stage3.py _get_trainable_parameter_groups line 726): fp32
master, Adam m and v, a gradient that stays zero (stage_1_and_2.py set_none_gradients_to_zero,
line 2352), updated by the step; their module is never called, so ZeRO-3 never gathers them. tierlab reads them as Model.unrun_matrices and
unrun_small_params: counted, held in every tier as the block's other tensors, no FLOPs, no
ZeRO-3 fetch (profiles/schema.py, sim/modules.py), and named in the Model's not_modelled.

Beside the blocks: embed_scale (sqrt(d_model) with scale_embedding) is a float that multiplies
the lookup, not a tensor; final_logits_bias is a buffer of *ForConditionalGeneration
(modeling_bart.py line 809), not of the causal LM; the position table is an nn.Embedding
parameter in every family (learned: BartLearnedPositionalEmbedding, max_position_embeddings +
2 rows; Whisper's decoder WhisperPositionalEmbedding of max_target_positions rows, line 675;
sinusoidal in Pegasus and Marian, a parameter with requires_grad False, modeling_pegasus.py
line 90, modeling_marian.py line 88). The norms outside the blocks are `layernorm_embedding`
after the embedding (BART, mBART, PLBart, MVP, Blenderbot-Small, BigBird-Pegasus, TrOCR) and
`layer_norm` after the last block (mBART, Pegasus, Blenderbot, Whisper); Marian has neither.

ProphetNet's decoder holds the same cross-attention under other names (cross_attn,
cross_attn_layer_norm: cross_children) beside its n-gram predicting streams, (1 + ngram) x the
tokens in every block and ngram x in the head (profiles/hf_prophetnet.py). Musicgen's decoder,
whose blocks hold the same cross-attention, has a table and a head per codebook:
profiles/hf_codebooks.py.
"""
from __future__ import annotations

from typing import Any

from tierlab.profiles.hf_modules import Unmodelled, is_norm
from tierlab.profiles.hf_prophetnet import STREAM_CROSS, ngram_streams, refuse_ngram_streams

CROSS_CHILDREN = ("encoder_attn", "encoder_attn_layer_norm")
"""A decoder block's cross-attention and its norm (modeling_bart.py BartDecoderLayer lines
330-338; the same names in every family of this module)."""

EMBED_NORM = ("layernorm_embedding", "embeddings_layer_norm")
"""The norm after the embedding lookup (modeling_bart.py BartDecoder line 585;
modeling_prophetnet.py ProphetNetDecoder line 1073)."""

def check_decoder(model: Any) -> None:
    """Unmodelled for a built causal LM with n-gram streams and ngram 0 (ProphetNet: no
    stream for the head); nothing otherwise (Musicgen's per-codebook tables:
    profiles/hf_codebooks.py)."""
    refuse_ngram_streams(model)


def cross_children(model: Any) -> tuple[str, str]:
    """The names of a decoder block's cross-attention and its norm: STREAM_CROSS in ProphetNet
    (a model with n-gram streams), CROSS_CHILDREN otherwise."""
    return STREAM_CROSS if ngram_streams(model) else CROSS_CHILDREN


def cross_tensors(block: Any, children: tuple = CROSS_CHILDREN) -> tuple[tuple, tuple]:
    """((name, in, out) of each 2-D weight, (name, numel) of each other tensor) of a block's
    CROSS_CHILDREN, names as transformers gives them within the block (`encoder_attn.q_proj`,
    `encoder_attn.q_proj.bias`, `encoder_attn_layer_norm.weight`)."""
    kids = dict(block.named_children())
    mats, small = [], []
    for child in children:
        for name, p in (kids[child].named_parameters() if child in kids else ()):
            full = f"{child}.{name}"
            if p.dim() == 2 and name.endswith("weight") and not is_norm(kids[child]):
                mats.append((full.removesuffix(".weight"), int(p.shape[1]), int(p.shape[0])))
            else:
                small.append((full, p.numel()))
    return tuple(mats), tuple(small)


def cross_free(blocks: list, children: tuple = CROSS_CHILDREN) -> tuple[list, dict]:
    """(the blocks without their CROSS_CHILDREN, {"unrun_matrices", "unrun_small_params"}: the
    tensors of one block's cross-attention) where every block holds one, each of the same
    tensors; (blocks, {}) where none does. A block viewed without them is read as any other
    (profiles/hf_blocks.py layer_fields): its self_attn, fc1/fc2 and norms."""
    import torch

    held = [children[0] in dict(b.named_children()) for b in blocks]
    if not any(held):
        return blocks, {}
    tensors = [cross_tensors(b, children) for b in blocks]
    own = [n for b in blocks for n, _ in b.named_parameters(recurse=False)]
    if not all(held) or any(t != tensors[0] for t in tensors) or own:
        raise Unmodelled(f"cross-attention ({children[0]}) in {sum(held)} of "
                         f"{len(blocks)} blocks, or of different tensors between blocks")
    views = [torch.nn.ModuleDict({n: c for n, c in b.named_children() if n not in children})
             for b in blocks]
    return views, dict(unrun_matrices=tensors[0][0], unrun_small_params=tensors[0][1])


def decoder_fields(model: Any, config: Any, final: list, unrun: dict,
                   n_layers: int) -> tuple[dict, list[str]]:
    """(Model fields, not_modelled notes) of an encoder-decoder's decoder read by cross_free
    (`unrun` its fields; ({}, []) without): the cross-attention, the norms outside the blocks
    (`final`: layernorm_embedding -> Model.embed_norm, another -> the final norm, none: Marian),
    Whisper's decoder length (max_target_positions where no max_position_embeddings)."""
    if not unrun:
        return {}, []
    names = {id(m): n.rsplit(".", 1)[-1] for n, m in model.named_modules()}
    embed = [m for m in final if names.get(id(m)) in EMBED_NORM]
    fields = dict(unrun, embed_norm=bool(embed), final_norm=len(final) > len(embed))
    if getattr(config, "max_position_embeddings", None) is None and \
            getattr(config, "max_target_positions", None):
        fields["max_seq_len"] = int(config.max_target_positions)
    return fields, [cross_note(unrun, n_layers)] + frozen_positions(model)


def cross_note(unrun: dict, n_layers: int) -> str:
    """The not_modelled note of the cross-attention counted but not run."""
    per_block = sum(i * o for _, i, o in unrun["unrun_matrices"]) + \
        sum(k for _, k in unrun["unrun_small_params"])
    kids = dict.fromkeys(n.split(".")[0] for n, *_ in
                         unrun["unrun_matrices"] + unrun["unrun_small_params"])
    return (f"the cross-attention of every block ({', '.join(kids)}: {per_block:,} "
            f"parameters a block, {per_block * n_layers:,} in all) is counted, held and updated "
            "as the other parameters but not run: a decoder trained as a causal LM gets no "
            "encoder states and skips it")


def frozen_positions(model: Any) -> list[str]:
    """A note per position table transformers holds as a parameter with requires_grad False
    (Pegasus' and Marian's sinusoidal tables): tierlab trains it as a learned one."""
    return [f"{name} ({type(m).__name__}, {m.weight.numel():,} parameters) has requires_grad "
            "False: tierlab counts it with gradients and optimizer state as a learned table"
            for name, m in model.named_modules()
            if name.rsplit(".", 1)[-1] == "embed_positions" and
            getattr(getattr(m, "weight", None), "requires_grad", True) is False]
