"""Per-tier memory planner: where every byte of a DeepSpeed ZeRO run lives.

Tiers: "gpu" (per rank), "host" (per node: pinned + pageable), "nvme" (per node).
Model-state accounting follows DeepSpeed 0.19.8's own estimators
(`estimate_zero2_model_states_mem_needs`, `estimate_zero3_model_states_mem_needs`):
mixed precision keeps per parameter 2 B 16-bit params + 2 B 16-bit grads + 4 B fp32 grads +
4 B fp32 master + 8 B Adam m, v = 18 B, of which the classic back-of-envelope "16 B/param" omits
the fp32 gradient copy. On top of the estimators tierlab adds what they leave out: activations,
buckets, prefetch working set, swap buffers, the CUDA context and allocator slack.

GPU peak = what stays for the whole step (`gpu_persistent`) + the largest of the moments that
come and go (`gpu_moments`: loss backward, block backward, stage-0 optimizer step), not the sum of
everything. Host: torch-pinned buffers are power-of-two blocks (CachingHostAllocator), buffers
DeepSpeed's aio handle locks are exact; zero.Init leaves its freed pinned partitions cached.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from tierlab.profiles.schema import Hardware, Model, Software
from tierlab.sim.strategy import Strategy

# Allocator slack: PyTorch's caching allocator rounds blocks and fragments; reserved exceeds
# allocated by ~5-10% in steady training (PyTorch CUDA memory docs; estimate, to be validated).
ALLOCATOR_SLACK = 0.07
# Host RSS of one training process before model states: Python + torch + DeepSpeed + CUDA host
# side (estimate, ~2.5 GB per rank for a CUDA build; to be validated against measured runs).
PROCESS_BASELINE_BYTES = 2.5e9
# DeepSpeed's aio tensors smaller than max(1 MiB, block_size) are not swapped (swap_tensor/utils.py)
MIN_AIO_BYTES = 1 << 20
# aio read/write alignment per intra-op thread (swap_tensor/utils.py AIO_ALIGNED_BYTES)
AIO_ALIGNED_BYTES = 1024


@dataclass(frozen=True, kw_only=True)
class TierUsage:
    """Bytes one tier holds at peak, with what they are."""

    tier: str
    """'gpu' (per rank), 'host' (per node) or 'nvme' (per node)."""
    used_bytes: float
    capacity_bytes: float
    breakdown: Mapping[str, float] = field(default_factory=dict)
    """Item -> bytes; host items are prefixed 'pinned:' or 'pageable:'."""

    @property
    def fits(self) -> bool:
        return self.used_bytes <= self.capacity_bytes

    @property
    def utilisation(self) -> float:
        if not self.capacity_bytes:   # a tier the box lacks: unused is fine, any use is not
            return float("inf") if self.used_bytes else 0.0
        return self.used_bytes / self.capacity_bytes

    def part(self, prefix: str) -> float:
        return sum(v for k, v in self.breakdown.items() if k.startswith(prefix))

    def to_dict(self) -> dict:
        return {"used_bytes": self.used_bytes, "capacity_bytes": self.capacity_bytes,
                "fits": self.fits, "breakdown": dict(self.breakdown)}


@dataclass(frozen=True, kw_only=True)
class MemoryPlan:
    tiers: Mapping[str, TierUsage]
    model_states: Mapping[str, float]
    """Whole-model bytes (all ranks together) of each model state, for the classic arithmetic."""
    n_params: int

    @property
    def fits(self) -> bool:
        return all(t.fits for t in self.tiers.values())

    @property
    def binding_tier(self) -> str | None:
        """The first tier that does not fit; if all fit, the most utilised one."""
        over = [t for t in self.tiers.values() if not t.fits]
        pool = over or list(self.tiers.values())
        return max(pool, key=lambda t: t.utilisation).tier if pool else None

    def to_dict(self) -> dict:
        states = dict(self.model_states)
        return {"n_params": self.n_params, "fits": self.fits, "binding_tier": self.binding_tier,
                "tiers": {name: t.to_dict() for name, t in self.tiers.items()},
                "model_states": {**states, "total_bytes": sum(states.values()),
                                 "bytes_per_param": sum(states.values()) / self.n_params}}


# ----------------------------------------------------------------------------------------------
# model states

def model_state_bytes(model: Model, strategy: Strategy) -> dict[str, float]:
    """Whole-model bytes by state. Mixed precision: 2 + 2 + 4 + 4 + 4 = 16 B/param (+4 B fp32 grads
    that DeepSpeed's optimizer also keeps: see `fp32_grads`). fp32 training: 4 + 4 + 4 + 4."""
    n = model.n_params
    if strategy.precision == "fp32":
        # 70B x (4 params + 4 grads + 8 m,v) = 1.12 TB
        return {"params": 4.0 * n, "grads": 4.0 * n, "adam_m": 4.0 * n, "adam_v": 4.0 * n}
    # 70B: 140 GB params + 140 GB grads + 560 GB (m, v) = 840 GB; + 280 GB fp32 master = 1.12 TB
    return {"params_16bit": 2.0 * n, "grads_16bit": 2.0 * n, "adam_m": 4.0 * n,
            "adam_v": 4.0 * n, "master_fp32": 4.0 * n}


def largest_module_params(model: Model) -> int:
    """Largest single module ZeRO-3 gathers at once: a transformer block or the embedding/head."""
    return max(model.params_per_layer, model.vocab * model.hidden)


def persistent_params(model: Model, strategy: Strategy) -> int:
    """ZeRO-3 keeps parameters under stage3_param_persistence_threshold whole on every GPU."""
    t = strategy.zero.stage3_param_persistence_threshold
    small = [v for v in model.layer_small_params().values() if v < t]
    small += [i * o for i, o in model.layer_matrices().values() if i * o < t]
    final_norm = model.hidden * (2 if model.norm == "layernorm" else 1)
    return model.n_layers * sum(small) + (final_norm if final_norm < t else 0)


def sub_group_numel(model: Model, strategy: Strategy) -> int:
    """Elements of the largest optimizer sub-group of one rank's partition."""
    partition = model.n_params / strategy.data_parallel_size
    return int(min(strategy.zero.sub_group_size, partition)) if strategy.zero.sub_group_size else int(partition)


# ----------------------------------------------------------------------------------------------
# activations

def activation_bytes_per_token_layer(model: Model, strategy: Strategy) -> float:
    """Bytes autograd keeps per token per transformer block (HF Llama, SDPA attention, no s^2
    scores). Counted tensor by tensor, 16-bit unless noted:
    RMSNorm input upcast to fp32 (4h) + normed (2h), q/k/v (2(h + 2 kv)), attention out (2h),
    second norm fp32 input (4h) + normed (2h), MLP gate, up, act, product (4 x 2 ffn)."""
    b = strategy.bytes_per_param
    h, f, kv = model.hidden, model.ffn, model.kv_dim
    mlp = (4 if model.gated_mlp else 2) * f
    norm_input = 4 if model.norm == "rmsnorm" else b
    return (2 * norm_input * h + b * (2 * h + (h + 2 * kv) + h + mlp)
            + (b * f if not model.gated_mlp else 0))   # GELU keeps its input too


def activation_bytes(model: Model, strategy: Strategy) -> dict[str, float]:
    """Activation bytes of one micro-batch on one GPU held through the backward, by item."""
    tokens = strategy.train_micro_batch_size_per_gpu * model.seq_len
    b = strategy.bytes_per_param
    per_layer = activation_bytes_per_token_layer(model, strategy) * tokens
    if strategy.activation_checkpointing:
        # each block's input is kept (b x h per token); one block is recomputed at a time
        return {"checkpointed_inputs": float(model.n_layers * b * model.hidden * tokens),
                "recompute_block": per_layer}
    return {"layer_activations": per_layer * model.n_layers}


def logits_loss_bytes(model: Model, strategy: Strategy) -> float:
    """Peak bytes of the LM head's logits and loss (HF LlamaForCausalLM + ForCausalLMLoss).

    transformers loss_utils.py ForCausalLMLoss: `logits.float()` then cross_entropy =
    log_softmax (fp32 result, saved) + nll_loss. Forward end: 16-bit logits + fp32 copy + fp32
    log-probs = 10 B/element. Loss backward (the peak): NllLossBackward's dense fp32 grad +
    the saved log-probs + LogSoftmaxBackward's fp32 grad input = 12 B/element; by then the
    16-bit logits are gone (the runner keeps only `.loss`; ToCopyBackward saves nothing).
    Llama-0.5B, 4 x 1024 tokens x 151,936 vocab x 12 B = 7.47 GB."""
    tokens = strategy.train_micro_batch_size_per_gpu * model.seq_len
    return float(tokens * model.vocab * 12)


def gathered_numel(model: Model, strategy: Strategy) -> float:
    """Elements ZeRO-3 holds all-gathered on the GPU at the end of the forward.

    Reuse distance >= a module (default 1e9): partitioned_param_coordinator.py
    `__params_to_release` keeps what is reused soon and `fetch_sub_module` prefetches up to
    min(max_live - n_available, prefetch_bucket) per call, so the gathered set fills up to
    stage3_max_live_parameters (TinyLlama: min(1e9, 1.1e9) x 2 B = 2.0 GB). With
    stage3_max_reuse_distance below a module (e.g. 0) every module is released after use: the
    largest module plus one prefetch bucket (Llama-0.5B: 136 M + 50 M elements)."""
    z = strategy.zero
    fetched = model.n_params - persistent_params(model, strategy)
    largest = largest_module_params(model)
    if z.stage3_max_reuse_distance < largest:
        return float(min(fetched, largest + z.stage3_prefetch_bucket_size))
    return float(max(min(z.stage3_max_live_parameters, fetched), largest))


# ----------------------------------------------------------------------------------------------
# tiers

def gpu_persistent(hw: Hardware, model: Model, strategy: Strategy) -> dict[str, float]:
    """Bytes on one GPU for the whole step: context, model states, allocated-once buffers."""
    n, dp, z = model.n_params, strategy.data_parallel_size, strategy.zero
    b = strategy.bytes_per_param
    opt_bytes = (16.0 if strategy.precision != "fp32" else 8.0)   # fp32 grads + master + m, v
    out: dict[str, float] = {"cuda_context": hw.gpu.cuda_context_bytes}
    if z.stage == 3:
        out["persistent_params"] = float(b * persistent_params(model, strategy))
        if strategy.param_device == "none":
            out["param_partition"] = b * n / dp
        # stage3.py _setup_for_real_optimizer: the ipg bucket buffer, allocated once
        out["reduce_bucket"] = float(b * z.reduce_bucket_size)
    else:
        out["params"] = float(b * n)
        grads_on_gpu = z.stage < 2
        out["grads"] = b * n / (1 if grads_on_gpu else dp) if strategy.optimizer_device == "none" \
            else 0.0
    if strategy.optimizer_device == "none":
        out["optimizer_states"] = opt_bytes * n / (dp if z.stage >= 1 else 1)
        if z.stage == 3:
            out["grad_partition"] = b * n / dp
    if z.stage in (1, 2) and strategy.optimizer_device != "none":
        # stage_1_and_2.py: temp_grad_buffer_for_gpu_offload, largest parameter, 16-bit
        largest = max(max(i * o for i, o in model.layer_matrices().values()),
                      model.vocab * model.hidden)
        out["temp_grad_buffer"] = float(b * largest)
    if z.stage in (1, 2) and dp > 1:
        out["allgather_bucket"] = float(b * z.allgather_bucket_size)
    return out


def gpu_moments(hw: Hardware, model: Model, strategy: Strategy) -> dict[str, dict[str, float]]:
    """What comes and goes on top of `gpu_persistent`, at each candidate peak of a step."""
    n, dp, z = model.n_params, strategy.data_parallel_size, strategy.zero
    b = strategy.bytes_per_param
    acts = activation_bytes(model, strategy)
    held = {k: v for k, v in acts.items() if k != "recompute_block"}
    if z.stage == 3:
        held["gathered_params"] = b * gathered_numel(model, strategy)
    loss = {**held, "logits": logits_loss_bytes(model, strategy)}
    backward = {**held, **acts}
    if z.stage == 3:
        backward["gathered_grads"] = float(b * largest_module_params(model))
        if strategy.optimizer_device == "nvme":
            # stage3.py _offload_grad_partition_at_boundary: `grad_buffer.to(fp32)` on the GPU
            # for every partition of the bucket, held until _swap_out_offload_fp32_gradients
            backward["grad_fp32_swap_staging"] = 4.0 * min(z.reduce_bucket_size, n / dp)
    elif z.stage >= 1 or dp > 1:
        # stage_1_and_2.py setup_buckets: ipg buffers allocated at the first gradient hook
        # (2 with overlap_comm), released in independent_gradient_partition_epilogue
        buckets = 2 if (z.overlap and z.stage in (1, 2)) else 1
        backward["reduce_bucket"] = float(b * z.reduce_bucket_size * buckets)
    out = {"loss": loss, "backward": backward}
    if z.stage == 0 and strategy.precision != "fp32":
        # DDP_BFLOAT16/FP16 -> runtime/fp16/fused_optimizer.py FP16_Optimizer.step:
        # _flatten_dense_tensors([p.grad.to(fp32) ...]) holds the per-parameter fp32 copies and
        # the flat fp32 grad (in optimizer_states) at once, 16-bit grads still alive:
        # TinyLlama 24 B/param = 26.4 GB, measured 24.65 GiB
        out["step"] = {"step_fp32_grad_copies": 4.0 * n}
    return out


def gpu_breakdown(hw: Hardware, model: Model, strategy: Strategy) -> dict[str, float]:
    """Bytes on one GPU at peak: the persistent items plus the largest moment's items."""
    out = gpu_persistent(hw, model, strategy)
    moments = gpu_moments(hw, model, strategy)
    out.update(max(moments.values(), key=lambda m: sum(m.values())))
    tensors = sum(v for k, v in out.items() if k != "cuda_context")
    out["allocator_slack"] = ALLOCATOR_SLACK * tensors
    return {k: v for k, v in out.items() if v}


def pinned_bytes(nbytes: float) -> float:
    """Host memory one page-locked buffer really holds: PyTorch's CachingHostAllocator rounds
    every request up to the next power of two (ATen/core/CachingHostAllocator.h: `roundSize =
    PowerOf2Ceil(size)` unless pinned_max_round_threshold is set; default SIZE_MAX), and
    cudaHostAlloc'd pages are resident. E.g. 4.4 GB fp32 master of TinyLlama -> 2^33 = 8.59 GB."""
    if nbytes <= 0:
        return 0.0
    return float(2 ** math.ceil(math.log2(nbytes)))


def host_breakdown(hw: Hardware, model: Model, strategy: Strategy,
                   software: Software | None = None) -> dict[str, float]:
    """Bytes resident in host RAM of one node (all its ranks), 'pinned:' or 'pageable:'.

    Every buffer torch pins (`pin_memory()`) counts at its power-of-two size (`pinned_bytes`),
    one term per buffer; buffers DeepSpeed's aio handle locks (swap buffers) count exactly.
    E.g. TinyLlama ZeRO-2 + CPU Adam: 2.2 GB baseline + 8.59 (fp32
    master) + 4.29 (16-bit copy-back) + 8.59 (fp32 grads) + 0.13 (temp grad) + 8.8 (m, v)
    = 32.6 GB, measured 32.5 GB (30.29 GiB)."""
    ranks, z = hw.gpus_per_node, strategy.zero
    base = software.process_baseline_bytes if software else PROCESS_BASELINE_BYTES
    out: dict[str, float] = {"pageable:process_baseline": base}
    out.update(_zero3_host(model, strategy) if z.stage == 3 else _zero12_host(model, strategy))
    if z.stage == 3 and strategy.optimizer_device == "none" and strategy.param_device == "none":
        out = {"pageable:process_baseline": base}
    return {k: v * ranks for k, v in out.items() if v}


def _zero12_host(model: Model, strategy: Strategy) -> dict[str, float]:
    """One rank, stages 0-2 with the optimizer on the CPU (stage_1_and_2.py, one param group):
    `single_partition_of_fp32_groups` (fp32 master, pinned if pin_memory),
    `param_buffer_of_bit16_for_cpu_offload_groups` (16-bit copy-back buffer),
    `initialize_optimizer_states` fp32 grad partition, `temp_grad_buffer_for_cpu_offload`
    (16-bit, largest parameter), and DeepSpeedCPUAdam's m, v (pageable, created lazily)."""
    if strategy.optimizer_device != "cpu":
        return {}
    part = model.n_params / strategy.data_parallel_size
    oo = strategy.zero.offload_optimizer
    pin = pinned_bytes if oo.pin_memory else (lambda x: x)
    kind = "pinned" if oo.pin_memory else "pageable"
    b = strategy.bytes_per_param
    largest = max(max(i * o for i, o in model.layer_matrices().values()), model.vocab * model.hidden)
    return {f"{kind}:master_fp32": pin(4.0 * part), f"{kind}:params_16bit_buffer": pin(b * part),
            f"{kind}:grads_fp32": pin(4.0 * part), f"{kind}:temp_grad_buffer": pin(b * largest),
            "pageable:adam_m_v": 8.0 * part}


def _io_aligned_numel(numel: float, elem_bytes: int, strategy: Strategy) -> float:
    """Elements rounded up to the aio alignment: 1 KiB x intra_op_parallelism (swap_tensor/
    utils.py AIO_ALIGNED_BYTES; partitioned_param_swapper.py / optimizer_utils.py
    `_io_aligned_numel`)."""
    align = AIO_ALIGNED_BYTES * strategy.aio.intra_op_parallelism // elem_bytes
    return float(math.ceil(numel / align) * align)


def _min_aio_bytes(strategy: Strategy) -> int:
    """Tensors smaller than this are never swapped (swappable_tensor: max(1 MiB, block_size))."""
    return max(MIN_AIO_BYTES, strategy.aio.block_size)


def _zero3_host(model: Model, strategy: Strategy) -> dict[str, float]:
    """One rank, stage 3 with offload (stage3.py, partition_parameters.py, swap_tensor/)."""
    from tierlab.sim.workload import modules, sub_groups

    z, b = strategy.zero, strategy.bytes_per_param
    part = model.n_params / strategy.data_parallel_size
    groups = sub_groups(modules(model, strategy), strategy, strategy.data_parallel_size)
    out: dict[str, float] = {}
    if strategy.optimizer_device == "cpu":
        out.update(_zero3_cpu_optimizer_host(strategy, groups, part))
    elif strategy.optimizer_device == "nvme":
        out.update(_zero3_nvme_optimizer_host(strategy, groups))
    if strategy.optimizer_device != "none":
        # stage3.py _setup_for_real_optimizer: grad_partitions_flat_buffer, the whole 16-bit
        # (gradient_accumulation_dtype = model dtype) gradient partition, pinned if pin_memory
        out["pinned:grad_partitions_flat"] = (pinned_bytes(b * part)
                                              if z.offload_optimizer.pin_memory else b * part)
    if strategy.param_device in ("cpu", "nvme"):
        out.update(_zero3_param_host(strategy, groups, part))
        out["pinned:zero_init_partitions_cached"] = _zero_init_cache_left(
            model, strategy, _pinned_requests_after_init(strategy, groups, part))
    return out


def _zero3_cpu_optimizer_host(strategy: Strategy, groups: list[list[float]],
                              part: float) -> dict[str, float]:
    """CPU Adam: stage3.py _create_fp32_partitions (fp16 flat .to(cpu, fp32).clone(): pageable),
    initialize_optimizer_states (one fp32 grad buffer per sub-group, pinned if pin_memory; the
    `gradient_buffer` there is a local, freed on return) and DeepSpeedCPUAdam's lazy m, v."""
    oo = strategy.zero.offload_optimizer
    pin = pinned_bytes if oo.pin_memory else (lambda x: x)
    kind = "pinned" if oo.pin_memory else "pageable"
    return {"pageable:master_fp32": 4.0 * part,
            f"{kind}:grads_fp32": sum(pin(4.0 * sum(g)) for g in groups),
            "pageable:adam_m_v": 8.0 * part}


def _zero3_nvme_optimizer_host(strategy: Strategy, groups: list[list[float]]) -> dict[str, float]:
    """Optimizer on NVMe. OptimizerSwapper.__init__: SwapBufferManager(buffer_count x io-aligned
    largest sub-group, fp32) — buffers from aio_handle.new_cpu_locked_tensor, i.e. page-aligned
    malloc + mlock of the exact size (csrc/pin_memory/deepspeed_pin_tensor.cpp `alloc`), NOT
    torch's power-of-two CachingHostAllocator. E.g. Llama-0.5B, sub_group_size 1e8: the
    embedding alone (136.1 M) is the largest group: 4 x 136.1 M x 4 B = 2.18 GB (2.03 GiB)."""
    oo = strategy.zero.offload_optimizer
    largest = _io_aligned_numel(max(sum(g) for g in groups), 4, strategy)
    out = {"pinned:optimizer_swap_buffers": oo.buffer_count * 4.0 * largest}
    if oo.pipeline:
        # DeepSpeedCPUAdam creates m, v lazily (zeros_like: pageable) in the first step;
        # PipelinedOptimizerSwapper.swap_out_optimizer_state copies them to pinned buffers but,
        # unlike PartitionedOptimizerSwapper (release_swap_buffers -> release_memory), never
        # releases them: they stay until the next step's swap-in set_buffers. So the step-1 peak
        # holds 8 B x swappable elements (Llama-0.5B: 3.95 GB; measured 16.04 -> 12.36 GiB).
        swappable = [sum(g) for g in groups if 4.0 * sum(g) >= _min_aio_bytes(strategy)]
        out["pageable:adam_m_v_first_step"] = 8.0 * sum(swappable)
    return out


def _flat_params_numel(strategy: Strategy, part: float) -> float:
    """stage3.py _create_param_groups_fp16_flat_cpu_memory: the flat 16-bit buffer (one param
    group) is capped at max_in_cpu ONLY when params_in_nvme_and_cpu (device nvme). With device
    cpu the whole partition is flat: TinyLlama 2.2 GB -> 2^32 B pinned, not min(1e9, n) x 2 B."""
    if strategy.param_device == "nvme":
        return min(strategy.zero.offload_param.max_in_cpu, part)
    return part


def _zero3_param_host(strategy: Strategy, groups: list[list[float]],
                      part: float) -> dict[str, float]:
    """Parameters offloaded to CPU or NVMe: the flat 16-bit buffer — always torch-pinned
    (`get_accelerator().pin_memory(torch.empty(...))`, whatever offload_param.pin_memory says) —
    and, for NVMe, the swapper's locked buffers."""
    from tierlab.sim.workload import nvme_param_fraction

    op, b, dp = strategy.zero.offload_param, strategy.bytes_per_param, strategy.data_parallel_size
    flat = _flat_params_numel(strategy, part)
    out = {"pinned:params_16bit": pinned_bytes(b * flat) if flat > 0 else 0.0}
    if strategy.param_device == "nvme":
        # partitioned_param_swapper.py _configure_aio: ONE locked tensor of buffer_count x
        # io-aligned buffer_size elements (new_cpu_locked_tensor: exact size, not power of two)
        out["pinned:param_swap_buffers"] = op.buffer_count * b * _io_aligned_numel(
            op.buffer_size, b, strategy)
        _, on_nvme = nvme_param_fraction(groups, strategy)
        if any(on_nvme):
            # stage3.py: a sub-group without a CPU flat buffer -> reserve_partitioned_swap_space
            # (largest sub-group's params by their FULL ds_numel, io-aligned; a locked tensor)
            largest = max(groups, key=sum)
            out["pinned:partitioned_swap_buffer"] = b * sum(
                _io_aligned_numel(n * dp, b, strategy) for n in largest)
    return out


def _pinned_requests_after_init(strategy: Strategy, groups: list[list[float]],
                                part: float) -> list[float]:
    """torch pin_memory blocks (power-of-two) DeepSpeed asks for after zero.Init freed the
    partitions into the cache: per-sub-group fp32 grads (CPU Adam) and the 16-bit grad buffer,
    when offload_optimizer.pin_memory. (The flat 16-bit params buffer is requested before
    `_move_to_flat_buffer` frees the partitions: see `_zero_init_cache_left`.)"""
    oo, b = strategy.zero.offload_optimizer, strategy.bytes_per_param
    if not oo.pin_memory or strategy.optimizer_device == "none":
        return []
    grads = [pinned_bytes(4.0 * sum(g)) for g in groups] if strategy.optimizer_device == "cpu" \
        else []
    return grads + [pinned_bytes(b * part)]


def _zero_init_cache_left(model: Model, strategy: Strategy, later: list[float]) -> float:
    """Pinned bytes zero.Init leaves in torch's CachingHostAllocator cache at the peak.

    partition_parameters.py `_partition_param`: a partition that goes to the CPU is
    `torch.empty(...)` then `pin_memory()` (a power-of-two block); `_move_to_flat_buffer` later
    points it at the flat buffer, so the block is freed into the cache, never to the OS. With
    device nvme only partitions smaller than max(1 MiB, block_size) take this path; larger ones
    use the swapper's locked buffers. A tied LM head (transformers modeling_utils.py
    `PreTrainedModel.tie_weights`: `setattr(parent, name, source_param)`) was first built as its
    own Linear under zero.Init, partitioned, then dropped: one more cached block (Llama-0.5B:
    136 M x 2 B -> 2^29 B per rank). A later request of exactly a cached block's size takes it
    back (CachingHostAllocator.h `get_free_block`: one free list per power of two) — e.g.
    Llama-3B's last sub-group, 192 M x 4 B -> 2^30, reuses the embedding's 2^30 block."""
    from tierlab.sim.workload import modules

    op, b, dp = strategy.zero.offload_param, strategy.bytes_per_param, strategy.data_parallel_size
    if not op.pin_memory:
        return 0.0
    numels = [n for m in modules(model, strategy) for n in m.own_params]
    head = [model.vocab * model.hidden] if model.tie_embeddings else []
    blocks = [pinned_bytes(b * n / dp) for n in numels + head
              if strategy.param_device != "nvme" or b * n / dp < _min_aio_bytes(strategy)]
    head_blocks = blocks[len(blocks) - len(head):] if head else []
    flat = pinned_bytes(b * _flat_params_numel(strategy, model.n_params / dp))
    if flat in head_blocks:          # the flat buffer is created after the head was dropped
        blocks.remove(flat)
    for size in later:
        if size in blocks:
            blocks.remove(size)
    return float(sum(blocks))


def nvme_breakdown(hw: Hardware, model: Model, strategy: Strategy) -> dict[str, float]:
    """Swap-file bytes of one node."""
    ranks = hw.gpus_per_node
    part = model.n_params / strategy.data_parallel_size
    out: dict[str, float] = {}
    if strategy.optimizer_device == "nvme":
        out["optimizer_p_m_v_fp32"] = 12.0 * part * ranks
        out["grads_fp32"] = 4.0 * part * ranks
    if strategy.param_device == "nvme":
        out["params_16bit"] = 2.0 * max(0.0, part - strategy.zero.offload_param.max_in_cpu) * ranks
    return {k: v for k, v in out.items() if v}


def plan_memory(hardware: Hardware, model: Model, strategy: Strategy, *,
                software: Software | None = None) -> MemoryPlan:
    """Peak bytes per tier, with capacities and what binds."""
    gpu = gpu_breakdown(hardware, model, strategy)
    host = host_breakdown(hardware, model, strategy, software)
    nvme = nvme_breakdown(hardware, model, strategy)
    tiers = {
        "gpu": TierUsage(tier="gpu", used_bytes=sum(gpu.values()),
                         capacity_bytes=hardware.gpu.hbm_bytes, breakdown=gpu),
        "host": TierUsage(tier="host", used_bytes=sum(host.values()),
                          capacity_bytes=hardware.dram_bytes, breakdown=host),
        "nvme": TierUsage(tier="nvme", used_bytes=sum(nvme.values()),
                          capacity_bytes=hardware.nvme_capacity_bytes, breakdown=nvme),
    }
    return MemoryPlan(tiers=tiers, model_states=model_state_bytes(model, strategy),
                      n_params=model.n_params)
