"""The host tier of the memory planner: what one node's training processes hold in RAM.

Torch-pinned buffers (`pin_memory()`) are power-of-two blocks of PyTorch's CachingHostAllocator;
buffers DeepSpeed's aio handle locks (`new_cpu_locked_tensor`) are exact, io-aligned sizes;
zero.Init leaves the pinned partitions it freed in torch's host cache. Every item cites the
DeepSpeed 0.19.8 code that allocates it. `sim/memory.py` puts the tiers together.
"""
from __future__ import annotations

import math

from tierlab.profiles.layout import token_width
from tierlab.profiles.schema import Hardware, Model, Software
from tierlab.sim.host_costs import software_for
from tierlab.sim.layout import (ParamLayout, io_aligned_numel, min_aio_bytes,
                                optimizer_swap_buffers, param_layout, param_swap_buffers,
                                partition)
from tierlab.sim.strategy import Strategy


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
    base = software_for(hw, software).process_baseline_bytes     # the fitted one, every verb
    out = {"pageable:process_baseline": base, **rank_offload_items(model, strategy)}
    return {k: v * hw.gpus_per_node for k, v in out.items() if v}


def rank_offload_items(model: Model, strategy: Strategy) -> dict[str, float]:
    """One rank's offload buffers and states in host RAM, 'pinned:' or 'pageable:' (no process
    baseline): what `host_breakdown` adds per rank, and what preflight's pinned check sums."""
    z = strategy.zero
    if z.stage == 3 and strategy.optimizer_device == "none" and strategy.param_device == "none":
        return {}
    lay = param_layout(model, strategy, strategy.data_parallel_size)
    out = _zero3_host(model, strategy, lay) if z.stage == 3 else _zero12_host(strategy, lay)
    return {k: v for k, v in out.items() if v}


def _zero12_host(strategy: Strategy, lay: ParamLayout) -> dict[str, float]:
    """One rank, stages 0-2 with the optimizer on the CPU (stage_1_and_2.py, one param group):
    `single_partition_of_fp32_groups` (fp32 master, pinned if pin_memory),
    `param_buffer_of_bit16_for_cpu_offload_groups` (16-bit copy-back buffer),
    `initialize_optimizer_states` fp32 grad partition, `temp_grad_buffer_for_cpu_offload`
    (16-bit, largest parameter), and DeepSpeedCPUAdam's m, v (pageable, created lazily)."""
    if strategy.optimizer_device != "cpu":
        return {}
    part = lay.partition_numel
    oo = strategy.zero.offload_optimizer
    pin = pinned_bytes if oo.pin_memory else (lambda x: x)
    kind = "pinned" if oo.pin_memory else "pageable"
    b = strategy.bytes_per_param
    largest = max(lay.numels)           # the largest parameter tensor
    out = {f"{kind}:master_fp32": pin(4.0 * part), f"{kind}:params_16bit_buffer": pin(b * part),
           f"{kind}:grads_fp32": pin(4.0 * part), f"{kind}:temp_grad_buffer": pin(b * largest),
           "pageable:adam_m_v": 8.0 * part}
    if strategy.gradient_accumulation_steps > 1 and strategy.zero.stage == 2:
        # async_accumulate_grad_in_cpu_via_gpu (ZeRO-2 with micro-steps; ZeRO-1 never calls it:
        # sim/workload.py): accumulated_grads_in_cpu, one 16-bit buffer of the whole
        # param.numel() per parameter of this rank's partition, pinned one by one (each its own
        # power-of-two block). TinyLlama: 3.0 GB; h200-q's runs with micro-steps held 2.6 GiB
        # (TinyLlama) and 1.7 GiB (Llama-0.5B) more than the items above
        out[f"{kind}:accumulated_grads"] = sum(pin(b * n) for n, p in zip(lay.numels, lay.parts)
                                               if p > 0)
    return out


def _zero3_host(model: Model, strategy: Strategy, lay: ParamLayout) -> dict[str, float]:
    """One rank, stage 3 with offload (stage3.py, partition_parameters.py, swap_tensor/)."""
    z, b = strategy.zero, strategy.bytes_per_param
    part, groups = lay.partition_numel, lay.groups
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
        out.update(_zero3_param_host(strategy, lay))
        out["pinned:zero_init_partitions_cached"] = _zero_init_cache_left(
            model, strategy, lay, _pinned_requests_after_init(strategy, groups, part))
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
    out = {"pinned:optimizer_swap_buffers": optimizer_swap_buffers(groups, strategy).nbytes}
    if oo.pipeline:
        # DeepSpeedCPUAdam creates m, v lazily (zeros_like: pageable) in the first step;
        # PipelinedOptimizerSwapper.swap_out_optimizer_state copies them to pinned buffers but,
        # unlike PartitionedOptimizerSwapper (release_swap_buffers -> release_memory), never
        # releases them: they stay until the next step's swap-in set_buffers. So the step-1 peak
        # holds 8 B x swappable elements (Llama-0.5B: 3.95 GB; measured 16.04 -> 12.36 GiB).
        swappable = [sum(g) for g in groups if 4.0 * sum(g) >= min_aio_bytes(strategy)]
        out["pageable:adam_m_v_first_step"] = 8.0 * sum(swappable)
    return out


def _zero3_param_host(strategy: Strategy, lay: ParamLayout) -> dict[str, float]:
    """Parameters offloaded to CPU or NVMe: the flat 16-bit buffer — always torch-pinned
    (`get_accelerator().pin_memory(torch.empty(...))`, whatever offload_param.pin_memory says) —
    and, for NVMe, the swapper's locked buffers."""
    b = strategy.bytes_per_param
    flat = lay.cpu_flat_numel
    out = {"pinned:params_16bit": pinned_bytes(b * flat) if flat > 0 else 0.0}
    if strategy.param_device == "nvme":
        out["pinned:param_swap_buffers"] = param_swap_buffers(strategy).nbytes
        if any(lay.on_nvme):
            # stage3.py: a sub-group without a CPU flat buffer -> reserve_partitioned_swap_space
            # (largest sub-group's params by their FULL ds_numel, io-aligned; a locked tensor)
            largest = max(range(len(lay.groups)), key=lambda k: sum(lay.groups[k]))
            out["pinned:partitioned_swap_buffer"] = b * sum(
                io_aligned_numel(n, b, strategy) for n in lay.group_numels(largest))
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


def _zero_init_cache_left(model: Model, strategy: Strategy, lay: ParamLayout,
                          later: list[float]) -> float:
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
    op, b = strategy.zero.offload_param, strategy.bytes_per_param
    if not op.pin_memory:
        return 0.0
    head = [partition(model.vocab * token_width(model), strategy, strategy.data_parallel_size)] \
        if model.tie_embeddings else []
    blocks = [pinned_bytes(b * p) for p in [*lay.parts, *head]
              if strategy.param_device != "nvme" or b * p < min_aio_bytes(strategy)]
    head_blocks = blocks[len(blocks) - len(head):] if head else []
    flat = pinned_bytes(b * lay.cpu_flat_numel)
    if flat in head_blocks:          # the flat buffer is created after the head was dropped
        blocks.remove(flat)
    for size in later:
        if size in blocks:
            blocks.remove(size)
    return float(sum(blocks))
