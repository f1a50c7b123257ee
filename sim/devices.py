"""How long things take: one SimPy primitive per physical thing, plus the pure rate functions.

The engine simulates one representative rank of one node (scale by symmetry, see engine.py).
Resources the node's ranks share — the PCIe switch uplink, the CPU (DRAM bandwidth and cores that
run CPU Adam), the NVMe drives, the NIC — are seen by that rank at their fair share
(capacity / ranks sharing). Every rank of a data-parallel job issues the same operations at the
same moments, so fair sharing is exactly what contention between them produces.

Each device is a `simpy.Resource` of capacity 1 (a CUDA stream, a DMA engine direction, one aio
handle): requests queue FIFO and `Device.run` logs a (resource, name, start_s, end_s) span.
Pinned swap buffers are a `simpy.Container` (`SwapBuffers`): a swap-in that finds too few
buffers waits for a swap-out to return them, as DeepSpeed's swap buffer manager makes it.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Iterator, NamedTuple

import simpy

from tierlab.profiles.schema import CPU, NVMe, PCIe
from tierlab.sim.resources import RESOURCES
from tierlab.sim.strategy import Aio

log = logging.getLogger(__name__)

ADAM_DRAM_BYTES_PER_PARAM = 28
"""DeepSpeedCPUAdam reads p, g, m, v and writes p, m, v: 7 x 4 B (csrc/adam/cpu_adam_impl.cpp)."""


class Span(NamedTuple):
    """One operation on one resource (a named tuple: a step makes one per op, and a sweep
    makes them by the million)."""

    resource: str
    name: str
    start_s: float
    end_s: float


# ----------------------------------------------------------------------------------------------
# pure rate functions (no SimPy)

def pcie_bandwidth_Bps(pcie: PCIe, direction: str, pinned: bool, gpus_per_node: int = 1) -> float:
    """Per-GPU bandwidth of one direction; a shared switch uplink caps it at its fair share
    among the GPUs of the node behind it (all ranks copy at the same moments, by symmetry).

    E.g. DGX-2: 4 GPUs behind one 16 GB/s uplink, all copying: min(12, 16 / 4) = 4 GB/s each.
    """
    if direction not in ("h2d", "d2h"):
        raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
    kind = "pinned" if pinned else "pageable"
    link = getattr(pcie, f"{direction}_{kind}_Bps")
    if pcie.switch_uplink_Bps is not None:
        sharers = max(1, min(pcie.gpus_per_switch, gpus_per_node))
        link = min(link, pcie.switch_uplink_Bps / sharers)
    return link


def pcie_seconds(pcie: PCIe, nbytes: float, direction: str, pinned: bool,
                 gpus_per_node: int = 1) -> float:
    """latency + bytes / bandwidth (0 for nothing to move)."""
    if nbytes <= 0:
        return 0.0
    return pcie.latency_s + nbytes / pcie_bandwidth_Bps(pcie, direction, pinned, gpus_per_node)


def grads_rescaled(*, stage: int, clipping: bool, fp16: bool) -> bool:
    """Whether the optimizer step scales the fp32 gradients in place (`unscale_and_clip_grads`'s
    `grad.mul_(1 / combined_scale)`, DeepSpeed 0.19.8): always at stage 3 (stage3.py 2979-2988)
    and stage 0 (fp16/fused_optimizer.py 374-385, called from `step`); ZeRO-1/2 skip it only with
    neither gradient_clipping nor fp16 loss scaling (stage_1_and_2.py 3194-3195)."""
    return stage not in (1, 2) or clipping or fp16


def optimizer_copies_to_16bit(*, params_offloaded: bool, stage: int) -> bool:
    """The CPU optimizer step copies the updated fp32 partition into a 16-bit host buffer: at
    ZeRO-1/2 always (stage_1_and_2.py 3092-3096, `bit16_partition_buffer.data.copy_(
    fp32_partition.data)` before the H2D), at stage 3 with offloaded params
    (stage3._reassign_or_swap_out_partitioned_parameters)."""
    return params_offloaded or stage in (1, 2)


def optimizer_dram_bytes_per_param(*, rescaled: bool, params_offloaded: bool, stage: int,
                                   cast_measured: bool = False) -> int:
    """DRAM bytes the CPU optimizer step moves per parameter of a sub-group (DeepSpeed 0.19.8):
    at stage 3 the global grad norm reads the fp32 grads (4 B, stage3.scaled_global_norm);
    ZeRO-1/2 offload sums the per-parameter norms its backward took on the GPU
    (stage_1_and_2.complete_grad_norm_calculation_for_cpu_offload: no host read); `rescaled`
    (grads_rescaled): the grads are scaled in place (read + write 8 B, unscale_and_clip_grads);
    DeepSpeedCPUAdam itself (28 B); the 16-bit copy (optimizer_copies_to_16bit: read 4 B + write
    2 B), unless `cast_measured` (the host's measured cast rate times it: cpu_cast16_seconds)."""
    norm = 4 if stage == 3 else 0
    copies = optimizer_copies_to_16bit(params_offloaded=params_offloaded, stage=stage)
    copy = 6 if copies and not cast_measured else 0
    return norm + (8 if rescaled else 0) + ADAM_DRAM_BYTES_PER_PARAM + copy


FUSED_ADAM_HBM_BYTES_PER_PARAM = 28
"""FusedAdam (multi_tensor_adam) on fp32 master weights: p, g, m, v read (16 B), p, m, v written
(12 B)."""


NORM_FP64_HBM_BYTES_PER_PARAM = 18
"""ZeRO-1/2/3's gradient norm per 16-bit gradient element: read 2, write the fp64 copy 8, read it
8 (DeepSpeed 0.19.8 `get_grad_norm_direct` with `get_norm_dtype()` = torch.double on CUDA)."""


def gpu_optimizer_hbm_bytes_per_param(*, stage: int, rescaled: bool) -> int:
    """HBM bytes DeepSpeed 0.19.8's optimizer step moves per parameter without offload (bf16/fp16
    training, fp32 master weights), read + write:
    - the 16-bit gradient made fp32: read 2 + write 4 (stage 0: FP16_Optimizer.step `p.grad.to`,
      fp16/fused_optimizer.py; ZeRO-1/2: `flat_grad_partition.to`, stage_1_and_2.step;
      ZeRO-3: the fp32 gradient of each sub-group, stage3 `_prepare_fp32_grad_for_sub_group`);
    - the gradients are flattened first (read + write 4 B at 16 bits: ZeRO-1/2's
      `flatten(averaged_gradients)`, ZeRO-3's `self.flatten(self.averaged_gradients[i])` in
      `_prepare_fp32_grad_for_sub_group`; read + write 8 B at 32 bits for FP16_Optimizer's
      `_flatten_dense_tensors`);
    - the global norm: ZeRO-1/2/3 convert each 16-bit gradient to the norm dtype, fp64
      (`zero/utils.get_norm_dtype`), and reduce it: read 2 + write 8 + read 8
      (`get_grad_norm_direct`: `vector_norm(g.data.to(get_norm_dtype()))` at ZeRO-1/2,
      `g.to(...).to(get_norm_dtype()).norm()` at ZeRO-3); stage 0 reads the fp32 gradients (4);
    - `rescaled` (grads_rescaled): unscale_and_clip_grads scales them in place (read + write 8);
    - FusedAdam (28); the updated fp32 weights copied to the 16-bit ones (read 4 + write 2)."""
    to_fp32, adam_back = 6, FUSED_ADAM_HBM_BYTES_PER_PARAM + 6
    flatten = 8 if stage == 0 else 4
    norm = 4 if stage == 0 else NORM_FP64_HBM_BYTES_PER_PARAM
    return to_fp32 + flatten + norm + (8 if rescaled else 0) + adam_back



def zero12_bucket_hbm_bytes_per_element(*, bytes_per_param: int, dp: int, contiguous: bool,
                                        partition_copy: bool) -> float:
    """HBM bytes (read + write) DeepSpeed 0.19.8's ZeRO-1/2 moves on the GPU per element of a
    reduced gradient bucket, beyond what stage 0 does (autograd's gradients stay where written);
    b = bytes per 16-bit element, runtime/zero/stage_1_and_2.py, reduce_scatter=true:
    - contiguous_gradients (`reduce_ipg_grads` -> `average_tensor`):
      each gradient copied into the IPG bucket buffer, 2b
      (`reduce_independent_p_g_buckets_and_remove_grads`, `new_grad_tensor.copy_`);
      the bucket divided in place by the world size, by 1 too at one rank, 2b (`tensor.div_`);
      more than one rank: the bucket's per-rank slices concatenated for the all-reduce, 2b
      (`allreduce_bucket`'s `self.flatten`; the one slice of one rank is a view), and this
      rank's slice of the result copied back, 2b/dp (`allreduce_and_copy_with_multiple_ranks`
      `buf.copy_`; at one rank the result is the bucket itself and copy_ returns at once);
      `partition_copy` (no offload_optimizer): this rank's slice copied into the gradient
      partition, 2b/dp (`copy_grads_in_partition`; with offload it goes to the host: PCIe ops);
    - without contiguous_gradients (`buffered_reduce_fallback` -> `allreduce_and_copy`): the
      gradients flattened (2b), divided (2b) and copied back (2b).
    The one-rank all-reduce moves nothing (NCCL's one-rank in-place sum is a no-op).

    E.g. bf16 at one rank: 4 (bucket copy) + 4 (div_) + 4 (partition copy) = 12 B/element."""
    b, own = float(bytes_per_param), 1.0 / dp
    if not contiguous:
        return 6 * b
    out = 2 * b + 2 * b                               # copy into the IPG bucket, div_
    if dp > 1:
        out += 2 * b + 2 * b * own                    # flatten the slices, copy this rank's back
    if partition_copy:
        out += 2 * b * own                            # copy into the gradient partition
    return out


def cpu_adam_params_per_s(cpu: CPU, ranks: int,
                          dram_bytes_per_param: float = ADAM_DRAM_BYTES_PER_PARAM) -> float:
    """CPU optimizer throughput one rank sees when `ranks` ranks step at once.

    Node ceiling = min(compute: adam_params_per_s, DRAM: bandwidth / bytes moved per param);
    ranks share it fairly. E.g. DGX-2 host, Adam alone: min(1.6e9, 200e9 / 28 = 7.1e9) = 1.6e9/s.
    """
    node = min(cpu.adam_params_per_s, cpu.dram_bandwidth_Bps / dram_bytes_per_param)
    return node / max(1, ranks)


def cpu_adam_seconds(cpu: CPU, ranks: int, elements: float,
                     dram_bytes_per_param: float = ADAM_DRAM_BYTES_PER_PARAM) -> float:
    return elements / cpu_adam_params_per_s(cpu, ranks, dram_bytes_per_param) if elements > 0 \
        else 0.0


def cpu_cast16_seconds(cpu: CPU, ranks: int, elements: float) -> float:
    """The fp32 -> 16-bit host copy of `elements` parameters at the host's measured cast rate
    (CPU.cast16_params_per_s), `ranks` ranks sharing it fairly; 0 without a measured rate."""
    if cpu.cast16_params_per_s is None or elements <= 0:
        return 0.0
    return elements / (cpu.cast16_params_per_s / max(1, ranks))


def aio_throughput_Bps(nvme: NVMe, drives: int, aio: Aio, direction: str, ranks: int) -> float:
    """Bytes/s one rank's aio handle gets from a RAID-0 array of `drives` drives.

    Every rank keeps queue_depth x intra_op_parallelism requests of block_size in flight; a
    request is striped over the drives and costs latency + block / array bandwidth. With
    overlap_events the queue is refilled on each completion (Little's law):
        array = min(drives x bw, ranks x inflight x block / (latency + block / (drives x bw)))
    Without overlap_events a batch of `inflight` blocks is submitted and waited for as a whole,
    so each batch also pays the latency once with the array idle:
        per rank = inflight x block / (latency + ranks x inflight x block / (drives x bw)).
    The rank's share is the array rate / ranks.
    """
    if drives <= 0:
        raise ValueError("no NVMe drives")
    measured = aio_measured_Bps(nvme, aio, direction)
    if measured is not None:      # this setting (or its neighbours) was calibrated: use it
        return drives * measured / max(1, ranks)
    bw = drives * (nvme.read_bandwidth_Bps if direction == "read" else nvme.write_bandwidth_Bps)
    inflight = aio.queue_depth * aio.intra_op_parallelism
    block = float(aio.block_size)
    if aio.overlap_events:
        array = min(bw, ranks * inflight * block / (nvme.latency_s + block / bw))
        return array / ranks
    return inflight * block / (nvme.latency_s + ranks * inflight * block / bw)


def aio_measured_Bps(nvme: NVMe, aio: Aio, direction: str) -> float | None:
    """The calibrated aio rate of one drive for this block_size / intra_op_parallelism, log-linear
    in queue_depth between the calibrated depths (clamped at the ends); None if the sweep did
    not cover this block size and parallelism or the settings differ in
    single_submit/overlap_events from the calibrated defaults.

    E.g. h200x2-host, 1 MiB blocks, parallelism 1: qd 4 read 1.717 GB/s, qd 32 1.840 GB/s ->
    qd 8 (1/3 of the way in log2) 1.758 GB/s, where the best point of the sweep says 2.355.
    """
    if aio.single_submit or not aio.overlap_events:
        return None
    col = 3 if direction == "read" else 4
    pts = sorted((p[1], p[col]) for p in nvme.aio_points
                 if p[0] == aio.block_size and p[2] == aio.intra_op_parallelism)
    if not pts:
        return None
    qd = aio.queue_depth
    if qd <= pts[0][0]:
        return pts[0][1]
    for (q0, r0), (q1, r1) in zip(pts, pts[1:]):
        if qd <= q1:
            f = (math.log2(qd) - math.log2(q0)) / (math.log2(q1) - math.log2(q0))
            return r0 + f * (r1 - r0)
    return pts[-1][1]


def nvme_seconds(nvme: NVMe, drives: int, aio: Aio, direction: str, ranks: int,
                 nbytes: float) -> float:
    """One swap request batch: first-request latency + bytes / the rank's aio throughput."""
    if nbytes <= 0:
        return 0.0
    return nvme.latency_s + nbytes / aio_throughput_Bps(nvme, drives, aio, direction, ranks)


# ----------------------------------------------------------------------------------------------
# SimPy primitives

@dataclass
class Device:
    """A serial device (capacity-1 simpy.Resource): a CUDA stream, a DMA direction, an aio handle.

    `exclusive`: one process only ever runs ops on it, one after the other (the engine's stream of
    that resource), so nothing can queue for it and `run` holds it without a request/release
    (one SimPy event per op instead of three; the times are the same)."""

    env: simpy.Environment
    name: str
    spans: list[Span] = field(default_factory=list)
    resource: simpy.Resource = field(init=False)
    exclusive: bool = False

    def __post_init__(self) -> None:
        self.resource = simpy.Resource(self.env, capacity=1)

    def run(self, op_name: str, duration_s: float) -> Iterator[simpy.Event]:
        """Queue for the device (unless exclusive), hold it for `duration_s`, log the span."""
        if self.exclusive:
            start = self.env.now
            yield self.env.timeout(duration_s)
            self.spans.append(Span(self.name, op_name, start, self.env.now))
            return
        with self.resource.request() as req:
            yield req
            start = self.env.now
            yield self.env.timeout(duration_s)
            self.spans.append(Span(self.name, op_name, start, self.env.now))

    @property
    def busy_s(self) -> float:
        return sum(s.end_s - s.start_s for s in self.spans)


class SwapBuffers:
    """Pinned swap buffers (DeepSpeed's SwapBufferManager) as a simpy.Container of `count` units.

    `take(n)` waits until n buffers are free; `give(n)` returns them. `log` records
    (time_s, +/-n, who) so tests can assert the exact sequence.
    """

    def __init__(self, env: simpy.Environment, count: int, name: str = "swap_buffers"):
        if count < 1:
            raise ValueError(f"{name}: need at least one buffer, got {count}")
        self.env, self.name, self.count = env, name, count
        self.container = simpy.Container(env, capacity=count, init=count)
        self.log: list[tuple[float, int, str]] = []
        self.last_giver: int | None = None
        """Id of the op that last returned buffers (set by the engine, for the critical path)."""

    def take(self, n: int, who: str) -> Iterator[simpy.Event]:
        if n > self.count:
            raise ValueError(f"{self.name}: {who} needs {n} buffers, only {self.count} exist")
        yield self.container.get(n)
        self.log.append((self.env.now, -n, who))

    def give(self, n: int, who: str) -> Iterator[simpy.Event]:
        yield self.container.put(n)
        self.log.append((self.env.now, n, who))


SHARED_QUEUE = frozenset({"nvme_read", "nvme_write"})
"""The resources whose streams queue for one device (the NVMe drives' request queue)."""


def make_devices(env: simpy.Environment) -> dict[str, Device]:
    """One Device per resource name of RESOURCES; nvme_read and nvme_write keep their own issue
    order (the swapper's read and write aio handles) but share one queue: the drives serve one
    request batch at a time at their full rate, so a pipelined read and write take as long as
    the two one after the other (measured on h200x2-host: pipelined 8.2 s vs 7.7 / 8.6 s).
    Every other device serves one stream only (exclusive): the ranks' sharing of PCIe, CPU and
    NIC is in their rates (fair share), not a queue."""
    devs = {name: Device(env, name, exclusive=name not in SHARED_QUEUE) for name in RESOURCES}
    devs["nvme_write"].resource = devs["nvme_read"].resource
    return devs

