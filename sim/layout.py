"""One parameter layout: every parameter tensor of a model as one rank of a ZeRO job holds it —
its partition, its optimizer sub-group, whether it persists on the GPU, and what lives in CPU
memory and on NVMe. The workload (sim/workload.py), the memory planner (sim/memory*.py) and
preflight (runner/preflight.py) all read it from here (pure Python).

Sources (deepspeed 0.19.8): runtime/zero/partition_parameters.py `_aligned_size`/`_padding_size`
(a stage-3 partition is ceil(numel / dp): the tensor is padded to a multiple of dp),
`_partition_param` (zero.Init writes every swappable partition to NVMe);
runtime/zero/parameter_offload.py `mark_persistent_parameters` (numel <= threshold persists);
runtime/zero/stage3.py `_create_fp16_sub_groups`, `_create_param_groups_fp16_flat_cpu_memory`,
`_create_fp16_partitions_with_defragmentation`, `_swappable_optimizer_subgroup`;
runtime/swap_tensor/utils.py MIN_AIO_BYTES, AIO_ALIGNED_BYTES;
partitioned_param_swapper.py `swappable_tensor`, `get_buffer`, `_io_aligned_numel`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from tierlab.profiles.layout import largest_matrix_numel
from tierlab.profiles.schema import Model
from tierlab.sim.modules import Module, modules
from tierlab.sim.strategy import Strategy

MIN_AIO_BYTES = 1 << 20
"""swap_tensor/utils.py: tensors smaller than max(1 MiB, aio block_size) are never swapped."""
AIO_ALIGNED_BYTES = 1024
"""swap_tensor/utils.py: aio reads/writes are aligned to 1 KiB x intra_op_parallelism."""


def n_params(model: Model) -> int:
    """`model.n_params` (cached on the Model itself: profiles/schema.py)."""
    return model.n_params


@dataclass(frozen=True, kw_only=True)
class ParamLayout:
    """The parameters of one rank, in the order DeepSpeed groups them (embedding, blocks, head)."""

    modules: tuple[Module, ...]
    """The units ZeRO-3 fetches (sim/modules.py), each with the tensors it owns."""
    names: tuple[str, ...]
    """Every parameter tensor ('embed_tokens', 'layers.3.q_proj', 'lm_head'), a tied head once."""
    numels: tuple[int, ...]
    """Elements of each tensor (the whole tensor, all ranks)."""
    groups: tuple[tuple[float, ...], ...]
    """This rank's partition of each tensor, in optimizer sub-groups (stages 0-2: one group)."""
    on_nvme: tuple[bool, ...]
    """Per sub-group: its 16-bit params live on NVMe (no room left under max_in_cpu)."""
    persistent_numel: int
    """Elements ZeRO-3 keeps whole on every GPU (numel <= stage3_param_persistence_threshold)."""
    bytes_per_param: int

    @cached_property
    def parts(self) -> tuple[float, ...]:
        """This rank's partition of each tensor, in tensor order (computed once: callers index
        it per tensor, and a 1T-parameter model has tens of thousands)."""
        return tuple(p for g in self.groups for p in g)

    @cached_property
    def partition_numel(self) -> float:
        """Elements of this rank's parameter (and optimizer) partition."""
        return float(sum(self.parts))

    @property
    def nvme_param_fraction(self) -> float:
        """Fraction of this rank's 16-bit partition that lives on NVMe during training."""
        total = self.partition_numel
        nvme = sum(sum(g) for g, n in zip(self.groups, self.on_nvme) if n)
        return nvme / total if total else 0.0

    cpu_flat_numel: float
    """Elements of the pinned 16-bit CPU flat buffer of offloaded params (stage3.py
    _create_param_groups_fp16_flat_cpu_memory: capped at max_in_cpu only for device nvme — then a
    sub-group that does not fit leaves the rest of it unused; device cpu: the whole partition,
    TinyLlama 2.2 GB -> 2^32 B pinned, not min(1e9, n) x 2 B)."""

    def group_numels(self, k: int) -> tuple[int, ...]:
        """Whole-tensor elements of sub-group k's parameters."""
        start = sum(len(g) for g in self.groups[:k])
        return self.numels[start:start + len(self.groups[k])]


