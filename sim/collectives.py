"""Data-parallel collectives, analytically (no SimPy): ring within a node, hierarchical across.

Bandwidth terms follow the NCCL performance notes (nccl-tests doc/PERFORMANCE.md): a ring
all-gather or reduce-scatter of a tensor of N bytes over p ranks moves (p-1)/p x N bytes through
each rank's link; an all-reduce is a reduce-scatter followed by an all-gather (2 (p-1)/p x N).
Latency: one hop latency per ring step, (p-1) steps.

Across nodes (hierarchical, as NCCL's tree/ring over NICs): the inter-node stage moves
(n-1)/n x N bytes in and out of every node through the node's NICs; the intra-node stage moves
(g-1)/g x N over NVLink (or over PCIe through the host when the GPU has no NVLink).
Both stages are returned separately so the engine can charge the NIC and the GPU links apart.
"""
from __future__ import annotations

from dataclasses import dataclass

from tierlab.profiles.schema import Hardware

NVLINK_HOP_LATENCY_S = 5e-6
"""Per ring step over NVLink/NVSwitch (NCCL small-message latency on DGX-class nodes ~5 us;
nccl-tests all_reduce_perf 8 B results). Used only for the latency term."""


@dataclass(frozen=True, kw_only=True)
class CollectiveTime:
    """Time of one collective split by the link it loads."""

    intra_s: float
    """Ring over the GPUs of one node (NVLink or PCIe)."""
    inter_s: float
    """Through the NICs, between nodes (0 on one node)."""

    @property
    def total_s(self) -> float:
        return self.intra_s + self.inter_s


def intra_node_bandwidth_Bps(hw: Hardware) -> float:
    """Per-GPU per-direction bandwidth of the intra-node ring: NVLink, else PCIe via the host."""
    if hw.gpu.nvlink_bandwidth_Bps > 0:
        return hw.gpu.nvlink_bandwidth_Bps
    return min(hw.pcie.h2d_pinned_Bps, hw.pcie.d2h_pinned_Bps)


def _ring_s(nbytes: float, ranks: int, bandwidth_Bps: float, hop_latency_s: float) -> float:
    """(p-1)/p x N / bw + (p-1) x latency; 0 for one rank."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return (ranks - 1) / ranks * nbytes / bandwidth_Bps + (ranks - 1) * hop_latency_s


def all_gather(hw: Hardware, nbytes: float) -> CollectiveTime:
    """All-gather of a tensor of `nbytes` (full, gathered size) over the whole world."""
    g, n = hw.gpus_per_node, hw.nodes
    intra_latency = hw.pcie.latency_s if hw.gpu.nvlink_bandwidth_Bps <= 0 else NVLINK_HOP_LATENCY_S
    intra = _ring_s(nbytes, g, intra_node_bandwidth_Bps(hw), intra_latency)
    # inter-node: every node receives (n-1)/n x N through its NICs (aggregate per node)
    inter = _ring_s(nbytes, n, hw.network.nic_bandwidth_Bps, hw.network.latency_s)
    return CollectiveTime(intra_s=intra, inter_s=inter)


def reduce_scatter(hw: Hardware, nbytes: float) -> CollectiveTime:
    """Reduce-scatter of `nbytes` (full, unreduced size): same traffic as an all-gather."""
    return all_gather(hw, nbytes)


def all_reduce(hw: Hardware, nbytes: float) -> CollectiveTime:
    """All-reduce = reduce-scatter + all-gather: twice the traffic."""
    half = all_gather(hw, nbytes)
    return CollectiveTime(intra_s=2 * half.intra_s, inter_s=2 * half.inter_s)
