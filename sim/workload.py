"""What DeepSpeed 0.19 moves, and when, for one rank of a data-parallel ZeRO job (pure Python).

`build_workload(hardware, model, strategy, first_step=...)` lists the operations of one optimizer
step in the order DeepSpeed issues them. Each op names the resource it occupies, what it moves
(bytes) or computes (forward-equivalents of a block, elements for Adam), the ops it waits for,
and the pinned swap buffers it takes/gives back. Each resource runs its ops in issue order (a CUDA
stream, a DMA direction, an aio handle), so the schedule is a fixed DAG: `engine.py` times it with
SimPy and `devices.py` says how long each op takes.

Sources (deepspeed 0.19.8, runtime/zero/): parameter fetch/prefetch/release —
partitioned_param_coordinator.py `fetch_sub_module`, `__params_to_release`; gradients —
stage3.py `partition_grads`, `_offload_grad_partition_at_boundary`; stage_1_and_2.py
`async_accumulate_grad_in_cpu_via_gpu`, `async_inplace_copy_grad_to_fp32_buffer_from_gpu`;
the NVMe gradient swap-out — sim/grad_swap.py (`_swap_out_offload_fp32_gradients`,
async_swapper.py `AsyncTensorSwapper`);
optimizer — stage3.py `step`, `_create_param_groups_fp16_flat_cpu_memory` (max_in_cpu),
swap_tensor/partitioned_optimizer_swapper.py and pipelined_optimizer_swapper.py.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, fields

from tierlab.errors import ConfigError
from tierlab.profiles.schema import Hardware, Model, Software
from tierlab.sim.host_costs import (checkpoint_carried_s, checkpoint_cost_s, grad_event_cost_s,
                                   overflow_scan_cost_s, step_cost_s, use_cost_s)
from tierlab.sim.grad_swap import SwapOut, flush_swap_out, grad_swapper, swap_out
from tierlab.sim.layout import (OPT_STATE_TENSORS, optimizer_buffers_needed, param_layout,
                               partition)
from tierlab.sim.modules import (Module, Use, ceil_div, forward_uses,  # noqa: F401
                                 modules, prefetch_depth, trace)
from tierlab.sim.strategy import Strategy

@dataclass(frozen=True, slots=True)
class Op:
    """One operation of the step on one resource."""

    id: int
    name: str
    resource: str
    """One of sim/resources.RESOURCES."""
    phase: str
    """'forward', 'backward' or 'optimizer'."""
    nbytes: float = 0.0
    """Bytes moved (PCIe, NVMe) or the full tensor size of a collective."""
    work: str = ""
    """Compute kind and use ('block.fwd', 'block.recompute', 'block.bwd', 'head.fwd', ...,
    'adam_gpu', 'adam_cpu'), host work ('host.<use>', 'grad_copies', ...) or collective kind."""
    amount: float = 0.0
    """Forward-equivalents for 'block'/'head'; elements for Adam."""
    deps: tuple[int, ...] = ()
    take_buffers: int = 0
    give_buffers: int = 0
    pool: str = ""
    """'optimizer' or 'param': the swap-buffer pool taken from / given to."""
    pinned: bool = True
    """Host side of a PCIe copy is page-locked (offload_*.pin_memory)."""


@dataclass(frozen=True, kw_only=True)
class Workload:
    ops: tuple[Op, ...]
    micro_steps: int
    dp: int
    sub_groups: tuple[int, ...]
    """Elements of each optimizer sub-group of this rank (one group for stages 0-2)."""
    nvme_param_fraction: float
    """Fraction of this rank's 16-bit parameter partition living on NVMe (beyond max_in_cpu)."""
    optimizer_buffers: int
    param_buffers: int


def check_memory_supported(strategy: Strategy) -> None:
    """Raise ConfigError naming a key whose effect on memory tierlab does not model: the memory
    plan (sim/memory.plan_memory) would place the states as if the key were not there (a partial
    optimizer offload planned as a full one keeps 1 - ratio of the optimizer states off the GPU
    figure). `memory` refuses such a config; `preflight` says the plan is skipped."""
    z = strategy.zero
    if z.offload_optimizer.ratio < 1.0 and strategy.optimizer_device != "none":
        raise ConfigError(f"zero_optimization.offload_optimizer.ratio={z.offload_optimizer.ratio:g} "
                          "(< 1: a partial optimizer offload): DeepSpeed accepts it, but tierlab "
                          "does not model it; use 1.0")
    if z.zero_hpz_partition_size > 1:
        raise ConfigError(f"zero_optimization.zero_hpz_partition_size={z.zero_hpz_partition_size} "
                          "(> 1: ZeRO++ hpZ, a secondary parameter partition per node): DeepSpeed "
                          "accepts it, but tierlab does not model it")


