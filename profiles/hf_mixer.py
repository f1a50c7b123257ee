"""A built model's state-space / short-convolution mixer -> Model.mixer fields (profiles/schema.py
Mixer): its tensors read off transformers' meta-device module, its conv + scan FLOPs counted from
the modeling file's forward.

- tensors: every Linear weight of the mixer is a projection (a GEMM: in_proj, x_proj, dt_proj,
  out_proj); every other tensor (the depthwise conv's weight and bias, A_log, D, dt_bias, the
  Linears' biases, the mixer's own norms) is a small parameter, counted by numel.
- FLOPs per token of what is not a projection (multiply and add = 2 FLOPs), from the slow
  (pure torch) paths, which the CUDA kernels compute the same arithmetic of:
  * Mamba (modeling_mamba.py `MambaMixer.slow_forward`; Jamba's `JambaMambaMixer.slow_forward`
    and FalconMamba's copy): depthwise causal conv 2 k d per token (d = intermediate channels,
    k = conv_kernel); selective scan per channel and state: exp(dt A) 1, dt B 1, (dt B) u 1,
    state update A h + B u 2, C h 2 -> 7 d N; D skip 2 d; gate 1 d.
  * Zamba's multi-head Mamba-1 (modeling_zamba.py `ZambaMambaMixer.forward` ->
    `mamba_selective_scan` per head; Glorioso et al. 2024, "Zamba", arXiv 2405.16712): Mamba-1's
    conv, scan, D skip and gate above, and x_proj and dt_proj, which are parameters of one
    matrix per head (x_proj_weight H x (R + 2 N) x P, dt_proj_weight H x P x R; P = d / H),
    not Linears: their batched products 2 d (R + 2 N) + 2 d R are counted here, as the scan's.
  * Mamba-2 (modeling_mamba2.py `Mamba2Mixer.torch_forward`, Bamba's copy; the SSD algorithm of
    Dao & Gu 2024, "Transformers are SSMs", sec. 6): conv 2 k (d + 2 G N); per head of width
    P = d / H and chunk L = chunk_size: C B^T in the chunk 2 L N, the masked (M x) 2 L P, the
    chunk states (B decay x) 2 N P, the states' output C h 2 N P; D skip 2 d. Counted at the
    full chunk (no causal halving, as the attention scores are) and L = chunk_size: a sequence
    shorter than one chunk is over-counted.
    Granite 4 (`GraniteMoeHybridMambaLayer.torch_forward`) and Falcon-H1 (`FalconH1Mixer.
    torch_forward`, heads of width mamba_d_head over mamba_d_ssm channels) are copies of it.
  * LFM2 short conv (modeling_lfm2.py `Lfm2ShortConv.forward`): B x gate 1 h, depthwise
    conv 2 k h, C y gate 1 h. LFM3's (modeling_lfm3.py `Lfm3ShortConv`) is the same forward and
    conv helper: read by that code and its shapes (is_short_conv), not by name.
  * Gated DeltaNet (modeling_qwen3_next.py `Qwen3NextGatedDeltaNet.forward` ->
    `torch_chunk_gated_delta_rule`, chunk L = 64, its default): depthwise conv 2 k (2 H_k d_k
    + H_v d_v); q and k repeated to the H_v value heads, then per value head and token, each
    product counted in full (no triangular halving, as the SSD and the scores are): the UT
    system k_beta k^T 2 L d_k, the intra-chunk q k^T 2 L d_k, the two triangular solves for
    new_values 2 L d_v and k_cumdecay 2 L d_k, v_new's k_cumdecay S 2 d_k d_v, the
    inter-chunk q S 2 d_k d_v, intra_chunk_attn v_new 2 L d_v, the state update k^T v_new
    2 d_k d_v -> L (6 d_k + 4 d_v) + 6 d_k d_v; the gated RMSNorm's gate 1 H_v d_v.
    OLMo Hybrid's and Lara Mini's (modeling_olmo_hybrid.py `OlmoHybridGatedDeltaNet`,
    modeling_lara_mini.py `LaraMiniGatedDeltaNet`) call the same `torch_chunk_gated_delta_rule`
    (the same code) behind projections of their own split (separate q/k/v/a/b/g; Qwen3.5's
    in_proj_qkv/z/b/a): read by that computation and those shapes (is_gated_delta), not by name.
  * KDA, Kimi delta attention (modeling_kimi_linear.py `KimiLinearDeltaAttention.forward` ->
    `chunk_kimi_delta_attention`, chunk L = 64; Bailing-hybrid's `BailingHybridDeltaAttention`
    calls the same code): Gated DeltaNet's chunked rule with a decay per channel, not per head,
    on H heads of one width d for q, k and v: conv 2 k (3 H d); per head and token, as the code
    computes it: the UT system `(k_beta * key * decay_mask).sum(-1)` 3 L d (two products and a
    sum over d, not a matmul), `attn @ v_beta` 2 L d, `attn @ (k_beta * g.exp())` 2 L d,
    `(q * g.exp()) @ S` 2 d^2, `(q * k * decay_mask).sum(-1)` 3 L d, `k_cumdecay @ S` 2 d^2,
    `attn_intra @ v_new` 2 L d, the state update `k^T @ v_new` 2 d^2 -> 12 L d + 6 d^2; the
    gated norm's gate H d. Not counted (as Gated DeltaNet's decays are not): the [L, L, d] decay
    mask `(g_i - g_j).exp()` (L d subtractions and exps per token and head), the row-by-row
    forward substitution of the UT system, the l2 norms, softplus and exps of the forget gate.
  * Lightning attention (modeling_minimax.py `MiniMaxLightningAttention.forward`: blocked linear
    attention with a fixed decay per head, block B = `block_size`, H heads of width d): per head
    and token, each product in full (no causal halving, as the scores): intra-block Q K^T 2 B d
    and (QK^T * decay) V 2 B d, inter-block (Q * q_decay) S 2 d^2, the state's (K * k_decay)^T V
    2 d^2 -> 4 B d + 4 d^2; the sigmoid output gate's product H d. Counted at L = block_size even
    when the sequence is shorter; the decays' products, the state's decay (2 d^2 / B per token),
    the silu on qkv and the RMSNorm over H d are not.
  * RWKV-4 (modeling_rwkv.py `RwkvSelfAttention` time-mix + `RwkvFeedForward` channel-mix, one
    mixer: RwkvBlock runs both, the channel-mix's receptance gate makes it no MLP tierlab
    reads; the WKV operator of Peng et al. 2023, "RWKV: Reinventing RNNs for the Transformer
    Era", arXiv 2305.13048, sec. 3, as `rwkv_linear_attention_cpu` computes it per channel and
    token, each elementwise op 1 FLOP, exp and maximum included; the CUDA kernel wkv_cuda.cu
    runs the same steps): hidden h, attention width a (attention_hidden_size), ffn f. Time-mix:
    three token-shift lerps `x mu + shifted (1 - mu)` 3 h each -> 9 h; the output's max 2, two
    exps of differences 2 + 3, numerator e1 num + e2 v 3, denominator 2, the division 1, the
    state's max 2, two exps 3 + 2, num 3, den 2 -> 25 a; `receptance * rwkv` a. Channel-mix:
    two lerps 6 h, the square f, `receptance * value` h -> 16 h + 26 a + f. Not counted (as
    elsewhere): the sigmoids and the relu. The recurrent state (num, den, max of a, fp32, and
    two shifted rows of h per layer) is kept only with use_cache, not in training.
  * mLSTM, xLSTM's matrix-memory cell (modeling_xlstm.py `xLSTMLayer.forward` ->
    `mlstm_chunkwise_native_autograd` -> `mlstm_chunkwise_recurrent_fw_C` (the chunk states)
    and `mlstm_chunkwise_parallel_fw_H` (the outputs), chunk L = config.chunk_size; Beck et al.
    2024, "xLSTM: Extended Long Short-Term Memory", arXiv 2405.04517, sec. 2.3 and the
    chunkwise form of its appendix), H heads of widths d_k (qk_dim / H) and d_v (v_dim / H):
    per head and token, each product in full (no causal halving, as the scores): Q K^T
    2 L d_k, its qk_scale and its product with the decay matrix D 2 L, M V 2 L d_v, the
    normaliser M.sum L, (Q Bbar) C 2 d_k d_v and (Q Bbar) n 2 d_k, Q Bbar qk_scale 2 d_k, the
    division by the denominator d_v; the chunk state (K Abar)^T V 2 d_k d_v, K Abar d_k, its
    sum d_k -> L (2 d_k + 2 d_v + 3) + 4 d_k d_v + 6 d_k + d_v; the sigmoid output gate's
    product H d_v. Counted at L = chunk_size even when the sequence is shorter; not counted
    (as Gated DeltaNet's decays are not): the [L, L] log-decay matrix and its exp, the maxima,
    the chunk states' decay (d_k d_v / L per token), the gates' soft caps and logsigmoid, the
    multi-head norm.
  * Griffin's recurrent block, the RG-LRU (modeling_recurrent_gemma.py
    `RecurrentGemmaRecurrentBlock`; De et al. 2024, arXiv 2402.19427): profiles/hf_rglru.py
    (widths, FLOPs w (2 k + 4 b + 17) per token: conv, the block-diagonal gates, the recurrence).
"""
from __future__ import annotations

