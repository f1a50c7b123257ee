"""Reading a built model's modules (profiles/hf_build.py): the decoder blocks, the attention
projections (heads checked against the shapes, or the attention read as tensors), an MLP's width
and gating, the experts' count. Each reader returns Model fields or raises Unmodelled naming
what it met; the blocks are assembled from these in profiles/hf_blocks.py.
"""
from __future__ import annotations

from typing import Any

from tierlab.profiles.hf_compressed import compress_rate, grouped_matrices, grouped_output_error
from tierlab.profiles.hf_indexer import indexer_module, indexer_of
from tierlab.profiles.hf_mixer import mixer_tensors
from tierlab.profiles.hf_xlnet import is_relative_attention, relative_fields
from tierlab.profiles.schema import AttentionTensors


ATTENTION_NAMES = ("self_attn", "attn", "attention", "self_attention", "multi_head_attention",
                   "temporal_block")    # RecurrentGemma: its local attention, or its RG-LRU


MLP_NAMES = ("mlp", "feed_forward", "block_sparse_moe", "moe", "ffn", "mlp_block")


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
    of other shapes, or beside an indexer: the attention read as tensors (tensor_attention); a
    linear attention (NOT_SOFTMAX): Unmodelled, saying so. XLNet's relative attention (3-D q, k,
    v, o, r): profiles/hf_xlnet.py relative_fields."""
    not_softmax(attn)
    if is_relative_attention(attn):
        fields, wrong = relative_fields(attn, config, hidden)
        if wrong:
            raise Unmodelled(wrong)
        return fields
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
    # an indexer (Kolibri 1.1's beside plain q/k/v/o): AttentionTensors.indexer holds it
    if kv is None or indexer_module(attn) is not None or (
            getattr(config, "model_type", None) in ODD_BIAS_TYPES and
            odd_biases(attn, q * (2 if gated else 1), kv * head_dim, hidden)) or \
            getattr(config, "model_type", None) in TENSOR_BIAS_TYPES:
        return tensor_attention(attn, config, hidden)
    widths = [w for w in (norm_width(m) for n, m in attn.named_modules() if n and is_norm(m))
              if w]
    if widths and max(widths) not in (head_dim, q):
        raise Unmodelled(f"q/k norms {widths} wide in {type(attn).__name__}")
    qk_norm = "none" if not widths else ("head" if max(widths) == head_dim else "full")
    return dict(n_heads=heads, n_kv_heads=kv, attn_head_dim=head_dim if q != hidden else 0,
                fused_qkv=len(mats) == 2, qk_norm=qk_norm, attn_output_gate=gated)


ODD_BIAS_TYPES = ("recurrent_gemma",)
"""model_types whose attention is read as tensors where its biases are odd (odd_biases). GPT-Neo's
has the same pattern (out_proj alone: modeling_gpt_neo.py GPTNeoSelfAttention) and would count
as transformers does (defaults: 1,315,575,808 for 1,315,428,352 today, -0.011 %); left as it
counts until a change of its count is wanted."""


TENSOR_BIAS_TYPES = ("whisper", "bigbird_pegasus")
"""model_types whose attention is read as tensors, each bias listed, whatever its biases total:
Whisper's k_proj has none beside q, v and out_proj's (transformers 5.25.0 modeling_whisper.py
WhisperAttention lines 281-284: a total that equals q/k/v's), BigBird-Pegasus' decoder
attention none (modeling_bigbird_pegasus.py lines 1171-1174, use_bias False) beside the MLP's
fc1/fc2 biases; Model's bias flags count neither (the MLP's biases then decide Model.bias)."""


def odd_biases(attn: Any, q_out: int, kv: int, hidden: int) -> bool:
    """The projections carry biases of another total than Model's flags count (none, q/k/v:
    Model.qkv_bias, all four: Model.bias): RecurrentGemma's o_proj alone (transformers 5.25.0
    modeling_recurrent_gemma.py line 217, `bias=True` beside q/k/v's `config.attention_bias`);
    such an attention is read as tensors, which list each bias (tensor_attention)."""
    n = sum(m.bias.numel() for m in attn.modules() if not is_norm(m)
            and getattr(m, "weight", None) is not None and m.weight.dim() == 2
            and getattr(m, "bias", None) is not None)
    return n not in (0, q_out + 2 * kv, q_out + 2 * kv + hidden)


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
    heads x v width to hidden (o_proj, which every such forward ends with). A mixture of
    attention heads (attention_experts: JetMoE) adds its experts' q and o projections; a token's
    top-k experts each project its own heads / top-k of the heads back to hidden."""
    heads, kv, qk, v = score_shape(attn, config, hidden)
    mats, small = mixer_tensors(attn)
    experts = attention_experts(attn)
    top_k, per_expert = experts.get("experts_per_token", 1), experts.get("expert_matrices", ())
    if experts:     # the 3-D expert weights become expert matrices, not small parameters
        small = tuple((n, k) for n, k in small if n.removesuffix(".weight") not in
                      {e for e, _, _ in per_expert})
    grouped = grouped_matrices(attn)    # DeepSeek-V4's o_a_proj: a GEMM, not a small tensor
    if grouped:
        mats += tuple((n, i, o) for n, i, o, _ in grouped)
        small = tuple((n, k) for n, k in small if n.removesuffix(".weight") not in
                      {g for g, *_ in grouped})
    wrong = grouped_output_error(attn, mats, heads, v, hidden) or compress_rate(attn)[1]
    if wrong:
        raise Unmodelled(f"{wrong} in {type(attn).__name__}")
    outs = [(i, o) for _, i, o in mats] + [(i * top_k, o) for _, i, o in per_expert] + \
        [(heads * v, hidden) for _ in grouped[:1]]     # o_a then o_b: heads x v -> hidden
    if not any(i == heads * v and o == hidden for i, o in outs):
        shapes = ", ".join([f"{n} {i}x{o}" for n, i, o in mats] +
                           [f"{n} {experts['n_experts']} x {i}x{o}" for n, i, o in per_expert])
        raise Unmodelled(f"attention projections in {type(attn).__name__} ({shapes}) without an "
                         f"output projection from {heads} heads of {v} to {hidden}")
    return dict(n_heads=heads, n_kv_heads=kv, attn_head_dim=qk, fused_qkv=False,
                qk_norm="none", attn_output_gate=False,
                attention_tensors=AttentionTensors(
                    matrices=mats, small_params=small, v_head_dim=v,
                    indexer=indexer_shape(attn, qk), compress_rate=compress_rate(attn)[0],
                    **experts))


