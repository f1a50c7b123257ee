"""Typed hardware and model profiles. SI units inside, the unit in every field name.

Conversions from the YAML files ("80 GB", "2039 GB/s", "312 TFLOP/s", "10 us") happen once, in
`profiles/load.py`. Every number carries its provenance in `sources` (field name -> source text).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Mapping

from tierlab.bounds import ATTENTION_WINDOW, LOOP_PASSES
from tierlab.profiles.fields import HOST_COST_FIELDS, PEAK_FLOPS_DTYPES, SOFTWARE_TERMS
from tierlab.profiles.layout import (ADAPTER_PREFIX, ATTENTION_TENSORS_PREFIX, BLOCK_NORMS,
                                    UNRUN_PREFIX,
                                    attention_matrices,
                                    block_matrices,
                                    block_small_params,
                                    embed_params, head_params)
from tierlab.profiles import loop_order

__all__ = ["CPU", "GPU", "HOST_COST_FIELDS", "PEAK_FLOPS_DTYPES", "AttentionTensors", "BlockKind",
           "Hardware", "LayerAttention", "Loop", "MLA",
           "Model", "Mixer", "MoE", "NVMe", "Network", "PCIe", "PerLayerInputs", "Shared",
           "Software"]


def _positive(obj, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if value is None:
            continue
        if not value > 0:
            raise ValueError(f"{type(obj).__name__}.{name} must be > 0, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class GPU:
    """One accelerator model."""

    name: str
    """Marketing name, e.g. 'A100-SXM4-80GB'."""
    hbm_bytes: float
    """Device memory in bytes (80 GB -> 80e9; cards sold in GiB are stored in GiB x 2**30)."""
    hbm_bandwidth_Bps: float
    """Peak device-memory bandwidth, bytes/s."""
    peak_flops: Mapping[str, float]
    """Dense peak FLOP/s by dtype: keys among PEAK_FLOPS_DTYPES."""
    matmul_efficiency: tuple[tuple[float, float], ...]
    """Achieved/peak for a GEMM as a function of its FLOP count: ((flops, efficiency), ...) sorted
    by flops, interpolated in log(flops) and clamped at both ends."""
    nvlink_bandwidth_Bps: float = 0.0
    """Per-GPU, per-direction GPU-to-GPU bandwidth (NVLink/NVSwitch); 0 = none, PCIe peer traffic."""
    cuda_context_bytes: float
    """Memory taken by the CUDA context, cuBLAS/NCCL workspaces before any tensor is allocated."""
    layer_time_curve: tuple[tuple[float, float, float], ...] = ()
    """Measured time of a real decoder layer beside its modelled GPU time: ((modelled forward s,
    measured forward s, measured backward s), ...) sorted by modelled time, from `tierlab
    calibrate`'s `layer` benchmark. Its GPU-bound points scale the block's kernel model
    (flops.block_seconds); () = the FLOP/bandwidth model alone."""
    sources: Mapping[str, str] = field(default_factory=dict)
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """Field -> (low, high) in the field's SI unit: the value's central 80% interval (given in
    the profile or derived from its source kind, profiles/ranges.py)."""

    def __post_init__(self) -> None:
        _positive(self, "hbm_bytes", "hbm_bandwidth_Bps", "cuda_context_bytes")
        for point in self.layer_time_curve:
            if len(point) != 3 or not all(0 < v < 1e3 for v in point):
                raise ValueError(f"GPU.layer_time_curve point {point!r}: three times in seconds, "
                                 "each > 0")
        if not self.peak_flops:
            raise ValueError(f"GPU.peak_flops of {self.name} is empty")
        for dtype, flops in self.peak_flops.items():
            if not flops > 0:
                raise ValueError(f"GPU.peak_flops.{dtype} must be > 0, got {flops!r}")
        if not self.matmul_efficiency:
            raise ValueError(f"GPU.matmul_efficiency of {self.name} is empty")
        for flops, eff in self.matmul_efficiency:
            if not (flops > 0 and 0 < eff <= 1):
                raise ValueError(f"GPU.matmul_efficiency point ({flops}, {eff}) out of range")


@dataclass(frozen=True, kw_only=True)
class CPU:
    """The host processor(s) of one node, all sockets together."""

    name: str
    sockets: int
    """Number of CPU packages."""
    cores: int
    """Physical cores of the node, all sockets."""
    dram_bandwidth_Bps: float
    """Achievable (STREAM-like) DRAM bandwidth of the node, bytes/s."""
    adam_params_per_s: float
    """DeepSpeedCPUAdam throughput using every core, fp32 parameters updated per second."""
    adam_one_thread_params_per_s: float | None = None
    """DeepSpeedCPUAdam throughput on one thread (the thread sweep's one-thread point, the median
    process), measured by `tierlab calibrate`: one core's speed under DeepSpeed's own CPU kernel.
    A recorded fact, not a model input: as the fitted host terms' measure of host speed (they are
    one Python thread's work; the all-core rate also counts cores, 32 on the fit machines, 16 on
    the hosts lent since) it predicts machines no fit saw better than the all-core rate but
    breaks the lab's step-time bound on a fit machine's own run, and it moves by x1.2-1.4 from one
    process to the next (docs/calibration.md#host-speed). None: not measured."""
    module_call_s: float | None = None
    """Host seconds of one forward call of a small hooked nn.Module on the GPU (Python + hook +
    torch dispatch + kernel launch, autograd on), measured by `tierlab calibrate`. A recorded
    fact, not a model input: as the fitted host terms' measure of host speed it predicts the lab's
    machines a little better than the CPU Adam rate but one of them (h200x2-e, 27.1 us on the
    lab's fastest machine) much worse, and in one machine's own training processes it read 15-54
    us (docs/calibration.md#host-speed), so the fitted terms follow adam_params_per_s instead."""
    cast16_params_per_s: float | None = None
    """fp32 parameters per second copied into a 16-bit host buffer with every core (torch
    `copy_` of an fp32 tensor into a pinned bf16 one: DeepSpeed's copy of the updated fp32
    partition into the 16-bit buffer after CPU Adam), measured by `tierlab calibrate`'s `cast`
    benchmark. The conversion runs below the DRAM rate its 6 bytes would take (1.6-1.75x their
    time on two H100 hosts, lab/fresh/h100-{a,b}/opt-host-ops.json). None: the copy is charged
    its 6 bytes at the DRAM rate CPU Adam streams at (sim/devices.py)."""
    host_costs: Mapping[str, float] = field(default_factory=dict)
    """DeepSpeed's per-event host costs measured on this host by `tierlab calibrate` (keys:
    HOST_COST_FIELDS of profiles/fields.py, seconds); they override the software profile's values
    (empty: none)."""
    sources: Mapping[str, str] = field(default_factory=dict)
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """Field -> (low, high) in the field's SI unit: the value's central 80% interval (given in
    the profile or derived from its source kind, profiles/ranges.py)."""

    def __post_init__(self) -> None:
        _positive(self, "sockets", "cores", "dram_bandwidth_Bps", "adam_params_per_s")
        for key, value in self.host_costs.items():
            if key not in HOST_COST_FIELDS:
                raise ValueError(f"CPU.host_costs: unknown term {key!r}")
            if not value >= 0:
                raise ValueError(f"CPU.host_costs.{key} must be >= 0, got {value!r}")
        if self.module_call_s is not None:
            _positive(self, "module_call_s")
        if self.cast16_params_per_s is not None:
            _positive(self, "cast16_params_per_s")
        if self.adam_one_thread_params_per_s is not None:
            _positive(self, "adam_one_thread_params_per_s")


@dataclass(frozen=True, kw_only=True)
class NVMe:
    """One NVMe drive model (per-drive figures)."""

    name: str
    read_bandwidth_Bps: float
    write_bandwidth_Bps: float
    capacity_bytes: float
    latency_s: float
    """Per-request latency at low queue depth (4 KiB random read class)."""
    aio_points: tuple[tuple[int, int, int, float, float], ...] = ()
    """Calibrated DeepSpeed aio rates per setting: (block_size, queue_depth,
    intra_op_parallelism, read_Bps, write_Bps) — the whole sweep, not only its best point
    (`tierlab calibrate` raw results; empty: the queueing model of devices.py is used)."""
    sources: Mapping[str, str] = field(default_factory=dict)
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """Field -> (low, high) in the field's SI unit: the value's central 80% interval (given in
    the profile or derived from its source kind, profiles/ranges.py)."""

    def __post_init__(self) -> None:
        _positive(self, "read_bandwidth_Bps", "write_bandwidth_Bps", "capacity_bytes", "latency_s")
        for pt in self.aio_points:
            if len(pt) != 5 or min(pt) <= 0:
                raise ValueError(f"NVMe.aio_points: expected (block_size, queue_depth, "
                                 f"intra_op_parallelism, read_Bps, write_Bps) > 0, got {pt!r}")


@dataclass(frozen=True, kw_only=True)
class PCIe:
    """Host<->GPU link of one GPU, each direction a separate full-duplex channel."""

    h2d_pinned_Bps: float
    d2h_pinned_Bps: float
    h2d_pageable_Bps: float
    d2h_pageable_Bps: float
    latency_s: float
    """Fixed cost per transfer (launch + DMA setup)."""
    switch_uplink_Bps: float | None = None
    """Bandwidth per direction of the upstream link a PCIe switch shares; None = no shared switch."""
    gpus_per_switch: int = 1
    """GPUs behind one switch uplink."""
    nvme_per_switch: int = 0
    """NVMe drives behind the same switch uplink (their traffic shares it with the GPUs)."""
    sources: Mapping[str, str] = field(default_factory=dict)
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """Field -> (low, high) in the field's SI unit: the value's central 80% interval (given in
    the profile or derived from its source kind, profiles/ranges.py)."""

    def __post_init__(self) -> None:
        _positive(self, "h2d_pinned_Bps", "d2h_pinned_Bps", "h2d_pageable_Bps", "d2h_pageable_Bps",
                  "latency_s", "switch_uplink_Bps", "gpus_per_switch")
        if self.nvme_per_switch < 0:
            raise ValueError(f"PCIe.nvme_per_switch must be >= 0, got {self.nvme_per_switch!r}")


@dataclass(frozen=True, kw_only=True)
class Network:
    """Inter-node network of one node."""

    nic_bandwidth_Bps: float
    """Aggregate per-direction NIC bandwidth of the node."""
    latency_s: float
    sources: Mapping[str, str] = field(default_factory=dict)
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """Field -> (low, high) in the field's SI unit: the value's central 80% interval (given in
    the profile or derived from its source kind, profiles/ranges.py)."""

    def __post_init__(self) -> None:
        _positive(self, "nic_bandwidth_Bps", "latency_s")


@dataclass(frozen=True, kw_only=True)
class Hardware:
    """A cluster: `nodes` identical nodes of `gpus_per_node` GPUs each."""

    name: str
    description: str
    gpu: GPU
    gpus_per_node: int
    cpu: CPU
    dram_bytes: float
    """Host RAM of one node."""
    nvme: NVMe | None
    nvme_drives: int
    """Drives per node used for swap (RAID-0 / striped), 0 if none."""
    pcie: PCIe
    network: Network
    nodes: int = 1
    sources: Mapping[str, str] = field(default_factory=dict)
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """Field -> (low, high) in the field's SI unit: the value's central 80% interval (given in
    the profile or derived from its source kind, profiles/ranges.py)."""

    def __post_init__(self) -> None:
        _positive(self, "gpus_per_node", "dram_bytes", "nodes")
        if self.nvme_drives < 0:
            raise ValueError(f"Hardware.nvme_drives must be >= 0, got {self.nvme_drives!r}")
        if self.nvme_drives > 0 and self.nvme is None:
            raise ValueError("Hardware.nvme_drives > 0 but no nvme drive model is given")

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def nvme_capacity_bytes(self) -> float:
        return self.nvme.capacity_bytes * self.nvme_drives if self.nvme else 0.0


@dataclass(frozen=True, kw_only=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank q and kv projections."""

    q_lora_rank: int = 0
    """Rank of the query compression (q_a_proj -> norm -> q_b_proj); 0 = one q_proj (V2-Lite)."""
    kv_lora_rank: int
    """Rank of the joint key/value compression (kv_a_proj_with_mqa -> norm -> kv_b_proj)."""
    qk_nope_head_dim: int
    """Per-head query/key width without rotary embedding."""
    qk_rope_head_dim: int
    """Per-head query/key width with rotary embedding (the key part is shared by all heads)."""
    v_head_dim: int
    """Per-head value width."""

    def __post_init__(self) -> None:
        _positive(self, "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        if self.q_lora_rank < 0:
            raise ValueError(f"MLA.q_lora_rank must be >= 0, got {self.q_lora_rank!r}")

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True, kw_only=True)
class MoE:
    """Mixture-of-experts MLPs: every expert is stored and trained, top-k run per token."""

    n_experts: int
    """Routed experts per MoE layer (Mixtral num_local_experts, DeepSeek n_routed_experts)."""
    experts_per_token: int
    """Routed experts each token runs (top-k: num_experts_per_tok)."""
    expert_ffn: int
    """Intermediate size of one routed expert."""
    shared_ffn: int = 0
    """Intermediate size of the always-active shared expert MLP, 0 = none (DeepSeek: one MLP of
    n_shared_experts x moe_intermediate_size; Qwen2-MoE: shared_expert_intermediate_size)."""
    shared_gate: bool = False
    """A sigmoid gate hidden -> 1 scales the shared expert (Qwen2-MoE shared_expert_gate)."""
    dense_layers: tuple[int, ...] = ()
    """Layers whose MLP is dense (width Model.ffn) instead of MoE (DeepSeek first_k_dense_replace,
    Qwen-MoE decoder_sparse_step / mlp_only_layers)."""
    router_scales: bool = False
    """The router carries a scale of its input (hidden) and one per expert (n_experts) beside
    its projection: Gemma 4's MoE block (modeling_gemma4.py Gemma4TextRouter.__init__, lines
    1296-1304: `scale`, `per_expert_scale`)."""
    output_bias: bool = False
    """A bias of hidden added to the MoE's summed output, outside the experts (always used):
    JetMoE (modeling_jetmoe.py JetMoeMoE.__init__ line 224, forward line 263); layout's
    `moe_bias`."""
    zero_experts: int = 0
    """Zero-computation (identity) experts the router also picks from, holding no parameters:
    LongCat-Flash's zero_expert_num (modeling_longcat_flash.py LongcatFlashTopkRouter line 135:
    the router scores n_experts + zero_experts; LongcatFlashMoE.forward lines 214-227 adds the
    input, scaled, for each pick of one). Under balanced routing a token runs
    experts_per_token x n_experts / (n_experts + zero_experts) real experts (token_share)."""

    def __post_init__(self) -> None:
        _positive(self, "n_experts", "experts_per_token", "expert_ffn")
        if self.zero_experts < 0:
            raise ValueError(f"MoE.zero_experts must be >= 0, got {self.zero_experts!r}")
        if self.experts_per_token > self.n_experts + self.zero_experts:
            raise ValueError(f"MoE.experts_per_token {self.experts_per_token} exceeds n_experts "
                             f"{self.n_experts}" + (f" + zero_experts {self.zero_experts}"
                                                     if self.zero_experts else ""))
        if self.shared_ffn < 0:
            raise ValueError(f"MoE.shared_ffn must be >= 0, got {self.shared_ffn!r}")

    @property
    def token_share(self) -> float:
        """Fraction of the tokens each routed expert multiplies (balanced routing): top-k over
        the experts the router picks from, zero-computation ones included (k / n without)."""
        return self.experts_per_token / (self.n_experts + self.zero_experts)

MIXER_KINDS = ("mamba", "mamba2", "short_conv", "gated_delta", "kda", "lightning", "rwkv",
               "mlstm", "mamba_heads", "rg_lru")
"""Token mixers tierlab counts in place of attention (Model.mixer): Mamba's selective scan
(modeling_mamba.py MambaMixer), Mamba-2's SSD (modeling_mamba2.py Mamba2Mixer and its copies in
Bamba, Granite 4, Falcon-H1), LFM2's gated short convolution (modeling_lfm2.py Lfm2ShortConv),
Qwen3-Next's Gated DeltaNet linear attention (modeling_qwen3_next.py Qwen3NextGatedDeltaNet),
Kimi Linear's delta attention with per-channel decay (KDA: modeling_kimi_linear.py
KimiLinearDeltaAttention, Bailing-hybrid's copy), MiniMax's lightning attention (blocked linear
attention with a per-head decay: modeling_minimax.py MiniMaxLightningAttention), RWKV-4's
time-mix (WKV) and channel-mix together (modeling_rwkv.py RwkvSelfAttention, RwkvFeedForward;
Mixer.mlp False: the channel-mix is the mixer's), xLSTM's mLSTM layer (modeling_xlstm.py
xLSTMLayer, its chunkwise kernel), Zamba's multi-head Mamba-1 (modeling_zamba.py
ZambaMambaMixer: x_proj and dt_proj one matrix per head), Griffin's recurrent block with its
RG-LRU (modeling_recurrent_gemma.py RecurrentGemmaRecurrentBlock: profiles/hf_rglru.py)."""


@dataclass(frozen=True, kw_only=True)
class Mixer:
    """A linear-attention / state-space / short-convolution token mixer that replaces attention
    in the blocks `layers` (Mamba, Jamba, Bamba, LFM2, Granite 4, Qwen3-Next, Nemotron-H,
    Zamba2; beside it in Falcon-H1): its tensors as transformers builds them (profiles/hf_mixer.py reads them off
    the meta-device model) and the FLOPs of its scan."""

    kind: str
    """One of MIXER_KINDS."""
    layers: tuple[int, ...]
    """Blocks whose attention is this mixer (every block of a pure Mamba model)."""
    matrices: tuple[tuple[str, int, int], ...]
    """(name, in, out) of each projection (in_proj, x_proj, dt_proj, out_proj): GEMMs."""
    small_params: tuple[tuple[str, int], ...]
    """(name, numel) of the other tensors: the depthwise conv's weight and bias, A_log, D,
    dt_bias, the mixer's own norms."""
    scan_flops_per_token: float
    """Forward FLOPs per token of the conv and the scan (not the projections): hf_mixer.py."""
    mlp: bool = True
    """The mixer blocks keep the MLP/MoE (Jamba, Bamba, LFM2); False: mixer only (Mamba)."""
    attention: bool = False
    """The mixer blocks keep their attention too, the two run side by side on the same input
    (Falcon-H1's parallel hybrid: FalconH1DecoderLayer adds self_attn's and mamba's outputs);
    False: the mixer replaces the attention."""

    def __post_init__(self) -> None:
        if self.kind not in MIXER_KINDS:
            raise ValueError(f"Mixer.kind must be one of {', '.join(MIXER_KINDS)}, got "
                             f"{self.kind!r}")
        for name in ("layers", "matrices", "small_params"):
            object.__setattr__(self, name, tuple(tuple(v) if isinstance(v, list) else v
                                                 for v in getattr(self, name)))
        if not self.layers or any(isinstance(i, bool) or not isinstance(i, int) or i < 0
                                  for i in self.layers):
            raise ValueError(f"Mixer.layers must list block indices, got {self.layers!r}")
        if any(n <= 0 for *_, n in self.small_params) or \
                any(i <= 0 or o <= 0 for _, i, o in self.matrices):
            raise ValueError("Mixer.matrices and Mixer.small_params must have positive sizes")
        if not self.scan_flops_per_token >= 0:
            raise ValueError(f"Mixer.scan_flops_per_token must be >= 0, got "
                             f"{self.scan_flops_per_token!r}")


