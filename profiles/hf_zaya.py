"""Zaya's MoE router (model_type `zaya`) read off the built model (profiles/hf_build.py) as
tensors of its block's attention, the way Gemma 3n's AltUp is (profiles/hf_altup.py).

transformers 5.25.0 models/zaya/modeling_zaya.py (h = hidden_size, r = router_hidden_size,
n = num_experts):
- `ZayaRouter.__init__` (lines 510-540): down_proj h -> r with bias, router_states_scale r (every
  layer but the first: `use_eda`), router_mlp (`ZayaRouterMLP`, lines 493-507: norm r, fc1 and
  fc2 r -> r with bias, GELU after each, out_proj r -> n + 1 without bias: the n experts and a
  skip expert), balancing_biases n + 1 (a buffer, the skip expert's -1).
- `ZayaRouter.forward` (lines 542-571): down_proj on the MoE's input, plus the previous layer's
  router state times router_states_scale, then router_mlp, softmax, top-k of the biased
  probabilities; a pick of the skip expert is masked to expert 0 with weight 0.
- `ZayaSparseMoeBlock` (lines 610-631): that router as `gate`, 3-D `experts`.

tierlab's MoE holds a router of hidden x n_experts (MoE.n_experts) and no other: Zaya's runs
three Linears per token before its projection to the experts. So each block's attention is read
with the MoE's `gate` beside its own tensors (layout names `attn.router.down_proj`, ...: every
Linear a GEMM of each token, 2 x in x out FLOPs, the scale and norm small parameters) and its
MoE without it (ROUTER_READ tells moe_fields). The skip expert is no zero-computation expert
(MoE.zero_experts): with the default balancing bias of -1 it is never picked, so a token runs its
top-k of the n real experts. What this leaves out is named in the router's note.
"""
from __future__ import annotations

from typing import Any

from tierlab import bounds
from tierlab.profiles.hf_altup import block_view
from tierlab.profiles.hf_modules import n_experts, named_child, norm_width

MODEL_TYPE = "zaya"
"""The model_type whose keys check_router reads."""

EXPERTS = bounds.Bound(1, bounds.MODEL["n_experts"].high, why="Zaya's router picks among them; "
                       "0 leaves its experts empty")

ROUTER = ("gate",)
"""The MoE module's router child (ZayaSparseMoeBlock.__init__ line 613)."""

ROUTER_READ = "router_read_as_attention"
"""The attribute of a MoE view whose router was read into the block's attention: moe_fields
then takes no router matrix from it, and carries its value into the Model's not_modelled."""


def router_shape(router: Any, n: int) -> tuple[int, int] | None:
    """(h, r) of a router of the shapes ZayaRouter builds for n experts (module docstring),
    router_states_scale present or not, and no other tensor; else None."""
    try:
        r, h = router.down_proj.weight.shape
        shapes = {name: tuple(p.shape) for name, p in router.named_parameters()}
        norm = norm_width(router.router_mlp.norm)
    except (AttributeError, ValueError):
        return None
    want = {"down_proj.weight": (r, h), "down_proj.bias": (r,),
            "router_mlp.norm.weight": (r,), "router_mlp.fc1.weight": (r, r),
            "router_mlp.fc1.bias": (r,), "router_mlp.fc2.weight": (r, r),
            "router_mlp.fc2.bias": (r,), "router_mlp.out_proj.weight": (n + 1, r)}
    ok = norm == r and shapes in (want, dict(want, router_states_scale=(r,)))
    return (int(h), int(r)) if ok else None


def routed_blocks(blocks: list) -> list:
    """The blocks, each whose MoE (`mlp`) holds a router of Zaya's shapes as a view: its
    attention holds that router (`router`), its MoE the MoE's other children and ROUTER_READ
    (router_note); other blocks unchanged."""
    views = [_routed(b) for b in blocks]
    for view in (v for v in views if v is not None):
        setattr(view[0]["mlp"], ROUTER_READ, router_note(*view[1:], sum(map(bool, views))))
    return [v[0] if v else b for v, b in zip(views, blocks)]


def _routed(block: Any) -> tuple[Any, int, int, int] | None:
    """(the block as routed_blocks views it, h, r, n), or None where it is not Zaya's."""
    import torch

    mlp = getattr(block, "mlp", None)
    router = named_child(mlp, ROUTER) if mlp is not None else None
    experts = named_child(mlp, ("experts",)) if mlp is not None else None
    if router is None or experts is None or getattr(block, "self_attn", None) is None:
        return None
    n = n_experts(experts[1])
    shape = router_shape(router[1], n)
    if shape is None:
        return None
    view = block_view(block, {"router": router[1]})
    view["mlp"] = torch.nn.ModuleDict({k: c for k, c in mlp.named_children() if k != router[0]})
    return view, *shape, n


def router_note(h: int, r: int, n: int, blocks: int) -> str:
    """What reading Zaya's router into the attention leaves out, with its figures."""
    return (f"Zaya's router (down_proj {h} -> {r}, router_mlp {r} -> {r} -> {r} -> {n} experts "
            "+ 1 skip expert: modeling_zaya.py ZayaRouter) read as tensors of the attention of "
            f"each block, beside the layout's router of hidden x n_experts ({blocks} MoE blocks "
            f"x {h} x {n} = {blocks * h * n:,} parameters counted over); its GELUs, softmax and "
            "the router state carried between layers are not timed; a token's pick of the skip "
            "expert (never, with the default balancing bias of -1) is counted as a real expert's")


def check_router(config: Any, where: str) -> None:
    """A Zaya config's router keys, before the model is built: num_experts and
    router_hidden_size whole numbers >= 1 (transformers builds a router and experts 0 wide, or
    fails on a negative size). Else one ConfigError line naming the key."""
    if getattr(config, "model_type", None) != MODEL_TYPE:
        return
    bounds.check(config.num_experts, EXPERTS, f"{where}: num_experts")
    bounds.check(config.router_hidden_size, bounds.MODEL["hidden"], f"{where}: router_hidden_size")