def check_supported(strategy: Strategy) -> None:
    """Raise ConfigError naming a key whose effect the engine does not model: those of
    check_memory_supported, GPUDirect Storage, NVMe parameters beside GPU optimizer states (the
    memory plan places those: the schedule is not modelled), too few optimizer swap buffers."""
    check_memory_supported(strategy)
    if strategy.aio.use_gds:
        raise ConfigError("aio.use_gds=true (GPUDirect Storage) is not modelled by tierlab's "
                          "simulator")
    if strategy.param_device == "nvme" and strategy.optimizer_device == "none":
        raise ConfigError("zero_optimization.offload_param.device=nvme without offload_optimizer "
                          "is not modelled (DeepSpeed keeps fp32 partitions on the GPU then)")
    z = strategy.zero
    oo = z.offload_optimizer
    need = optimizer_buffers_needed(strategy)
    if strategy.optimizer_device == "nvme" and oo.buffer_count < need:
        raise ConfigError(f"zero_optimization.offload_optimizer.buffer_count={oo.buffer_count}: "
                          f"this swapper needs {need} (4 per sub-group in flight: p, m, v, g; "
                          "pipeline_read/pipeline_write each add a sub-group); DeepSpeed asserts "
                          "'ran out of swap buffers'")


# ----------------------------------------------------------------------------------------------
# op emission

@dataclass
class _Builder:
    """Appends ops in issue order and hands out ids."""

    phase: str = "forward"
    ops: list[Op] = field(default_factory=list)

    def add(self, name: str, resource: str, deps=(), **kw) -> int:
        op = Op(id=len(self.ops), name=name, resource=resource, phase=self.phase,
                deps=tuple(d for d in deps if d is not None), **kw)
        self.ops.append(op)
        return op.id

    def collective(self, name: str, work: str, nbytes: float, hw: Hardware, deps=()) -> int | None:
        """Intra-node ring on gpu_comm, then the inter-node stage on the network."""
        last = None
        if hw.gpus_per_node > 1:
            last = self.add(f"{name}.{work}", "gpu_comm", deps, nbytes=nbytes, work=work)
        if hw.nodes > 1:
            last = self.add(f"{name}.{work}.inter", "network", deps if last is None else (last,),
                            nbytes=nbytes, work=work)
        return last


@dataclass(frozen=True, kw_only=True)
class _Ctx:
    hw: Hardware
    strategy: Strategy
    mods: list
    dp: int
    bpp: int
    nvme_frac: float
    use_s: dict = field(default_factory=dict)
    """Host seconds per submodule use by kind ('fwd', 'recompute', 'bwd'; sim/host_costs.py),
    worked out once per workload; empty: the host is free."""
    grad_s: tuple[float, float] = (0.0, 0.0)
    """ZeRO-1/2 offload host seconds per parameter tensor: (accumulation, boundary copy)."""
    ckpt_s: float = 0.0
    """Host seconds of the activation-checkpoint wrapper per block forward (0: none)."""
    ckpt_bwd_s: float = 0.0
    """Host seconds of the checkpoint's recompute machinery per block backward (0: none)."""
    unwrap: bool = False
    """A block's forward is charged less than its submodules' dispatch by the checkpoint wrapper
    the dispatch term carries (no checkpointing; host_costs.checkpoint_carried_s)."""
    swap: SwapOut | None = None
    """ZeRO-3 with the optimizer on NVMe: the gradient swapper's state over the backward."""