def _named(values) -> tuple:
    """A tuple of tuples (a list of lists read back from JSON kept as tuples)."""
    return tuple(tuple(v) if isinstance(v, list) else v for v in values)


@dataclass(frozen=True, kw_only=True)
class Shared:
    """Attention + MLP blocks whose weights several depths reuse (Zamba2: modeling_zamba2.py
    `Zamba2Model.get_layers` ties every `num_mem_blocks`-th hybrid layer's `shared_transformer`
    to the first; `Zamba2HybridLayer.forward` runs it on the concatenated hidden state and
    embedding, then its own `linear`, and adds the result to its Mamba block's input). The
    tensors are as transformers builds them (profiles/hf_build.py reads them off the meta-device
    model); the attention's heads are Model.n_heads of Model.head_dim."""

    layers: tuple[int, ...]
    """Blocks that run a shared block before their mixer (Zamba2's `hybrid` layers), in order."""
    blocks: int
    """Distinct shared blocks: the j-th use runs block j % blocks (num_mem_blocks)."""
    matrices: tuple[tuple[str, int, int], ...]
    """(name, in, out) of one shared block's weights (q, k, v, o on 2 x hidden, gate_up, down):
    stored once per block, owned by its first use, multiplied at every use."""
    small_params: tuple[tuple[str, int], ...]
    """(name, numel) of one shared block's other tensors (its two norms)."""
    use_matrices: tuple[tuple[str, int, int], ...]
    """(name, in, out) of what each use holds for itself: its LoRA adapters (stored in the shared
    block's adapter lists, one slot per use: Zamba2Attention / Zamba2MLP `*_adapter_list`) and
    the block's `linear`."""

    def __post_init__(self) -> None:
        for name in ("layers", "matrices", "small_params", "use_matrices"):
            object.__setattr__(self, name, _named(getattr(self, name)))
        if not self.layers or any(isinstance(i, bool) or not isinstance(i, int) or i < 0
                                  for i in self.layers):
            raise ValueError(f"Shared.layers must list block indices, got {self.layers!r}")
        if isinstance(self.blocks, bool) or not isinstance(self.blocks, int) or \
                not 1 <= self.blocks <= len(self.layers):
            raise ValueError(f"Shared.blocks must be 1 to {len(self.layers)} (its uses), got "
                             f"{self.blocks!r}")
        if any(n <= 0 for *_, n in self.small_params) or any(
                i <= 0 or o <= 0 for _, i, o in self.matrices + self.use_matrices):
            raise ValueError("Shared.matrices, use_matrices and small_params must have positive "
                             "sizes")

    def owner(self, layer: int) -> bool:
        """Block `layer` is the first use of its shared block (owns its weights)."""
        return layer in self.layers[:self.blocks]


