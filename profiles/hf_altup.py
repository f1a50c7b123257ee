"""Gemma 3n's text decoder (model_type `gemma3n_text`, the text_config of `gemma3n`) read off the
built model (profiles/hf_build.py): its AltUp and LAuReL blocks and the model-level AltUp
projections, beside what the other readers already take (Gemma 4's per-layer inputs, the
attention, the MLP).

transformers 5.25.0 models/gemma3n/modeling_gemma3n.py (h = hidden_size, n = altup_num_inputs,
r = laurel_rank):
- `Gemma3nTextAltUp.__init__` (lines 988-996): correct_output_scale h, correction_coefs n -> n,
  prediction_coefs n -> n^2, modality_router h -> n (Linears without bias), router_norm h.
  `predict` (lines 1003-1029): the router on the active stream (tanh of modality_router on the
  normed input, lines 998-1001), prediction_coefs, then per token the n streams mixed by that
  n x n matrix (`torch.matmul`, line 1026: 2 h n^2 FLOPs) plus the input; `correct` (lines
  1031-1060): the router again on the block's output (line 1043), correction_coefs, and each
  stream moved by its coefficient times the innovation (lines 1044-1059, element-wise).
- `Gemma3nTextLaurelBlock` (lines 920-935): linear_left h -> r, linear_right r -> h,
  post_laurel_norm h, added to the normed input (line 935) beside the attention (line 1300).
- `Gemma3nTextDecoderLayer.forward` (lines 1271-1322): predict, the attention, laurel and the MLP
  on the active stream, correct, then Gemma 4's per-layer gate and projection on the corrected
  active stream, added to the other n - 1 streams (line 1320).
- `Gemma3nTextModel.__init__` (lines 1604-1610): altup_projections and
  altup_unembed_projections, n - 1 Linears h -> h each, run on every token before the first
  block (lines 1685-1692) and after the last (lines 1720-1727).
- `Gemma3nTextAttention.__init__` (lines 1174-1182): a layer that reuses another's KV
  (`kv_sharing_modes` "reuse", the last num_kv_shared_layers) builds no k_proj, v_proj, k_norm:
  its attention is q and o of its own, its scores over the keys and values of the last layer of
  its type that computes them (forward lines 1210-1225).

tierlab's block has one place for tensors beside its q/k/v/o, MLP and norms: the attention
read as tensors (Model.attention_tensors, hf_modules.tensor_attention), whose rule — every
Linear weight a GEMM of each token, 2 x in x out FLOPs, every other tensor a small parameter —
is how AltUp's three Linears and laurel's pair run: once per token and block. So each block's
attention is read with its block's `altup` and `laurel` beside q/k/v/o (layout names
`attn.altup.modality_router`, `attn.laurel.linear_left`, ...), the first block's with
altup_projections, the last block's with altup_unembed_projections (they run just before and
after them). A kv-sharing layer's attention is read without k and v: none are built.
What this leaves out is named in the Model's not_modelled (altup_notes).
"""
from __future__ import annotations

from typing import Any

from tierlab import bounds
from tierlab.errors import ConfigError
from tierlab.profiles.hf_modules import Unmodelled, named_child, norm_width

TEXT_TYPE = "gemma3n_text"
"""The text decoder's model_type whose keys check_altup reads."""

BLOCK_PARTS = ("altup", "laurel")
"""A Gemma 3n block's children read into its attention (Gemma3nTextDecoderLayer lines 1264-1265)."""

MODEL_PARTS = ("altup_projections", "altup_unembed_projections")
"""The model's AltUp projections, n - 1 Linears h -> h each (Gemma3nTextModel lines 1604-1610)."""

STREAMS = bounds.Bound(1, 1_000, why="Gemma 3n runs 4; each stream adds two hidden x hidden "
                                     "projections")
RANK = bounds.Bound(1, 1_000_000, why="Gemma 3n's laurel_rank is 64")