def partition(numel: int, strategy: Strategy, dp: int) -> float:
    """One rank's share of a tensor: stage 3 pads each tensor to a multiple of dp
    (partition_parameters.py `_aligned_size`: ds_numel + (dp - ds_numel % dp) % dp); stages 1-2
    partition the flat group (its padding, < dp elements, ignored); stage 0 holds it all."""
    stage = strategy.zero.stage
    if stage == 0:
        return float(numel)
    return float(math.ceil(numel / dp)) if stage == 3 else numel / dp


def sub_groups(parts: list[float], strategy: Strategy) -> list[list[float]]:
    """Partitions grouped as DeepSpeed's `_create_fp16_sub_groups` (stage 3: close a group once it
    reaches sub_group_size; stages 0-2: one group)."""
    if strategy.zero.stage < 3:
        return [list(parts)]
    groups, cur = [], []
    for n in parts:
        cur.append(n)
        if sum(cur) >= strategy.zero.sub_group_size:
            groups.append(cur)
            cur = []
    if cur:
        groups.append(cur)
    return groups


def nvme_groups(groups: list[list[float]], strategy: Strategy) -> list[bool]:
    """Which sub-groups' 16-bit params live on NVMe: those that no longer fit the flat CPU buffer of
    max_in_cpu elements (stage3.py _create_fp16_partitions_with_defragmentation: a group gets a
    flat buffer only if flat_offset + its size <= the buffer's numel)."""
    if strategy.param_device != "nvme":
        return [False] * len(groups)
    cap, offset, on_nvme = strategy.zero.offload_param.max_in_cpu, 0.0, []
    for g in groups:
        offset += sum(g)
        on_nvme.append(offset > cap)
    return on_nvme


_RECENT: list[tuple[Model, tuple, "ParamLayout"]] = []
"""The last layouts built, by the identity of their (frozen) model and what the layout reads of
the strategy (layout_key): one memory plan reads the layout four times, a 1T-parameter model's
takes ~0.2 s to build, and `plan` asks for one per candidate (70B on dgx-a100: 2,328 asks, 280
candidates, most differing only in micro-batch, checkpointing or knobs no layout reads)."""

RECENT_LAYOUTS = 32


def layout_key(model: Model, strategy: Strategy, dp: int) -> tuple:
    """Everything _build_layout reads of the strategy: the zero_optimization block (stage,
    offload_param, sub_group_size, persistence threshold), the compute dtype's bytes, and for a
    MoE model the micro-batch (the experts its tokens reach: modules._block); the world."""
    tokens = strategy.train_micro_batch_size_per_gpu if model.moe is not None else None
    return strategy.zero, strategy.bytes_per_param, tokens, dp


def param_layout(model: Model, strategy: Strategy, dp: int) -> ParamLayout:
    """The layout of `model` under `strategy` on a data-parallel world of `dp` ranks."""
    key = layout_key(model, strategy, dp)
    for i, (m, k, lay) in enumerate(_RECENT):
        if m is model and k == key:
            if i:
                _RECENT.insert(0, _RECENT.pop(i))
            return lay
    lay = _build_layout(model, strategy, dp)
    _RECENT.insert(0, (model, key, lay))
    del _RECENT[RECENT_LAYOUTS:]
    return lay


