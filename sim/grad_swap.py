"""The fp32 gradient swap-out of ZeRO-3 with the optimizer on NVMe, as DeepSpeed 0.19.8 runs it
inside backward (pure Python: which bytes go into which pinned buffer, and when a buffer must be
waited for).

Sources (deepspeed 0.19.8, runtime/): zero/stage3.py `partition_grads` (per reduced bucket, at the
accumulation boundary) -> `_offload_grad_partition_at_boundary` (`grad_buffer.to(fp32)` on the
GPU for a swappable sub-group) -> `_swap_out_offload_fp32_gradients` -> swap_tensor/
partitioned_optimizer_swapper.py (and pipelined_optimizer_swapper.py) `swap_out_gradients` ->
optimizer_utils.py `_swap_out_gradients` (on first use `swap_buffer_manager.allocate_all`: every
free optimizer swap buffer, each the io-aligned largest sub-group in fp32) ->
async_swapper.py `AsyncTensorSwapper`:
- `_swap_out_tensor` -> swap_tensor/utils.py `SwapBuffer.insert_tensor`: `copy_` of the GPU
  tensor into the current buffer — a blocking D2H on the calling (autograd) thread; a tensor
  takes its io-aligned length and never straddles two buffers;
- `_make_swap_space`: when the current buffer is full and a buffer is free, its writes are
  submitted (`_flush_ready_buffers`, `async_pwrite`, no wait); when none is free,
  `_flush_buffers_until_complete` submits it and waits for every write in flight
  (`aio_handle.wait()`) — a stall of the backward;
- the last buffer is written when the optimizer's first swap-in flushes the swapper
  (optimizer_utils.py `_flush_gradient_swapper` -> `release_buffers`).
The buffers come from `aio_handle.new_cpu_locked_tensor` (csrc/pin_memory/page_alloc.cpp
`ds_page_aligned_alloc`: posix_memalign + mlock): locked for the kernel but not registered with
CUDA, so the D2H copy into them is a pageable copy for the CUDA driver (staged through its own
pinned bounce buffer) and runs at the host's pageable D2H rate, whatever `pin_memory` says.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tierlab.sim.layout import AIO_ALIGNED_BYTES, optimizer_swap_buffers


@dataclass(frozen=True, slots=True)
class Piece:
    """A run of consecutive gradient tensors copied into one buffer fill."""

    fill: int
    """Index of the buffer fill (0, 1, ... over the whole backward)."""
    numel: float
    """Elements of this bucket's tensors copied into that fill."""
    waits: bool
    """The swapper found no free buffer before this fill: it waited for every write in flight."""


@dataclass
class GradSwapper:
    """DeepSpeed's AsyncTensorSwapper over one backward (state carried across reduce buckets)."""

    buffer_numel: float
    """Elements of one swap buffer: the io-aligned largest sub-group (optimizer_utils.py
    `largest_numel`)."""
    buffers: int
    """Buffers it holds: all of offload_optimizer.buffer_count (`allocate_all`)."""
    align: int = 1
    """Elements each tensor is rounded up to (1 KiB x aio.intra_op_parallelism / 4 B)."""
    fill: int = -1
    """Current buffer fill (-1: none yet)."""
    used: float = 0.0
    """Elements used in the current fill."""

    def __post_init__(self) -> None:
        if self.buffer_numel <= 0 or self.buffers < 1:
            raise ValueError(f"GradSwapper needs buffers of > 0 elements, got {self.buffers} of "
                             f"{self.buffer_numel}")

    def pack(self, tensors: list[float]) -> list[Piece]:
        """The pieces one `swap_out_gradients` call (one reduced bucket's tensors, in order) makes.

        Llama-0.5B on one rank, sub_group_size 1e8, 4 buffers: the embedding (136.1 M elements)
        is the largest sub-group, so 4 x 136.1 M x 4 B = 2.18 GB of buffers hold all 494 M
        gradients (1.98 GB) — no wait. TinyLlama (1.1 G) with the same config: ~4.4 buffers of
        grads for 4 buffers — the fifth fill waits for the first four writes."""
        pieces: list[Piece] = []
        for numel in tensors:
            need = math.ceil(numel / self.align) * self.align
            if need > self.buffer_numel:
                raise ValueError(f"gradient of {numel:.0f} elements exceeds the swap buffer "
                                 f"({self.buffer_numel:.0f})")
            waits = False
            if self.fill < 0 or self.used + need > self.buffer_numel:
                self.fill += 1
                self.used = 0.0
                waits = self.fill > 0 and self.fill % self.buffers == 0
            self.used += need
            if pieces and pieces[-1].fill == self.fill:
                pieces[-1] = Piece(self.fill, pieces[-1].numel + numel, pieces[-1].waits)
            else:
                pieces.append(Piece(self.fill, numel, waits))
        return pieces