import ast
import copy
import functools
import importlib
import inspect
from typing import Any, Mapping

from tierlab import bounds
from tierlab.errors import ConfigError
from tierlab.profiles.hf_rglru import (RGLRU, check_block_types, refuse_unknown, rglru_flops,
                                       rglru_widths)

MIXER_CHILDREN = ("mixer", "mamba", "conv", "linear_attn", "self_attn", "mlstm_layer",
                  "temporal_block")
"""Child names of a decoder block that hold its mixer (Mamba: mixer; Jamba/Bamba/Granite 4/
Falcon-H1: mamba; LFM2, LFM3: conv; Qwen3-Next, OLMo Hybrid, Lara Mini: linear_attn; Kimi
Linear, Bailing-hybrid, MiniMax: self_attn, where their KDA or lightning layers hold it in place
of attention; xLSTM: mlstm_layer; RecurrentGemma: temporal_block, its recurrent block or
its local attention; RWKV's attention, its time-mix, is read with its
feed_forward by rwkv_mix)."""

MIXER_CLASSES = {"MambaMixer": "mamba", "FalconMambaMixer": "mamba", "JambaMambaMixer": "mamba",
                 "Mamba2Mixer": "mamba2", "BambaMixer": "mamba2",
                 "GraniteMoeHybridMambaLayer": "mamba2", "FalconH1Mixer": "mamba2",
                 "Zamba2MambaMixer": "mamba2", "NemotronHMamba2Mixer": "mamba2",
                 "Lfm2ShortConv": "short_conv", "Qwen3NextGatedDeltaNet": "gated_delta",
                 "Qwen3_5GatedDeltaNet": "gated_delta", "Qwen3_5MoeGatedDeltaNet": "gated_delta"}