def _fetch(b: _Builder, c: _Ctx, mod: Module, tag: str, deps) -> tuple[int | None, tuple]:
    """NVMe read -> pinned buffer -> H2D of the partition -> all-gather (stage 3). Returns the
    fetch's last op and the ops the Python thread that issues it blocks on (fetch_issue_wait)."""
    part = ceil_div(mod.fetch_numel, c.dp)
    s = c.strategy
    last, bufs = None, 0
    if s.param_device == "nvme" and c.nvme_frac > 0:
        bufs = min(mod.fetch_tensors, s.zero.offload_param.buffer_count)
        last = b.add(f"{tag}.param_read", "nvme_read", deps, nbytes=c.nvme_frac * part * c.bpp,
                     take_buffers=bufs, pool="param")
    h2d = None
    if s.param_device in ("cpu", "nvme"):
        last = h2d = b.add(f"{tag}.param_h2d", "pcie_h2d", (last,) if last is not None else deps,
                           nbytes=part * c.bpp, give_buffers=bufs, pool="param" if bufs else "",
                           pinned=s.zero.offload_param.pin_memory)
    if c.dp > 1:
        ag = b.collective(tag, "all_gather", mod.fetch_numel * c.bpp, c.hw,
                          (last,) if last is not None else deps)
        last = ag if ag is not None else last
    return last, fetch_issue_wait(c.dp, h2d)


def fetch_issue_wait(dp: int, h2d: int | None) -> tuple[int, ...]:
    """What the Python thread that issues a fetch blocks on (0.19.8): with more than one rank,
    `_all_gather_dtype` copies the offloaded partition with a blocking `.to(device)` on the
    allgather stream (a stream synchronisation), so the host waits for that copy before it goes
    on; at one rank `_no_gather_coalesced` copies with non_blocking=True (the wait comes later,
    fetch_wait)."""
    return (h2d,) if dp > 1 and h2d is not None else ()


def _grads(b: _Builder, c: _Ctx, numel: int, tag: str, deps, micro: int, gas: int,
           nparams: int = 0, tensors: tuple = ()) -> list[int]:
    """Reduce a gradient bucket and move this rank's partition where the optimizer wants it."""
    s, stage = c.strategy, c.strategy.zero.stage
    boundary = micro == gas - 1
    part = ceil_div(numel, c.dp)
    last = None
    if stage == 2 or (stage == 1 and boundary):
        # ZeRO-1/2's copies of the bucket on the GPU: into the IPG buffer, div_ by the world size,
        # into the gradient partition (devices.zero12_bucket_hbm_bytes_per_element); ZeRO-1
        # reduces only at the boundary (stage_1_and_2.py `reduce_ready_partitions_and_remove_grads`)
        last = b.add(f"{tag}.bucket_copies", "gpu_compute", deps, work="zero12_bucket",
                     amount=float(numel))
        deps = (last,)
    if c.dp > 1 and (stage >= 2 or (stage == 1 and boundary)):
        last = b.collective(tag, grad_collective(s), numel * c.bpp, c.hw, deps)
    after = (last,) if last is not None else deps
    out = [last] if last is not None else []
    dev = s.optimizer_device
    if dev == "none":
        return out
    pin = s.zero.offload_optimizer.pin_memory
    if stage == 3:       # partition_grads: 16-bit copy_ to pinned CPU, .to(cuda) back
        d = b.add(f"{tag}.grad_d2h", "pcie_d2h", after, nbytes=part * c.bpp, pinned=pin)
        u = b.add(f"{tag}.grad_h2d", "pcie_h2d", (d,), nbytes=part * c.bpp, pinned=pin)
        out += [d, u]
        after = (u,)
    elif gas > 1 and stage == 2:
        # async_accumulate_grad_in_cpu_via_gpu (copy_grads_in_partition), every micro-step;
        # ZeRO-1 never calls it (DeepSpeed 0.19.8 on CPU, tests/test_zero12_accum_ds.py): its
        # gradients accumulate in param.grad on the GPU until the boundary (sim/memory.py)
        u = (b.add(f"{tag}.grad_h2d", "pcie_h2d", after, nbytes=part * c.bpp, pinned=pin)
             if micro else None)
        d = b.add(f"{tag}.grad_d2h", "pcie_d2h", (u,) if u is not None else after,
                  nbytes=part * c.bpp, pinned=pin)
        out += [x for x in (u, d) if x is not None]
        after = (d,)
    if gas > 1 and stage == 2 and c.grad_s[0] > 0 and nparams:
        # async_accumulate_grad_in_cpu_via_gpu walks the bucket's parameters one by one, in
        # every micro-step, the boundary's too (micro_step_id > 0 there): the unit calibrate_host
        # derives the term in
        out.append(b.add(f"{tag}.grad_accum", "cpu_host", after, work="grad_accum",
                         amount=float(nparams)))
    if boundary and c.swap is not None:     # fp32 partition -> gradient swapper -> NVMe
        return out + swap_out(b, c.swap, [partition(t, s, c.dp) for t in tensors] or [part],
                              part, tag, after)
    if boundary:         # fp32 gradient partition to the CPU
        d = b.add(f"{tag}.grad32_d2h", "pcie_d2h", after, nbytes=part * 4.0, pinned=pin)
        out.append(d)
        if stage in (1, 2) and c.grad_s[1] > 0 and nparams:
            # copy_grads_in_partition, per parameter: norm, overflow check (a host sync: the
            # device bool's truthiness), .to(fp32) + D2H; the Python thread is held until the
            # bucket's gradients are computed and copied, then dispatches the rest of backward
            out.append(b.add(f"{tag}.grad_copies", "cpu_host", (d,), work="grad_copies",
                             amount=float(nparams)))
    return out


