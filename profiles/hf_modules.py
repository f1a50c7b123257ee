"""Reading a built model's modules (profiles/hf_build.py): the decoder blocks, the attention
projections (heads checked against the shapes, or the attention read as tensors), an MLP's width
and gating, the experts' count. Each reader returns Model fields or raises Unmodelled naming
what it met; the blocks are assembled from these in profiles/hf_blocks.py.
"""
from __future__ import annotations

from typing import Any

from tierlab.profiles.hf_mixer import mixer_tensors
from tierlab.profiles.schema import AttentionTensors


ATTENTION_NAMES = ("self_attn", "attn", "attention", "self_attention", "multi_head_attention")


MLP_NAMES = ("mlp", "feed_forward", "block_sparse_moe", "moe", "ffn")


SHARED_NAMES = ("shared_expert", "shared_experts", "shared_mlp")


class Unmodelled(Exception):
    """A part of the built model that tierlab's Model cannot express (the message names it)."""


def named_child(module: Any, names: tuple[str, ...]) -> tuple[str, Any] | None:
    return next(((n, c) for n, c in module.named_children() if n in names), None)


def is_norm(module: Any) -> bool:
    return "norm" in type(module).__name__.lower()


def param_count(module: Any) -> int:
    return sum(p.numel() for p in module.parameters())


def norm_width(norm: Any) -> int:
    """Elements a norm normalises, read off its weight (0 without one)."""
    weight = getattr(norm, "weight", None)
    return weight.numel() if weight is not None else 0


def weight_matrices(module: Any) -> dict[str, Any]:
    """name -> parameter of the matrices (2-D/3-D, not a norm's, not a bias)."""
    norms = {n for n, m in module.named_modules() if n and is_norm(m)}
    return {n: p for n, p in module.named_parameters()
            if p.dim() >= 2 and "bias" not in n.rsplit(".", 1)[-1]
            and n.rsplit(".", 1)[0] not in norms}


def decoder_layers(model: Any, n_layers: int) -> Any:
    """The ModuleList of the decoder blocks: the largest one with n_layers entries."""
    lists = [m for m in model.modules() if type(m).__name__ == "ModuleList" and len(m) == n_layers]
    if not lists:
        raise Unmodelled(f"no list of {n_layers} decoder layers")
    return max(lists, key=param_count)


def attention_fields(attn: Any, config: Any, hidden: int) -> dict:
    """Heads, kv heads and head width from the config object, checked against the projections;
    fused or separate q/k/v; q/k norms ('head': head_dim wide, 'full': all heads). Projections
    of other shapes: the attention read as tensors (tensor_attention); a linear attention
    (NOT_SOFTMAX): Unmodelled, saying so."""
    not_softmax(attn)
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    q = heads * head_dim
    mats = weight_matrices(attn)
    numel = sum(p.numel() for p in mats.values())
    # kv heads: the config's, else multi-head (GPT-J has no num_key_value_heads)
    kv_heads = [n for n in (getattr(config, "num_key_value_heads", None), heads) if n]
    kv = next((n for n in kv_heads if numel == 2 * hidden * (q + n * head_dim)
               and _shapes_are(mats, hidden, q, n * head_dim)), None) \
        if len(mats) in (2, 4) else None    # q, k, v, o or qkv, o: else read as tensors
    # Qwen3-Next: q_proj outputs the query and a gate of q_dim (Model.attn_output_gate)
    gated = kv is None and len(mats) == 4 and any(
        numel == 2 * hidden * (q + n * head_dim) + hidden * q for n in kv_heads)
    if gated:
        kv = next(n for n in kv_heads if numel == 2 * hidden * (q + n * head_dim) + hidden * q)
    if kv is None:
        return tensor_attention(attn, config, hidden)
    widths = [w for w in (norm_width(m) for n, m in attn.named_modules() if n and is_norm(m))
              if w]
    if widths and max(widths) not in (head_dim, q):
        raise Unmodelled(f"q/k norms {widths} wide in {type(attn).__name__}")
    qk_norm = "none" if not widths else ("head" if max(widths) == head_dim else "full")
    return dict(n_heads=heads, n_kv_heads=kv, attn_head_dim=head_dim if q != hidden else 0,
                fused_qkv=len(mats) == 2, qk_norm=qk_norm, attn_output_gate=gated)


