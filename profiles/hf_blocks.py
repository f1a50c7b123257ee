"""One decoder block of a built model read as Model fields (profiles/hf_build.py): its attention
or mixer, its dense MLP or MoE (router, shared expert, Gemma 4's MoE beside the MLP), its norms
and biases, Gemma 4's per-layer inputs, Zamba's shared blocks, Nemotron-H's one-part blocks, and
the children left unread. Built from the module readers of profiles/hf_modules.py.
"""
from __future__ import annotations

import re
from typing import Any

from tierlab.profiles.hf_config import TOP_K_KEYS, experts_per_token
from tierlab.profiles.hf_cross import cross_block, cross_layer_fields
from tierlab.profiles.hf_hyper import BLOCK_HYPER, block_hyper
from tierlab.profiles.hf_mixer import find_mixer, mixer_fields, mixer_tensors
from tierlab.profiles.hf_sublayers import zero_experts
from tierlab.profiles.hf_modules import (ATTENTION_NAMES, MLP_NAMES, SHARED_NAMES, Unmodelled,
                                         attention_fields, fused_gate_up, is_norm, linear_biases,
                                         mlp_shape, n_experts, named_child, norm_width,
                                         param_count, weight_matrices)
from tierlab.profiles.hf_zaya import ROUTER_READ


def moe_fields(mlp: Any, config: Any, hidden: int, beside: Any = None) -> dict:
    """Routed experts (one 3-D tensor per matrix, or a list of MLPs; or JetMoE's
    parallel_experts and the bias on the MoE's output, MoE.output_bias), router, shared
    expert(s) and its gate; top-k from the config object. `beside`: a shared MLP that the block
    holds next to the MoE module rather than inside it, as (name, module) (Granite 4's
    shared_mlp). A MoE view holding hf_zaya.ROUTER_READ: its router was read into the block's
    attention (Zaya's), so it holds none, and its note joins the Model's not_modelled."""
    latent = [n for n, c in mlp.named_children() if "latent" in n and param_count(c)]
    if latent:                  # NemotronHMoE's moe_latent_size: experts on a narrower input
        raise Unmodelled(f"latent expert projections ({', '.join(latent)}) in "
                         f"{type(mlp).__name__}")
    child = named_child(mlp, ("experts",))
    experts = child[1] if child else parallel_experts(mlp)     # JetMoE: beside the router
    n = n_experts(experts)
    shape = mlp_shape(experts, hidden, n, fused_experts=type(experts).__name__ != "ModuleList")
    shared = named_child(mlp, SHARED_NAMES) or beside
    shared_ffn = mlp_shape(shared[1], hidden)["ffn"] if shared else 0
    gate = sum(p.numel() for name, p in mlp.named_parameters()
               if name.startswith("shared_expert_gate.") and p.dim() == 2)
    inner = ("experts.",) + tuple(f"{s}." for s in SHARED_NAMES) + ("shared_expert_gate.",) + \
        (() if child else tuple(f"{n}." for n in PARALLEL_EXPERTS))
    router = sum(p.numel() for name, p in weight_matrices(mlp).items() if not name.startswith(inner))
    zero = zero_experts(config)     # LongCat: the router scores the zero-computation ones too
    scored = scored_shared(shared, router, hidden, n + zero)    # Inkling: and the shared ones
    elsewhere = getattr(mlp, ROUTER_READ, None)     # Zaya's: read into the block's attention
    if router != (0 if elsewhere else hidden * (n + zero + scored)) or gate not in (0, hidden):
        raise Unmodelled(f"a router of {router:,} parameters for {n} experts"
                         f"{f' + {zero} zero-computation' if zero else ''} in "
                         f"{type(mlp).__name__}")
    top_k = experts_per_token(config)
    if not top_k:
        raise Unmodelled(f"no experts-per-token key ({', '.join(TOP_K_KEYS)}) in the config")
    bias = {} if child else \
        dict(output_bias=dict(mlp.named_parameters(recurse=False)).get("bias") is not None)
    if zero:
        bias["zero_experts"] = zero
    if elsewhere:
        bias["router_note"] = elsewhere
    if scored:      # the layout's router is hidden x (n + zero): these rows stay out
        loose = sum(p.numel() for name, p in mlp.named_parameters()
                    if not name.startswith(inner) and p.dim() < 2)
        bias["router_note"] = (f"the router's {scored} rows scoring the shared experts and its "
                               f"{loose:,} other parameters ({hidden * scored + loose:,} per MoE "
                               "block, counted as none)")
    return dict(n_experts=n, experts_per_token=top_k, expert_ffn=shape["ffn"],
                shared_ffn=shared_ffn, shared_gate=bool(gate), gated_mlp=shape["gated_mlp"],
                fused_gate_up=shape["fused_gate_up"], **bias)


