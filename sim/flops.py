"""FLOPs of a decoder-only transformer, per layer and per step.

Conventions (Megatron-LM / Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
on GPU Clusters", eq. 3, which DeepSpeed's published TFLOP/s figures also use):
- a GEMM of (m x k) @ (k x n) costs 2 m k n FLOPs;
- backward costs 2x forward (grad w.r.t. inputs and w.r.t. weights);
- activation checkpointing recomputes each block's forward once more in backward (the logits
  are not recomputed), so a GPT block costs 4 x forward per step -> 96 B s l h^2 (1 + s/6h) plus
  6 B s h V for the logits — the figure DeepSpeed reports as "TFLOP/s per GPU".
- attention scores (Q K^T) and the weighted sum (A V) are counted in full (no causal halving),
  as Megatron does: 2 x 2 s^2 h per sample per layer, s keys per query.
- a sliding-window layer of window w (Jiang et al. 2023, "Mistral 7B", sec. 2 "Sliding Window
  Attention": each token attends at most w tokens of the previous layer; Gemma Team 2024,
  "Gemma 2", sec. 2: local layers of a 4096-token window alternate with global ones) counts
  min(w, s) keys per query, and a chunked layer of chunk c (Llama 4: each query attends its own
  chunk) min(c, s): the width of the band its mask leaves, in the same no-halving count
  (transformers masking_utils.py `sliding_window_overlay`, `chunked_overlay`). This assumes a
  kernel that skips the masked blocks (FlashAttention-2's window_size, flex attention).
GQA: K and V projections are h x (n_kv_heads x head_dim); the score FLOPs do not change.
DeepSeek sparse attention's indexer (AttentionTensors.indexer) runs under torch.no_grad: its
GEMMs and scores are forward work (LayerFlops.forward_only), recomputed with checkpointing, never
run backward; the attention's own scores stay dense over all keys, as eager / SDPA compute them.
Blocks whose attention has a shape of its own (Model.layer_attention: Gemma 4's global layers of
head_dim 512 beside sliding ones of 256) run their own projections and score over their own
heads x widths (Model.shaped, score_spans).
An attention read as tensors (Model.attention_tensors: gated, low-rank, extra projections) runs
each of its Linear weights as a GEMM (2 x in x out per token) and its scores over
Model.n_heads heads of Model.head_dim (Q K^T) and AttentionTensors.v_head_dim (A V); a
relative-position projection (AttentionTensors.position_matrix: XLNet's r) runs over its
positions_per_token x s positions, and each query scores that many position keys beside its s.
A mixture of attention heads (JetMoE: AttentionTensors.expert_matrices) runs each attention
expert's q and o projections on top-k / n of the tokens, as a MoE's experts; its scores run over
Model.n_heads = top-k x kv heads (modeling_jetmoe.py JetMoeAttention.forward lines 463-483).
A mixer block (Model.mixer: Mamba, Mamba-2, LFM2's short conv, Gated DeltaNet) runs its
projections as GEMMs and, in place of the scores, its conv + scan FLOPs
(Mixer.scan_flops_per_token, counted from the modeling file in profiles/hf_mixer.py), timed like
the attention's batched GEMMs; a parallel hybrid block (Mixer.attention: Falcon-H1) runs both,
its scores and its scan.
A single-part block (Model.attention_only_layers, mlp_only_layers: Nemotron-H's NemotronHBlock
holds one part) runs that part alone: an attention block its projections and scores, no MLP; an
MLP or MoE block no attention, no scores. A shared block (Model.shared: Zamba2's
Zamba2HybridLayer) runs at every depth that uses it: its weights' GEMMs (stored once), the use's
own adapters and linear, and its attention's scores (Model.n_heads of Model.head_dim), beside the
block's Mamba-2 scan.
A looped block (Model.loops: Dory's recurrent layers, Inkling2-Loop's loop layers, HRM's stacks)
runs once per pass: the mean block is taken over the forward's block runs (Model.forward_order),
each block weighted by its runs, so block_runs x the mean is the forward's block FLOPs; a run
under torch.no_grad (HRM's L_bp_cycles) is forward work only, never recomputed nor run backward
(step_flops); a loop's own matrices (Inkling2-Loop's message gates) run in the passes after the
first (Model.matrix_runs).
Gemma 4's per-layer inputs (Model.per_layer_inputs) add to each block its gate and projection
GEMMs (2 x in x out per token, listed with the block's matrices) and their memory-bound kernels;
the model-level projection is timed with the LM head (once per forward, 2 x in the backward,
not recomputed: logits_forward), the table lookup as memory traffic shared out to the blocks
(per_layer_input_hbm_values).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tierlab.profiles.layout import (ADAPTER_PREFIX, ATTENTION_TENSORS_PREFIX, active_ffn,
                                    attention_share,
                                    hyper_connection_mixer, logit_width, logits_per_token,
                                    stream_keys)
from tierlab.profiles.schema import GPU, Model


@dataclass(frozen=True, kw_only=True)
class LayerFlops:
    """Forward FLOPs of one transformer block for `tokens` tokens: the mean over the forward's
    block runs (each block once without loops, Model.block_runs of them)."""

    gemms: tuple[float, ...]
    """FLOPs of each distinct weight GEMM (q, k, v, o, up, down, [gate], [router, experts...])."""
    gemm_counts: tuple[float, ...] = ()
    """How many times each GEMM runs per (mean) block; () = once each. A model with n_dense
    dense and n_moe MoE blocks gives the dense GEMMs n_dense / n_layers."""
    attention_parts: tuple[tuple[float, float], ...]
    """(Q K^T + A V FLOPs, runs per (mean) block) of each distinct attention span (batched GEMMs
    over heads): ((flops, 1.0),) for full attention everywhere; gpt-oss's alternating sliding
    and full layers give two parts of 0.5 each."""
    hbm_bytes: float
    """Bytes of memory-bound kernels (norms, residual adds, activation, softmax), read + write."""
    forward_only: tuple[tuple[float, float], ...] = ()
    """(FLOPs, runs per (mean) block) of work the forward runs without a backward (DeepSeek
    sparse attention's indexer under torch.no_grad: its GEMMs and its scores); in `total`."""
    forward_only_hbm_bytes: float = 0.0
    """Bytes of the memory-bound kernels of that work (the indexer's fp32 scores, ReLU, top-k)."""

    @property
    def counts(self) -> tuple[float, ...]:
        return self.gemm_counts or (1.0,) * len(self.gemms)

    @property
    def forward_only_flops(self) -> float:
        return sum(f * n for f, n in self.forward_only)

    @property
    def attention(self) -> float:
        """Q K^T and A V FLOPs of the (mean) block."""
        return sum(f * n for f, n in self.attention_parts)

    @property
    def total(self) -> float:
        return sum(f * n for f, n in zip(self.gemms, self.counts)) + self.attention + \
            self.forward_only_flops


def layer_forward(model: Model, micro_batch: int, bytes_per_value: int = 2) -> LayerFlops:
    """Forward FLOPs and memory-bound traffic of one (mean) block for one micro-batch: of
    Model.streams x seq_len tokens a sample (ProphetNet's n-gram streams; seq_len without)."""
    tokens = micro_batch * model.seq_len * model.streams
    gemms: dict[tuple, list[float]] = {}       # (group, matrix kind) -> [flops, runs per block]
    hbm = 0.0
    scores = score_spans(model)
    spans = attention_spans(model) if len(scores) > 1 else tuple((k, n) for (k, _, _), n in scores)
    # softmax's keys per query, averaged over blocks (an int, s, for full attention)
    mean_keys = spans[0][0] if len(spans) == 1 else \
        sum(k * n for k, n in spans) / max(1, sum(n for _, n in spans))
    no_grad: dict[tuple, list[float]] = {}     # the same, of the forward-only GEMMs
    runs = model.block_runs         # n_layers without loops: each group weighs n / n_layers
    for rep, n in model.layer_groups():
        for name, (n_in, n_out, share) in run_gemms(model, rep).items():
            kind = (rep, re.sub(r"^experts\.\d+\.", "experts.", name))
            into = no_grad if forward_only(model, rep, name) else gemms
            entry = into.setdefault(kind, [2.0 * tokens * share * n_in * n_out, 0.0])
            entry[1] += n * model.matrix_runs(rep, name) / runs
        hbm += _layer_hbm_bytes(model.shaped(rep), micro_batch, bytes_per_value,
                                block_ffn(model, rep), mean_keys if attends(model, rep) else 0) \
            * n * model.layer_runs(rep)[0]
    # Q K^T: 2 k (heads x qk width) per token, A V: 2 k (heads x v width) per token, k the keys
    # a query attends (all query heads; GQA shares K/V, not FLOPs) = 4 s h for plain attention;
    # each block with its own heads and widths (Model.layer_attention)
    attention = tuple((2.0 * tokens * keys * heads * width, n / runs)
                      for (keys, heads, width), n in scores)
    if model.mixer is not None:     # the mixer blocks' conv + scan in place of the scores
        attention += ((tokens * model.mixer.scan_flops_per_token,
                       sum(model.layer_runs(i)[0] for i in model.mixer.layers) / runs),)
    index_parts, index_bytes = indexer_work(model, tokens)
    return LayerFlops(gemms=tuple(f for f, _ in gemms.values()),
                      gemm_counts=tuple(c for _, c in gemms.values()), attention_parts=attention,
                      hbm_bytes=hbm / runs,
                      forward_only=tuple((f, c) for f, c in no_grad.values()) + index_parts,
                      forward_only_hbm_bytes=index_bytes)


def forward_only(model: Model, layer: int, name: str) -> bool:
    """GEMM `name` (layout's) of block `layer` runs without a backward: a DeepSeek sparse
    attention's indexer matrix (AttentionTensors.forward_only)."""
    tensors = model.shaped(layer).attention_tensors
    return tensors is not None and name.startswith(ATTENTION_TENSORS_PREFIX) and \
        tensors.forward_only(name[len(ATTENTION_TENSORS_PREFIX):])


def indexer_work(model: Model, tokens: int) -> tuple[tuple[tuple[float, float], ...], float]:
    """((score FLOPs, runs per mean block), memory-bound bytes per mean block) of the indexers
    (AttentionTensors.indexer), forward only. modeling_deepseek_v32.py DeepseekV32Indexer.forward:
    `scores = matmul(q.float(), k^T)` over H index heads of width D and one key head
    (2 x keys x H x D per query), ReLU, `matmul(weights, scores)` summing the heads (2 x keys x
    H), `index_scores.topk(index_topk)`; fp32 [H, keys] scores written, read by ReLU, written,
    read by the head sum, then [keys] index scores written, masked (read + write) and read by
    top-k: 4 B x keys x (4 H + 4) per query. Keys: the layer's (all s, causal no-halving)."""
    parts: dict[tuple, float] = {}
    nbytes = 0.0
    if not _has_indexer(model):         # every model but DeepSeek sparse attention's: no loop
        return (), 0.0
    for i in range(model.n_layers):
        tensors = model.shaped(i).attention_tensors if attends(model, i) else None
        if tensors is None or not tensors.indexer:
            continue
        heads, width, _ = tensors.indexer
        # V4's indexer scores the compressed entries (DeepseekV4IndexerScorer.forward)
        keys = compressed_keys(model, i) if tensors.compress_rate else attended_keys(model, i)
        flops = 2.0 * tokens * keys * heads * (width + 1)
        runs = model.layer_runs(i)[0]
        parts[flops] = parts.get(flops, 0.0) + runs / model.block_runs
        nbytes += 4.0 * tokens * keys * (4 * heads + 4) * runs / model.block_runs
    return tuple(parts.items()), nbytes


def _has_indexer(model: Model) -> bool:
    """Some block's attention read as tensors has an indexer (AttentionTensors.indexer)."""
    tensors = [model.attention_tensors, *(a.attention_tensors for a in model.layer_attention)]
    return any(t is not None and t.indexer for t in tensors)


def run_gemms(model: Model, layer: int) -> dict[str, tuple[int, int, float]]:
    """name -> (in, out, token fraction) of every GEMM block `layer` runs in the forward
    (Model.layer_run_matrices: a shared block's weights at every use): 1, or top_k / n_experts
    for each routed expert's matrices and each attention expert's (JetMoE's MoA:
    layout.attention_share; balanced routing; profiles/layout.py conventions); 1 / adapters
    for each language's adapter (Xmod: Model.adapters)."""
    moe, own = model.is_moe_layer(layer), model.shaped(layer)
    share = model.moe.token_share if moe else 1.0
    lang = 1.0 / max(model.adapters, 1)     # Xmod: each token runs one language's adapter
    return {name: (i, o, share if name.startswith("experts.") else
                   lang if name.startswith(ADAPTER_PREFIX) else attention_share(own, name))
            for name, (i, o) in model.layer_run_matrices(layer).items()}


def attends(model: Model, layer: int) -> bool:
    """Block `layer` computes attention scores: not a mixer in place of attention (unless a
    shared block's attention runs beside it: Zamba2), not an MLP or MoE alone (Nemotron-H)."""
    if layer in model.mlp_only_layers:
        return False
    if model.shared is not None and layer in model.shared.layers:
        return True
    return not model.is_mixer_layer(layer) or model.mixer.attention


def block_ffn(model: Model, layer: int) -> int:
    """MLP width a token of block `layer` passes through (layout.active_ffn): 0 in an
    attention-only block; the shared block's MLP (Model.ffn) in a use of it."""
    if layer in model.attention_only_layers:
        return 0
    if model.shared is not None and layer in model.shared.layers:
        return model.ffn
    return active_ffn(model, model.is_moe_layer(layer), model.is_mixer_layer(layer))


def attended_keys(model: Model, layer: int) -> int:
    """Keys one query of block `layer` attends in the no-halving count: min(window, s) for a
    sliding-window or chunked layer (Model.attention_windows), s for full attention; plus, for
    DeepSeek-V4's compressed attention, the s // m compressed entries (compressed_keys); a
    cross-attention block's Model.cross_keys vision tokens, every one (no causal mask); with
    Model.streams the mean over the streams' queries (layout.stream_keys: ProphetNet's)."""
    if model.cross_keys and model.shaped(layer).cross_attention:
        return model.cross_keys
    window = model.attention_windows[layer] if model.attention_windows else 0
    return stream_keys(model, (min(window, model.seq_len) if window else model.seq_len) +
                       compressed_keys(model, layer))


def compressed_keys(model: Model, layer: int) -> int:
    """Compressed KV entries every query of block `layer` scores: s // m, m its compressor's
    AttentionTensors.compress_rate (modeling_deepseek_v4.py: one entry per closed window of m
    tokens, `usable = (len // compress_rate) * compress_rate`; DeepseekV4Attention.forward
    concatenates them after the local keys and eager scores all of them, masking the future
    ones and, in CSA, all but the indexer's top-k: dense, as DeepSeek-V3.2's); 0 elsewhere."""
    if model.attention_tensors is None and not model.layer_attention:
        return 0                        # no attention read as tensors: no compressor
    tensors = model.shaped(layer).attention_tensors
    rate = tensors.compress_rate if tensors is not None else 0
    return model.seq_len // rate if rate else 0


def attention_spans(model: Model) -> tuple[tuple[int, int], ...]:
    """(keys per query, block runs that attend so many) of each distinct span, first block
    first: ((s, n_layers),) for full attention; gpt-oss-20b at s = 4096: ((128, 12), (4096,
    12)); a looped block counted once per forward run (Model.layer_runs)."""
    spans: dict[int, int] = {}
    for i in range(model.n_layers):
        if not attends(model, i):       # the scan (layer_forward), an MLP alone
            continue
        keys = attended_keys(model, i)
        spans[keys] = spans.get(keys, 0) + model.layer_runs(i)[0]
    return tuple(spans.items())


def score_spans(model: Model) -> tuple[tuple[tuple[int, int, int], int], ...]:
    """((keys per query, query heads, q/k + v head width), block runs so) of each distinct score
    shape, first block first: attention_spans split by each block's own heads and widths
    (Model.shaped: Gemma 4's sliding layers of 8 heads x 256 beside global ones of 8 x 512)."""
    spans: dict[tuple[int, int, int], int] = {}
    for i in range(model.n_layers):
        if not attends(model, i):
            continue
        own = model.shaped(i)
        key = (attended_keys(model, i), own.n_heads,
               _qk_width(own) + _v_width(own) + _position_width(own))
        spans[key] = spans.get(key, 0) + model.layer_runs(i)[0]
    return tuple(spans.items())


def _qk_width(model: Model) -> int:
    return model.mla.qk_head_dim if model.mla else model.head_dim


def _position_width(model: Model) -> int:
    """Width a query's relative-position scores add per content key: positions_per_token x
    head width (XLNet's bd, s x 2 s beside ac's s x s: modeling_xlnet.py line 112,
    AttentionTensors.position_matrix); 0 without."""
    t = model.attention_tensors
    return t.positions_per_token * model.head_dim if t is not None else 0


def _v_width(model: Model) -> int:
    if model.attention_tensors is not None:
        return model.attention_tensors.v_head_dim
    return model.mla.v_head_dim if model.mla else model.head_dim


def _layer_hbm_bytes(model: Model, micro_batch: int, bytes_per_value: int, ffn: int,
                     keys: float) -> float:
    """Memory-bound kernels of one block's forward (unfused, as PyTorch eager runs them).

    2 norms (read + write h) + 2 residual adds (read 2h, write h) = 10 h values per token;
    activation: gated reads 2 f writes f (3 f), plain reads f writes f (2 f), f the width a
    token passes through (MoE: top-k x expert width + shared width);
    softmax over the score matrix (no flash attention): read + write heads x `keys` per token
    (the keys a query attends: s for full attention, attended_keys); over Model.streams x s
    tokens a sample.
    """
    tokens = micro_batch * model.seq_len * model.streams
    act = 3 if model.gated_mlp else 2
    per_token = 10 * model.hidden + act * ffn + 2 * model.n_heads * keys
    if model.per_layer_inputs is not None:      # Gemma 4's per-layer inputs
        per_token += per_layer_input_hbm_values(model)
    return float(tokens * per_token * bytes_per_value)


def logits_forward(model: Model, micro_batch: int) -> float:
    """LM head GEMM: 2 h V per token (embedding lookup is free; w V where the head reads
    Model.head_width), BERT's head transform (2 h w: Model.head_transform), ELECTRA's and
    RemBERT's embedding projection (2 e h: Model.embed_width), and Qwen4-Exp's
    hyper_connection_mixer GEMMs before it (layout.hyper_connection_mixer); with Gemma 4's
    per-layer inputs also the model-level projection (per_layer_input_forward), timed with
    the head: like it, it runs once per forward outside the blocks (never recomputed) and 2 x
    in the backward."""
    tokens = micro_batch * model.seq_len
    head = 2.0 * tokens * logit_width(model) * logits_per_token(model)     # Musicgen: a head each
    # Qwen4-Exp's hyper_connection_mixer before the head: down and up, 2 x n h x r each
    head += 2.0 * tokens * sum(hyper_connection_mixer(model).values())
    # BERT's head transform before it: dense h -> w (modeling_bert.py lines 470-484), and
    # ELECTRA's / RemBERT's projection of the embedding to hidden, once per forward like it
    head += 2.0 * tokens * model.hidden * logit_width(model) * model.head_transform
    head += 2.0 * tokens * model.hidden * model.embed_width
    if model.per_layer_inputs is None:
        return head
    return head + tokens * per_layer_input_forward(model)[1]


def per_layer_input_forward(model: Model) -> tuple[float, float]:
    """(FLOPs per token of one block's per-layer-input GEMMs, FLOPs per token of the model-level
    projection), 2 x in x out each (modeling_gemma4.py Gemma4TextDecoderLayer.forward lines
    1408-1415: per_layer_input_gate hidden -> width, per_layer_projection width -> hidden;
    Gemma4TextModel.project_per_layer_inputs line 1773: per_layer_model_projection hidden ->
    n_layers x width). Gemma 4's defaults (h 2,304, w 256, 30 blocks): 2,359,296 per block and
    35,389,440 once. (0, 0) without per-layer inputs."""
    p = model.per_layer_inputs
    if p is None:
        return 0.0, 0.0
    return 2.0 * 2 * model.hidden * p.width, 2.0 * model.hidden * model.n_layers * p.width


def per_layer_input_hbm_values(model: Model) -> int:
    """Values per token one block's per-layer-input kernels read + write (unfused, as
    _layer_hbm_bytes counts): act on the gate's output (2 w), product with the slice (3 w), the
    norm (2 h), the residual add (3 h); and the block's share of the model-level work, 13 w per
    token and block (modeling_gemma4.py lines 1745 and 1773-1784: the table lookup (gather, read
    + write) and its embed scale, the projection's scale, its norm, the sum and its scale:
    2 + 2 + 2 + 2 + 3 + 2 = 13 x n_layers x w per token). 0 without per-layer inputs."""
    p = model.per_layer_inputs
    if p is None:
        return 0
    return 5 * p.width + 5 * model.hidden + 13 * p.width


def step_flops(model: Model, micro_batch: int, grad_accum: int = 1,
               checkpointing: bool = True) -> float:
    """FLOPs one GPU executes per optimizer step (forward + backward [+ recompute]).

    Blocks: 3 x forward (+1 with checkpointing); logits: 3 x forward (never recomputed). A
    looped block: a forward per run, backward (+ recompute) per run with gradients
    (Model.block_runs, grad_block_runs; n_layers each without loops).
    """
    lf = layer_forward(model, micro_batch)
    runs = model.grad_block_runs
    block = (lf.total - lf.forward_only_flops) * runs
    logits = logits_forward(model, micro_batch)
    # forward-only work (an indexer under torch.no_grad): forward (+ recompute), no backward
    no_grad = (2.0 if checkpointing else 1.0) * lf.forward_only_flops * runs
    # block runs under torch.no_grad (a loop's no_grad runs): their forward alone
    no_grad_runs = (model.block_runs - runs) * lf.total
    return grad_accum * ((4.0 if checkpointing else 3.0) * block + no_grad + no_grad_runs
                         + 3.0 * logits)


def matmul_efficiency(gpu: GPU, flops: float) -> float:
    """Achieved/peak for a GEMM of `flops`, interpolated in log10(flops), clamped at the ends."""
    points = gpu.matmul_efficiency
    if flops <= points[0][0]:
        return points[0][1]
    if flops >= points[-1][0]:
        return points[-1][1]
    x = math.log10(flops)
    for (f0, e0), (f1, e1) in zip(points, points[1:]):
        if flops <= f1:
            t = (x - math.log10(f0)) / (math.log10(f1) - math.log10(f0))
            return e0 + t * (e1 - e0)
    return points[-1][1]  # pragma: no cover - loop always returns


def peak_flops(gpu: GPU, precision: str) -> float:
    """Dense peak for the compute dtype (fp16/bf16 fall back to each other, then to fp32)."""
    order = {"fp16": ("fp16", "bf16", "fp32"), "bf16": ("bf16", "fp16", "fp32"),
             "fp32": ("tf32", "fp32")}[precision]
    for dtype in order:
        if dtype in gpu.peak_flops:
            return gpu.peak_flops[dtype]
    return gpu.peak_flops["fp32"]


def gemm_seconds(gpu: GPU, precision: str, flops: float) -> float:
    """Time of one GEMM: flops / (peak x efficiency(flops))."""
    if flops <= 0:
        return 0.0
    return flops / (peak_flops(gpu, precision) * matmul_efficiency(gpu, flops))


def layer_forward_seconds(gpu: GPU, precision: str, lf: LayerFlops) -> float:
    """GEMMs at their size-dependent efficiency + attention batched GEMMs + HBM-bound kernels.

    The attention GEMMs run as micro_batch x heads batched products; their efficiency is taken at
    the size of the whole batch (cuBLAS batched GEMMs fill the GPU like one large GEMM).
    """
    t = sum(n * gemm_seconds(gpu, precision, f) for f, n in zip(lf.gemms, lf.counts))
    t += sum(n * gemm_seconds(gpu, precision, f) for f, n in lf.attention_parts)
    return t + lf.hbm_bytes / gpu.hbm_bandwidth_Bps + forward_only_seconds(gpu, precision, lf)


def forward_only_seconds(gpu: GPU, precision: str, lf: LayerFlops) -> float:
    """Time of the block's forward-only work (LayerFlops.forward_only), 0 without."""
    if not lf.forward_only and not lf.forward_only_hbm_bytes:
        return 0.0
    return sum(n * gemm_seconds(gpu, precision, f) for f, n in lf.forward_only) + \
        lf.forward_only_hbm_bytes / gpu.hbm_bandwidth_Bps


HOST_BOUND_MARGIN = 1.5
"""A measured layer point is GPU-bound when its forward takes at least this many times the
fastest point's: the fastest is the Python dispatch floor of an eager HF layer (~50 kernel
launches), which the simulator charges to cpu_host (Software.host_dispatch_*), not to the GPU."""


def gpu_bound(forward_s: list[float]) -> list[bool]:
    """Which measured layer forwards are GPU-bound (HOST_BOUND_MARGIN x the fastest or more)."""
    floor = min(forward_s, default=0.0)
    return [f >= HOST_BOUND_MARGIN * floor for f in forward_s]


def block_seconds(gpu: GPU, precision: str, lf: LayerFlops) -> tuple[float, float]:
    """(forward s, backward s) of one block's GPU kernels: the model above (backward = 2 x
    forward) times the measured/modelled ratios of the GPU profile's layer-time curve, where it
    has one (flops.kernel_ratios)."""
    model_s = layer_forward_seconds(gpu, precision, lf)
    fwd, bwd = kernel_ratios(gpu.layer_time_curve, model_s)
    # forward-only work (an indexer under torch.no_grad) has no backward
    return fwd * model_s, bwd * 2.0 * (model_s - forward_only_seconds(gpu, precision, lf))


def kernel_ratios(curve: tuple[tuple[float, float, float], ...],
                  model_s: float) -> tuple[float, float]:
    """(measured/modelled forward, measured/(2 x modelled) backward) at modelled forward time
    `model_s`, from the GPU-bound points of a layer-time curve (HOST_BOUND_MARGIN), interpolated
    in log(modelled time) and held flat beyond the ends; (1, 1) without GPU-bound points. Never
    below 1: a layer is not faster than its kernels' model."""
    if not curve:
        return 1.0, 1.0
    pts = sorted((m, max(1.0, f / m), max(1.0, b / (2.0 * m)))
                 for (m, f, b), ok in zip(curve, gpu_bound([f for _, f, _ in curve])) if ok)
    if not pts:
        return 1.0, 1.0
    if model_s <= pts[0][0]:
        return pts[0][1], pts[0][2]
    if model_s >= pts[-1][0]:
        return pts[-1][1], pts[-1][2]
    for (ma, fa, ba), (mb, fb, bb) in zip(pts, pts[1:]):
        if ma < model_s <= mb:
            t = (math.log(model_s) - math.log(ma)) / (math.log(mb) - math.log(ma))
            return fa + t * (fb - fa), ba + t * (bb - ba)
    return pts[-1][1], pts[-1][2]  # pragma: no cover - loop always returns