@dataclass(frozen=True, kw_only=True)
class Loop:
    """Consecutive blocks that one forward runs as a section `passes` times in a row, each block's
    weights stored once (profiles/hf_loops.py reads them from transformers' config object):
    - Dory (transformers 5.25.0 modeling_dory.py DoryModel.forward, lines 543-556: `for loop_idx
      in range(n_loops)` over `self.layers[recurrent_start:recurrent_end]`): its
      n_recurrent_layers after the n_input_layers, n_recurrent_loops passes;
    - Inkling2-Loop (modeling_inkling2_loop.py Inkling2LoopTextModel.forward, lines 1425-1468: a
      first pass over `self.layers[loop_start:loop_end]`, then `for loop_idx in range(1,
      loop_num_passes)` again from the pre-loop states): loop_layer_index_start to _end,
      loop_num_passes passes; the passes after the first run each block's message gates
      (`matrices`);
    - HRM (modeling_hrm_text.py HrmTextModel.forward: `for high_cycle_idx in
      range(H_cycles)`, inside it `for low_cycle_idx in range(L_cycles)` the L stack, then the H
      stack; lines 493-525): a loop of both stacks, H_cycles passes, holding one of the L stack,
      L_cycles passes, whose runs before the last L_bp_cycles of each H cycle are under
      torch.no_grad (line 503).
    A pass costs what a block costs, once per pass: forward, recompute and backward FLOPs,
    stored activations (or checkpointed inputs), a ZeRO-3 module use with its hooks; parameters,
    gradients and optimizer state are the block's, once (Model.forward_order).

    Not Zamba2's Shared: a shared block is one attention + MLP (or num_mem_blocks alike) whose
    weights other blocks run beside their own mixer, each use a block of its own with its own
    tensors; a loop re-runs whole blocks of any kind (their own attention shape, MoE, mixer) in
    sequence, some of them without gradients, so its unit is the block's run, not a grafted
    part."""

    layers: tuple[int, ...]
    """The section's blocks, consecutive, in order."""
    passes: int
    """Runs of the section each time the forward reaches it (n_recurrent_loops,
    loop_num_passes, L_cycles, H_cycles), 1 to bounds.LOOP_PASSES."""
    no_grad: tuple[int, ...] = ()
    """Runs of the section under torch.no_grad, numbered 0, 1, ... over the whole forward (an
    enclosing loop's passes included): forward only, no recompute, no backward, nothing stored
    (HRM's L stack, default L_bp_cycles [2] padded to [1, 2]: runs 0, 1 and 3 of 6). ():
    every run carries gradients."""
    matrices: tuple[tuple[str, int, int], ...] = ()
    """(name, in, out) of what each block of the section holds for the runs after the first of
    each time the forward reaches it (Inkling2-Loop's q/k/v/mlp message gates,
    Inkling2LoopMessageGate: down_proj 2 x hidden -> loop_gate_rank, forget_gate_proj and
    message_gate_proj back, lines 81-98; run only when `messages` is given, lines 1005-1011,
    1035-1036, 1159-1163, 1187-1188): stored in every block of the section, GEMMs of passes - 1
    of its runs per entry."""

    def __post_init__(self) -> None:
        for name in ("layers", "no_grad"):
            if not isinstance(getattr(self, name), (tuple, list)):
                raise ValueError(f"Loop.{name} must be a list of whole numbers, got "
                                 f"{getattr(self, name)!r}")
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "matrices", _named(self.matrices))
        first = self.layers[0] if self.layers else None
        if not self.layers or any(isinstance(i, bool) or not isinstance(i, int) or i < 0
                                  for i in self.layers) or \
                self.layers != tuple(range(first, first + len(self.layers))):
            raise ValueError(f"Loop.layers must list consecutive block indices, got "
                             f"{self.layers!r}")
        if isinstance(self.passes, bool) or not isinstance(self.passes, int) or \
                not LOOP_PASSES.low <= self.passes <= LOOP_PASSES.high:
            raise ValueError(f"Loop.passes must be a whole number of 1 to "
                             f"{LOOP_PASSES.high:,.0f}, got {self.passes!r}")
        if len(set(self.no_grad)) != len(self.no_grad) or any(
                isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in self.no_grad):
            raise ValueError(f"Loop.no_grad must list distinct runs >= 0, got {self.no_grad!r}")
        if any(i <= 0 or o <= 0 for _, i, o in self.matrices):
            raise ValueError("Loop.matrices must have positive sizes")


@dataclass(frozen=True, kw_only=True)
class PerLayerInputs:
    """Gemma 4's per-layer inputs (transformers 5.25 modeling_gemma4.py): a second embedding
    table `embed_tokens_per_layer` of vocab x (n_layers x width) (Gemma4TextModel.__init__, lines
    1566-1580), beside it a model-level `per_layer_model_projection` hidden -> n_layers x width
    and its `per_layer_projection_norm` (width); `project_per_layer_inputs` (lines 1751-1784)
    adds the projected embedding to the looked-up rows, and each block i takes its slice
    (`per_layer_inputs[:, :, i, :]`, line 1684) into its own `per_layer_input_gate`
    (hidden -> width), act, product with the slice, `per_layer_projection` (width -> hidden) and
    `post_per_layer_input_norm` (hidden), added to the residual
    (Gemma4TextDecoderLayer.__init__ lines 1345-1350, forward lines 1408-1415). The tensors are
    profiles/layout.py's (per_layer_input_params, per_layer_block_matrices)."""

    width: int
    """Width of one block's per-layer input (hidden_size_per_layer_input)."""
    vocab: int
    """Rows of the per-layer embedding table (vocab_size_per_layer_input)."""

    def __post_init__(self) -> None:
        for name in ("width", "vocab"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"PerLayerInputs.{name} must be a whole number >= 1, got "
                                 f"{value!r}")