def scored_shared(shared: Any, router: int, hidden: int, routed: int) -> int:
    """Shared experts the router scores beside the routed ones: the s experts stacked in the
    shared module's 3-D weights (s x out x in) where the router is hidden x (routed + s), else 0.
    Inkling (transformers 5.25.0 modeling_inkling.py InklingTopkRouter.__init__ lines 334-346:
    `weight` of n_routed_experts + n_shared_experts rows; forward lines 348-371: sigmoid scores,
    top-k over the routed columns, the shared columns' scores weigh the shared experts, lines
    387-398, InklingSharedExperts: gate_proj, up_proj, down_proj of n_shared_experts x ...)."""
    mats = list(weight_matrices(shared[1]).values()) if shared else []
    if not mats or any(p.dim() != 3 for p in mats):
        return 0
    s = int(mats[0].shape[0])
    return s if router == hidden * (routed + s) else 0


PARALLEL_EXPERTS = ("input_linear", "output_linear")
"""A MoE's routed experts as two children of the MoE module itself, each one weight of
experts x out x in (modeling_jetmoe.py JetMoeMoE.__init__ lines 225-226, JetMoeParallelExperts
line 134): input_linear hidden -> 2 x intermediate (gate and up), output_linear back."""


def parallel_experts(mlp: Any) -> Any:
    """JetMoE's PARALLEL_EXPERTS of `mlp` held as one module (what moe_fields reads as its
    `experts`), None where it lacks them or they are not experts-first 3-D weights."""
    import torch

    kids = dict(mlp.named_children())
    weights = [getattr(kids.get(n), "weight", None) for n in PARALLEL_EXPERTS]
    if any(w is None or w.dim() != 3 for w in weights) or \
            weights[0].shape[0] != weights[1].shape[0]:
        return None
    return torch.nn.ModuleDict({n: kids[n] for n in PARALLEL_EXPERTS})


def block_moe_fields(layer: Any, mlp: Any, config: Any, hidden: int) -> dict:
    """MoE fields of Gemma 4's MoE block (enable_moe_block; modeling_gemma4.py
    Gemma4TextDecoderLayer.__init__ lines 1352-1358, forward lines 1391-1403): a `router`
    (Gemma4TextRouter: proj hidden -> n, `scale` hidden, `per_expert_scale` n; its norm has no
    weight) and 3-D `experts` (Gemma4TextExperts: gate_up_proj, down_proj) that are children of
    the block and run on the same residual as its dense `mlp`, the outputs summed: a MoE whose
    always-active shared expert is that MLP (MoE.shared_ffn), the router's scales
    MoE.router_scales. Another router or experts: Unmodelled naming them."""
    experts, router = named_child(layer, ("experts",))[1], named_child(layer, ("router",))
    n = n_experts(experts)
    shape = mlp_shape(experts, hidden, n, fused_experts=type(experts).__name__ != "ModuleList")
    dense = mlp_shape(mlp, hidden)
    proj = sum(p.numel() for p in weight_matrices(router[1]).values()) if router else 0
    scales = sorted(p.numel() for _, p in router[1].named_parameters() if p.dim() == 1) \
        if router else []
    top_k = experts_per_token(config)
    if proj != hidden * n or scales != sorted([hidden, n]) or not top_k or \
            dense["gated_mlp"] != shape["gated_mlp"]:
        raise Unmodelled(f"a MoE beside the MLP in {type(layer).__name__} whose router "
                         f"({proj:,} + {sum(scales):,} parameters for {n} experts) or top-k "
                         "tierlab does not read (Gemma 4's enable_moe_block)")
    return dict(n_experts=n, experts_per_token=top_k, expert_ffn=shape["ffn"],
                shared_ffn=dense["ffn"], shared_gate=False, router_scales=True,
                gated_mlp=shape["gated_mlp"], fused_gate_up=shape["fused_gate_up"])


