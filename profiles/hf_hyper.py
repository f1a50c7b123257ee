"""Qwen4-Exp's gated residuals (hyper-connections, Model.hyper_connections) read off a built
model: each block's `attn_hyper_connection` and `mlp_hyper_connection`, and the model's
`hyper_connection_mixer` (transformers 5.25.0 modeling_qwen4_exp.py Qwen4ExpTextGatedResidual,
lines 1112-1140; Qwen4ExpTextDecoderLayer.__init__ lines 1390-1391; Qwen4ExpTextModel.__init__
line 1496). Another shape of these children: Unmodelled naming it.
"""
from __future__ import annotations

from typing import Any

from tierlab.profiles.hf_modules import Unmodelled, is_norm, param_count


BLOCK_HYPER = ("attn_hyper_connection", "mlp_hyper_connection")
"""A block's gated residuals: before its attention and before its MLP (lines 1409, 1424)."""


MODEL_HYPER = "hyper_connection_mixer"
"""The model's gated residual without inject, on the streams before the head (line 1597)."""


GATED_RESIDUAL = ("hc_norm", "input_mix_weight_down", "input_mix_weight_up",
                  "block_inject_weight")
"""Children of one gated residual (lines 1118-1121): the norm of n x hidden (grouped per
stream), down n h -> r, up r -> n h, inject n h -> n (absent with use_combine=False)."""


def gated_residual(module: Any, hidden: int, inject: bool = True) -> tuple[int, int] | None:
    """(streams n, rank r) of a gated residual of GATED_RESIDUAL's shapes (inject: with its
    block_inject_weight; without, the model's mixer), no biases; None for any other module."""
    kids = dict(module.named_children())
    norm, down, up, out = (kids.get(k) for k in GATED_RESIDUAL)
    if norm is None or down is None or up is None or (out is not None) != inject or \
            set(kids) - set(GATED_RESIDUAL) or list(module.parameters(recurse=False)) or \
            any(getattr(m, "bias", None) is not None for m in (down, up, out) if m is not None):
        return None
    r, wide = (int(d) for d in down.weight.shape)
    n = wide // hidden
    ok = n >= 1 and wide == n * hidden and is_norm(norm) and param_count(norm) == wide and \
        tuple(up.weight.shape) == (wide, r) and \
        (not inject or tuple(out.weight.shape) == (n, wide))
    return (n, r) if ok else None


def block_hyper(layer: Any, hidden: int) -> tuple[tuple[int, int] | None, list]:
    """((n, r), their hc_norm modules) of a block holding both BLOCK_HYPER of one shape; (None,
    []) where it holds neither; Unmodelled where one is missing or of another shape."""
    kids = dict(layer.named_children())
    have = [n for n in BLOCK_HYPER if n in kids]
    if not have:
        return None, []
    read = {gated_residual(kids[n], hidden) for n in have}
    if len(have) != len(BLOCK_HYPER) or None in read or len(read) != 1:
        shapes = ", ".join(f"{n} ({param_count(kids[n]):,} parameters)" for n in have)
        raise Unmodelled(f"hyper-connections of other shapes than Qwen4-Exp's gated residuals "
                         f"in {type(layer).__name__}: {shapes}")
    return read.pop(), [kids[n].hc_norm for n in BLOCK_HYPER]


def model_hyper(model: Any, hidden: int, hyper: tuple[int, int]) -> list:
    """[the model's MODEL_HYPER] where its blocks hold gated residuals of (n, r) and it is one
    of the same (n, r), no inject; [] where none is found (its parameters stay outside the
    blocks: named, in the count)."""
    found = [m for name, m in model.named_modules() if name.rsplit(".", 1)[-1] == MODEL_HYPER]
    if len(found) != 1 or gated_residual(found[0], hidden, inject=False) != hyper:
        return []
    return found


def hyper_notes(hyper: tuple[int, int], counted: bool) -> list[str]:
    """Model.not_modelled of the blocks' gated residuals: what of them is not timed where they
    are counted (the model's MODEL_HYPER found); where not, that they are not counted."""
    n, r = hyper
    if not counted:
        return [f"hyper-connections of {n} streams, rank {r}, in the blocks without the model's "
                f"{MODEL_HYPER} of the same shape (not counted)"]
    return [f"hyper-connections (Qwen4ExpTextGatedResidual, modeling_qwen4_exp.py lines "
            f"1112-1140): counted, their GEMMs timed; the residual of {n} streams ({n} x hidden "
            "wide) is not in the activation memory, and their sigmoid / SiLU gates, stream means "
            "and injections are element-wise work in no FLOP count"]