@dataclass(frozen=True, kw_only=True)
class AttentionTensors:
    """Softmax attention read as the tensors transformers builds (profiles/hf_build.py
    `tensor_attention`, off the meta-device module) where its projections are not the q/k/v/o
    (or fused qkv) of Model's heads: gated attention (AFMoE's gate_proj), low-rank q or kv (MLA
    variants: MiniCPM3, GLM-4-MoE-Lite, Youtu), fused kv and attention experts (JetMoE's mixture
    of attention heads: expert_matrices), a dynamic-mask projection
    (Doge's dt_proj), different q and v head widths (MiMo-V2-Flash), sinks. Every Linear weight
    is a GEMM of a token (2 x in x out FLOPs); every other tensor (norms, biases, sinks, per-head
    scalars) is a small parameter; the scores are Model.n_heads heads of Model.head_dim (Q K^T)
    and v_head_dim (A V), as the module's forward reshapes them."""

    matrices: tuple[tuple[str, int, int], ...]
    """(name, in, out) of each Linear weight of the attention module (q_proj, q_a_proj, gate_proj,
    kv_proj, o_proj, ...): the GEMMs one token runs."""
    small_params: tuple[tuple[str, int], ...]
    """(name, numel) of the module's other tensors: q/k/low-rank norms, biases, sinks, scalars."""
    v_head_dim: int
    """Width of one value head in A V (o_proj takes n_heads x v_head_dim)."""
    indexer: tuple[int, int, int] = ()
    """DeepSeek sparse attention's indexer (modeling_deepseek_v32.py DeepseekV32Indexer, its
    copies in GLM-MoE-DSA, AXK2): (index heads, index head width, index_topk). Its matrices
    (`indexer.` names) and scores run in the forward only (`forward` is under torch.no_grad:
    no gradient, no backward); () = none."""
    expert_matrices: tuple[tuple[str, int, int], ...] = ()
    """(name, in, out) of one attention expert's projections, where the attention is a mixture
    of attention heads (JetMoE's MoA, arXiv:2404.07413 sec. 2.2; modeling_jetmoe.py JetMoeMoA
    .__init__ lines 285-286: `experts.input_linear` hidden -> kv heads x head width, the
    expert's q projection, and `experts.output_linear` back, each a JetMoeParallelExperts
    weight of n_experts x out x in, line 134). Every expert stores its own (layout names
    `attn.{name}.{e}`); a token runs experts_per_token of them (JetMoeMoA.map / reduce, lines
    294-337): each expert's GEMMs see top-k / n of the tokens, as a MoE's do. () = none."""
    n_experts: int = 0
    """Attention experts (JetMoE: num_local_experts); 0 without expert_matrices."""
    experts_per_token: int = 0
    """Attention experts a token runs (JetMoE: num_experts_per_tok, JetMoeAttention.top_k,
    line 440); 0 without expert_matrices."""
    compress_rate: int = 0
    """DeepSeek-V4's compressed KV (modeling_deepseek_v4.py DeepseekV4CSACompressor /
    HCACompressor, profiles/hf_compressed.py): tokens per compressed entry, config
    compress_rates (CSA 4, HCA 128). A query scores its sliding window plus all s //
    compress_rate compressed entries (DeepseekV4Attention.forward concatenates them to the keys
    and masks; eager computes every score), and an indexer (`compressor.indexer.` names)
    scores the s // compress_rate entries; 0 = no compressor."""
    position_matrix: str = ""
    """The matrix that projects a relative positional encoding rather than the tokens (XLNet's
    `r`, modeling_xlnet.py lines 58, 260; profiles/hf_xlnet.py): it runs over
    positions_per_token x s positions a sample, and each query scores as many position keys
    (the bd term, line 112) beside its s content keys; "" = none."""
    positions_per_token: int = 0
    """Positions of that encoding per token: XLNet's 2 (attn_type "bi": klen + qlen) or 1
    ("uni": klen + 1, timed as s); 0 without a position_matrix."""

    def __post_init__(self) -> None:
        for name in ("matrices", "small_params", "expert_matrices"):
            object.__setattr__(self, name, _named(getattr(self, name)))
        object.__setattr__(self, "indexer", tuple(self.indexer))
        experts = (self.n_experts, self.experts_per_token)
        whole = all(type(v) is int for v in experts)        # not bool, not float
        ok = whole and (1 <= self.experts_per_token <= self.n_experts if self.expert_matrices
                        else experts == (0, 0))
        if not ok or any(i <= 0 or o <= 0 for _, i, o in self.expert_matrices):
            raise ValueError(f"AttentionTensors.n_experts and experts_per_token must be whole "
                             f"numbers, 1 <= experts_per_token <= n_experts with expert_matrices "
                             f"of positive sizes (0 and 0 without), got {experts!r}")
        if self.indexer and (len(self.indexer) != 3 or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in self.indexer)):
            raise ValueError(f"AttentionTensors.indexer must be (heads, head width, top-k), each "
                             f">= 1, got {self.indexer!r}")
        if isinstance(self.compress_rate, bool) or not isinstance(self.compress_rate, int) or \
                self.compress_rate < 0:
            raise ValueError(f"AttentionTensors.compress_rate must be a whole number >= 0 (0: no "
                             f"compressor), got {self.compress_rate!r}")
        if type(self.positions_per_token) is not int or self.positions_per_token < 0 or \
                (self.positions_per_token > 0) != (self.position_matrix in
                                                   {n for n, _, _ in self.matrices}):
            raise ValueError(f"AttentionTensors.positions_per_token must be a whole number >= 1 "
                             f"with a position_matrix among the matrices (0 and \"\" without), "
                             f"got {self.positions_per_token!r}, {self.position_matrix!r}")
        _positive(self, "v_head_dim")
        if not self.matrices or any(n <= 0 for *_, n in self.small_params) or \
                any(i <= 0 or o <= 0 for _, i, o in self.matrices):
            raise ValueError("AttentionTensors.matrices and small_params must have positive "
                             "sizes")

    def forward_only(self, name: str) -> bool:
        """Matrix `name` (transformers' name in the module) is the indexer's: no backward
        (DeepSeek-V4's sits in its compressor: `compressor.indexer.q_b_proj`)."""
        return bool(self.indexer) and (name.startswith(INDEXER_PREFIX) or (
            self.compress_rate > 0 and name.startswith("compressor." + INDEXER_PREFIX)))

    def token_share(self, name: str) -> float:
        """Fraction of the tokens that matrix `name` (layout's name less `attn.`) multiplies:
        top-k / n for an attention expert's (`experts.input_linear.3`: balanced routing, each
        expert sees tokens x k / n, as layout.block_gemms counts a MoE's); positions_per_token
        for the position_matrix (XLNet's r: 2 s positions a sample); else 1."""
        if self.position_matrix and name == self.position_matrix:
            return float(self.positions_per_token)
        if self.expert_matrices and name.rsplit(".", 1)[0] in \
                {n for n, _, _ in self.expert_matrices}:
            return self.experts_per_token / self.n_experts
        return 1.0

    def idle_expert_params(self) -> int:
        """Parameters of the attention experts one token does not run: (n - k) x one
        expert's matrices (0 without experts)."""
        return (self.n_experts - self.experts_per_token) * \
            sum(i * o for _, i, o in self.expert_matrices)


@dataclass(frozen=True, kw_only=True)
class LayerAttention:
    """The attention of the blocks `layers` where its shape is not Model's own: a heterogeneous
    per-layer transformers config (Gemma 4: modeling_gemma4.py Gemma4TextAttention.__init__
    reads `config.per_layer_config[layer_idx]`'s head_dim and num_key_value_heads, and its
    forward views q/k/v as (-1, head_dim)), or modules whose heads differ by layer. The fields
    are Model's attention fields, and mean what they mean there, in these blocks."""

    layers: tuple[int, ...]
    """Blocks whose attention has this shape."""
    n_heads: int
    n_kv_heads: int
    attn_head_dim: int = 0
    """Width of one head; 0 = hidden / n_heads."""
    fused_qkv: bool = False
    qk_norm: str = "none"
    attn_output_gate: bool = False
    attention_tensors: AttentionTensors | None = None
    cross_attention: bool = False
    """Model.cross_attention in these blocks (Llama 3.2 Vision's cross-attention layers)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))
        if isinstance(self.attention_tensors, Mapping):     # read back from JSON
            object.__setattr__(self, "attention_tensors",
                               AttentionTensors(**self.attention_tensors))
        _positive(self, "n_heads", "n_kv_heads")
        if self.attn_head_dim < 0:
            raise ValueError(f"LayerAttention.attn_head_dim must be >= 0, got "
                             f"{self.attn_head_dim!r}")
        if not self.layers or any(isinstance(i, bool) or not isinstance(i, int) or i < 0
                                  for i in self.layers):
            raise ValueError(f"LayerAttention.layers must list block indices, got "
                             f"{self.layers!r}")

    def fields(self) -> dict:
        """Model's attention fields as these blocks have them."""
        return dict(n_heads=self.n_heads, n_kv_heads=self.n_kv_heads,
                    attn_head_dim=self.attn_head_dim, fused_qkv=self.fused_qkv,
                    qk_norm=self.qk_norm, attn_output_gate=self.attn_output_gate,
                    attention_tensors=self.attention_tensors,
                    cross_attention=self.cross_attention)


LOOP_PREFIX = "loop."
"""Names of a loop's matrices among its blocks' tensors (`loop.q_message_gate.down_proj`)."""


INDEXER_PREFIX = "indexer."
"""Names of the indexer's tensors within a DeepSeek sparse attention module (`indexer.wq_b`)."""


class BlockKind(tuple):
    """Model.layer_kind: unpacks as (MoE block, mixer block), the two flags profiles/layout.py's
    block functions take, and carries `part`, which equality and hash include: a single-part
    block ('attention' or 'mlp': Nemotron-H) or a shared-block use ('shared-owner' or
    'shared-use': Zamba2) is a kind of its own wherever blocks are grouped by kind (Model.
    layer_groups, sim/modules.py's per-kind blocks); '' for every other block. `shape`: which
    of Model.layer_attention the block's attention has (1, 2, ...), 0 for Model's own. `loop`:
    which of Model.loops holds the block innermost (1, 2, ...: its blocks run alike and may hold
    the loop's matrices), 0 for none."""

    def __new__(cls, moe: bool, mixer: bool, part: str = "", shape: int = 0,
                loop: int = 0) -> "BlockKind":
        kind = super().__new__(cls, (moe, mixer))
        kind.part, kind.shape, kind.loop = part, shape, loop
        return kind

    def __eq__(self, other: object) -> bool:
        return tuple.__eq__(self, other) and self.part == getattr(other, "part", "") and \
            self.shape == getattr(other, "shape", 0) and self.loop == getattr(other, "loop", 0)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((tuple(self), self.part, self.shape, self.loop))

    def __getnewargs__(self) -> tuple:
        return (*self, self.part, self.shape, self.loop)


ATTENTION_SMALL = ("q_norm", "k_norm", "q_a_norm", "kv_a_norm")
"""Small parameters of a block that belong to its attention (layout.block_small_params)."""


def _attention_side(name: str, attention: set) -> bool:
    """A block tensor (layout's names) that belongs to the attention: a projection, its bias, a
    q/k or MLA norm, a tensor of AttentionTensors (layout's `attn.` names)."""
    return name in attention or name.removesuffix(".bias") in attention or \
        name in ATTENTION_SMALL or name.startswith(ATTENTION_TENSORS_PREFIX)


def _block_norm(name: str) -> bool:
    """One of the block's own norms (layout.block_small_params: input_norm, post_attention_norm,
    ...), which a single-part block keeps whichever part it holds."""
    return name.endswith("_norm") and name not in ATTENTION_SMALL and \
        not name.startswith(ATTENTION_TENSORS_PREFIX)