def _build_layout(model: Model, strategy: Strategy, dp: int) -> ParamLayout:
    mods = modules(model, strategy)
    names = [n for m in mods for n in m.own_names]
    numels = [n for m in mods for n in m.own_params]
    groups = sub_groups([partition(n, strategy, dp) for n in numels], strategy)
    thr = strategy.zero.stage3_param_persistence_threshold if strategy.zero.stage == 3 else -1
    part = sum(sum(g) for g in groups)
    flat = (min(strategy.zero.offload_param.max_in_cpu, part) if strategy.param_device == "nvme"
            else part)
    return ParamLayout(modules=tuple(mods), names=tuple(names), numels=tuple(numels),
                       groups=tuple(tuple(g) for g in groups),
                       on_nvme=tuple(nvme_groups(groups, strategy)),
                       persistent_numel=sum(n for n in numels if n <= thr),
                       cpu_flat_numel=float(flat),
                       bytes_per_param=strategy.bytes_per_param)


# ----------------------------------------------------------------------------------------------
# NVMe: what DeepSpeed swaps, and the swap files it writes

def min_aio_bytes(strategy: Strategy) -> int:
    """Tensors smaller than this are never swapped (swappable_tensor: max(1 MiB, block_size))."""
    return max(MIN_AIO_BYTES, strategy.aio.block_size)


def io_aligned_numel(numel: float, elem_bytes: int, strategy: Strategy) -> float:
    """Elements rounded up to the aio alignment: 1 KiB x intra_op_parallelism (swap_tensor/utils.py
    AIO_ALIGNED_BYTES; partitioned_param_swapper.py / optimizer_utils.py `_io_aligned_numel`)."""
    align = AIO_ALIGNED_BYTES * strategy.aio.intra_op_parallelism // elem_bytes
    return float(math.ceil(numel / align) * align)


OPT_STATE_TENSORS = 3
"""Adam's swapped fp32 tensors per sub-group: master weights p, m, v (12 B/element)."""


@dataclass(frozen=True, kw_only=True)
class SwapBuffers:
    """One pool of DeepSpeed's locked aio swap buffers (aio_handle.new_cpu_locked_tensor:
    page-aligned malloc + mlock of the exact size, not torch's power-of-two pinned cache)."""

    count: int
    """Buffers in the pool (offload_*.buffer_count)."""
    numel: float
    """Elements of one buffer, io-aligned."""
    elem_bytes: int
    """Bytes per element (4: fp32 optimizer state; the 16-bit parameters' 2)."""

    @property
    def nbytes(self) -> float:
        return self.count * self.elem_bytes * self.numel


def optimizer_swap_buffers(groups, strategy: Strategy) -> SwapBuffers:
    """The optimizer swapper's buffers (optimizer on NVMe): offload_optimizer.buffer_count of the
    io-aligned largest sub-group, fp32 (OptimizerSwapper.__init__: SwapBufferManager of
    `largest_numel`); in ZeRO-3's backward the gradient swapper takes them all
    (optimizer_utils.py `_swap_out_gradients` -> `allocate_all`). `groups`: the sub-groups'
    tensor sizes (ParamLayout.groups)."""
    return SwapBuffers(count=strategy.zero.offload_optimizer.buffer_count, elem_bytes=4,
                       numel=io_aligned_numel(max(sum(g) for g in groups), 4, strategy))


def param_swap_buffers(strategy: Strategy) -> SwapBuffers:
    """The parameter swapper's buffers (params on NVMe): partitioned_param_swapper.py
    `_configure_aio`, ONE locked tensor of offload_param.buffer_count x io-aligned buffer_size
    16-bit elements; every swapped partition must fit one (`get_buffer` asserts it)."""
    op, b = strategy.zero.offload_param, strategy.bytes_per_param
    return SwapBuffers(count=op.buffer_count, elem_bytes=b,
                       numel=io_aligned_numel(op.buffer_size, b, strategy))


def optimizer_buffers_needed(strategy: Strategy, sub_groups: int | None = None) -> int:
    """Swap buffers the optimizer swapper needs. Each sub-group swap-in takes one buffer per
    swapped tensor (fp32 param + Adam's exp_avg and exp_avg_sq) plus one for the gradient = 4
    (pipelined_optimizer_swapper._swap_in_optimizer_state); with >= 2 sub-groups, pipeline_read
    holds the next sub-group's 4 and pipeline_write the previous one's 4 while Adam runs:
    4 x (1 + read + write) -> 4, 8 or 12 (the H200 host: 4 and 8 fail, 12 works). `sub_groups`
    None: as if there were several."""
    oo = strategy.zero.offload_optimizer
    if sub_groups is not None and sub_groups < 2:
        return OPT_STATE_TENSORS + 1
    return pipelined_buffer_count(oo.pipeline_read, oo.pipeline_write)


