"""Per-tier memory planner: where every byte of a DeepSpeed ZeRO run lives.

Tiers: "gpu" (per rank), "host" (per node: pinned + pageable), "nvme" (per node).
Model-state accounting follows DeepSpeed 0.19.8's own estimators
(`estimate_zero2_model_states_mem_needs`, `estimate_zero3_model_states_mem_needs`):
mixed precision keeps per parameter 2 B 16-bit params + 2 B 16-bit grads + 4 B fp32 grads +
4 B fp32 master + 8 B Adam m, v = 18 B, of which the classic back-of-envelope "16 B/param" omits
the fp32 gradient copy. On top of the estimators tierlab adds what they leave out: activations,
buckets, prefetch working set, swap buffers, the CUDA context and allocator slack.

GPU peak = what stays for the whole step (`gpu_persistent`) + the largest of the moments that
come and go (`gpu_moments`: loss backward, block backward, ZeRO-3's gradient-bucket reduction,
stage-0 optimizer step), not the sum of everything. Host: torch-pinned buffers are power-of-two blocks (CachingHostAllocator), buffers
DeepSpeed's aio handle locks are exact; zero.Init leaves its freed pinned partitions cached.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from tierlab.profiles.layout import (logit_width, logits_per_token, mean_active_ffn,
                                     per_layer_input_params, token_rows, token_width)
from tierlab.profiles.schema import Hardware, Model, Software
from tierlab.sim.headroom import DEFAULT_HEADROOM, Headroom
from tierlab.sim.layout import ParamLayout, n_params, param_layout, swap_file_bytes
from tierlab.sim.memory_moments import Moment, moments as moments_of
from tierlab.sim.memory_host import host_breakdown, pinned_bytes  # noqa: F401 (re-exported)
from tierlab.sim.strategy import Strategy
from tierlab.units import fmt_gib, gib, gib_dict

# Allocator slack: PyTorch's caching allocator rounds blocks and fragments; reserved exceeds
# allocated by ~5-10% in steady training (PyTorch CUDA memory docs; estimate, to be validated).
ALLOCATOR_SLACK = 0.07
ALLOCATOR_SLACK_RANGE = (0.05, 0.10)
"""Its central 80% interval (the ~5-10% above), for the `fits` margin (sim/ranges.py)."""


@dataclass(frozen=True, kw_only=True)
class TierUsage:
    """Bytes one tier holds at peak, with what they are."""

    tier: str
    """'gpu' (per rank), 'host' (per node) or 'nvme' (per node)."""
    used_bytes: float
    capacity_bytes: float
    breakdown: Mapping[str, float] = field(default_factory=dict)
    """Item -> bytes; host items are prefixed 'pinned:' or 'pageable:'."""
    headroom_bytes: float = 0.0
    """Kept free for what the plan does not count (sim/headroom.py): fits below capacity - it."""

    @property
    def limit_bytes(self) -> float:
        """What the tier may hold and still fit: capacity - headroom."""
        return self.capacity_bytes - self.headroom_bytes

    @property
    def fits(self) -> bool:
        return self.used_bytes <= self.limit_bytes

    @property
    def utilisation(self) -> float:
        if not self.capacity_bytes:   # a tier the box lacks: unused is fine, any use is not
            return float("inf") if self.used_bytes else 0.0
        return self.used_bytes / self.capacity_bytes

    def part(self, prefix: str) -> float:
        return sum(v for k, v in self.breakdown.items() if k.startswith(prefix))

    def to_dict(self) -> dict:
        """The JSON view, in GiB (tierlab.units)."""
        return {"used_GiB": gib(self.used_bytes), "capacity_GiB": gib(self.capacity_bytes),
                "headroom_GiB": gib(self.headroom_bytes), "fits": self.fits,
                "breakdown_GiB": gib_dict(self.breakdown)}


@dataclass(frozen=True, kw_only=True)
class MemoryPlan:
    tiers: Mapping[str, TierUsage]
    model_states: Mapping[str, float]
    """Whole-model bytes (all ranks together) of each model state, for the classic arithmetic."""
    n_params: int
    moments: tuple[Moment, ...] = ()
    """Host RAM at checkpoint save, 16-bit model save, model load and resume (rank 0's node;
    sim/memory_moments.py): their own verdicts, not part of `fits` (the training step's)."""
    headroom: Headroom = DEFAULT_HEADROOM

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
        """The JSON view (`tierlab memory --json`), sizes in GiB (tierlab.units)."""
        states = dict(self.model_states)
        total = sum(states.values())
        return {"n_params": self.n_params, "fits": self.fits, "binding_tier": self.binding_tier,
                "tiers": {name: t.to_dict() for name, t in self.tiers.items()},
                "model_states_GiB": {**gib_dict(states), "total": gib(total)},
                "bytes_per_param": total / self.n_params,
                "headroom": {t: self.headroom.of(t).text() for t in self.tiers},
                "moments": {m.name: m.to_dict() for m in self.moments},
                "moments_fit": all(m.fits for m in self.moments)}


# ----------------------------------------------------------------------------------------------
# model states

def model_state_bytes(model: Model, strategy: Strategy) -> dict[str, float]:
    """Whole-model bytes by state. Mixed precision: 2 + 2 + 4 + 4 + 4 = 16 B/param (+4 B fp32 grads
    that DeepSpeed's optimizer also keeps: see `fp32_grads`). fp32 training: 4 + 4 + 4 + 4."""
    n = n_params(model)
    if strategy.precision == "fp32":
        # 70B x (4 params + 4 grads + 8 m,v) = 1.12 TB
        return {"params": 4.0 * n, "grads": 4.0 * n, "adam_m": 4.0 * n, "adam_v": 4.0 * n}
    # 70B: 140 GB params + 140 GB grads + 560 GB (m, v) = 840 GB; + 280 GB fp32 master = 1.12 TB
    return {"params_16bit": 2.0 * n, "grads_16bit": 2.0 * n, "adam_m": 4.0 * n,
            "adam_v": 4.0 * n, "master_fp32": 4.0 * n}


def largest_module_params(model: Model) -> int:
    """Largest single module ZeRO-3 gathers at once: a transformer block or the embedding/head
    (or Gemma 4's per-layer table, its own Embedding module: layout.per_layer_input_params)."""
    return max(model.params_per_layer, token_rows(model) * token_width(model),
               model.vocab * logit_width(model), *per_layer_input_params(model).values())


# ----------------------------------------------------------------------------------------------
# activations

def activation_bytes_per_token_layer(model: Model, strategy: Strategy) -> float:
    """Bytes autograd keeps per token per transformer block (HF Llama, SDPA attention, no s^2
    scores). Counted tensor by tensor, 16-bit unless noted:
    RMSNorm input upcast to fp32 (4h) + normed (2h), q/k/v (2(h + 2 kv)), attention out (2h),
    second norm fp32 input (4h) + normed (2h), MLP gate, up, act, product (4 x 2 ffn); for MoE
    ffn is the width a token passes through (top-k x expert width + shared), averaged over
    blocks (layout.active_ffn)."""
    b = strategy.bytes_per_param
    h, f, kv = model.hidden, mean_active_ffn(model), model.kv_dim
    mlp = (4 if model.gated_mlp else 2) * f
    norm_input = 4 if model.norm == "rmsnorm" else b
    per_layer = 0.0
    if model.per_layer_inputs is not None:
        # Gemma 4 (modeling_gemma4.py lines 1408-1415): the gate's input (b h), its output, the
        # act's output and the product with the slice (3 b w), the norm's fp32 input (4 h)
        per_layer = b * (h + 3 * model.per_layer_inputs.width) + norm_input * h
    return (2 * norm_input * h + b * (2 * h + (h + 2 * kv) + h + mlp)
            + (b * f if not model.gated_mlp else 0)   # GELU keeps its input too
            + per_layer)


def activation_bytes(model: Model, strategy: Strategy) -> dict[str, float]:
    """Activation bytes of one micro-batch on one GPU held through the backward, by item: each
    block run with gradients keeps its own (a looped block once per such pass, Model.loops;
    a pass under torch.no_grad keeps nothing): Model.grad_block_runs blocks' worth; a block
    runs Model.streams x seq_len tokens a sample (ProphetNet's n-gram streams)."""
    tokens = strategy.train_micro_batch_size_per_gpu * model.seq_len * model.streams
    b = strategy.bytes_per_param
    runs = model.grad_block_runs        # n_layers without loops
    per_layer = activation_bytes_per_token_layer(model, strategy) * tokens
    # Gemma 4: the packed per-layer inputs (n_layers x width per token, modeling_gemma4.py
    # project_per_layer_inputs) are an input of every block, kept until the last backward
    extra = {"per_layer_inputs": float(b * model.n_layers * model.per_layer_inputs.width *
                                       tokens)} if model.per_layer_inputs is not None else {}
    if strategy.activation_checkpointing:
        # each block's input is kept (b x h per token); one block is recomputed at a time
        return {"checkpointed_inputs": float(runs * b * model.hidden * tokens),
                "recompute_block": per_layer, **extra}
    return {"layer_activations": per_layer * runs, **extra}


def logits_loss_bytes(model: Model, strategy: Strategy) -> float:
    """Peak bytes of the LM head's logits and loss (HF LlamaForCausalLM + ForCausalLMLoss).

    transformers loss_utils.py ForCausalLMLoss: `logits.float()` then cross_entropy =
    log_softmax (fp32 result, saved) + nll_loss. Forward end: 16-bit logits + fp32 copy + fp32
    log-probs = 10 B/element. Loss backward (the peak): NllLossBackward's dense fp32 grad +
    the saved log-probs + LogSoftmaxBackward's fp32 grad input = 12 B/element; by then the
    16-bit logits are gone (the runner keeps only `.loss`; ToCopyBackward saves nothing).
    Llama-0.5B, 4 x 1024 tokens x 151,936 vocab x 12 B = 7.47 GB."""
    tokens = strategy.train_micro_batch_size_per_gpu * model.seq_len
    return float(tokens * logits_per_token(model) * 12)     # Musicgen: every codebook's


def gathered_numel(model: Model, strategy: Strategy, lay: ParamLayout) -> float:
    """Elements ZeRO-3 holds all-gathered on the GPU at the end of the forward.

    Reuse distance >= a module (default 1e9): partitioned_param_coordinator.py
    `__params_to_release` keeps what is reused soon and `fetch_sub_module` prefetches up to
    min(max_live - n_available, prefetch_bucket) per call, so the gathered set fills up to
    stage3_max_live_parameters (TinyLlama: min(1e9, 1.1e9) x 2 B = 2.0 GB). With
    stage3_max_reuse_distance below a module (e.g. 0) every module is released after use: the
    largest module plus one prefetch bucket (Llama-0.5B: 136 M + 50 M elements)."""
    z = strategy.zero
    fetched = sum(lay.numels) - lay.persistent_numel
    largest = largest_module_params(model)
    if z.stage3_max_reuse_distance < largest:
        return float(min(fetched, largest + z.stage3_prefetch_bucket_size))
    return float(max(min(z.stage3_max_live_parameters, fetched), largest))


# ----------------------------------------------------------------------------------------------
# tiers

def gpu_persistent(hw: Hardware, model: Model, strategy: Strategy) -> dict[str, float]:
    """Bytes on one GPU for the whole step: context, model states, allocated-once buffers."""
    lay = param_layout(model, strategy, strategy.data_parallel_size)
    n, part, z = sum(lay.numels), lay.partition_numel, strategy.zero
    b = strategy.bytes_per_param
    # fp32 grads + master + m, v; ZeRO-1/2/3 build the fp32 gradient only inside the step
    # (`step_fp32_grad`, gpu_moments), stage 0's FP16_Optimizer keeps its flat one
    opt_bytes = 8.0 if strategy.precision == "fp32" else (16.0 if z.stage == 0 else 12.0)
    out: dict[str, float] = {"cuda_context": hw.gpu.cuda_context_bytes}
    if z.stage == 3:
        out["persistent_params"] = float(b * lay.persistent_numel)
        if strategy.param_device == "none":
            out["param_partition"] = b * part
        # stage3.py _setup_for_real_optimizer: the ipg bucket buffer, allocated once
        out["reduce_bucket"] = float(b * z.reduce_bucket_size)
    else:
        out["params"] = float(b * n)
        grads_on_gpu = z.stage < 2
        out["grads"] = b * (n if grads_on_gpu else part) if strategy.optimizer_device == "none" \
            else 0.0
        if z.stage == 1 and strategy.gradient_accumulation_steps > 1:
            # stage_1_and_2.py reduce_ready_partitions_and_remove_grads: without partitioned
            # gradients a bucket is reduced only at the accumulation boundary, so every 16-bit
            # gradient accumulates in param.grad until then, offloaded optimizer or not
            # (TinyLlama ZeRO-1 CPU, mb 2 x 2 micro-steps: 5.97 GiB measured on h200-q,
            # 3.73 GiB predicted without them)
            out["grads"] = float(b * n)
    if strategy.optimizer_device == "none":
        out["optimizer_states"] = opt_bytes * part
        if z.stage == 3:
            out["grad_partition"] = b * part
    if z.stage in (1, 2) and strategy.optimizer_device != "none":
        # stage_1_and_2.py: temp_grad_buffer_for_gpu_offload, largest parameter, 16-bit
        out["temp_grad_buffer"] = float(b * max(lay.numels))
    if z.stage in (1, 2) and strategy.data_parallel_size > 1:
        out["allgather_bucket"] = float(b * z.allgather_bucket_size)
    return out


def gpu_moments(hw: Hardware, model: Model, strategy: Strategy) -> dict[str, dict[str, float]]:
    """What comes and goes on top of `gpu_persistent`, at each candidate peak of a step."""
    n, dp, z = n_params(model), strategy.data_parallel_size, strategy.zero
    b = strategy.bytes_per_param
    lay = param_layout(model, strategy, dp)
    acts = activation_bytes(model, strategy)
    held = {k: v for k, v in acts.items() if k != "recompute_block"}
    if z.stage == 3:
        held["gathered_params"] = b * gathered_numel(model, strategy, lay)
    loss = {**held, "logits": logits_loss_bytes(model, strategy)}
    backward = {**held, **acts}
    out = {"loss": loss, "backward": backward}
    if z.stage == 3:
        backward["gathered_grads"] = float(b * largest_module_params(model))
        # the first full bucket is reduced inside a block's backward (a gradient hook) once
        # `bucket` elements of gradients exist: the blocks not yet reached still hold their
        # inputs and gathered params, the block at hand its recomputed activations
        left = max(0.0, 1.0 - z.reduce_bucket_size / n) if n else 0.0
        mid = {k: v * left for k, v in held.items()} if left else {}
        if left and "recompute_block" in acts:
            mid["recompute_block"] = acts["recompute_block"]
        out["grad_reduce"] = grad_reduce_bytes(model, strategy, lay, mid)
    elif z.stage >= 1 or dp > 1:
        # stage_1_and_2.py setup_buckets: ipg buffers allocated at the first gradient hook
        # (2 with overlap_comm), released in independent_gradient_partition_epilogue
        buckets = 2 if (z.overlap and z.stage in (1, 2)) else 1
        backward["reduce_bucket"] = float(b * z.reduce_bucket_size * buckets)
        if z.stage in (1, 2) and strategy.optimizer_device != "none":
            # at the boundary copy_grads_in_partition -> set_norm_for_param_grad_in_gpu casts
            # each reduced gradient's slice to fp64 (zero/utils.py get_norm_dtype) for its norm,
            # one parameter at a time while the buckets are alive: the largest sets the peak.
            # TinyLlama mb 2 x 4 micro-steps: 65.5M x 8 B = 0.49 GiB beside the two 0.37 GiB
            # buckets at the measured peak (lab/scripts/memory_snapshot.py, 3.81 GiB allocated)
            backward["grad_norm_fp64"] = 8.0 * min(max(lay.numels), lay.partition_numel)
    if z.stage >= 1 and strategy.optimizer_device == "none" and strategy.precision != "fp32":
        # the fp32 gradient exists only inside the step: stage_1_and_2.py `step` flattens this
        # rank's partition (`flatten_dense_tensors_aligned`, 16-bit) and `.to(fp32)`s it as
        # `single_partition_of_fp32_groups[i].grad`, set to None after the update; stage3.py
        # `_prepare_fp32_grad_for_sub_group` does the same one sub-group at a time and
        # `_release_sub_group` drops it before the next. Both copies are alive at the `.to`
        # (TinyLlama ZeRO-2: 24.27 GB measured, 24.2 GB so; 22.0 GB without the flat copy)
        sub = float(lay.partition_numel if z.stage < 3
                    else min(z.sub_group_size, lay.partition_numel))
        out["step"] = {"step_fp32_grad": 4.0 * sub, "step_flat_grad_16bit": b * sub}
    if z.stage == 0 and strategy.precision != "fp32":
        # DDP_BFLOAT16/FP16 -> runtime/fp16/fused_optimizer.py FP16_Optimizer.step:
        # _flatten_dense_tensors([p.grad.to(fp32) ...]) holds the per-parameter fp32 copies and
        # the flat fp32 grad (in optimizer_states) at once, 16-bit grads still alive:
        # TinyLlama 24 B/param = 26.4 GB, measured 24.65 GiB
        out["step"] = {"step_fp32_grad_copies": 4.0 * n}
    return out


def grad_reduce_bytes(model: Model, strategy: Strategy, lay: ParamLayout,
                      held: dict[str, float]) -> dict[str, float]:
    """ZeRO-3 reducing a full gradient bucket (stage3.py `__reduce_and_partition_ipg_grads`).

    With reduce_scatter (the default) `reduce_scatter_coalesced` torch.cat's the bucket's
    gradients into a new flat buffer, alive while `partition_grads` walks the parameters. With
    offload_optimizer each parameter's partition is copied back to the GPU (`.to(device)`), its
    norm taken in fp64 (`_constant_buffered_norm2`, 250M-element parts) and then cast to fp32 for
    the copy to the host: the largest parameter's partition sets the peak. NVMe optimizer: the
    fp32 casts of the whole bucket are held until `_swap_out_offload_fp32_gradients`. A model
    that fits one bucket is reduced once, in the epilogue, after every activation and gathered
    parameter is gone (`held` empty); otherwise mid-backward, with what is still held then
    (`held`). Llama-0.5B ZeRO-3 CPU, 1 x 512 tokens on one GPU: 0.92 GiB flat + 136M x (2 + 8) B
    = 2.19 GiB; peak allocated measured 3.44 GiB, predicted 3.12 (2.74 without this moment).
    TinyLlama ZeRO-3 NVMe at 8 GiB: measured 5.60 GiB, predicted 5.35."""
    n, dp, z = n_params(model), strategy.data_parallel_size, strategy.zero
    b = strategy.bytes_per_param
    bucket = float(min(z.reduce_bucket_size, n))
    out = dict(held)
    if z.reduce_scatter:
        out["reduce_scatter_flat"] = b * bucket
    if strategy.optimizer_device != "none":
        part = max(lay.parts)          # the largest parameter's partition
        norm = 8.0 * min(part, 2.5e8)
        out["grad_partition_copy"] = b * part
        if strategy.optimizer_device == "nvme":
            # the casts pile up over the bucket; the big parameters' norms come early (the
            # head is first in backward), when few casts are held, so the end of the walk peaks
            out["grad_fp32_swap_staging"] = max(4.0 * bucket / dp, norm)
        else:                # the norm's temporary is freed before the cast (a no-op in fp32)
            cast = 4.0 * part if b != 4 else 0.0
            out["grad_norm_fp64" if norm >= cast else "grad_fp32_cast"] = max(norm, cast)
    return out


def gpu_breakdown(hw: Hardware, model: Model, strategy: Strategy) -> dict[str, float]:
    """Bytes on one GPU at peak: the persistent items plus the largest moment's items."""
    out = gpu_persistent(hw, model, strategy)
    moments = gpu_moments(hw, model, strategy)
    out.update(max(moments.values(), key=lambda m: sum(m.values())))
    tensors = sum(v for k, v in out.items() if k != "cuda_context")
    out["allocator_slack"] = ALLOCATOR_SLACK * tensors
    return {k: v for k, v in out.items() if v}


def nvme_breakdown(hw: Hardware, model: Model, strategy: Strategy) -> dict[str, float]:
    """Swap-file bytes of one node: every rank's files (sim/layout.py swap_file_bytes)."""
    lay = param_layout(model, strategy, strategy.data_parallel_size)
    return {k: v * hw.gpus_per_node for k, v in swap_file_bytes(lay, strategy).items()}


def plan_memory(hardware: Hardware, model: Model, strategy: Strategy, *,
                software: Software | None = None, headroom: Headroom | None = None) -> MemoryPlan:
    """Peak bytes per tier, with capacities, the headroom each keeps free (default
    sim/headroom.DEFAULT_HEADROOM) and what binds; and the moments outside the step."""
    room = headroom or DEFAULT_HEADROOM
    parts = {"gpu": (gpu_breakdown(hardware, model, strategy), hardware.gpu.hbm_bytes),
             "host": (host_breakdown(hardware, model, strategy, software), hardware.dram_bytes),
             "nvme": (nvme_breakdown(hardware, model, strategy), hardware.nvme_capacity_bytes)}
    tiers = {name: TierUsage(tier=name, used_bytes=sum(items.values()), capacity_bytes=cap,
                             breakdown=items, headroom_bytes=room.of(name).bytes_of(cap))
             for name, (items, cap) in parts.items()}
    host = tiers["host"]
    base = host.breakdown.get("pageable:process_baseline", 0.0) / hardware.gpus_per_node
    return MemoryPlan(tiers=tiers, model_states=model_state_bytes(model, strategy),
                      n_params=n_params(model), headroom=room,
                      moments=moments_of(hardware, model, strategy, host.used_bytes, base,
                                         host.headroom_bytes))


def format_memory(plan: MemoryPlan, title: str) -> str:
    """`tierlab memory`'s table: per tier used / capacity / fits and the breakdown, in GiB; the
    headroom each tier keeps; the moments outside the step, each with its verdict."""
    lines = [title, f"{'tier':8s} {'used':>14s} {'capacity':>14s}  fits", "-" * 46]
    for name, tier in plan.tiers.items():
        scope = "per GPU" if name == "gpu" else "per node"
        lines.append(f"{name:8s} {fmt_gib(tier.used_bytes):>14s} "
                     f"{fmt_gib(tier.capacity_bytes):>14s}  {'yes' if tier.fits else 'NO'}   "
                     f"({scope})")
        for item, nbytes in sorted(tier.breakdown.items(), key=lambda kv: -kv[1]):
            lines.append(f"    {item:34s} {fmt_gib(nbytes):>14s}")
    states = plan.model_states
    total = sum(states.values())
    parts = " + ".join(f"{k} {fmt_gib(v)}" for k, v in states.items())
    lines.append(f"model states (whole model, {plan.n_params / 1e9:.2f} B params): {parts} = "
                 f"{fmt_gib(total)} ({total / plan.n_params:.0f} B/param)")
    verdict = "fits" if plan.fits else f"does NOT fit: {plan.binding_tier} tier is over capacity"
    lines.append(f"verdict: {verdict}; binding tier: {plan.binding_tier}")
    lines.append(f"headroom kept free: {headroom_text(plan)}")
    lines += [f"  {m.line()}" for m in plan.moments]
    return "\n".join(lines)


def headroom_text(plan: MemoryPlan) -> str:
    """'gpu 0, host 5% (2.98 GiB), nvme 0' (--gpu-headroom/--host-headroom)."""
    return ", ".join(f"{n} {plan.headroom.of(n).text()}" + (
        f" ({fmt_gib(t.headroom_bytes)})" if t.headroom_bytes and plan.headroom.of(n).fraction
        else "") for n, t in plan.tiers.items())