def attention_experts(attn: Any) -> dict:
    """AttentionTensors' expert fields of a mixture of attention heads, {} for any other
    attention: the modules inside it that hold a `num_experts` x out x in weight
    (modeling_jetmoe.py JetMoeParallelExperts.__init__ line 134; JetMoeMoA.__init__ lines
    285-286: input_linear, the expert's q projection, and output_linear) and the experts a
    token runs, the attention's `top_k` (JetMoeAttention.__init__ line 440:
    config.num_experts_per_tok). Experts of different counts, or a top-k missing or outside
    1..n: Unmodelled naming it."""
    found = [(n, m.weight) for n, m in attn.named_modules() if n and _int_attr(m, "num_experts")
             and _stacked(getattr(m, "weight", None))]
    if not found:
        return {}
    counts = {int(w.shape[0]) for _, w in found}
    top_k = _int_attr(attn, "top_k")
    n = max(counts)
    if len(counts) > 1 or top_k is None or not 1 <= top_k[1] <= n:
        raise Unmodelled(f"a mixture of attention heads in {type(attn).__name__} of "
                         f"{sorted(counts)} experts, top_k {top_k and top_k[1]} "
                         "(num_experts_per_tok: 1 to num_local_experts)")
    return dict(expert_matrices=tuple((name, int(w.shape[2]), int(w.shape[1]))
                                      for name, w in found),
                n_experts=n, experts_per_token=top_k[1])


def _stacked(weight: Any) -> bool:
    """A weight of experts x out x in (3-D), not None."""
    return weight is not None and weight.dim() == 3


def indexer_shape(attn: Any, width: int) -> tuple[int, int, int]:
    """(heads, head width, top-k) of a sparse attention's indexer (profiles/hf_indexer.py
    indexer_module, indexer_of; `width`: the attention's q/k head width, which a weightless
    indexer scores with: Kolibri 1.1's), () without one; an indexer without them: Unmodelled."""
    module = indexer_module(attn)
    if module is None:
        return ()
    found, wrong = indexer_of(module, width)
    if wrong:
        raise Unmodelled(wrong)
    return found


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
    """Two Linear weights (out x in), or two expert weights stored as Linear's per expert
    (experts x out x in), whose first outputs twice what the second takes: gate and up in one
    matrix, chunked in two (Granite's shared_mlp input_linear -> output_linear:
    modeling_granitemoehybrid.py GraniteMoeHybridMLP.forward; JetMoE's experts:
    modeling_jetmoe.py JetMoeMoE.__init__ line 225 `hidden_size * 2`, forward lines 253-255)."""
    return len(mats) == 2 and all(p.dim() in (2, 3) for p in mats) and \
        mats[0].shape[-2] == 2 * mats[1].shape[-1]


def n_experts(experts: Any) -> int:
    """Routed experts of an `experts` module: a list of MLPs, 3-D tensors (experts first), or
    2-D tensors of its `num_experts` stacked on the first axis (DBRX: transformers 5.25.0
    modeling_dbrx.py DbrxExpertGLU.__init__ lines 254-256, w1/v1/w2 of moe_num_experts x
    ffn_hidden_size rows; DbrxExperts.__init__ line 278 `num_experts`)."""
    if type(experts).__name__ == "ModuleList":
        return len(experts)
    mats = list(weight_matrices(experts).values())
    stacked = _int_attr(experts, "num_experts")
    if stacked and stacked[1] > 0 and all(p.dim() == 2 and p.shape[0] % stacked[1] == 0
                                          for p in mats):
        return stacked[1]
    return mats[0].shape[0]