def layer_fields(layer: Any, config: Any, hidden: int) -> dict:
    """One decoder block: attention, or a state-space / short-conv mixer in its place
    (profiles/hf_mixer.py), None when it has neither that tierlab models; dense MLP or MoE;
    its norms, which projections carry biases, and the children left unread."""
    if named_child(layer, SHARED_BLOCK) is not None:
        return hybrid_fields(layer, config, hidden)
    if cross_block(layer):              # Llama 3.2 Vision's cross-attention blocks
        return cross_layer_fields(layer, config, hidden)
    layer = unwrapped(layer)            # DBRX's norm_attn_norm
    attn, mlp = named_child(layer, ATTENTION_NAMES), named_child(layer, MLP_NAMES) or loose_mlp(layer)
    per_layer = per_layer_block(layer, hidden)      # Gemma 4's gate, projection and norm
    mixer = find_mixer(layer)           # in place of attention, or beside it (Falcon-H1)
    if mixer is not None and attn is not None and mixer[0] == attn[0]:
        attn = None                     # Kimi Linear's KDA: the mixer in the self_attn slot
    held = {n for n, c in layer.named_children()    # RWKV's channel-mix: the mixer holds it
            if mixer is not None and any(c is m for m in mixer[1].children())}
    if mlp is not None and mlp[0] in held:
        mlp = None
    part = None if mixer or attn or mlp else single_part_child(layer)   # Nemotron-H
    if part is not None:
        attn, mlp = (part[1:], None) if part[0] == "attention" else (None, part[1:])
    beside = named_child(layer, SHARED_NAMES) if mlp is not None else None    # Granite 4's shared_mlp
    own = set(PER_LAYER_BLOCK) if per_layer else set()
    hyper, hyper_norms = block_hyper(layer, hidden)    # Qwen4-Exp: its norms are the block's
    norms = [c for n, c in layer.named_children() if is_norm(c) and n not in own
             and n not in EMBED_NORM] + hyper_norms
    parts = (mixer, attn, mlp, beside) if mixer or part else \
        ((attn, mlp, beside) if attn and mlp else ())
    # Gemma 4's enable_moe_block: router and experts children of the block beside its mlp
    block_moe = mlp is not None and named_child(layer, ("experts",)) is not None
    read = {n for n, _ in (p for p in parts if p is not None)} | own | held | \
        (set(LOOSE_MLP) if mlp is not None and mlp[0] == LOOSE_MLP[0] else set()) | \
        ({"experts", "router"} if block_moe else set()) | (set(BLOCK_HYPER) if hyper else set())
    other = [f"{n} ({type(c).__name__})" for n, c in layer.named_children()
             if n not in read and not is_norm(c) and param_count(c)]
    out = dict(other=other, n_norms=len(norms), norms=norms, attn=None, mlp=None, moe=None,
               mixer=None, attn_bias=None, mlp_bias=None, part=part and part[0],
               per_layer=per_layer, hyper=hyper,
               embed_norm=any(n in EMBED_NORM and is_norm(c) for n, c in layer.named_children()))
    if mixer is not None:
        out["mixer"] = dict(mixer_fields(mixer[1]), attention=attn is not None)
    elif (attn is None or mlp is None) and part is None:
        return out
    if attn is not None:
        out["attn"] = attention_fields(attn[1], config, hidden)
        out["attn_bias"] = None if out["attn"].get("attention_tensors") else \
            linear_biases(attn[1])      # a tensor attention lists its biases itself
    if mlp is None:                 # Mamba: the mixer alone
        return out
    out["mlp_bias"] = linear_biases(mlp[1])[1]
    if named_child(mlp[1], ("experts",)) or parallel_experts(mlp[1]) is not None:
        out["moe"] = moe_fields(mlp[1], config, hidden, beside)
        out["other"] += [n for n in (out["moe"].pop("router_note", None),) if n]
    elif block_moe:
        out["moe"] = block_moe_fields(layer, mlp[1], config, hidden)
    else:
        out["mlp"] = mlp_shape(mlp[1], hidden)
    return out