_COMPUTE = {("block", "fwd"): 1.0, ("block", "recompute"): 1.0, ("block", "bwd"): 2.0,
            ("head", "fwd"): 1.0, ("head", "bwd"): 2.0, ("embed", "fwd"): 0.0,
            ("embed", "bwd"): 0.0}
"""Forward-equivalents per use: backward = 2 x forward (the embedding lookup is ~free); blocks are
timed from the GPU profile's measured layer-time curve where it has one (flops.block_seconds)."""


def _micro_step(b: _Builder, c: _Ctx, uses: list[Use], depth: int, micro: int, gas: int,
                start: tuple) -> list[int]:
    """Forward and backward of one micro-batch; returns the ops the next step waits for."""
    s, n = c.strategy, len(uses)
    # autograd sums a parameter's gradient over its uses before its hook runs (AccumulateGrad
    # fires once per backward; non-reentrant checkpointing, transformers 5.25's default:
    # modeling_utils.py _activation_checkpointing_enable), so ZeRO reduces a looped block's
    # gradient at its module's last backward use
    last_bwd = {u.module: i for i, u in enumerate(uses) if u.kind == "bwd"}
    fetch_done: list[int | None] = [None] * n
    compute: list[int | None] = [None] * n
    issued, bucket, nparams, pending, grad_ops = -1, 0.0, 0, [], []
    btensors: list[tuple[int, tuple[int, ...]]] = []
    host_block: tuple = ()
    tail, events = None, []
    for i, use in enumerate(uses):
        issue_waits: tuple = ()
        mod = c.mods[use.module]
        b.phase = "forward" if use.kind == "fwd" else "backward"
        prev = (compute[i - 1],) if i else start
        before = tail       # the allgather stream's last fetch before use i's hook runs
        while issued < min(n - 1, i + depth):
            issued += 1
            if uses[issued].fetch:
                wait = prev + ((fetch_done[i],) if issued != i and fetch_done[i] is not None else ())
                fetch_done[issued], blocks = _fetch(b, c, c.mods[uses[issued].module],
                                                    f"m{micro}.{use_tag(c, uses[issued])}", wait)
                issue_waits += blocks
                tail = fetch_done[issued] if fetch_done[issued] is not None else tail
        deps = prev + ((fetch_done[i],) if fetch_done[i] is not None else ())
        if fetch_done[i] is not None:
            deps += fetch_wait(c.dp, before, events)
            events.append(fetch_done[i] if before is None else max(before, fetch_done[i]))
        deps += issue_waits     # the hook issued those fetches and waited for their copies
        if c.ckpt_s > 0 and use.kind == "fwd" and mod.kind == "block":
            # HF gradient checkpointing wraps the block's forward in torch.utils.checkpoint
            # (saved-tensor hooks, RNG state) before any of its kernels is launched
            host_block = (b.add(f"m{micro}.{use_tag(c, use)}.ckpt", "cpu_host",
                                deps[len(prev):] + host_block, work="ckpt_wrap", amount=1.0),)
        elif c.ckpt_bwd_s > 0 and use.kind == "recompute" and mod.kind == "block":
            # backward reaches the block: torch.utils.checkpoint's unpack hook starts the
            # recompute under its own pack hooks (`_checkpoint_hook`) on the autograd thread
            host_block = (b.add(f"m{micro}.{use_tag(c, use)}.ckpt", "cpu_host",
                                deps[len(prev):] + host_block, work="ckpt_recompute",
                                amount=1.0),)
        if c.use_s.get(use.kind, 0.0) > 0 and mod.hooked:
            # the Python thread launches each submodule's kernels (and under ZeRO-3 first runs
            # its pre-forward hook, which waits for its gathered params); it runs ahead of the
            # GPU otherwise, so the GPU work of a use waits for its dispatch
            # without checkpointing a block's forward sheds the wrapper the dispatch term carries
            work = ("host.fwd_unwrapped" if c.unwrap and use.kind == "fwd" and mod.kind == "block"
                    else f"host.{use.kind}")
            hook = b.add(f"m{micro}.{use_tag(c, use)}.hooks", "cpu_host",
                         deps[len(prev):] + host_block, work=work, amount=float(mod.hooked))
            deps += (hook,)
        deps += host_block
        host_block = ()
        if not s.zero.overlap:
            deps += tuple(pending)
        compute[i] = b.add(f"m{micro}.{use_tag(c, use)}", "gpu_compute", deps,
                           work=f"{mod.kind}.{use.kind}",
                           amount=_COMPUTE[(mod.kind, use.kind)])
        if use.kind != "bwd" or s.zero.stage == 0 or last_bwd[use.module] != i:
            continue        # a looped block's gradient: once, after its last backward
        bucket += sum(mod.own_params)
        nparams += len(mod.own_params)
        if c.swap is not None:      # only the NVMe gradient swapper packs tensor by tensor
            btensors.append((use.module, mod.own_params))
        if bucket >= s.zero.reduce_bucket_size or i == n - 1:
            # a bucket is reduced in ds_id (module) order (stage3.py `__avg_scatter_grads` sorts)
            tensors = tuple(t for _, own in sorted(btensors) for t in own)
            pending = _grads(b, c, bucket, f"m{micro}.grads.{mod.name}", (compute[i],), micro, gas,
                             nparams, tensors)
            grad_ops += pending
            # host work and the blocking gradient swap-out copies hold the autograd thread
            host_block = tuple(x for x in pending if b.ops[x].resource == "cpu_host"
                               or b.ops[x].work == "grad_swap_out")
            bucket, nparams, btensors = 0.0, 0, []
    if s.zero.stage == 0 and micro == gas - 1 and c.dp > 1:    # engine.allreduce_gradients
        total = sum(sum(m.own_params) for m in c.mods)
        ar = b.collective(f"m{micro}.grads", "all_reduce", total * c.bpp, c.hw, (compute[-1],))
        grad_ops.append(ar)
    return [x for x in (compute[-1], *grad_ops) if x is not None]


