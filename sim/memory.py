"""Per-tier memory planner: where every byte of a DeepSpeed ZeRO run lives.

Tiers: "gpu" (per rank), "host" (per node: pinned + pageable), "nvme" (per node).
Model-state accounting follows DeepSpeed 0.19.8's own estimators
(`estimate_zero2_model_states_mem_needs`, `estimate_zero3_model_states_mem_needs`):
mixed precision keeps per parameter 2 B 16-bit params + 2 B 16-bit grads + 4 B fp32 grads +
4 B fp32 master + 8 B Adam m, v = 18 B, of which the classic back-of-envelope "16 B/param" omits
the fp32 gradient copy. On top of the estimators tierlab adds what they leave out: activations,
buckets, prefetch working set, swap buffers, the CUDA context and allocator slack.
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
    """Peak activation bytes of one micro-batch on one GPU, by item."""
    tokens = strategy.train_micro_batch_size_per_gpu * model.seq_len
    b = strategy.bytes_per_param
    per_layer = activation_bytes_per_token_layer(model, strategy) * tokens
    out = {}
    if strategy.activation_checkpointing:
        # each block's input is kept (b x h per token); one block is recomputed at a time
        out["checkpointed_inputs"] = float(model.n_layers * b * model.hidden * tokens)
        out["recompute_block"] = per_layer
    else:
        out["layer_activations"] = per_layer * model.n_layers
    # logits in 16-bit + fp32 upcast for the loss + its gradient (HF LlamaForCausalLM)
    out["logits"] = float(tokens * model.vocab * (b + 4 + 4))
    return out


# ----------------------------------------------------------------------------------------------
# tiers

def gpu_breakdown(hw: Hardware, model: Model, strategy: Strategy) -> dict[str, float]:
    """Bytes on one GPU at peak."""
    n, dp, z = model.n_params, strategy.data_parallel_size, strategy.zero
    b = strategy.bytes_per_param
    mixed = strategy.precision != "fp32"
    opt_bytes = (16.0 if mixed else 8.0)   # fp32 grads + master + m + v (fp32: m + v)
    out: dict[str, float] = {"cuda_context": hw.gpu.cuda_context_bytes}
    if z.stage == 3:
        # Steady state: fetch_sub_module prefetches up to min(max_live - n_available,
        # prefetch_bucket) elements on every submodule call (partitioned_param_coordinator.py
        # `__max_n_available_params`), ~9 calls per block, so the gathered set fills up to
        # stage3_max_live_parameters (or the whole fetched model if smaller) — e.g. TinyLlama:
        # min(1e9, 1.1e9) x 2 B = 2.0 GB, not one block + one 5e7 bucket (0.23 GB).
        fetched = model.n_params - persistent_params(model, strategy)
        live = max(min(z.stage3_max_live_parameters, fetched), largest_module_params(model))
        out["gathered_params"] = float(b * live)            # all-gathered working set
        out["gathered_grads"] = float(b * largest_module_params(model))
        out["persistent_params"] = float(b * persistent_params(model, strategy))
        if strategy.param_device == "none":
            out["param_partition"] = b * n / dp
    else:
        out["params"] = float(b * n)
        grads_on_gpu = z.stage < 2
        out["grads"] = b * n / (1 if grads_on_gpu else dp) if strategy.optimizer_device == "none" \
            else 0.0
    if strategy.optimizer_device == "none":
        shard = dp if z.stage >= 1 else 1
        out["optimizer_states"] = opt_bytes * n / shard
        if z.stage == 3:
            out["grad_partition"] = b * n / dp
    buckets = 2 if (z.overlap and z.stage in (1, 2)) else 1
    out["reduce_bucket"] = float(b * z.reduce_bucket_size * buckets) if z.stage >= 1 or dp > 1 \
        else 0.0
    if z.stage in (1, 2) and dp > 1:
        out["allgather_bucket"] = float(b * z.allgather_bucket_size)
    out.update(activation_bytes(model, strategy))
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

    Every page-locked buffer counts at its power-of-two size (`pinned_bytes`), one term per
    buffer DeepSpeed pins. E.g. TinyLlama ZeRO-2 + CPU Adam: 2.2 GB baseline + 8.59 (fp32
    master) + 4.29 (16-bit copy-back) + 8.59 (fp32 grads) + 0.13 (temp grad) + 8.8 (m, v)
    = 32.6 GB, measured 32.5 GB (30.29 GiB)."""
    ranks = hw.gpus_per_node
    n, dp, z = model.n_params, strategy.data_parallel_size, strategy.zero
    part = n / dp                                   # one rank's partition, elements
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


def _zero3_host(model: Model, strategy: Strategy) -> dict[str, float]:
    """One rank, stage 3 with offload (stage3.py, partition_parameters.py)."""
    from tierlab.sim.workload import modules, sub_groups

    z, b = strategy.zero, strategy.bytes_per_param
    dp = strategy.data_parallel_size
    part = model.n_params / dp
    oo, op = z.offload_optimizer, z.offload_param
    out: dict[str, float] = {}
    groups = [sum(g) for g in sub_groups(modules(model, strategy), strategy, dp)]
    if strategy.optimizer_device == "cpu":
        pin = pinned_bytes if oo.pin_memory else (lambda x: x)
        kind = "pinned" if oo.pin_memory else "pageable"
        # _create_fp32_partitions: fp16 flat .to(cpu, fp32).clone() — pageable
        out["pageable:master_fp32"] = 4.0 * part
        # initialize_optimizer_states: one fp32 grad buffer per sub-group, pinned
        out[f"{kind}:grads_fp32"] = sum(pin(4.0 * g) for g in groups)
        out["pageable:adam_m_v"] = 8.0 * part
    elif strategy.optimizer_device == "nvme":
        # OptimizerSwapper: buffer_count pinned fp32 buffers of the largest sub-group
        out["pinned:optimizer_swap_buffers"] = oo.buffer_count * pinned_bytes(
            4.0 * max(groups))
    if strategy.optimizer_device != "none":
        # stage3.py: grad_partitions_flat_buffer — the whole 16-bit gradient partition, pinned
        out["pinned:grad_partitions_flat"] = (pinned_bytes(b * part) if oo.pin_memory
                                              else b * part)
    if strategy.param_device in ("cpu", "nvme"):
        pin = pinned_bytes if op.pin_memory else (lambda x: x)
        kind = "pinned" if op.pin_memory else "pageable"
        # _create_param_groups_fp16_flat_cpu_memory: one flat 16-bit buffer per param group
        out[f"{kind}:params_16bit"] = pin(b * min(op.max_in_cpu, part))
        # zero.Init pinned each partition on creation (partition_parameters.py `_partition_param`);
        # freed into the CachingHostAllocator's cache when moved into the flat buffer, never
        # returned to the OS (no reuse: later pinned requests are larger)
        if op.pin_memory:
            out["pinned:zero_init_partitions_cached"] = sum(
                pinned_bytes(b * n / dp) for m in modules(model, strategy) for n in m.own_params)
    if strategy.param_device == "nvme":
        out["pinned:param_swap_buffers"] = op.buffer_count * pinned_bytes(b * op.buffer_size)
    return out


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