"""transformers' mixer classes -> Mixer.kind (the ones whose forward hf_mixer counts)."""


def find_mixer(layer: Any) -> tuple[str, Any] | None:
    """(child name, module) of the block's mixer: a class in MIXER_CLASSES or one that computes
    what one of them does (mixer_kind), RWKV's time-mix and channel-mix together (rwkv_mix: a
    module holding both, so the block's feed_forward is the mixer's), or None."""
    rwkv = rwkv_mix(layer)
    if rwkv is not None:
        return "attention", rwkv
    return next(((n, c) for n, c in layer.named_children()
                 if n in MIXER_CHILDREN and mixer_kind(c) is not None), None)


def mixer_kind(module: Any) -> str | None:
    """Mixer.kind of a built module: its class's in MIXER_CLASSES, else "gated_delta" where it
    runs Qwen3-Next's delta rule on tensors of a Gated DeltaNet's shapes (is_gated_delta)."""
    kind = MIXER_CLASSES.get(type(module).__name__)
    if kind is not None:
        return kind
    return "gated_delta" if is_gated_delta(module) else "kda" if is_kda(module) else \
        "short_conv" if is_short_conv(module) else \
        "lightning" if is_lightning(module) else "rwkv" if is_rwkv(module) else \
        "mlstm" if is_mlstm(module) else "mamba_heads" if is_zamba_mamba(module) else \
        "rg_lru" if is_rglru(module) else None


def is_rglru(module: Any) -> bool:
    """Griffin's recurrent block (RecurrentGemma): its shapes (hf_rglru.rglru_widths), its
    forward RecurrentGemmaRecurrentBlock's code, its `rg_lru`'s forward and `_rnn_scan`
    RecurrentGemmaRglru's (RGLRU)."""
    if rglru_widths(module) is None:
        return False
    ref, block, lru = RGLRU
    cls = type(module.rg_lru)
    return _same_forward(type(module), ref, block) and _same_forward(cls, ref, lru) and _same(
        _code(_class_method(cls.__module__, cls.__name__, "_rnn_scan")),
        _code(_class_method(ref, lru, "_rnn_scan")))


ZAMBA_MAMBA = ("transformers.models.zamba.modeling_zamba", "ZambaMambaMixer")
"""The multi-head Mamba-1 zamba_mamba_flops counts (module, class)."""


def zamba_mamba_widths(module: Any) -> tuple[int, int, int, int, int] | None:
    """(H, d, N, R, k) of a multi-head Mamba-1 of the shapes ZambaMambaMixer.__init__ builds:
    in_proj h -> 2 d, out_proj d -> h, a depthwise conv of d channels, x_proj_weight
    H x (R + 2 N) x P, dt_proj_weight H x P x R, dt_proj_bias and D H x P, A_log H x P x N."""
    try:
        heads, d = int(module.n_mamba_heads), int(module.intermediate_size)
        n, r = int(module.ssm_state_size), int(module.time_step_rank)
        channels, k = _conv(module)
        shapes = {name: tuple(module.get_parameter(name).shape) for name in
                  ("x_proj_weight", "dt_proj_weight", "dt_proj_bias", "A_log", "D")}
    except (AttributeError, StopIteration, TypeError, ValueError):
        return None
    p = d // heads if heads >= 1 else 0
    mats = {name: (i, o) for name, i, o in mixer_tensors(module)[0]}
    ok = p >= 1 and p * heads == d and channels == d and mats.get("in_proj", (0, 0))[1] == 2 * d \
        and mats.get("out_proj", (0, 0))[0] == d and len(mats) == 2 and shapes == {
            "x_proj_weight": (heads, r + 2 * n, p), "dt_proj_weight": (heads, p, r),
            "dt_proj_bias": (heads, p), "A_log": (heads, p, n), "D": (heads, p)}
    return (heads, d, n, r, k) if ok else None