def grad_collective(s: Strategy) -> str:
    """The collective that reduces a gradient bucket over the data-parallel ranks (0.19.8):
    ZeRO-3 reduce-scatters it (stage3.py `__avg_scatter_grads`); ZeRO-1/2 all-reduce the whole
    bucket (stage_1_and_2.py `average_tensor` -> `allreduce_and_scatter`, or `allreduce_bucket`
    without reduce_scatter) unless use_multi_rank_bucket_allreduce is off, when each rank's
    slice is reduced to its owner (`allreduce_no_retain`: reduce-scatter volume). ZeRO-1
    reduces only at the accumulation boundary (`reduce_ready_partitions_and_remove_grads`)."""
    z = s.zero
    if z.stage >= 3 or (z.reduce_scatter and not z.use_multi_rank_bucket_allreduce):
        return "reduce_scatter"
    return "all_reduce"


MAX_ONGOING_FETCH_EVENTS = 2
"""partitioned_param_coordinator.py `__max_ongoing_fetch_events`: fetch events the host lets run
ahead of it before it synchronises the oldest."""


def fetch_wait(dp: int, stream_tail: int | None, events: list[int]) -> tuple[int, ...]:
    """What the Python thread waits for before a use whose parameters are in flight dispatches
    (`fetch_sub_module`, per parameter): at one rank, `NoGatherCoalescedHandle.wait` synchronises
    the allgather stream, so it waits for every fetch queued there, prefetches included
    (`stream_tail`); with more ranks, each wait records an event on that stream and the host
    synchronises the oldest once more than MAX_ONGOING_FETCH_EVENTS are pending (`events`: the
    stream position at each earlier wait)."""
    if dp == 1:
        return (stream_tail,) if stream_tail is not None else ()
    if len(events) > MAX_ONGOING_FETCH_EVENTS:
        return (events[-MAX_ONGOING_FETCH_EVENTS - 1],)
    return ()


def use_tag(c: _Ctx, use: Use) -> str:
    return f"{use.kind}.{c.mods[use.module].name}"


