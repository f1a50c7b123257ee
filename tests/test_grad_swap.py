"""ZeRO-3's fp32 gradient swap-out with the optimizer on NVMe (sim/grad_swap.py): DeepSpeed's
AsyncTensorSwapper fills every optimizer swap buffer, submits a full one's writes, and waits for
all writes in flight when no buffer is free — inside backward."""
import pytest

from tierlab.sim import workload as wl
from tierlab.sim.engine import phase_times, run_step
from tierlab.sim.grad_swap import GradSwapper, Piece
from tests._simhelp import scenario

PIPE = ("zero_optimization.offload_optimizer.pipeline_read=true",
        "zero_optimization.offload_optimizer.pipeline_write=true",
        "zero_optimization.offload_optimizer.buffer_count=12")


def test_tensors_fill_buffers_in_order_and_never_straddle():
    sw = GradSwapper(buffer_numel=10, buffers=4)
    assert sw.pack([6, 3, 2]) == [Piece(0, 9, False), Piece(1, 2, False)]
    # the state carries over to the next bucket's call
    assert sw.pack([8, 1]) == [Piece(1, 8, False), Piece(2, 1, False)]


def test_the_fill_after_the_last_free_buffer_waits_for_all_writes():
    sw = GradSwapper(buffer_numel=10, buffers=2)
    pieces = sw.pack([10] * 5)
    assert [p.waits for p in pieces] == [False, False, True, False, True]


def test_buffers_that_hold_every_gradient_never_wait():
    # Llama-0.5B, one rank: 4 buffers of the 136.1 M-element embedding hold all 494 M gradients
    sw = GradSwapper(buffer_numel=136_134_656, buffers=4, align=1024)
    layer = [802_816, 114_688, 114_688, 802_816] + [4_358_144] * 3    # q k v o gate up down
    pieces = sw.pack([136_134_656] + layer * 24)
    assert not any(p.waits for p in pieces) and pieces[-1].fill == 3


def test_alignment_rounds_each_tensor_up():
    sw = GradSwapper(buffer_numel=2048, buffers=1, align=1024)
    assert [p.fill for p in sw.pack([1000, 1000, 1000])] == [0, 1]


def test_a_tensor_larger_than_a_buffer_is_refused():
    with pytest.raises(ValueError, match="exceeds the swap buffer"):
        GradSwapper(buffer_numel=10, buffers=4).pack([11])


def _swap_ops(ops):
    return [o for o in ops if o.work == "grad_swap_out"]


@pytest.mark.lab
def test_backward_copies_into_the_swap_buffers_at_the_pageable_rate():
    """pin_memory=true, yet the aio buffers are only mlocked: the copies are pageable."""
    hw, m, s = scenario("zero3-nvme", hardware="h200-host")
    assert s.zero.offload_optimizer.pin_memory
    ops = wl.build_workload(hw, m, s).ops
    copies = _swap_ops(ops)
    assert copies and all(not o.pinned and o.resource == "pcie_d2h" for o in copies)
    assert sum(o.nbytes for o in copies) == pytest.approx(4.0 * m.n_params, rel=1e-3)
    cpu = wl.build_workload(*scenario("zero3-cpu", hardware="h200-host")).ops
    assert not _swap_ops(cpu) and not any(o.resource == "nvme_write" for o in cpu)


@pytest.mark.lab
def test_four_buffers_stall_the_backward_and_twelve_do_not():
    """TinyLlama's 4.4 GB of fp32 gradients, 1e8-element sub-groups: 4 buffers (~0.44 GB each)
    run out, so a copy waits for the writes in flight and the backward grows; the pipelined
    config's 12 buffers hold them all."""
    hw, m, s4 = scenario("zero3-nvme", hardware="h200-host")
    _, _, s12 = scenario("zero3-nvme", hardware="h200-host", sets=PIPE)
    w4, w12 = wl.build_workload(hw, m, s4), wl.build_workload(hw, m, s12)
    writes = {o.id for o in w4.ops if o.resource == "nvme_write"}
    assert any(writes & set(o.deps) for o in _swap_ops(w4.ops))
    assert not any({o.id for o in w12.ops if o.resource == "nvme_write"} & set(o.deps)
                   for o in _swap_ops(w12.ops))
    b4 = phase_times(run_step(hw, m, s4, workload=w4))["backward_s"]
    b12 = phase_times(run_step(hw, m, s12, workload=w12))["backward_s"]
    assert b4 > b12 * 1.2