def unwrapped(layer: Any) -> Any:
    """The block with a child that holds only its attention and norms (DBRX: transformers 5.25.0
    modeling_dbrx.py DbrxNormAttentionNorm.__init__ lines 360-365, norm_1, attn, norm_2; the
    block's `norm_attn_norm`, DbrxBlock.__init__ line 402) replaced by that child's children,
    so they are read as the block's own; the block itself where it has none, attends itself, or
    the names would clash."""
    import torch

    kids = dict(layer.named_children())
    wraps = [n for n, c in kids.items() if named_child(c, ATTENTION_NAMES) is not None and
             not list(c.parameters(recurse=False)) and
             all(k in ATTENTION_NAMES or is_norm(g) for k, g in c.named_children())]
    if len(wraps) != 1 or named_child(layer, ATTENTION_NAMES) is not None:
        return layer
    inner = dict(kids[wraps[0]].named_children())
    if set(inner) & set(kids):
        return layer
    flat = {k: v for n, c in kids.items() for k, v in (inner if n == wraps[0] else {n: c}).items()}
    return torch.nn.ModuleDict(flat)


LOOSE_MLP = ("fc1", "fc2")
"""A block's MLP as two Linear children of the block itself, no `mlp` module (modeling_biogpt.py
BioGptDecoderLayer.__init__, modeling_xglm.py XGLMDecoderLayer.__init__: `self.fc1 =
nn.Linear(embed_dim, ffn_dim)`, `self.fc2 = nn.Linear(ffn_dim, embed_dim)`)."""


def loose_mlp(layer: Any) -> tuple[str, Any] | None:
    """("fc1", the block's LOOSE_MLP Linears held as one module) where the block has both and no
    MLP child, else None."""
    import torch

    kids = dict(layer.named_children())
    if not all(n in kids for n in LOOSE_MLP):
        return None
    return LOOSE_MLP[0], torch.nn.ModuleDict({n: kids[n] for n in LOOSE_MLP})


EMBED_NORM = ("pre_ln",)
"""A block's norm child that runs on the embedding before the first block (RWKV: modeling_rwkv.py
RwkvBlock.__init__ builds `pre_ln` in layer 0 only, forward: `if self.layer_id == 0: hidden =
self.pre_ln(hidden)`): Model.embed_norm, not a block norm."""


PER_LAYER_BLOCK = ("per_layer_input_gate", "per_layer_projection", "post_per_layer_input_norm")
"""A block's per-layer-input children (modeling_gemma4.py Gemma4TextDecoderLayer.__init__ lines
1345-1350; Gemma 3n's decoder layer builds the same three beside its AltUp and laurel)."""


def per_layer_block(layer: Any, hidden: int) -> int | None:
    """Width of a block's per-layer input (Model.per_layer_inputs: its gate hidden -> width, its
    projection width -> hidden, both without bias, and a norm of hidden), None where the block
    has none; any other shape or a part missing: Unmodelled naming it."""
    kids = dict(layer.named_children())
    have = [n for n in PER_LAYER_BLOCK if n in kids]
    if not have:
        return None
    gate, proj, norm = (kids.get(n) for n in PER_LAYER_BLOCK)
    ok = gate is not None and proj is not None and norm is not None and \
        getattr(gate, "bias", None) is None and getattr(proj, "bias", None) is None and \
        gate.weight.dim() == 2 and gate.weight.shape[1] == hidden and \
        tuple(proj.weight.shape) == (hidden, gate.weight.shape[0]) and \
        norm_width(norm) == hidden and param_count(norm) == hidden
    if not ok:
        shapes = ", ".join(f"{n} {tuple(p.shape)}" for n in have
                           for p in kids[n].parameters())
        raise Unmodelled(f"per-layer inputs of other shapes than tierlab reads in "
                         f"{type(layer).__name__} ({shapes})")
    return int(gate.weight.shape[0])


_SLOT = re.compile(r"_adapter_list\.(\d+)\.")
"""A tensor of one use's slot in a Zamba2 shared block's adapter lists (`linear_q_adapter_list`,
`gate_up_proj_adapter_list`: modeling_zamba2.py lines 249-274, 997-1006)."""