def _optimizer(b: _Builder, c: _Ctx, groups: list[list[int]], on_nvme: list[bool],
               start: tuple) -> None:
    """Sub-groups strictly in order: [swap-in] -> Adam -> 16-bit params back -> [swap-out]."""
    b.phase = "optimizer"
    s, dev = c.strategy, c.strategy.optimizer_device
    oo = s.zero.offload_optimizer
    prev_adam = prev_read = prev_write = None
    for k, g in enumerate(groups):
        e = float(sum(g))
        tag = f"opt.sg{k}"
        if dev == "none":
            prev_adam = b.add(f"{tag}.adam_gpu", "gpu_compute", (prev_adam,) if k else start,
                              work="adam_gpu", amount=e)
            continue
        read = None
        if dev == "nvme":
            if oo.pipeline_read and prev_read is not None:
                rdeps = (prev_read,)
            else:
                rdeps = (prev_write,) if prev_write is not None else (prev_adam,) if k else start
            read = b.add(f"{tag}.swap_in", "nvme_read", rdeps, nbytes=e * 16.0,
                         take_buffers=OPT_STATE_TENSORS + 1, pool="optimizer")
            prev_read = read
        adeps = (read,) if read is not None else ((prev_adam,) if k else start)
        if dev == "nvme" and not oo.pipeline_write and prev_write is not None:
            adeps += (prev_write,)
        adam = b.add(f"{tag}.adam", "cpu_adam", adeps, work="adam_cpu", amount=e)
        back = adam
        if s.param_device == "none":
            back = b.add(f"{tag}.param_h2d", "pcie_h2d", (adam,), nbytes=e * c.bpp,
                         pinned=oo.pin_memory)
        elif on_nvme[k]:
            back = b.add(f"{tag}.param_write", "nvme_write", (adam,), nbytes=e * c.bpp)
        if dev == "nvme":
            prev_write = b.add(f"{tag}.swap_out", "nvme_write", (back,),
                               nbytes=e * 4.0 * OPT_STATE_TENSORS,
                               give_buffers=OPT_STATE_TENSORS + 1, pool="optimizer")
        prev_adam = back
    if s.zero.stage in (1, 2) and c.dp > 1:     # updated 16-bit partitions all-gathered
        total = sum(sum(g) for g in groups) * c.dp
        last = prev_write if prev_write is not None else prev_adam
        b.collective("opt.params", "all_gather", total * c.bpp, c.hw, (last,))


WORKLOAD_CACHE_SIZE = 128
"""Workloads `build_workload` keeps (least recently used dropped): a sweep over rates, drives or
the optimizer's speed reuses one workload per (model, config, GPU count, first step, host terms)."""

_workloads: OrderedDict[tuple, Workload] = OrderedDict()


def clear_workload_cache() -> None:
    """Forget every cached workload (benchmarks time a cold build with it)."""
    _workloads.clear()


@dataclass(frozen=True)
class _HostTerms:
    """What a workload reads from the software profile: the host seconds it writes into its
    ops (sim/host_costs.py) and whether the norm all-reduce waits for the slowest rank."""

    use_s: tuple[tuple[str, float], ...]
    grad_s: tuple[float, float]
    ckpt_s: float
    ckpt_bwd_s: float
    ckpt_carried_s: float
    rank_sync_s: float
    step_s: float
    overflow_scan_s: float


def _host_terms(software: Software | None, strategy: Strategy) -> _HostTerms | None:
    if software is None:
        return None
    return _HostTerms(
        use_s=tuple((k, use_cost_s(software, strategy, k)) for k in ("fwd", "recompute", "bwd")),
        grad_s=(grad_event_cost_s(software, False), grad_event_cost_s(software, True)),
        ckpt_s=checkpoint_cost_s(software, strategy),
        ckpt_bwd_s=checkpoint_cost_s(software, strategy, "recompute"),
        ckpt_carried_s=checkpoint_carried_s(software, strategy),
        rank_sync_s=software.multi_rank_sync_s, step_s=step_cost_s(software, strategy),
        overflow_scan_s=overflow_scan_cost_s(software, strategy))


TOKEN_FIELDS = ("seq_len",)
"""Model fields a dense model's ops never read (its compute per micro-batch is the Timer's)."""
BATCH_FIELDS = ("train_batch_size", "train_micro_batch_size_per_gpu", "raw")
"""Strategy fields the ops never read for a dense model: the batch (the Timer's) and the raw
ds_config (every key the simulator reads is a field)."""