def altup_shape(altup: Any) -> tuple[int, int] | None:
    """(h, n) of an AltUp module of the shapes Gemma3nTextAltUp builds (module docstring), and
    no other tensor; else None."""
    try:
        h, n = altup.correct_output_scale.shape[0], altup.modality_router.weight.shape[0]
        shapes = {name: tuple(p.shape) for name, p in altup.named_parameters()}
    except (AttributeError, IndexError):
        return None
    want = {"correct_output_scale": (h,), "correction_coefs.weight": (n, n),
            "prediction_coefs.weight": (n * n, n), "modality_router.weight": (n, h),
            "router_norm.weight": (h,)}
    return (int(h), int(n)) if shapes == want else None


def laurel_shape(laurel: Any) -> tuple[int, int] | None:
    """(h, r) of a LAuReL block of Gemma3nTextLaurelBlock's shapes, and no other tensor; else
    None."""
    try:
        r, h = laurel.linear_left.weight.shape
        shapes = {name: tuple(p.shape) for name, p in laurel.named_parameters()}
    except (AttributeError, ValueError):
        return None
    ok = shapes == {"linear_left.weight": (r, h), "linear_right.weight": (h, r),
                    "post_laurel_norm.weight": (h,)} and norm_width(laurel.post_laurel_norm) == h
    return (int(h), int(r)) if ok else None


def altup_blocks(model: Any, blocks: list) -> tuple[list, list]:
    """(the blocks, the model-level modules they took): for Gemma 3n blocks (children `altup` and
    `laurel`), each block as a view whose attention holds them too (module docstring), the first
    and last also the model's MODEL_PARTS; other blocks unchanged, ([...], []). A block with
    only one of them, or of other shapes, or a model without the projections: Unmodelled."""
    if not any(named_child(b, BLOCK_PARTS) is not None for b in blocks):
        return blocks, []
    shapes = {(altup_shape(getattr(b, "altup", None)), laurel_shape(getattr(b, "laurel", None)))
              for b in blocks}
    altup, laurel = next(iter(shapes)) if len(shapes) == 1 else (None, None)
    if altup is None or laurel is None or altup[0] != laurel[0]:
        raise Unmodelled("AltUp / laurel blocks of other shapes than Gemma 3n's (Gemma3nTextAltUp, "
                         f"Gemma3nTextLaurelBlock) in {type(blocks[0]).__name__}")
    h, n = altup
    into, out_of = (model_projections(model, name, h, n) for name in MODEL_PARTS)
    last = len(blocks) - 1
    views = [block_view(b, dict(zip(BLOCK_PARTS, (b.altup, b.laurel)),
                                **({MODEL_PARTS[0]: into} if i == 0 else {}),
                                **({MODEL_PARTS[1]: out_of} if i == last else {})))
             for i, b in enumerate(blocks)]
    return views, [into, out_of]


def model_projections(model: Any, name: str, h: int, n: int) -> Any:
    """The model's ModuleList `name` of n - 1 Linears h -> h without bias; else Unmodelled."""
    found = [m for k, m in model.named_modules() if k.rsplit(".", 1)[-1] == name]
    shapes = [tuple(p.shape) for p in found[0].parameters()] if len(found) == 1 else None
    if shapes != [(h, h)] * (n - 1) or sum(1 for _ in found[0].modules()) != n:
        raise Unmodelled(f"{name}: not the {n - 1} projections {h} -> {h} of Gemma 3n's "
                         f"{n} AltUp streams (found {shapes})")
    return found[0]


def block_view(block: Any, extra: dict) -> Any:
    """The block as a ModuleDict of its children, its attention (`self_attn`) a ModuleDict of the
    attention's children and `extra`, with the attention's head attributes (head_dim,
    num_key_value_groups: hf_modules.score_shape reads them); `extra`'s own children dropped."""
    import torch

    attn = block.self_attn
    view = torch.nn.ModuleDict(dict(attn.named_children(), **extra))
    for attr in ("head_dim", "num_key_value_groups"):
        setattr(view, attr, getattr(attn, attr))
    kids = {n: (view if n == "self_attn" else c) for n, c in block.named_children()
            if n not in extra}
    return torch.nn.ModuleDict(kids)