SHARED_BLOCK = ("shared_transformer", "shared_transf")
"""A hybrid layer's shared attention + MLP block: Zamba2's (modeling_zamba2.py
Zamba2HybridLayer), Zamba's (modeling_zamba.py ZambaHybridLayer: every hybrid layer's
`shared_transf` tied to the first's, `_tied_weights_keys`; no adapters)."""


def hybrid_fields(layer: Any, config: Any, hidden: int) -> dict:
    """A Zamba2HybridLayer (modeling_zamba2.py) or ZambaHybridLayer (modeling_zamba.py, one
    shared block, its MLP's gate, up and down apart): its `mamba_decoder` read as a mixer block, and
    the use of a shared block: the `shared_transformer`'s weights (tied across its uses: every
    Linear weight a GEMM, the norms and biases small), its `*_adapter_list` slot (each use runs
    its own: Zamba2Attention / Zamba2MLP `forward`, `layer_dic[layer_idx]`; every slot is built
    alike from the config, so one slot is read) and the layer's `linear` (hidden x hidden)."""
    out = layer_fields(layer.mamba_decoder, config, hidden)
    block = named_child(layer, SHARED_BLOCK)[1]
    mats, small = mixer_tensors(block)
    slots = sorted({int(m.group(1)) for n, *_ in mats if (m := _SLOT.search(n))})
    own = [(_SLOT.sub("_adapter.", n), i, o) for n, i, o in mats
           if slots and f"_adapter_list.{slots[0]}." in n]
    weights = tuple(m for m in mats if not _SLOT.search(m[0]))
    attn = block.self_attn
    heads, head_dim = config.num_attention_heads, int(attn.head_dim)
    mlp = [p for n, p in block.feed_forward.named_parameters() if n in
           ("gate_up_proj.weight", "down_proj.weight")]
    split = len(mlp) == 1 and {"gate_proj.weight", "up_proj.weight"} <= \
        {n for n, _ in block.feed_forward.named_parameters()}      # Zamba's gate, up apart
    if (len(mlp) != 2 and not split) or heads * head_dim != attn.q_proj.weight.shape[0]:
        raise Unmodelled(f"a shared block of {param_count(block):,} parameters in "
                         f"{type(block).__name__}")
    gated = split or fused_gate_up(mlp)
    out["shared"] = _shared_use(config, layer, weights, small, own, heads, head_dim, hidden,
                                dict(ffn=int(mlp[-1].shape[1]), gated_mlp=gated,
                                     fused_gate_up=gated and not split))
    return out


def _shared_use(config: Any, layer: Any, weights: tuple, small: tuple, own: list, heads: int,
                head_dim: int, hidden: int, mlp: dict) -> dict:
    """One use of a shared block (hybrid_fields): its weights, its own adapters and `linear`,
    the attention's heads and the MLP's shape; Zamba's one block where no num_mem_blocks."""
    return dict(
        blocks=getattr(config, "num_mem_blocks", None) or 1, matrices=weights,
        small_params=small,
        use_matrices=tuple(own) + (("linear", *layer.linear.weight.shape[::-1]),),
        attention=dict(n_heads=heads, n_kv_heads=config.num_key_value_heads,
                       attn_head_dim=head_dim if heads * head_dim != hidden else 0),
        mlp=mlp)


SINGLE_PART = {"Attention": "attention", "MLP": "mlp", "MoE": "mlp"}
"""Class-name endings of a block's one child when the block holds a single part, and the part
(Nemotron-H's `mixer`: NemotronHAttention, NemotronHMLP, NemotronHMoE; modeling_nemotron_h.py
`NemotronHBlock.__init__`: `self.mixer = MIXER_TYPES[self.block_type](config, ...)`)."""


def single_part_child(layer: Any) -> tuple[str, str, Any] | None:
    """(part, child name, module) of a block whose one child beside its norms is an attention,
    an MLP or a MoE alone (SINGLE_PART), None for any other block."""
    kids = [(n, c) for n, c in layer.named_children() if not is_norm(c) and param_count(c)]
    if len(kids) != 1:
        return None
    name, module = kids[0]
    part = next((p for end, p in SINGLE_PART.items() if type(module).__name__.endswith(end)), None)
    return (part, name, module) if part else None