def _what_ops_read(model: Model, strategy: Strategy) -> tuple:
    """The model and strategy as the workload cache keys them: whole for a MoE model (its tokens
    route to experts), without TOKEN_FIELDS / BATCH_FIELDS for a dense one."""
    if model.moe is not None:
        return model, repr(strategy)
    return (tuple(getattr(model, f.name) for f in fields(model) if f.name not in TOKEN_FIELDS),
            repr(tuple(getattr(strategy, f.name) for f in fields(strategy)
                       if f.name not in BATCH_FIELDS)))


def build_workload(hw: Hardware, model: Model, strategy: Strategy, *,
                   first_step: bool = False, software: Software | None = None) -> Workload:
    """The ops of one optimizer step (gradient_accumulation_steps micro-steps + the step).

    Cached by what it depends on: the model, the strategy (every field), the GPU counts, step 1
    or not, and the host terms the software profile gives it (never the hardware's rates, which
    only `engine.Timer` reads). The tokens of a micro-batch (micro-batch x sequence length) are
    read only to count the experts a MoE block routes them to (sim/modules._block): a dense
    model's workload is keyed without them (a sweep over batch and sequence builds it once; the
    Timer times its compute per micro-batch). A Workload is frozen, so a cached one is shared
    safely."""
    check_supported(strategy)
    terms = _host_terms(software, strategy)
    key = (*_what_ops_read(model, strategy), hw.world_size, hw.gpus_per_node, hw.nodes,
           first_step, terms)
    wl = _workloads.get(key)
    if wl is not None:
        _workloads.move_to_end(key)
        return wl
    wl = _workloads[key] = _build(hw, model, strategy, first_step, terms)
    if len(_workloads) > WORKLOAD_CACHE_SIZE:
        _workloads.popitem(last=False)
    return wl


def _build(hw: Hardware, model: Model, strategy: Strategy, first_step: bool,
           terms: _HostTerms | None) -> Workload:
    dp = hw.world_size
    lay = param_layout(model, strategy, dp)
    mods, groups, frac, on_nvme = list(lay.modules), lay.groups, lay.nvme_param_fraction, lay.on_nvme
    c = _Ctx(hw=hw, strategy=strategy, mods=mods, dp=dp, bpp=strategy.bytes_per_param,
             nvme_frac=frac, use_s=dict(terms.use_s) if terms else {},
             grad_s=terms.grad_s if terms else (0.0, 0.0),
             ckpt_s=terms.ckpt_s if terms else 0.0,
             ckpt_bwd_s=terms.ckpt_bwd_s if terms else 0.0,
             unwrap=bool(terms and terms.ckpt_carried_s > 0),
             swap=grad_swapper(lay, strategy))
    uses = trace(mods, strategy, first_step, forward_uses(model))
    depth = prefetch_depth(mods, strategy, first_step)
    b = _Builder()
    start: tuple = ()
    gas = strategy.gradient_accumulation_steps
    for micro in range(gas):
        start = tuple(_micro_step(b, c, uses, depth, micro, gas, start))
    if c.swap is not None:
        # the step's host work before the sub-group loop runs while the gradient writes are in
        # flight; the first swap-in's flush (FIFO behind them on the aio handle) waits for them
        start = tuple(x for x in start if b.ops[x].resource != "nvme_write")
    if (dp > 1 and terms and terms.rank_sync_s > 0
            and strategy.optimizer_device != "none"):
        # the norm all-reduce waits for the slowest rank's host work (its gradient copies to the
        # CPU, contended between the ranks): fitted on 2-rank CPU-offload runs only. Without
        # offload the ranks leave backward in step, through its gradient collectives (zenflow's
        # 2-GPU Qwen2.5-1.5B ZeRO-2: 0.240 s published, 0.288 s predicted with the wait)
        b.phase = "optimizer"
        start = (b.add("opt.rank_sync", "cpu_host", start, work="rank_sync", amount=1.0),)
    tensors = float(sum(len(m.own_params) for m in mods))
    if strategy.zero.stage >= 1:
        # ZeRO-1/2/3 walk only the tensors of this rank's partition (stage_1_and_2.py
        # `scaled_global_norm` -> `get_grad_norm_direct(..., params_in_partition[i])`; stage3.py per
        # sub-group of the rank's partition); stage 0's FP16_Optimizer walks every tensor
        tensors /= dp
    step_s = terms.step_s if terms else 0.0
    if step_s > 0:
        # the optimizer's Python loop over parameter tensors (stage 0 FP16_Optimizer.step: one
        # fp32 conversion per gradient; ZeRO-1/2/3: norm, unscale, views, copy-back bookkeeping)
        # runs on the thread that then launches Adam; the clip decision and the invalid-norm check
        # read the norm on the host (a sync): the loop, then the optimizer's GPU/CPU work
        b.phase = "optimizer"
        start = (b.add("opt.host_loop", "cpu_host", start, work="step_host", amount=tensors),)
    if terms and terms.overflow_scan_s > 0:
        # fp16 ZeRO-3 with the optimizer offloaded: isinf/isnan over the host gradient partition
        # before any sub-group steps (stage3.py step -> _overflow_check_and_loss_scale_update)
        b.phase = "optimizer"
        start = (b.add("opt.overflow_scan", "cpu_host", start, work="overflow_scan",
                       amount=lay.partition_numel),)
    _optimizer(b, c, groups, on_nvme, flush_swap_out(b, c.swap, start))
    return Workload(ops=tuple(b.ops), micro_steps=gas, dp=dp,
                    sub_groups=tuple(float(sum(g)) for g in groups), nvme_param_fraction=frac,
                    optimizer_buffers=strategy.zero.offload_optimizer.buffer_count,
                    param_buffers=strategy.zero.offload_param.buffer_count)