def _shapes_are(mats: dict, hidden: int, q: int, kv: int) -> bool:
    """The projections are q, k, v, o (or qkv, o) of q and kv widths, as Linear (out x in)
    or all as Conv1D (in x out) stores them: numel alone takes MiMo-V2-Flash's sliding layers
    (4 kv heads of 16 for k, of 8 for v) for 2 kv heads of 16."""
    want = [(q, hidden), (kv, hidden), (kv, hidden), (hidden, q)] if len(mats) == 4 else \
        [(q + 2 * kv, hidden), (hidden, q)]
    have = sorted(tuple(p.shape) for p in mats.values())
    return have in (sorted(want), sorted(s[::-1] for s in want))


NOT_SOFTMAX = ("deltaattention", "lightningattention", "retention", "rwkv")
"""Words in an attention module's class name that mark a linear attention, not softmax:
a MiniMaxLightningAttention, RwkvSelfAttention (their forwards keep a recurrent state, no score
matrix) or KimiLinearDeltaAttention / BailingHybridDeltaAttention (KDA) that is not the
computation hf_mixer.is_lightning, is_rwkv or is_kda times (those that are are read as mixers
before this).
Not "linear" alone: KimiLinearAttention is Kimi Linear's softmax MLA."""


def not_softmax(attn: Any) -> None:
    """Unmodelled, in one line, for an attention module of a linear-attention class."""
    name = type(attn).__name__
    if any(w in name.lower() for w in NOT_SOFTMAX):
        raise Unmodelled(f"linear attention ({name}: a recurrent state in place of softmax "
                         "scores, which tierlab does not time)")


def _int_attr(obj: Any, *names: str) -> tuple[str, Any] | None:
    """(name, value) of the first of `names` that `obj` sets to a number (0 included)."""
    for n in names:
        v = getattr(obj, n, None)
        if isinstance(v, int) and not isinstance(v, bool):
            return n, v
    return None