@dataclass(frozen=True, kw_only=True)
class Model:
    """A decoder-only transformer (Llama / GPT / MoE families; profiles/layout.py lists its
    tensors, profiles/hf_arch.py reads it from a Hugging Face config.json)."""

    name: str
    n_layers: int
    hidden: int
    ffn: int
    """Intermediate size of the dense MLP."""
    n_heads: int
    n_kv_heads: int
    """Key/value heads (GQA); == n_heads for multi-head attention, 1 for multi-query."""
    vocab: int
    seq_len: int
    """Sequence length of a training sample (defaults to the profile's context length)."""
    gated_mlp: bool = True
    """SwiGLU-style MLP with three matrices (Llama) instead of two (GPT)."""
    tie_embeddings: bool = False
    norm: str = "rmsnorm"
    """'rmsnorm' (weight only), 'layernorm' (weight and bias) or 'nonparametric' (OLMo-1)."""
    bias: bool = False
    """Every attention and MLP linear layer carries a bias (GPT-2/3, GPT-NeoX, OPT, BLOOM)."""
    learned_pos_emb: bool = False
    """A learned position embedding table of seq_len x hidden (GPT) instead of RoPE."""
    max_seq_len: int = 0
    """Context length of the architecture (0 = same as seq_len)."""
    attn_head_dim: int = 0
    """Width of one attention head; 0 = hidden / n_heads (Gemma, Qwen3, Mistral-Nemo set it)."""
    qkv_bias: bool = False
    """q, k and v projections carry biases although `bias` is false (Qwen2, Qwen2-MoE)."""
    fused_qkv: bool = False
    """q, k, v are one matrix (GPT-2 c_attn, GPT-NeoX/Falcon/BLOOM query_key_value, Phi-3)."""
    fused_gate_up: bool = False
    """gate and up are one matrix (Phi-3 gate_up_proj)."""
    block_norms: int = 2
    """Norms per block: 1 (Phi-2, Falcon-7B's parallel block), 2, 4 (Gemma-2 sandwich norms), 7
    (Gemma 4's MoE block: three more around its experts); layout.BLOCK_NORMS names them."""
    qk_norm: str = "none"
    """Norms on queries and keys: 'none', 'head' (width head_dim: Qwen3) or 'full' (width of all
    heads: OLMo2)."""
    embed_norm: bool = False
    """A norm right after the token embedding (BLOOM word_embeddings_layernorm)."""
    pos_emb_rows: int = 0
    """Rows of the learned position table when not max_seq_len (OPT: max_position_embeddings
    + 2); 0 = max_seq_len (or seq_len)."""
    head_bias: bool = False
    """The LM head carries a bias (Phi-2)."""
    attn_output_gate: bool = False
    """q_proj also outputs a gate of q_dim that scales the attention output by its sigmoid
    before o_proj (Qwen3-Next's gated attention, modeling_qwen3_next.py Qwen3NextAttention:
    q_proj is 2 x q_dim wide)."""
    mla: MLA | None = None
    """Multi-head latent attention instead of q/k/v/o projections (DeepSeek-V2/V3)."""
    attention_tensors: AttentionTensors | None = None
    """The attention as transformers builds its tensors, in place of the projections the head
    fields above imply (profiles/hf_build.py reads it where those do not match); the scores run
    over n_heads heads of head_dim (Q K^T; MLA: qk_nope + qk_rope) and its v_head_dim (A V).
    None: q/k/v/o (or fused qkv, or mla)."""
    moe: MoE | None = None
    """Mixture-of-experts MLPs (Mixtral, Qwen-MoE, DeepSeek); None = dense."""
    attention_windows: tuple[int, ...] = ()
    """Keys one query of each block may attend, block by block, in tokens: the window of a
    sliding-window layer (Mistral/Phi-3/StarCoder2 `sliding_window`; the `sliding_attention`
    layers of Gemma 2/3, gpt-oss, Cohere2, OLMo 3, Qwen2 with `use_sliding_window`) or the chunk
    of a chunked one (Llama 4's `chunked_attention` layers, `attention_chunk_size`); 0 = full
    causal attention over the sequence; () = every block full. Read from a config.json as
    transformers decides it (profiles/hf_arch.py, profiles/hf_build.py); the score FLOPs take
    min(window, seq_len) keys per query (sim/flops.py)."""
    mixer: Mixer | None = None
    """A state-space / short-conv / linear-attention mixer in place of attention in Mixer.layers
    (Mamba, Jamba, Bamba, LFM2, Granite 4, Qwen3-Next), or beside it (Mixer.attention:
    Falcon-H1); None = attention in every block. With a mixer in every block and no MLP the
    attention and MLP fields (n_heads, ffn) are unused."""
    attention_only_layers: tuple[int, ...] = ()
    """Blocks that hold attention alone, no MLP (Nemotron-H's `*` blocks: modeling_nemotron_h.py
    `NemotronHBlock` holds one `mixer`, here NemotronHAttention, behind one norm)."""
    mlp_only_layers: tuple[int, ...] = ()
    """Blocks that hold an MLP or MoE alone, no attention (Nemotron-H's `-` and `E` blocks:
    NemotronHMLP, NemotronHMoE); dense or MoE as Model.moe says."""
    shared: Shared | None = None
    """Attention + MLP blocks that several depths reuse beside their mixer (Zamba2); None: none."""
    loops: tuple[Loop, ...] = ()
    """Sections of blocks one forward runs more than once (Dory, Inkling2-Loop, HRM: Loop), apart
    or nested; (): every block runs once (Model.forward_order)."""
    layer_attention: tuple[LayerAttention, ...] = ()
    """Blocks whose attention has another shape than the fields above say (Gemma 4's global
    layers: head_dim 512 beside the sliding layers' 256); each block's matrices, norms and
    score FLOPs follow its own shape (Model.shaped). (): every block has Model's."""
    per_layer_inputs: PerLayerInputs | None = None
    """Gemma 4's per-layer inputs: a second embedding table, its model-level projection and
    norm, and in every block a gate, a projection and a norm (PerLayerInputs); None: none."""
    cross_attention: bool = False
    """The attention attends cross_keys tokens of the vision tower, not the text (Llama 3.2
    Vision's gated cross-attention block, modeling_mllama.py MllamaCrossAttentionDecoderLayer
    lines 672-718: k/v project the vision states, lines 444-445; no causal mask); the block
    holds two tanh gates of one element each (cross_attn_attn_gate, cross_attn_mlp_gate, lines
    681 and 685). Set per block through LayerAttention (profiles/hf_cross.py)."""
    cross_keys: int = 0
    """Vision tokens per sample a cross-attention block attends (its k and v projections run on
    them); 0 without cross-attention."""
    hyper_connections: tuple[int, int] = ()
    """Qwen4-Exp's gated residuals (transformers 5.25.0 modeling_qwen4_exp.py
    Qwen4ExpTextGatedResidual, lines 1112-1140): (streams n = hc_count, rank r = hc_lowrank).
    The residual is n x hidden wide (Qwen4ExpTextModel.forward repeats the embedding n times,
    line 1584); before the attention and before the MLP (Qwen4ExpTextDecoderLayer lines
    1390-1391, 1409-1428) a gated residual normalises it (`hc_norm`, n x hidden, per stream),
    mixes the streams into the sublayer's input through a rank-r sigmoid gate
    (`input_mix_weight_down` n h -> r, `input_mix_weight_up` r -> n h) and weighs the
    sublayer's output into each stream (`block_inject_weight` n h -> n); those norms are the
    block's two (block_norms 2). The model's `hyper_connection_mixer` (line 1496, no inject)
    folds the streams back before the head in place of a final norm (line 1597). The GEMMs are
    timed (layout.hyper_connection_matrices); the n x hidden residual is not in the activation
    memory. (): none."""
    embed_tensors: tuple[tuple[str, int], ...] = ()
    """Tensors beside the token table, positions and embedding norm that a lookup (or no GEMM
    tierlab times) uses, as (transformers' name, numel), counted in the embedding module: BERT's
    token_type_embeddings (profiles/hf_bert.py names each). (): none."""
    head_transform: bool = False
    """A dense hidden -> head_width (hidden where 0) with bias, an activation and a norm of that
    width before the LM head (BERT's BertPredictionHeadTransform, transformers 5.25.0
    modeling_bert.py lines 470-484)."""
    final_norm: bool = True
    """A norm after the last block; False for post-LN blocks, which end in their own (BERT)."""
    embed_width: int = 0
    """Width of the token table, positions and embedding norm where it is not hidden, projected
    to hidden by a Linear with bias before the first block (ELECTRA's embedding_size:
    embeddings_project; RemBERT's input_embedding_size: embedding_hidden_mapping_in;
    profiles/hf_bert.py); 0: hidden, no projection."""
    head_width: int = 0
    """Width the LM head reads where it is not hidden, its transform projecting hidden to it
    (Model.head_transform; RemBERT's output_embedding_size, ELECTRA's embedding_size); 0: hidden."""
    unrun_matrices: tuple[tuple[str, int, int], ...] = ()
    """(name, in, out) of weights every block stores and trains but its forward never runs: the
    cross-attention of an encoder-decoder's decoder trained as a causal LM, with no encoder
    states (profiles/hf_encdec.py). Counted, partitioned, given gradients and optimizer state
    as the block's others (layer_matrices, layout.UNRUN_PREFIX names), never multiplied
    (layer_run_matrices) nor gathered by ZeRO-3 (sim/modules.py). (): none."""
    unrun_small_params: tuple[tuple[str, int], ...] = ()
    """(name, numel) of the other tensors of that kind (its biases, its norm)."""
    codebooks: int = 1
    """Token tables and LM heads, one of each per codebook (Musicgen's num_codebooks, transformers
    5.25.0 modeling_musicgen.py lines 425-428 and 640-642): the input embedding is the sum of
    the codebooks' lookups (line 508), each head produces logits over the codebook's vocab
    (line 727), the loss averages their cross-entropies (lines 744-749); profiles/hf_codebooks.py.
    1: one table and one head."""
    embed_rows: int = 0
    """Rows of each token table where they are not vocab (the head's rows): Musicgen's
    vocab_size + 1 (modeling_musicgen.py line 425); 0: vocab."""
    streams: int = 1
    """Copies of the sequence every block runs, concatenated along it (ProphetNet's main stream
    and its ngram predicting streams, transformers 5.25.0 modeling_prophetnet.py line 1195):
    every projection, MLP, norm and activation of a block runs on streams x seq_len tokens; the
    first (main) stream's queries score its own keys, each further stream's the main stream's
    and its own, 2 x the keys (lines 629 and 664: layout.stream_keys). 1: one stream."""
    head_streams: int = 1
    """Streams the LM head and the loss read, the last ones (ProphetNet: the ngram predicting
    streams, modeling_prophetnet.py lines 1771-1772; layout.logits_per_token); 1 to streams."""
    adapters: int = 0
    """Copies of adapter_matrices and adapter_small_params every block holds, one per language
    (Xmod's adapter_modules, transformers 5.25.0 modeling_xmod.py lines 427-429); a token runs
    its sample's language's alone, but every copy's module is called (on the tokens of its
    language, none for most: lines 451-455), so ZeRO-3 gathers each and each gets a gradient
    (zeros) and optimizer state. Counted and gathered as the block's others (layout.ADAPTER_PREFIX
    names), multiplied for 1 / adapters of the tokens each (sim/flops.run_gemms): one adapter a
    token (profiles/hf_xmod.py). 0: none."""
    adapter_matrices: tuple[tuple[str, int, int], ...] = ()
    """(name, in, out) of one language's adapter: Xmod's dense1 hidden -> hidden /
    adapter_reduction_factor, dense2 back (modeling_xmod.py lines 397-402)."""
    adapter_small_params: tuple[tuple[str, int], ...] = ()
    """(name, numel) of its other tensors (the two biases)."""
    not_modelled: tuple[str, ...] = ()
    """What a model transformers built holds that these fields leave out within the count check
    (profiles/hf_build.py fields_of, COUNT_TOLERANCE): parameters outside the layout, block
    children not read, layer differences counted as most blocks have them; named in `source`
    and in a note of every verb (scenario.py)."""
    source: str = ""

    def __post_init__(self) -> None:
        _positive(self, "n_layers", "hidden", "ffn", "n_heads", "n_kv_heads", "vocab", "seq_len",
                  "block_norms")
        if not self.attn_head_dim and self.mla is None and self.hidden % self.n_heads:
            raise ValueError(f"Model.hidden {self.hidden} is not divisible by n_heads {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"Model.n_heads {self.n_heads} is not divisible by n_kv_heads {self.n_kv_heads}")
        if self.norm not in ("rmsnorm", "layernorm", "nonparametric"):
            raise ValueError(f"Model.norm must be 'rmsnorm', 'layernorm' or 'nonparametric', "
                             f"got {self.norm!r}")
        if self.qk_norm not in ("none", "head", "full"):
            raise ValueError(f"Model.qk_norm must be 'none', 'head' or 'full', got {self.qk_norm!r}")
        if self.block_norms > len(BLOCK_NORMS):
            raise ValueError(f"Model.block_norms must be 1 to {len(BLOCK_NORMS)}, got "
                             f"{self.block_norms!r}")
        if self.embed_width < 0 or self.head_width < 0 or (self.head_width and
                                                          not self.head_transform):
            raise ValueError("Model.embed_width and Model.head_width must be >= 0, head_width "
                             "with a head_transform")
        if self.attn_head_dim < 0 or self.pos_emb_rows < 0:
            raise ValueError("Model.attn_head_dim and Model.pos_emb_rows must be >= 0")
        if isinstance(self.codebooks, bool) or not isinstance(self.codebooks, int) or \
                self.codebooks < 1 or self.embed_rows < 0 or \
                (self.codebooks > 1 and self.tie_embeddings):
            raise ValueError(f"Model.codebooks must be a whole number >= 1 (untied where > 1) "
                             f"and Model.embed_rows >= 0, got {self.codebooks!r}, "
                             f"{self.embed_rows!r}")
        if any(isinstance(v, bool) or not isinstance(v, int) for v in (self.streams,
                                                                      self.head_streams)) or \
                not 1 <= self.head_streams <= self.streams:
            raise ValueError(f"Model.streams and Model.head_streams must be whole numbers, "
                             f"1 <= head_streams <= streams, got {self.streams!r}, "
                             f"{self.head_streams!r}")
        if isinstance(self.adapters, bool) or not isinstance(self.adapters, int) or \
                self.adapters < 0 or bool(self.adapters) != bool(self.adapter_matrices):
            raise ValueError(f"Model.adapters must be a whole number >= 0, > 0 with "
                             f"adapter_matrices, got {self.adapters!r}")
        if self.attn_output_gate and (self.fused_qkv or self.mla is not None):
            raise ValueError("Model.attn_output_gate takes separate q/k/v projections (no "
                             "fused_qkv, no mla)")
        self._check_windows()
        if isinstance(self.mixer, Mapping):         # a Model read back from JSON
            object.__setattr__(self, "mixer", Mixer(**self.mixer))
        object.__setattr__(self, "not_modelled", tuple(self.not_modelled))     # JSON: a list
        for name in ("unrun_matrices", "unrun_small_params", "adapter_matrices",
                     "adapter_small_params"):
            object.__setattr__(self, name, _named(getattr(self, name)))
            if any(v <= 0 for t in getattr(self, name) for v in t[1:]):
                raise ValueError(f"Model.{name} must have positive sizes")
        object.__setattr__(self, "hyper_connections", tuple(self.hyper_connections))
        object.__setattr__(self, "embed_tensors", tuple(tuple(t) for t in self.embed_tensors))
        if self.hyper_connections and (len(self.hyper_connections) != 2 or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 1
                for v in self.hyper_connections) or self.block_norms != 2):
            raise ValueError(f"Model.hyper_connections must be (streams, rank), whole numbers "
                             f">= 1, with block_norms 2 (its gated residuals' norms), got "
                             f"{self.hyper_connections!r}")
        if isinstance(self.moe, Mapping):
            object.__setattr__(self, "moe", MoE(**dict(
                self.moe, dense_layers=tuple(self.moe.get("dense_layers", ())))))
        if isinstance(self.mla, Mapping):
            object.__setattr__(self, "mla", MLA(**self.mla))
        if isinstance(self.attention_tensors, Mapping):
            object.__setattr__(self, "attention_tensors",
                               AttentionTensors(**self.attention_tensors))
        if isinstance(self.per_layer_inputs, Mapping):
            object.__setattr__(self, "per_layer_inputs", PerLayerInputs(**self.per_layer_inputs))
        if self.mixer is not None and max(self.mixer.layers) >= self.n_layers:
            raise ValueError(f"Model.mixer.layers lists block {max(self.mixer.layers)}, the "
                             f"model has {self.n_layers}")
        self._check_parts()
        self._check_layer_attention()
        self._check_loops()
        if self.cross_keys < 0 or ((self.cross_attention or any(
                a.cross_attention for a in self.layer_attention)) and not self.cross_keys):
            raise ValueError(f"Model.cross_keys must be >= 1 with cross-attention blocks (0 "
                             f"without), got {self.cross_keys!r}")

    def _check_layer_attention(self) -> None:
        """layer_attention: LayerAttentions (Mappings read back from JSON) of blocks of the
        model, no block in two."""
        shapes = tuple(LayerAttention(**a) if isinstance(a, Mapping) else a
                       for a in self.layer_attention)
        object.__setattr__(self, "layer_attention", shapes)
        idx = [i for a in shapes for i in a.layers]
        if len(set(idx)) != len(idx) or any(i >= self.n_layers for i in idx):
            raise ValueError(f"Model.layer_attention must list distinct blocks 0 to "
                             f"{self.n_layers - 1}, got {idx!r}")

    def _check_loops(self) -> None:
        """loops: Loops (Mappings read back from JSON or a profile) of blocks of the model, apart
        or nested (profiles/loop_order.py check_loops)."""
        if not isinstance(self.loops, (tuple, list)):
            raise ValueError(f"Model.loops must be a list of loops, got {self.loops!r}")
        loops = tuple(Loop(**l) if isinstance(l, Mapping) else l for l in self.loops)
        if not all(isinstance(l, Loop) for l in loops):
            raise ValueError(f"Model.loops must be a list of loops, got {self.loops!r}")
        object.__setattr__(self, "loops", loops)
        loop_order.check_loops(self.n_layers, loops)

    def loop_of(self, layer: int) -> int:
        """Which of Model.loops holds block `layer` innermost (1, 2, ...), 0: none."""
        if not self.loops:
            return 0
        k = loop_order.innermost(self.loops, layer)
        return 0 if k is None else k + 1

    @cached_property
    def forward_order(self) -> tuple[tuple[int, bool], ...]:
        """(block, gradients) of every block run of one forward, in order: each block once
        without loops, a loop's section passes times over (profiles/loop_order.py)."""
        return loop_order.forward_order(self.n_layers, self.loops)

    @cached_property
    def _runs(self) -> tuple[tuple[int, int], ...]:
        """(forward runs, runs with gradients) of each block, from forward_order."""
        runs = [[0, 0] for _ in range(self.n_layers)]
        for i, grad in self.forward_order:
            runs[i][0] += 1
            runs[i][1] += grad
        return tuple(map(tuple, runs))

    def layer_runs(self, layer: int) -> tuple[int, int]:
        """(forward runs, runs with gradients) of block `layer` per forward: (1, 1) outside
        loops; each run costs the block's forward, those with gradients its recompute and
        backward too (Loop)."""
        return self._runs[layer] if self.loops else (1, 1)

    @property
    def block_runs(self) -> int:
        """Block runs of one forward (n_layers without loops)."""
        return len(self.forward_order) if self.loops else self.n_layers

    @property
    def grad_block_runs(self) -> int:
        """Block runs of one forward that carry gradients (n_layers without loops)."""
        return sum(g for _, g in self._runs) if self.loops else self.n_layers

    def matrix_runs(self, layer: int, name: str) -> int:
        """Forward runs of GEMM `name` (layout's) of block `layer`: its block's, but for a loop's
        `loop.` matrices, which skip the first pass of each entry (Loop.matrices)."""
        runs = self.layer_runs(layer)[0]
        if not name.startswith(LOOP_PREFIX):
            return runs
        k = self.loop_of(layer) - 1
        return runs - runs // self.loops[k].passes

    def _loop_matrices(self, layer: int) -> dict[str, tuple[int, int]]:
        """(in, out) of the matrices block `layer` holds for its loop's later passes."""
        k = self.loop_of(layer)
        return {f"{LOOP_PREFIX}{n}": (i, o) for n, i, o in self.loops[k - 1].matrices} if k \
            else {}

    def attention_shape(self, layer: int) -> int:
        """Which of layer_attention block `layer`'s attention has (1, 2, ...), 0: Model's."""
        return next((k + 1 for k, a in enumerate(self.layer_attention) if layer in a.layers), 0)

    @cached_property
    def _shapes(self) -> tuple["Model", ...]:
        """Model with each layer_attention's fields in place of its own (derived once)."""
        return tuple(replace(self, layer_attention=(), **a.fields())
                     for a in self.layer_attention)

    def shaped(self, layer: int) -> "Model":
        """The Model whose attention fields are block `layer`'s (itself where they are)."""
        k = self.attention_shape(layer) if self.layer_attention else 0
        return self._shapes[k - 1] if k else self

    def _check_parts(self) -> None:
        """attention_only_layers, mlp_only_layers and shared: blocks of the model, a single-part
        block neither a mixer block nor of the other part; a Shared read back from JSON."""
        if isinstance(self.shared, Mapping):
            object.__setattr__(self, "shared", Shared(**self.shared))
        parts = {}
        for name in ("attention_only_layers", "mlp_only_layers"):
            idx = tuple(getattr(self, name))
            object.__setattr__(self, name, idx)
            if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.n_layers
                   for i in idx):
                raise ValueError(f"Model.{name} must list blocks 0 to {self.n_layers - 1}, got "
                                 f"{idx!r}")
            parts[name] = set(idx)
        mixed = set(self.mixer.layers) if self.mixer is not None else set()
        if parts["attention_only_layers"] & parts["mlp_only_layers"] or \
                mixed & (parts["attention_only_layers"] | parts["mlp_only_layers"]):
            raise ValueError("Model.attention_only_layers, mlp_only_layers and mixer.layers must "
                             "not share a block")
        if self.shared is not None and max(self.shared.layers) >= self.n_layers:
            raise ValueError(f"Model.shared.layers lists block {max(self.shared.layers)}, the "
                             f"model has {self.n_layers}")

    def _check_windows(self) -> None:
        """attention_windows: () or one whole number per block, 0 (full) or a window within
        bounds.ATTENTION_WINDOW; a list (a Model read back from JSON) is kept as a tuple."""
        windows = self.attention_windows
        if not isinstance(windows, (tuple, list)):
            raise ValueError(f"Model.attention_windows must be a list of whole numbers, got "
                             f"{windows!r}")
        object.__setattr__(self, "attention_windows", tuple(windows))
        if windows and len(windows) != self.n_layers:
            raise ValueError(f"Model.attention_windows lists {len(windows)} blocks, the model has "
                             f"{self.n_layers}")
        for w in windows:
            if isinstance(w, bool) or not isinstance(w, int) or \
                    not (w == 0 or ATTENTION_WINDOW.low <= w <= ATTENTION_WINDOW.high):
                raise ValueError(f"Model.attention_windows: {w!r} is not 0 (full) or a window of "
                                 f"1 to {ATTENTION_WINDOW.high:,} tokens")

    @property
    def head_dim(self) -> int:
        return self.attn_head_dim or self.hidden // self.n_heads

    @property
    def q_dim(self) -> int:
        """Width of all query heads together (== hidden unless head_dim is set apart)."""
        return self.head_dim * self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.head_dim * self.n_kv_heads

    def is_moe_layer(self, layer: int) -> bool:
        return self.moe is not None and layer not in self.moe.dense_layers and \
            (self.mixer is None or self.mixer.mlp or layer not in self.mixer.layers) and \
            layer not in self.attention_only_layers

    def is_mixer_layer(self, layer: int) -> bool:
        return self.mixer is not None and layer in self.mixer.layers

    def block_part(self, layer: int) -> str:
        """BlockKind.part of block `layer`: 'attention' or 'mlp' (a single-part block),
        'shared-owner' or 'shared-use' (a use of a shared block), '' otherwise."""
        if layer in self.attention_only_layers:
            return "attention"
        if layer in self.mlp_only_layers:
            return "mlp"
        if self.shared is not None and layer in self.shared.layers:
            return "shared-owner" if self.shared.owner(layer) else "shared-use"
        return ""

    def layer_kind(self, layer: int) -> tuple[bool, bool]:
        """(MoE block, mixer block): the blocks of one kind are built alike and run alike (a
        BlockKind, which also tells single-part blocks, shared-block uses and the blocks of
        each loop apart)."""
        part, shape = self.block_part(layer), self.attention_shape(layer)
        moe, mixer, loop = self.is_moe_layer(layer), self.is_mixer_layer(layer), \
            self.loop_of(layer)
        return BlockKind(moe, mixer, part, shape, loop) if part or shape or loop else (moe, mixer)

    def layer_groups(self) -> tuple[tuple[int, int], ...]:
        """(a representative layer, how many layers are built like it): one group for a dense
        model, dense and MoE groups for DeepSeek/Qwen-MoE, x attention and mixer for Jamba."""
        return self._layer_groups

    @cached_property
    def _layer_groups(self) -> tuple[tuple[int, int], ...]:
        """layer_groups, worked out once per (frozen) Model: every simulated step asks for it."""
        groups: dict[tuple, list[int]] = {}
        for i in range(self.n_layers):
            groups.setdefault(self.layer_kind(i), []).append(i)
        return tuple((idx[0], len(idx)) for idx in groups.values())

    def layer_matrices(self, layer: int = 0) -> dict[str, tuple[int, int]]:
        """(in, out) of each weight matrix of transformer block `layer` (experts included; a
        shared block's weights in its first use, the owner)."""
        mats = block_matrices(self.shaped(layer), self.is_moe_layer(layer),
                              self.is_mixer_layer(layer))
        return {**self._part_of(layer, mats, dict(self._shared_matrices(layer, owned=True))),
                **self._loop_matrices(layer),
                **{f"{UNRUN_PREFIX}{n}": (i, o) for n, i, o in self.unrun_matrices},
                **self._adapters({n: (i, o) for n, i, o in self.adapter_matrices})}

    def layer_small_params(self, layer: int = 0) -> dict[str, int]:
        """Parameters of block `layer` that are not matrices: norms and biases."""
        small = block_small_params(self.shaped(layer), self.is_moe_layer(layer),
                                   self.is_mixer_layer(layer))
        shared = {f"shared.{n}": k for n, k in self.shared.small_params} \
            if self.block_part(layer) == "shared-owner" else {}
        return {**self._part_of(layer, small, shared),
                **{f"{UNRUN_PREFIX}{n}": k for n, k in self.unrun_small_params},
                **self._adapters(dict(self.adapter_small_params))}

    def _adapters(self, tensors: dict) -> dict:
        """`tensors` of one language's adapter, once per language (Model.adapters), named
        `adapters.<language>.<name>`."""
        return {f"{ADAPTER_PREFIX}{a}.{n}": v for a in range(self.adapters)
                for n, v in tensors.items()}

    def layer_run_matrices(self, layer: int = 0) -> dict[str, tuple[int, int]]:
        """(in, out) of each matrix block `layer` multiplies in its forward: its own, and the
        weights of the shared block it runs (at every use, owned or not: Zamba2)."""
        mats = block_matrices(self.shaped(layer), self.is_moe_layer(layer),
                              self.is_mixer_layer(layer))
        return {**self._part_of(layer, mats, dict(self._shared_matrices(layer, owned=False))),
                **self._loop_matrices(layer),
                **self._adapters({n: (i, o) for n, i, o in self.adapter_matrices})}

    def _shared_matrices(self, layer: int, owned: bool):
        """(name, (in, out)) of a shared-block use's own matrices, then the shared block's
        weights where block `layer` owns them (`owned`) or, with owned False, wherever it runs
        them."""
        part = self.block_part(layer)
        if not part.startswith("shared"):
            return
        yield from ((f"shared.use.{n}", (i, o)) for n, i, o in self.shared.use_matrices)
        if part == "shared-owner" or not owned:
            yield from ((f"shared.{n}", (i, o)) for n, i, o in self.shared.matrices)

    def _part_of(self, layer: int, tensors: dict, shared: dict) -> dict:
        """A block's tensors (layout's full block) cut to its one part (a single-part block:
        the attention's or the MLP's, and its norm), or with a shared-block use's added."""
        part = self.block_part(layer)
        if part not in ("attention", "mlp"):
            return {**tensors, **shared}
        attention = set(attention_matrices(self.shaped(layer)))
        return {k: v for k, v in tensors.items() if _block_norm(k) or
                _attention_side(k, attention) == (part == "attention")}

    def layer_params(self, layer: int = 0) -> int:
        mats = sum(i * o for i, o in self.layer_matrices(layer).values())
        return mats + sum(self.layer_small_params(layer).values())

    @property
    def params_per_layer(self) -> int:
        """Parameters of the largest block (every block, for a dense model)."""
        return max(self.layer_params(rep) for rep, _ in self.layer_groups())

    @property
    def embedding_params(self) -> int:
        """Token embedding (+ learned positions, embedding norm) + final norm + untied LM head."""
        head = head_params(self)
        if self.tie_embeddings:
            head.pop("lm_head")
        return sum(embed_params(self).values()) + sum(head.values())

    @cached_property
    def n_params(self) -> int:
        """Every parameter (worked out once per Model: the walk over the layers is ~20 us and a
        sweep point's memory plan reads it several times)."""
        blocks = sum(n * self.layer_params(rep) for rep, n in self.layer_groups())
        return blocks + self.embedding_params

    @property
    def active_params(self) -> int:
        """Parameters one token uses: routed experts, matrices and biases, counted top-k of n
        (= n_params if dense; gpt-oss-120b: 5.13e9 besides its 0.58e9 embedding, as the gpt-oss
        model card, arXiv:2508.10925 table 1, gives it)."""
        attention = self._idle_attention_experts()
        if self.moe is None:
            return self.n_params - attention
        m = self.moe
        idle = 1.0 - m.token_share     # (n - k) / n; LongCat: 1 - k / (n + zero)
        first = self._first_moe()
        expert = sum(i * o for name, (i, o) in self.layer_matrices(first).items()
                     if name.startswith("experts."))
        expert += sum(n for name, n in self.layer_small_params(first).items()
                      if name.startswith("experts."))
        moe_layers = sum(n for rep, n in self.layer_groups() if self.is_moe_layer(rep))
        return int(round(self.n_params - moe_layers * idle * expert)) - attention

    def _idle_attention_experts(self) -> int:
        """Attention-expert parameters one token does not use, over the blocks that hold them
        (AttentionTensors.idle_expert_params: JetMoE's MoA, top-k of n); 0 for every other
        attention."""
        idle = 0
        for rep, n in self.layer_groups():
            t = self.shaped(rep).attention_tensors
            if t is not None and t.expert_matrices and any(
                    k.startswith(ATTENTION_TENSORS_PREFIX) for k in self.layer_matrices(rep)):
                idle += n * t.idle_expert_params()
        return idle

    def _first_moe(self) -> int:
        return next(rep for rep, _ in self.layer_groups() if self.is_moe_layer(rep))