def bytes_by_resource(ops) -> dict[str, float]:
    """Bytes each resource moves in the ops (collectives: full tensor bytes)."""
    out: dict[str, float] = {}
    for op in ops:
        if op.nbytes:
            out[op.resource] = out.get(op.resource, 0.0) + op.nbytes
    return out


def expected_bytes(hw: Hardware, model: Model, strategy: Strategy, *,
                   first_step: bool = False) -> dict[str, float]:
    """Bytes per step of one rank by closed form (the bytes-per-parameter table that
    tests/test_workload.py states, generalised to any precision, gradient accumulation, reuse
    distance and max_in_cpu) — the conservation check for the ops `build_workload` emits.

    P = this rank's partition, F = elements fetched per micro-step (uses that re-gather), g =
    gradient_accumulation_steps, b = bytes per 16-bit param:
      H2D  = g F b [params offloaded] + g P b [stage-3 grad bounce] | (g-1) P b [stage 2, g>1]
             + P b [16-bit params back to a GPU-resident partition]
      D2H  = g P b [stage 3] | g P b [stage 2, g>1]  + 4 P [fp32 grads]   (stage 1: no bounce)
      NVMe read  = g F b x nvme_fraction + 16 P [p, m, v, g]
      NVMe write = 4 P [g] + 12 P [p, m, v] + b P_nvme [16-bit params beyond max_in_cpu]
    """
    dp, s = hw.world_size, strategy
    lay = param_layout(model, strategy, dp)
    mods, groups, frac, on_nvme = list(lay.modules), lay.groups, lay.nvme_param_fraction, lay.on_nvme
    g, b = s.gradient_accumulation_steps, s.bytes_per_param
    P = sum(sum(m.own_params) for m in mods) / dp
    uses = trace(mods, s, first_step, forward_uses(model))
    F = sum(mods[u.module].fetch_numel / dp for u in uses if u.fetch)
    out = dict.fromkeys(("pcie_h2d", "pcie_d2h", "nvme_read", "nvme_write"), 0.0)
    if s.param_device in ("cpu", "nvme"):
        out["pcie_h2d"] += g * F * b
        out["nvme_read"] += g * F * b * frac
    if s.optimizer_device == "none":
        return out
    if s.zero.stage == 3:
        out["pcie_h2d"] += g * P * b
        out["pcie_d2h"] += g * P * b
    elif g > 1 and s.zero.stage == 2:
        out["pcie_h2d"] += (g - 1) * P * b
        out["pcie_d2h"] += g * P * b
    out["pcie_d2h"] += 4 * P
    if s.param_device == "none":
        out["pcie_h2d"] += P * b
    if s.optimizer_device == "nvme":
        out["nvme_read"] += 16 * P
        out["nvme_write"] += 16 * P
    out["nvme_write"] += b * sum(sum(x) for x, n in zip(groups, on_nvme) if n)
    return out