def pipelined_buffer_count(pipeline_read: bool, pipeline_write: bool) -> int:
    """offload_optimizer.buffer_count for a pipeline choice with several sub-groups: 4 per
    sub-group in flight (optimizer_buffers_needed), 4 x (1 + read + write)."""
    return (OPT_STATE_TENSORS + 1) * (1 + int(pipeline_read) + int(pipeline_write))


def param_buffer_numel_needed(model: Model, world_size: int) -> int:
    """Elements offload_param.buffer_size must hold at least: every swapped partition fits one
    buffer (partitioned_param_swapper.py `get_buffer` asserts "buffer nbytes != file bytes"),
    the largest being the largest matrix's partition, ceil(numel / world_size)."""
    return -(-largest_matrix_numel(model) // world_size)


def swapped_params(lay: ParamLayout, strategy: Strategy) -> list[int]:
    """Indices of the tensors whose 16-bit partition zero.Init puts on NVMe: every partition of at
    least max(1 MiB, block_size) (partition_parameters.py `_partition_param`: final_location nvme
    if `param_swapper.swappable_tensor(numel=partition_size)`, then `swap_out_and_release`) —
    whatever max_in_cpu says; the ones under it are read back into the CPU flat buffer later."""
    if strategy.param_device != "nvme":
        return []
    b, floor = lay.bytes_per_param, min_aio_bytes(strategy)
    return [i for i, p in enumerate(lay.parts) if p * b >= floor]


def nvme_resident_params(lay: ParamLayout, strategy: Strategy) -> list[int]:
    """Indices of the swapped tensors that stay on NVMe in training: those of the sub-groups past
    max_in_cpu (the others were swapped into the flat buffer: stage3.py `_move_to_flat_buffer`)."""
    group_of = [k for k, g in enumerate(lay.groups) for _ in g]
    return [i for i in swapped_params(lay, strategy) if lay.on_nvme[group_of[i]]]


def swap_file_bytes(lay: ParamLayout, strategy: Strategy) -> dict[str, float]:
    """Bytes of the swap files one rank writes under its nvme_path(s), by what they hold.

    Optimizer on NVMe: per swappable sub-group (stage3.py `_swappable_optimizer_subgroup`: fp32
    numel x 4 B >= max(1 MiB, block_size)) the fp32 p, m, v files of io-aligned length
    (partitioned_optimizer_swapper.py swap_out_optimizer_state) and the fp32 gradient
    (optimizer_utils.py `_swap_out_gradients`). Params on NVMe: one file per swapped partition,
    the io-aligned swap buffer written whole (partitioned_param_swapper.py `get_buffer`,
    `_swap_out`); zero.Init writes them all and nothing removes the files, so the ones under
    max_in_cpu take disk space too. Llama-0.5B, one rank, params and optimizer on NVMe:
    0.49 G x 16 B = 7.91 GB + 16-bit params 0.97 GB = 8.88 GB."""
    out: dict[str, float] = {}
    if strategy.optimizer_device == "nvme":
        floor = min_aio_bytes(strategy)
        sizes = [sum(g) for g in lay.groups if 4.0 * sum(g) >= floor]
        out["optimizer_p_m_v_fp32"] = sum(12.0 * io_aligned_numel(n, 4, strategy) for n in sizes)
        out["grads_fp32"] = 4.0 * sum(sizes)
    b = lay.bytes_per_param
    out["params_16bit"] = sum(b * io_aligned_numel(lay.parts[i], b, strategy)
                              for i in swapped_params(lay, strategy))
    return {k: v for k, v in out.items() if v}