def is_zamba_mamba(module: Any) -> bool:
    """Zamba's multi-head Mamba-1: ZambaMambaMixer's forward and its `mamba_selective_scan`
    (the code), on its shapes (zamba_mamba_widths)."""
    if zamba_mamba_widths(module) is None:
        return False
    return _same_code(module, ZAMBA_MAMBA, "mamba_selective_scan")


MLSTM = ("transformers.models.xlstm.modeling_xlstm", "xLSTMLayer")
"""The mLSTM layer mlstm_flops counts (module, class: modeling_xlstm.py defines it, and the
chunkwise kernels, under `if is_xlstm_available(): ... else:`, where the `xlstm` package is
absent): another class is one where its forward is this one's code."""


def mlstm_widths(module: Any) -> tuple[int, int, int, int] | None:
    """(H, qk_dim, v_dim, chunk L) of an mLSTM layer of the shapes xLSTMLayer.__init__ builds
    (weight_mode "single": q, k h -> qk_dim, v, ogate_preact h -> v_dim, igate_preact,
    fgate_preact h -> H; "fused": qkv_opreact h -> 2 qk_dim + 2 v_dim, ifgate_preact h -> 2 H;
    out_proj v_dim -> h), H dividing both widths; else None."""
    try:
        heads, qk, v = int(module.config.num_heads), int(module.qk_dim), int(module.v_dim)
        chunk, h = int(module.config.chunk_size), int(module.config.hidden_size)
    except (AttributeError, TypeError, ValueError):
        return None
    mats = {n: (i, o) for n, i, o in mixer_tensors(module)[0]}
    single = {"q": (h, qk), "k": (h, qk), "v": (h, v), "ogate_preact": (h, v),
              "igate_preact": (h, heads), "fgate_preact": (h, heads), "out_proj": (v, h)}
    fused = {"qkv_opreact": (h, 2 * qk + 2 * v), "ifgate_preact": (h, 2 * heads),
             "out_proj": (v, h)}
    ok = heads >= 1 and chunk >= 1 and qk % heads == 0 and v % heads == 0 and \
        mats in (single, fused)
    return (heads, qk, v, chunk) if ok else None


def is_mlstm(module: Any) -> bool:
    """xLSTM's mLSTM layer: the same forward as xLSTMLayer's (MLSTM), on its shapes
    (mlstm_widths), its backend's forward and chunkwise kernel xLSTMBackend's code."""
    backend = getattr(module, "mlstm_backend", None)
    if backend is None or mlstm_widths(module) is None:
        return False
    return _same_forward(type(backend), MLSTM[0], "xLSTMBackend") and _same_code(
        module, MLSTM, "mlstm_chunkwise_native_autograd", "mlstm_chunkwise_fw",
        "mlstm_chunkwise_recurrent_fw_C", "mlstm_chunkwise_parallel_fw_H")


RWKV = ("transformers.models.rwkv.modeling_rwkv", "RwkvSelfAttention", "RwkvFeedForward",
        "rwkv_linear_attention")
"""What rwkv_flops counts (module, time-mix class, channel-mix class, WKV function): another
block's pair is RWKV's where their forwards are these classes' code and the WKV its."""


def rwkv_mix(layer: Any) -> Any:
    """A module holding the block's `attention` and `feed_forward` (a ModuleDict of the same
    modules, not copies) where they are RWKV's time-mix and channel-mix (is_rwkv), else None."""
    kids = dict(layer.named_children())
    if "attention" not in kids or "feed_forward" not in kids:
        return None
    import torch    # only a built (meta-device) model reaches here: torch is installed

    pair = torch.nn.ModuleDict({"attention": kids["attention"],
                                "feed_forward": kids["feed_forward"]})
    return pair if is_rwkv(pair) else None


def rwkv_widths(module: Any) -> tuple[int, int, int] | None:
    """(h, a, f) of an RWKV pair (rwkv_mix) of the shapes RwkvBlock builds: time-mix key, value,
    receptance h -> a and output a -> h, time_decay and time_first a, three time_mix_* of h;
    channel-mix key h -> f, receptance h -> h, value f -> h, two time_mix_* of h. Else None."""
    try:
        mats = {n: (i, o) for n, i, o in mixer_tensors(module)[0]}
        small = dict(mixer_tensors(module)[1])
        h, a = mats["attention.key"]
        f = mats["feed_forward.key"][1]
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
    want_mats = {"attention.key": (h, a), "attention.value": (h, a),
                 "attention.receptance": (h, a), "attention.output": (a, h),
                 "feed_forward.key": (h, f), "feed_forward.receptance": (h, h),
                 "feed_forward.value": (f, h)}
    want_small = {"attention.time_decay": a, "attention.time_first": a,
                  **{f"attention.time_mix_{n}": h for n in ("key", "value", "receptance")},
                  **{f"feed_forward.time_mix_{n}": h for n in ("key", "receptance")}}
    return (h, a, f) if mats == want_mats and small == want_small else None