def check_altup(config: Any, where: str) -> None:
    """A Gemma 3n text config's keys, before the model is built: altup_num_inputs and laurel_rank
    whole numbers >= 1 (transformers builds 0-wide tensors, or fails on a negative one),
    altup_active_idx one of the streams, hidden_size_per_layer_input >= 1 (every block runs its
    per-layer gate, line 1313), num_kv_shared_layers 0 to num_hidden_layers - 1 leaving a layer
    of each type to compute the keys it shares (kv_sharing_modes, configuration_gemma3n.py lines
    206-231), one MLP width in every layer (tierlab's blocks share one; MatFormer slices may
    differ). Else one ConfigError line naming the key."""
    if getattr(config, "model_type", None) != TEXT_TYPE:
        return
    n = bounds.check(config.altup_num_inputs, STREAMS, f"{where}: altup_num_inputs")
    bounds.check(config.laurel_rank, RANK, f"{where}: laurel_rank")
    bounds.check(config.hidden_size_per_layer_input, bounds.MODEL["hidden"],
                 f"{where}: hidden_size_per_layer_input")
    idx = config.altup_active_idx
    if isinstance(idx, bool) or not isinstance(idx, int) or not 0 <= idx < n:
        raise ConfigError(f"{where}: altup_active_idx: {idx!r} is not one of the {n} AltUp "
                          f"streams (0 to altup_num_inputs - 1)")
    check_kv_shared(config, where)
    widths = config.intermediate_size
    if len(set(widths)) > 1:
        raise ConfigError(f"{where}: intermediate_size: MLP widths differ between layers "
                          f"({sorted(set(widths))}, a MatFormer slice); tierlab's blocks share "
                          "one width")


def check_kv_shared(config: Any, where: str) -> None:
    """num_kv_shared_layers within 0 to num_hidden_layers - 1, and the layers before the shared
    ones holding every layer type the shared ones reuse (check_altup)."""
    k, layers = config.num_kv_shared_layers, config.num_hidden_layers
    bounds.check(k, bounds.Bound(0, max(0, layers - 1), why="one layer at least computes its "
                                 "own keys and values"), f"{where}: num_kv_shared_layers")
    types = list(config.layer_types)
    missing = sorted(set(types[layers - k:]) - set(types[:layers - k]))
    if missing:
        raise ConfigError(f"{where}: num_kv_shared_layers: {k} leaves no layer before the shared "
                          f"ones of type {', '.join(missing)} to compute the keys and values "
                          "they reuse")


def altup_notes(config: Any) -> list[str]:
    """What tierlab's reading of Gemma 3n leaves out (the Model's not_modelled), with the
    config's figures: h = hidden_size, n = altup_num_inputs."""
    h, n = config.hidden_size, config.altup_num_inputs
    sparse = [i for i, p in enumerate(config.activation_sparsity_pattern)
              if isinstance(p, (int, float)) and p > 0]
    run = bool(sparse) and sparse == list(range(sparse[0], sparse[-1] + 1))
    shown = f"{sparse[0]}-{sparse[-1]}" if run else ", ".join(map(str, sparse))
    notes = [f"AltUp's {n} streams: each block's n x n mixing of them (modeling_gemma3n.py "
             f"line 1026, 2 x hidden x n^2 = {2 * h * n * n:,} FLOPs per token) and its "
             f"router's second run (line 1043, {2 * h * n:,}) are not timed, nor their "
             "element-wise work; a block's input is counted as one hidden state per token, "
             f"not {n} (activation memory, checkpoints)",
             "AltUp, laurel and the model's altup_projections / altup_unembed_projections are "
             "read as tensors of the attention of each block, the projections of the first and "
             "last (recomputed with them under activation checkpointing)"]
    if sparse:
        notes.append(f"activation sparsity (layers {shown}: Gemma3nTextMLP._gaussian_topk, lines "
                     "959-973) is timed as the dense MLP it runs: gate, up and down in full")
    return notes