# ----------------------------------------------------------------------------------------------
# op emission (sim/workload.py's builder: `add(name, resource, deps, **op fields)` -> op id)

@dataclass
class SwapOut:
    """The swapper of the boundary backward and the fill whose writes are not yet submitted."""

    swapper: GradSwapper
    op: int | None = None
    """Last D2H copy into the open fill."""
    nbytes: float = 0.0
    """Bytes copied into the open fill."""
    fill: int = -1


def grad_swapper(lay, strategy) -> SwapOut | None:
    """ZeRO-3 + optimizer on NVMe: every optimizer swap buffer (the io-aligned largest sub-group,
    fp32) goes to the gradient swapper in backward (optimizer_utils.py `_swap_out_gradients` ->
    `allocate_all(num_elems=self.largest_numel)`); None for any other config."""
    if strategy.zero.stage != 3 or strategy.optimizer_device != "nvme":
        return None
    pool = optimizer_swap_buffers(lay.groups, strategy)
    align = AIO_ALIGNED_BYTES * strategy.aio.intra_op_parallelism // pool.elem_bytes
    return SwapOut(GradSwapper(buffer_numel=pool.numel, align=max(1, align), buffers=pool.count))


def swap_out(b, sw: SwapOut, tensors: list[float], part: float, tag: str, after) -> list[int]:
    """One bucket's `_swap_out_offload_fp32_gradients`: blocking D2H copies of its fp32 gradient
    partitions (`part` elements in all, `tensors` in ds_id order) into the swap buffers at the
    pageable rate; a full buffer's writes are submitted when the next fill starts, and a fill with
    no free buffer first waits for every write in flight. The caller holds the autograd thread
    until the last copy (they block it); the last fill is written by `flush_swap_out`."""
    out: list[int] = []
    pieces = sw.swapper.pack(tensors)
    total = sum(p.numel for p in pieces) or 1.0
    last = tuple(after)
    for p in pieces:
        deps = last
        if p.fill != sw.fill and sw.op is not None:     # _flush_ready_buffers: async_pwrite
            w = b.add(f"{tag}.grad32_write{sw.fill}", "nvme_write", (sw.op,), nbytes=sw.nbytes)
            out.append(w)
            sw.nbytes = 0.0
            if p.waits:         # _flush_buffers_until_complete: aio_handle.wait() for all
                deps += (w,)
        sw.fill = p.fill
        nbytes = part * 4.0 * p.numel / total
        sw.op = b.add(f"{tag}.grad32_d2h{p.fill}", "pcie_d2h", deps, nbytes=nbytes,
                      pinned=False, work="grad_swap_out")
        sw.nbytes += nbytes
        out.append(sw.op)
        last = (sw.op,)
    return out


def flush_swap_out(b, sw: SwapOut | None, start: tuple) -> tuple:
    """The optimizer's first swap-in flushes the swapper: the open fill is written and every write
    waited for (optimizer_utils.py `_flush_gradient_swapper` -> `release_buffers`)."""
    if sw is None or sw.op is None:
        return start
    b.phase = "optimizer"
    return (b.add("opt.grad32_flush", "nvme_write", start + (sw.op,), nbytes=sw.nbytes),)