@dataclass(frozen=True, kw_only=True)
class Software:
    """What a DeepSpeed/PyTorch version costs beyond the hardware's rates: host-side overheads
    that no microbenchmark isolates, fitted on a named training subset of measured runs
    (profiles/software/*.yaml; the held-out runs are reported separately by `tierlab validate`)."""

    name: str
    zero3_hook_s_per_module: float
    """Host seconds per use of one parameter-holding submodule under ZeRO-3: the pre/post
    forward hooks (`fetch_sub_module`, `release_sub_module`), the per-param `.to(cuda)` of an
    offloaded partition and the all-gather bookkeeping (partitioned_param_coordinator.py)."""
    first_step_fixed_s: float
    """Step-1 warm-up independent of the model states: CUDA/cuBLAS handle and kernel warm-up,
    caching-allocator growth (cudaMalloc), first NCCL/launch paths."""
    first_touch_Bps: float
    """Rate at which the first step creates DeepSpeedCPUAdam's lazily allocated m, v
    (torch.zeros_like on the CPU: page faults + zeroing of 8 B/param)."""
    process_baseline_bytes: float
    """Host RSS of one training process besides model states (Python, torch, DeepSpeed, CUDA)."""
    host_dispatch_s_per_module: float = 0.0
    """Host seconds per use (forward, recompute, backward) of one parameter-holding submodule
    under every ZeRO stage: eager PyTorch/HF launches each submodule's kernels from Python, the
    GPU runs asynchronously, so a pass takes max(GPU work, host dispatch). ZeRO-3's hooks
    (zero3_hook_s_per_module) come on top."""
    offload_grad_s_per_param: float = 0.0
    """Host seconds per parameter of ZeRO-1/2 with offload_optimizer at the accumulation
    boundary: stage_1_and_2.py `copy_grads_in_partition` runs per parameter the norm, the
    overflow check (`update_offload_overflow_tracker`: truthiness of a device tensor, a host
    sync) and the fp32 `.to()` + non_blocking D2H; the sync keeps the host from running ahead."""
    stage0_step_s_per_param: float = 0.0
    """Host seconds per parameter tensor of the optimizer step without ZeRO partitioning (stage 0,
    fp16/bf16: engine.py picks FP16_Optimizer, fp16/fused_optimizer.py, whose step walks the
    parameters in Python: per-tensor fp32 gradient copies, the norm, the copy-back)."""
    multi_rank_sync_s: float = 0.0
    """Host seconds per optimizer step with 2+ data-parallel ranks before the step proper: the
    step's first collective (the gradient-norm all-reduce, stage3.py `_get_norm_groups` /
    stage_1_and_2.py `get_grad_norm`) waits for the slowest rank, whose host-bound forward and
    backward jitter from step to step (a mean straggler wait; the rank count it was fitted at is
    in its source)."""
    host_dispatch_bwd_s_per_module: float | None = None
    """Host seconds per backward use of one parameter-holding submodule (autograd + hooks of
    stage 0/1/2); None: host_dispatch_s_per_module. Measured by `tierlab calibrate`
    (runner/calibrate_ds.py, stage 0)."""
    zero3_hook_bwd_s_per_module: float | None = None
    """ZeRO-3's extra host seconds per backward use, parameters on the GPU (pre/post backward
    hooks, gradient partitioning bookkeeping); None: zero3_hook_s_per_module."""
    zero3_offload_hook_s_per_module: float | None = None
    """ZeRO-3's extra host seconds per forward/recompute use with parameters offloaded (the
    per-parameter `.to(cuda)` of the CPU partition, partition_parameters.py `_all_gather`);
    None: zero3_hook_s_per_module."""
    zero3_offload_hook_bwd_s_per_module: float | None = None
    """ZeRO-3's extra host seconds per backward use with the optimizer offloaded (stage3.py
    `partition_grads`: the 16-bit gradient partition copied to the CPU each micro-step);
    None: zero3_hook_bwd_s_per_module."""
    zero3_pageable_bwd_s_per_module: float = 0.0
    """Extra host seconds per backward use of ZeRO-3 when offload_optimizer.pin_memory is false:
    `partition_grads`' copy into pageable memory is synchronous (torch copy_ to unpinned memory
    waits for the stream), so the Python thread stalls per gradient."""
    offload_accum_s_per_param: float | None = None
    """ZeRO-1/2 with offload_optimizer, per parameter tensor and micro-step that is not the last
    of its optimizer step: stage_1_and_2.py `async_accumulate_grad_in_cpu_via_gpu` (CPU
    accumulator -> GPU, add, -> CPU). None: offload_grad_s_per_param."""
    offload_step_s_per_param: float = 0.0
    """Host seconds per parameter tensor of the optimizer step with offload_optimizer, beyond
    CPU Adam and the copies the engine models: the norm, unscale/clip, per-tensor views of the
    flat fp32 partition and the 16-bit copy-back bookkeeping (stage3.py `step`,
    stage_1_and_2.py `step`)."""
    offload_step_pageable_s_per_param: float | None = None
    """The same with offload_optimizer.pin_memory false; None: offload_step_s_per_param."""
    zero3_step_s_per_param: float = 0.0
    """Host seconds per parameter tensor of ZeRO-3's optimizer step without offload_optimizer,
    beyond the GPU Adam the engine models (stage3.py `step`: per sub-group norm, unscale/clip and
    the 16-bit partition update, then `_post_step` per parameter). Measured by `tierlab calibrate`
    (runner/calibrate_ds.py, variant zero3)."""
    zero12_step_s_per_param: float = 0.0
    """The same for ZeRO-1/2 without offload_optimizer (stage_1_and_2.py `step`:
    `get_grad_norm_direct` launches a norm per gradient tensor, `free_grad_in_param_list`, the
    fp32 partition's unscale/clip, then the 16-bit copy-back). Measured by `tierlab calibrate`
    (variant zero2)."""
    zero12_hook_bwd_s_per_module: float = 0.0
    """Host seconds per backward use of a parameter-holding submodule under ZeRO-1/2 without
    offload_optimizer, beyond kernel dispatch: the gradient hook's
    `reduce_independent_p_g_buckets_and_remove_grads` (stage_1_and_2.py: bucket bookkeeping, the
    copy into the contiguous IPG bucket, stream/event records) and, per full bucket,
    `reduce_ipg_grads`/`average_tensor`'s per-parameter walk. It runs on the autograd thread, so it
    delays the dispatch of the rest of backward. (ZeRO-1 without overlap_comm runs the same walk
    after backward, in `reduce_gradients`.) Measured by `tierlab calibrate` (variant zero2,
    backward)."""
    checkpoint_s_per_block: float = 0.0
    """Host seconds activation checkpointing adds to each block's forward: Hugging Face gradient
    checkpointing wraps the block in torch.utils.checkpoint (non-reentrant: saved-tensor hooks,
    RNG state stash) on the Python thread. Measured by `tierlab calibrate`'s `layer` benchmark
    (checkpointed minus plain forward of host-bound layers); 0 where a fitted dispatch term was
    fitted on checkpointed runs and carries it."""
    checkpoint_bwd_s_per_block: float = 0.0
    """Host seconds activation checkpointing adds to each block's backward beyond re-running its
    forward: torch.utils.checkpoint's non-reentrant recompute (`_checkpoint_hook`: the
    saved-tensor unpack hook of every tensor the block saved, the recomputation under its own
    pack hooks, `_recomputation_hook`) runs Python on the autograd thread before the block's
    backward kernels launch. Measured by `tierlab calibrate`'s `layer` benchmark (checkpointed
    backward minus plain backward minus plain forward of host-bound layers); 0 where not
    measured."""
    checkpoint_carried_s_per_block: float = 0.0
    """Host seconds of the checkpoint wrapper per block forward that the fitted
    `host_dispatch_s_per_module` carries: it was fitted on checkpointed runs with
    checkpoint_s_per_block at 0, so a block's forward **without** activation checkpointing is
    charged this much less (sim/host_costs.checkpoint_carried_s). 0 where the host measured its
    own dispatch (runner/calibrate_ds.py trains its narrow models without checkpointing). The
    shipped profile leaves it at 0: docs/calibration.md, "The checkpoint wrapper the dispatch term
    carries", says what 0.762 ms (the lab's layer-benchmark median) did to which runs."""
    overflow_scan_s_per_element: float = 0.0
    """Host seconds per gradient element of ZeRO-3's fp16 overflow check with the optimizer
    offloaded: stage3.py `has_overflow` (0.19.8 lines 3009-3027) runs `torch.isinf(buf).any()`
    and `torch.isnan(buf).any()` over the rank's flat fp32 gradient partition in host memory
    (`grad_partitions_flat_buffer`) on the optimizer's thread before the step; bf16 and fp32
    skip it (`_overflow_check_and_loss_scale_update`). Measured by `tierlab calibrate`'s
    `overflow` benchmark (the same two torch calls on a host buffer)."""
    fit_adam_params_per_s: float | None = None
    """The CPU Adam rate (CPU.adam_params_per_s) of the machines the fitted host terms were
    fitted on (the median of their calibrations): a host's own measured rate is compared with it
    (sim/host_costs.host_speed_factor). None: the fitted terms are not scaled."""
    host_speed_share: float = 0.0
    """Share of each fitted host term (host_dispatch, zero3_hook, offload_grad_copy,
    stage0_step) that follows the host's speed: on a host whose measured CPU Adam rate is the fit
    machines' divided by r, the term costs (1 + share x (r - 1)) times its value, the rest
    (copies, synchronisations, waits) staying as fitted. Chosen on lab machines' runs
    (lab/scripts/bench_host_scale.py); 0: off."""
    host_speed: float = 1.0
    """The factor sim/host_costs.with_host_costs has applied to the fitted host terms for the
    hardware it was given (1: none); not a profile key."""
    train_cases: tuple[str, ...] = ()
    """Measured cases the fitted terms were fitted on; all others are held out."""
    sources: Mapping[str, str] = field(default_factory=dict)
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """Field -> (low, high) in the field's SI unit: the value's central 80% interval (given in
    the profile or derived from its source kind, profiles/ranges.py)."""

    def __post_init__(self) -> None:
        _positive(self, "first_touch_Bps", "process_baseline_bytes", "host_speed")
        if self.fit_adam_params_per_s is not None:
            _positive(self, "fit_adam_params_per_s")
        if not 0.0 <= self.host_speed_share <= 1.0:
            raise ValueError(f"Software.host_speed_share must be within 0-1, got "
                             f"{self.host_speed_share!r}")
        for name in (t.field for t in SOFTWARE_TERMS if t.dimension == "seconds"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ValueError(f"Software.{name} must be >= 0, got {getattr(self, name)!r}")
