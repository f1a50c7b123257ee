"""Typed hardware and model profiles. SI units inside, the unit in every field name.

Conversions from the YAML files ("80 GB", "2039 GB/s", "312 TFLOP/s", "10 us") happen once, in
`profiles/load.py`. Every number carries its provenance in `sources` (field name -> source text).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


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
    """Dense peak FLOP/s by dtype: keys among 'fp32', 'tf32', 'fp16', 'bf16'."""
    matmul_efficiency: tuple[tuple[float, float], ...]
    """Achieved/peak for a GEMM as a function of its FLOP count: ((flops, efficiency), ...) sorted
    by flops, interpolated in log(flops) and clamped at both ends."""
    nvlink_bandwidth_Bps: float = 0.0
    """Per-GPU, per-direction GPU-to-GPU bandwidth (NVLink/NVSwitch); 0 = none, PCIe peer traffic."""
    cuda_context_bytes: float
    """Memory taken by the CUDA context, cuBLAS/NCCL workspaces before any tensor is allocated."""
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _positive(self, "hbm_bytes", "hbm_bandwidth_Bps", "cuda_context_bytes")
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
    module_call_s: float | None = None
    """Host seconds of one forward call of a small hooked nn.Module on the GPU (Python + hook +
    torch dispatch + kernel launch, autograd on), measured by `tierlab calibrate`. A recorded
    fact, not a model input: on five H200 machines it did not track how fast they ran the same
    training step (validate/cases/README.md), so the fitted host terms are not scaled by it."""
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _positive(self, "sockets", "cores", "dram_bandwidth_Bps", "adam_params_per_s")
        if self.module_call_s is not None:
            _positive(self, "module_call_s")


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
class Model:
    """A decoder-only transformer (Llama / GPT family)."""

    name: str
    n_layers: int
    hidden: int
    ffn: int
    """Intermediate size of the MLP."""
    n_heads: int
    n_kv_heads: int
    """Key/value heads (GQA); == n_heads for multi-head attention."""
    vocab: int
    seq_len: int
    """Sequence length of a training sample (defaults to the profile's context length)."""
    gated_mlp: bool = True
    """SwiGLU-style MLP with three matrices (Llama) instead of two (GPT)."""
    tie_embeddings: bool = False
    norm: str = "rmsnorm"
    """'rmsnorm' (weight only) or 'layernorm' (weight and bias)."""
    bias: bool = False
    """Linear layers carry biases (GPT-2/3)."""
    learned_pos_emb: bool = False
    """A learned position embedding table of seq_len x hidden (GPT) instead of RoPE."""
    max_seq_len: int = 0
    """Context length of the architecture (0 = same as seq_len)."""
    source: str = ""

    def __post_init__(self) -> None:
        _positive(self, "n_layers", "hidden", "ffn", "n_heads", "n_kv_heads", "vocab", "seq_len")
        if self.hidden % self.n_heads:
            raise ValueError(f"Model.hidden {self.hidden} is not divisible by n_heads {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"Model.n_heads {self.n_heads} is not divisible by n_kv_heads {self.n_kv_heads}")
        if self.norm not in ("rmsnorm", "layernorm"):
            raise ValueError(f"Model.norm must be 'rmsnorm' or 'layernorm', got {self.norm!r}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.head_dim * self.n_kv_heads

    def layer_matrices(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each weight matrix of one transformer block."""
        h, f, kv = self.hidden, self.ffn, self.kv_dim
        mats = {"q_proj": (h, h), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (h, h),
                "up_proj": (h, f), "down_proj": (f, h)}
        if self.gated_mlp:
            mats["gate_proj"] = (h, f)
        return mats

    def layer_small_params(self) -> dict[str, int]:
        """Parameters of one block that are not matrices: norms and biases."""
        per_norm = self.hidden * (2 if self.norm == "layernorm" else 1)
        small = {"input_norm": per_norm, "post_attention_norm": per_norm}
        if self.bias:
            for name, (_, n_out) in self.layer_matrices().items():
                small[f"{name}.bias"] = n_out
        return small

    @property
    def params_per_layer(self) -> int:
        mats = sum(i * o for i, o in self.layer_matrices().values())
        return mats + sum(self.layer_small_params().values())

    @property
    def embedding_params(self) -> int:
        """Token embedding (+ learned positions) + final norm + untied LM head."""
        emb = self.vocab * self.hidden
        pos = (self.max_seq_len or self.seq_len) * self.hidden if self.learned_pos_emb else 0
        final_norm = self.hidden * (2 if self.norm == "layernorm" else 1)
        head = 0 if self.tie_embeddings else self.vocab * self.hidden
        return emb + pos + final_norm + head

    @property
    def n_params(self) -> int:
        return self.n_layers * self.params_per_layer + self.embedding_params


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
    train_cases: tuple[str, ...] = ()
    """Measured cases the fitted terms were fitted on; all others are held out."""
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _positive(self, "first_touch_Bps", "process_baseline_bytes")
        for name in ("zero3_hook_s_per_module", "first_step_fixed_s",
                     "host_dispatch_s_per_module", "offload_grad_s_per_param",
                     "stage0_step_s_per_param", "multi_rank_sync_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"Software.{name} must be >= 0, got {getattr(self, name)!r}")