def score_shape(attn: Any, config: Any, hidden: int) -> tuple[int, int, int, int]:
    """(query heads, kv heads, q/k head width, v head width) as an attention module's forward
    reshapes its projections: its own attributes first (every transformers attention sets
    `head_dim`, or `qk_head_dim` and `v_head_dim` for MLA: modeling_deepseek_v3.py
    DeepseekV3Attention, modeling_minicpm3.py MiniCPM3Attention; `num_heads` or config's
    num_attention_heads; `num_key_value_groups` = heads / kv heads), then the config's. A width
    or count below 1 is Unmodelled naming its attribute."""
    heads = _int_attr(attn, "num_heads", "num_attention_heads") or \
        ("num_attention_heads", config.num_attention_heads)
    qk = _int_attr(attn, "qk_head_dim", "head_dim") or _int_attr(config, "head_dim") or \
        ("hidden_size // num_attention_heads", hidden // max(1, heads[1]))
    v = _int_attr(attn, "v_head_dim") or _int_attr(config, "v_head_dim") or qk
    for name, value in (heads, qk, v):
        if value < 1:
            raise Unmodelled(f"attention {name} = {value} in {type(attn).__name__} (heads and "
                             "head widths are whole numbers >= 1)")
    groups = _int_attr(attn, "num_key_value_groups")
    kv = heads[1] // groups[1] if groups and groups[1] > 0 and heads[1] % groups[1] == 0 else \
        (getattr(config, "num_key_value_heads", None) or heads[1])
    return heads[1], kv if heads[1] % kv == 0 else heads[1], qk[1], v[1]


def tensor_attention(attn: Any, config: Any, hidden: int) -> dict:
    """Model attention fields of a softmax attention whose projections are not q/k/v/o of its
    heads: its tensors as transformers builds them (Model.attention_tensors: every Linear weight
    a GEMM, every other tensor small; profiles/hf_mixer.py mixer_tensors, the same rule as a
    mixer's) and its score shape (score_shape), checked by its output projection: a Linear from
    heads x v width to hidden (o_proj, which every such forward ends with)."""
    heads, kv, qk, v = score_shape(attn, config, hidden)
    mats, small = mixer_tensors(attn)
    if not any(i == heads * v and o == hidden for _, i, o in mats):
        shapes = ", ".join(f"{n} {i}x{o}" for n, i, o in mats)
        raise Unmodelled(f"attention projections in {type(attn).__name__} ({shapes}) without an "
                         f"output projection from {heads} heads of {v} to {hidden}")
    return dict(n_heads=heads, n_kv_heads=kv, attn_head_dim=qk, fused_qkv=False,
                qk_norm="none", attn_output_gate=False,
                attention_tensors=AttentionTensors(matrices=mats, small_params=small,
                                                   v_head_dim=v, indexer=indexer_shape(attn)))


def indexer_shape(attn: Any) -> tuple[int, int, int]:
    """(heads, head width, top-k) of a DeepSeek sparse attention's `indexer` child
    (modeling_deepseek_v32.py DeepseekV32Indexer.__init__: n_heads = index_n_heads, head_dim =
    index_head_dim, index_topk), () without one; an indexer without them: Unmodelled."""
    child = named_child(attn, ("indexer",))
    if child is None:
        return ()
    got = [_int_attr(child[1], n) for n in ("n_heads", "head_dim", "index_topk")]
    if any(g is None or g[1] < 1 for g in got):
        raise Unmodelled(f"an indexer ({type(child[1]).__name__}) whose heads, head width and "
                         "top-k tierlab does not find")
    return tuple(g[1] for g in got)


def linear_biases(module: Any) -> tuple[bool, bool]:
    """(every projection of `module` has a bias, some has one): a Linear's or Conv1D's (GPT-2)
    `bias`; 3-D experts' `*_bias` tensors count too."""
    flags = [getattr(m, "bias", None) is not None for m in module.modules()
             if not is_norm(m) and getattr(m, "weight", None) is not None and m.weight.dim() == 2]
    flags += [True for n, _ in module.named_parameters() if n.endswith("_bias")]
    return bool(flags) and all(flags), any(flags)


def mlp_shape(module: Any, hidden: int, n: int = 1, fused_experts: bool = False) -> dict:
    """Width and gating of one MLP (of `n` experts stored together): 3 matrices, or 2 named
    gate_up (fused), is gated; 2 others are not (GPT: fc_in, fc_out)."""
    mats = weight_matrices(module)
    per = len(mats) if fused_experts else len(mats) / n
    gated = per == 3 or (per == 2 and (any("gate" in name for name in mats)
                                       or fused_gate_up(list(mats.values()))))
    total = sum(p.numel() for p in mats.values()) // n
    width, rest = divmod(total, (3 if gated else 2) * hidden)
    if rest or per not in (2, 3):
        raise Unmodelled(f"an MLP of {per:g} matrices and {total:,} parameters in "
                         f"{type(module).__name__}")
    return dict(ffn=width, gated_mlp=gated, fused_gate_up=gated and per == 2)


def fused_gate_up(mats: list) -> bool:
    """Two Linear weights (out x in) whose first outputs twice what the second takes: gate and
    up in one matrix, chunked in two (Granite's shared_mlp input_linear -> output_linear:
    modeling_granitemoehybrid.py GraniteMoeHybridMLP.forward)."""
    return len(mats) == 2 and all(p.dim() == 2 for p in mats) and \
        mats[0].shape[0] == 2 * mats[1].shape[1]


def n_experts(experts: Any) -> int:
    """Routed experts of an `experts` module: a list of MLPs, or 3-D tensors (experts first)."""
    if type(experts).__name__ == "ModuleList":
        return len(experts)
    return next(iter(weight_matrices(experts).values())).shape[0]