def is_rwkv(module: Any) -> bool:
    """An RWKV-4 pair (rwkv_mix): RWKV's shapes (rwkv_widths), the time-mix's forward and
    extract_key_value RwkvSelfAttention's code and its WKV function `rwkv_linear_attention`
    (and the CPU loop it falls back to) RWKV's, the channel-mix's forward RwkvFeedForward's."""
    kids = dict(module.named_children()) if type(module).__name__ == "ModuleDict" else {}
    attn, ffn = kids.get("attention"), kids.get("feed_forward")
    if attn is None or ffn is None or rwkv_widths(module) is None:
        return False
    ref, time_mix, channel_mix, wkv = RWKV
    same_wkv = all(_same(_function_code(type(attn).__module__, n), _function_code(ref, n))
                   for n in (wkv, f"{wkv}_cpu"))
    return same_wkv and _same_forward(type(attn), ref, time_mix) and \
        _same(_code(_class_method(type(attn).__module__, type(attn).__name__,
                                  "extract_key_value")),
              _code(_class_method(ref, time_mix, "extract_key_value"))) and \
        _same_forward(type(ffn), ref, channel_mix)


GATED_DELTA_RULE = ("transformers.models.qwen3_next.modeling_qwen3_next",
                    "torch_chunk_gated_delta_rule")
"""The delta rule gated_delta_flops counts (module, function): another modeling file's mixer is
a Gated DeltaNet where its forward calls a function of this name whose code is this one's."""


def is_gated_delta(module: Any) -> bool:
    """The module's class's forward calls `torch_chunk_gated_delta_rule`, whose code (docstring
    and decorators aside) is Qwen3-Next's, and its tensors have a Gated DeltaNet's shapes: a
    depthwise conv over q, k, v (2 H_k d_k + H_v d_v channels), A_log and dt_bias of one value per
    value head, a Linear from H_v d_v back to the hidden size (OLMo Hybrid's o_proj, Lara Mini's
    out_proj), H_v a multiple of H_k (the rule repeats q and k to the value heads)."""
    try:
        heads, k_heads = int(module.num_v_heads), int(module.num_k_heads)
        d_k, d_v = int(module.head_k_dim), int(module.head_v_dim)
        hidden = int(module.hidden_size)
        channels, _ = _conv(module)
        per_head = [int(module.A_log.numel()), int(module.dt_bias.numel())]
    except (AttributeError, StopIteration, TypeError, ValueError):
        return False
    back = (heads * d_v, hidden) in {(i, o) for _, i, o in mixer_tensors(module)[0]}
    shapes = k_heads >= 1 and heads % k_heads == 0 and channels == 2 * k_heads * d_k + \
        heads * d_v and per_head == [heads, heads] and back
    return shapes and _calls_rule(type(module), GATED_DELTA_RULE)


KDA_RULE = ("transformers.models.kimi_linear.modeling_kimi_linear", "chunk_kimi_delta_attention")
"""The KDA chunk rule kda_flops counts (module, function), Bailing-hybrid's a copy of it."""


def is_kda(module: Any) -> bool:
    """Kimi delta attention (modeling_kimi_linear.py `KimiLinearDeltaAttention`, modeling_bailing_
    hybrid.py `BailingHybridDeltaAttention`): its forward calls `chunk_kimi_delta_attention`, the
    same code as Kimi Linear's, on H heads of one width d for q, k and v: a depthwise conv of
    3 H d channels, A_log of one value per head and dt_bias of one per channel (the forget gate),
    a Linear from H d back to the hidden size (o_proj)."""
    try:
        heads, d, hidden = int(module.num_heads), int(module.head_dim), int(module.hidden_size)
        channels, _ = _conv(module)
    except (AttributeError, StopIteration, TypeError, ValueError):
        return False
    mats, small = mixer_tensors(module)
    a_log = [n for name, n in small if name.split(".")[-1] == "A_log"]
    dt_bias = [n for name, n in small if name.split(".")[-1] == "dt_bias"]
    back = (heads * d, hidden) in {(i, o) for _, i, o in mats}
    return channels == 3 * heads * d and a_log == [heads] and dt_bias == [heads * d] and \
        back and _calls_rule(type(module), KDA_RULE)


def _calls_rule(cls: type, rule: tuple[str, str]) -> bool:
    """cls.forward calls the rule's function by name and its module defines the same code."""
    name = rule[1]
    ours = _function_code(cls.__module__, name)
    theirs = _function_code(rule[0], name)
    if ours is None or ours != theirs:
        return False
    forward = _class_method(cls.__module__, cls.__name__, "forward")
    return forward is not None and any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
        for n in ast.walk(forward))


SHORT_CONV = ("transformers.models.lfm2.modeling_lfm2", "Lfm2ShortConv")
"""The short convolution short_conv_flops counts (module, class): another modeling file's mixer
is one where its forward and the `causal_conv1d_forward` it calls are this one's code."""


def is_short_conv(module: Any) -> bool:
    """LFM2's gated short convolution under another name (LFM3's `Lfm3ShortConv`): the same
    forward (B, C, x = in_proj chunks; B x, the depthwise causal conv, C y, out_proj) and conv
    helper, on a depthwise Conv1d of h channels, in_proj h -> 3 h and out_proj h -> h."""
    try:
        channels, _ = _conv(module)
        mats = {name: (i, o) for name, i, o in mixer_tensors(module)[0]}
    except (AttributeError, StopIteration, TypeError, ValueError):
        return False
    h = channels
    if mats != {"in_proj": (h, 3 * h), "out_proj": (h, h)}:
        return False
    return _same_code(module, SHORT_CONV, "causal_conv1d_forward")


LIGHTNING = ("transformers.models.minimax.modeling_minimax", "MiniMaxLightningAttention")
"""The lightning attention lightning_flops counts (module, class): another class is one where its
forward is this one's code."""


def is_lightning(module: Any) -> bool:
    """MiniMax's lightning attention: the same forward as MiniMaxLightningAttention's, on H heads
    of width d: qkv_proj h -> 3 H d, output_gate h -> H d, out_proj H d -> h, no other Linear."""
    try:
        heads, d, block = int(module.num_attention_heads), int(module.head_dim), \
            int(module.block_size)
    except (AttributeError, TypeError, ValueError):
        return False
    shapes = sorted((i, o) for _, i, o in mixer_tensors(module)[0])
    h = next((i for i, o in shapes if o == 3 * heads * d), None)
    if block < 1 or h is None or shapes != sorted([(h, 3 * heads * d), (h, heads * d),
                                                   (heads * d, h)]):
        return False
    return _same_forward(type(module), LIGHTNING[0], LIGHTNING[1])


def _same_forward(cls: type, ref_module: str, ref_class: str) -> bool:
    """cls.forward is the code of ref_class.forward in ref_module."""
    return _same(_code(_class_method(cls.__module__, cls.__name__, "forward")),
                 _code(_class_method(ref_module, ref_class, "forward")))


def _same_code(module: Any, ref: tuple[str, str], *helpers: str) -> bool:
    """module's forward is the code of ref's (module, class) forward, and each helper function
    of its modeling file the code of ref's module's function of that name."""
    return _same_forward(type(module), *ref) and all(
        _same(_function_code(type(module).__module__, n), _function_code(ref[0], n))
        for n in helpers)


def _same(ours: str | None, theirs: str | None) -> bool:
    """Two functions' code (_code), both found and equal."""
    return ours is not None and ours == theirs


@functools.cache
def _module_tree(module_name: str) -> ast.Module:
    """The parsed source of a module (transformers' modeling files); empty without a source."""
    try:
        return ast.parse(inspect.getsource(importlib.import_module(module_name)))
    except (ImportError, OSError, TypeError, SyntaxError):
        return ast.Module(body=[], type_ignores=[])


def _defined(module_name: str, kind: type, name: str) -> Any:
    """The module's definition of `name` (a FunctionDef or ClassDef) at its top level, else under
    an `if` at its top level (modeling_xlstm.py defines its own kernels and layers under
    `if is_xlstm_available(): ... else:`), else None."""
    body = _module_tree(module_name).body
    nested = [n for node in body if isinstance(node, ast.If)
              for branch in (node.body, node.orelse) for n in branch]
    return next((n for n in body + nested if isinstance(n, kind) and n.name == name), None)


def _function_code(module_name: str, name: str) -> str | None:
    """ast.dump of a module-level function without its docstring and decorators, or None."""
    return _code(_defined(module_name, ast.FunctionDef, name))


def _code(node: ast.FunctionDef | None) -> str | None:
    """ast.dump of a function without its docstring and decorators (None: no function)."""
    if node is None:
        return None
    bare = copy.copy(node)
    bare.body = node.body[1:] if ast.get_docstring(node) is not None else node.body
    bare.decorator_list = []
    return ast.dump(bare)


def _class_method(module_name: str, cls: str, name: str) -> ast.FunctionDef | None:
    """The parsed method `name` of class `cls` defined in the module, or None."""
    node = _defined(module_name, ast.ClassDef, cls)
    return None if node is None else next(
        (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def mixer_tensors(module: Any) -> tuple[tuple, tuple]:
    """((name, in, out) of each Linear weight, (name, numel) of every other tensor)."""
    linear = {id(m.weight) for m in module.modules() if type(m).__name__ == "Linear"}
    mats, small = [], []
    for name, p in module.named_parameters():
        if id(p) in linear:
            mats.append((name.removesuffix(".weight"), int(p.shape[1]), int(p.shape[0])))
        else:
            small.append((name, int(p.numel())))
    return tuple(mats), tuple(small)


def _conv(module: Any) -> tuple[int, int]:
    """(channels, kernel) of the mixer's depthwise Conv1d (weight: channels x 1 x kernel)."""
    conv = next(m for m in module.modules() if type(m).__name__ == "Conv1d")
    channels, _, kernel = conv.weight.shape
    return int(channels), int(kernel)


def mamba_scan_flops(module: Any) -> float:
    """Mamba-1 per token: conv 2 k d + scan 7 d N + D skip 2 d + gate d (module docstring)."""
    d, n_state = module.A_log.shape
    channels, k = _conv(module)
    return float(2 * k * channels + 7 * d * n_state + 3 * d)


def mamba2_scan_flops(module: Any) -> float:
    """Mamba-2 (SSD) per token: conv 2 k (d + 2 G N) + H (2 L N + 2 L P + 4 N P) + 2 d."""
    heads = int(module.A_log.shape[0])
    d = next(p for n, p in module.named_parameters() if n == "out_proj.weight").shape[1]
    head_dim, n_state, chunk = d // heads, int(module.ssm_state_size), int(module.chunk_size)
    channels, k = _conv(module)
    per_head = 2 * chunk * n_state + 2 * chunk * head_dim + 4 * n_state * head_dim
    return float(2 * k * channels + heads * per_head + 2 * d)


def short_conv_flops(module: Any) -> float:
    """LFM2 per token: B x gate h + conv 2 k h + C y gate h."""
    channels, k = _conv(module)
    return float(2 * k * channels + 2 * channels)


GATED_DELTA_CHUNK = 64
"""Chunk length of transformers' `torch_chunk_gated_delta_rule` (its `chunk_size` default, which
Qwen3NextGatedDeltaNet.forward does not override; fla's chunk kernel uses 64 too)."""


def gated_delta_flops(module: Any) -> float:
    """Gated DeltaNet per token: conv 2 k c + H_v (L (6 d_k + 4 d_v) + 6 d_k d_v) + H_v d_v."""
    heads, d_k, d_v = int(module.num_v_heads), int(module.head_k_dim), int(module.head_v_dim)
    channels, k = _conv(module)
    chunk = GATED_DELTA_CHUNK
    per_head = chunk * (6 * d_k + 4 * d_v) + 6 * d_k * d_v
    return float(2 * k * channels + heads * per_head + heads * d_v)


def kda_flops(module: Any) -> float:
    """KDA per token: conv 2 k (3 H d) + H (12 L d + 6 d^2) + H d (module docstring)."""
    heads, d = int(module.num_heads), int(module.head_dim)
    channels, k = _conv(module)
    per_head = 12 * GATED_DELTA_CHUNK * d + 6 * d * d
    return float(2 * k * channels + heads * per_head + heads * d)


def lightning_flops(module: Any) -> float:
    """Lightning attention per token: H (4 B d + 4 d^2) + the output gate H d (module docstring)."""
    heads, d, block = int(module.num_attention_heads), int(module.head_dim), int(module.block_size)
    return float(heads * (4 * block * d + 4 * d * d) + heads * d)


def rwkv_flops(module: Any) -> float:
    """RWKV-4 per token: time-mix 9 h + 26 a, channel-mix 7 h + f (module docstring)."""
    h, a, f = rwkv_widths(module)
    return float(16 * h + 26 * a + f)


def zamba_mamba_flops(module: Any) -> float:
    """Zamba's multi-head Mamba-1 per token: conv 2 k d + x_proj 2 d (R + 2 N) + dt_proj 2 d R
    + scan 7 d N + D skip 2 d + gate d (module docstring)."""
    _, d, n, r, k = zamba_mamba_widths(module)
    return float(2 * k * d + 2 * d * (r + 2 * n) + 2 * d * r + 7 * d * n + 3 * d)


def mlstm_flops(module: Any) -> float:
    """mLSTM per token: H (L (2 d_k + 2 d_v + 3) + 4 d_k d_v + 6 d_k + d_v) + the output gate
    H d_v (module docstring)."""
    heads, qk, v, chunk = mlstm_widths(module)
    d_k, d_v = qk // heads, v // heads
    per_head = chunk * (2 * d_k + 2 * d_v + 3) + 4 * d_k * d_v + 6 * d_k + d_v
    return float(heads * per_head + v)


SCAN_FLOPS = {"mamba": mamba_scan_flops, "mamba2": mamba2_scan_flops,
              "short_conv": short_conv_flops, "gated_delta": gated_delta_flops,
              "kda": kda_flops, "lightning": lightning_flops, "rwkv": rwkv_flops,
              "mlstm": mlstm_flops, "mamba_heads": zamba_mamba_flops, "rg_lru": rglru_flops}


def mixer_fields(module: Any) -> dict:
    """Mixer keyword arguments (without layers, mlp) of one built mixer module."""
    kind = mixer_kind(module)
    mats, small = mixer_tensors(module)
    return dict(kind=kind, matrices=mats, small_params=small,
                scan_flops_per_token=SCAN_FLOPS[kind](module))


_SIZE = bounds.Bound(1, 1_000_000, why="the largest published mixers are < 20k wide")
MIXER_KEYS = ("state_size", "mamba_d_state", "ssm_state_size", "conv_kernel", "mamba_d_conv",
              "conv_L_cache", "expand", "mamba_expand", "time_step_rank", "mamba_dt_rank",
              "n_groups", "mamba_n_groups", "num_heads", "mamba_n_heads", "mamba_d_head",
              "chunk_size", "mamba_chunk_size", "mamba_d_ssm", "linear_conv_kernel_dim",
              "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads",
              "linear_num_value_heads", "mamba_num_heads", "mamba_head_dim", "n_mamba_heads",
              "mamba_ngroups", "num_mem_blocks", "adapter_rank", "linear_num_heads",
              "linear_head_dim", "short_conv_kernel_size", "block_size", "attention_hidden_size",
              "lru_width", "conv1d_width")
"""config.json keys that size a mixer (MambaConfig, Mamba2Config, JambaConfig, BambaConfig,
Lfm2Config, GraniteMoeHybridConfig, FalconH1Config, Qwen3NextConfig, NemotronHConfig,
Zamba2Config, OlmoHybridConfig, LaraMiniConfig, Lfm3Config, KimiLinearConfig,
BailingHybridConfig, MiniMaxConfig: block_size, its lightning attention's block; RwkvConfig:
attention_hidden_size, the time-mix's width; xLSTMConfig: num_heads, chunk_size;
RecurrentGemmaConfig: lru_width, conv1d_width) or Zamba2's
shared blocks (num_mem_blocks: 0 leaves modeling_zamba2.py `get_layers` no block to tie a use
to; adapter_rank): whole numbers >= 1 where set, checked before transformers builds anything (a negative state_size builds no tensor, or one
of nonsense size). `time_step_rank` and `mamba_dt_rank` may also be "auto" (the config classes'
ceil(hidden / 16)), Granite 4's `mamba_d_head` "auto" (mamba_expand x hidden / mamba_n_heads)."""

AUTO_KEYS = ("time_step_rank", "mamba_dt_rank", "mamba_d_head")
"""MIXER_KEYS that may be "auto"."""

MIXER_MODEL_TYPES = ("mamba", "falcon_mamba", "mamba2", "jamba", "bamba", "lfm2",
                     "granitemoehybrid", "falcon_h1", "qwen3_next", "zamba2", "nemotron_h",
                     "olmo_hybrid", "lara_mini", "lfm3", "kimi_linear", "bailing_hybrid",
                     "minimax", "rwkv", "xlstm", "zamba", "recurrent_gemma")
"""model_types whose config carries MIXER_KEYS (elsewhere a `num_heads` means something else)."""


def check_mixer_keys(data: Mapping, where: str) -> None:
    """A mixer-sizing key of `data` (a config.json part of a MIXER_MODEL_TYPES model) that is set
    must be a whole number >= 1 (or "auto" for a time-step rank), a Nemotron-H pattern letters
    of PATTERN_LETTERS, RecurrentGemma's block_types of hf_rglru.BLOCK_TYPES: else one
    ConfigError line naming the key."""
    if data.get("model_type") not in MIXER_MODEL_TYPES:
        return
    for key in MIXER_KEYS:
        value = data.get(key)
        if value is None or (value == "auto" and key in AUTO_KEYS):
            continue
        bounds.check(value, _SIZE, f"{where}: {key}")
    nested = data.get("linear_attn_config")     # Kimi Linear's checkpoints (KimiLinearConfig.
    if isinstance(nested, Mapping):             # __post_init__ reads these three from it)
        for key in ("num_heads", "head_dim", "short_conv_kernel_size"):
            if nested.get(key) is not None:
                bounds.check(nested[key], _SIZE, f"{where}: linear_attn_config.{key}")
    check_pattern(data, where)
    check_block_types(data, where)


PATTERN_LETTERS = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}
"""Nemotron-H's `hybrid_override_pattern`, one letter a block (configuration_nemotron_h.py
`_pattern_to_list`: Mamba-2, MoE, attention, MLP); another letter is a KeyError there."""


def check_pattern(data: Mapping, where: str) -> None:
    """A set `hybrid_override_pattern` (Nemotron-H) is a non-empty string of PATTERN_LETTERS:
    else one ConfigError line naming the key and the letter."""
    pattern = data.get("hybrid_override_pattern")
    if pattern is None or data.get("model_type") != "nemotron_h":
        return
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError(f"{where}: hybrid_override_pattern: expected a string of "
                          f"{', '.join(PATTERN_LETTERS)} (one block each), got {pattern!r}")
    refuse_unknown(pattern, PATTERN_LETTERS, f"{where}: hybrid_override_pattern", "block",
                   "a block letter: M Mamba-2, E MoE, * attention, - MLP")
