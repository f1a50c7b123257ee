"""Device models: exact SimPy event logs for tiny cases and the rate formulas."""
import pytest
import simpy

from tierlab.profiles.schema import CPU, NVMe, PCIe
from tierlab.sim import devices
from tierlab.sim.devices import Device, Span, SwapBuffers
from tierlab.sim.strategy import Aio

PCIE = PCIe(h2d_pinned_Bps=10e9, d2h_pinned_Bps=8e9, h2d_pageable_Bps=5e9, d2h_pageable_Bps=4e9,
            latency_s=1e-5)
DRIVE = NVMe(name="d", read_bandwidth_Bps=4e9, write_bandwidth_Bps=2e9, capacity_bytes=1e12,
             latency_s=1e-4)


def test_two_transfers_queue_fifo_on_one_direction():
    env = simpy.Environment()
    dev = Device(env, "pcie_h2d")

    def xfer(name, delay, dur):
        yield env.timeout(delay)
        yield from dev.run(name, dur)

    env.process(xfer("a", 0.0, 1.0))
    env.process(xfer("b", 0.5, 2.0))
    env.run()
    assert dev.spans == [Span("pcie_h2d", "a", 0.0, 1.0), Span("pcie_h2d", "b", 1.0, 3.0)]
    assert dev.busy_s == 3.0


def test_swap_buffers_stall_until_returned():
    env = simpy.Environment()
    pool = SwapBuffers(env, 4)

    def first():
        yield from pool.take(4, "sg0.read")
        yield env.timeout(2.0)
        yield from pool.give(4, "sg0.write")

    def second():
        yield env.timeout(0.5)
        yield from pool.take(4, "sg1.read")

    env.process(first())
    env.process(second())
    env.run()
    assert pool.log == [(0.0, -4, "sg0.read"), (2.0, 4, "sg0.write"), (2.0, -4, "sg1.read")]


def test_swap_buffers_reject_impossible_request():
    env = simpy.Environment()
    pool = SwapBuffers(env, 2)
    with pytest.raises(ValueError, match="needs 4 buffers"):
        next(pool.take(4, "x"))


def test_pcie_pinned_pageable_latency_and_shared_uplink():
    assert devices.pcie_seconds(PCIE, 1e9, "h2d", True) == pytest.approx(1e-5 + 0.1)
    assert devices.pcie_seconds(PCIE, 1e9, "d2h", False) == pytest.approx(1e-5 + 0.25)
    assert devices.pcie_seconds(PCIE, 0, "h2d", True) == 0.0
    shared = PCIe(**{**PCIE.__dict__, "switch_uplink_Bps": 12e9, "gpus_per_switch": 4})
    # 4 GPUs on one 12 GB/s uplink: 3 GB/s each; a node of 2 GPUs: 6 GB/s each
    assert devices.pcie_bandwidth_Bps(shared, "h2d", True, gpus_per_node=16) == 3e9
    assert devices.pcie_bandwidth_Bps(shared, "h2d", True, gpus_per_node=2) == 6e9
    assert devices.pcie_bandwidth_Bps(shared, "h2d", True, gpus_per_node=1) == 10e9


def test_cpu_adam_is_min_of_compute_and_dram_shared_by_ranks():
    cpu = CPU(name="c", sockets=1, cores=8, dram_bandwidth_Bps=28e9, adam_params_per_s=2e9)
    assert devices.cpu_adam_params_per_s(cpu, 1) == pytest.approx(1e9)   # 28 GB/s / 28 B
    assert devices.cpu_adam_params_per_s(cpu, 4) == pytest.approx(0.25e9)
    fast_dram = CPU(name="c", sockets=1, cores=8, dram_bandwidth_Bps=280e9, adam_params_per_s=2e9)
    assert devices.cpu_adam_seconds(fast_dram, 2, 1e9) == pytest.approx(1.0)


def test_aio_queue_depth_striping_and_overlap_events():
    deep = Aio(queue_depth=128, block_size=8 << 20)
    shallow = Aio(queue_depth=1, block_size=1 << 20)
    one = devices.aio_throughput_Bps(DRIVE, 1, deep, "read", 1)
    assert one == pytest.approx(4e9)                       # saturated: drive bandwidth
    assert devices.aio_throughput_Bps(DRIVE, 4, deep, "read", 1) == pytest.approx(16e9)  # RAID-0
    assert devices.aio_throughput_Bps(DRIVE, 1, shallow, "read", 1) < 4e9 * 0.8
    wait = Aio(queue_depth=8, overlap_events=False)
    assert (devices.aio_throughput_Bps(DRIVE, 1, wait, "write", 1)
            < devices.aio_throughput_Bps(DRIVE, 1, Aio(queue_depth=8), "write", 1))
    # ranks share the array: per-rank rate is the array rate / ranks when saturated
    assert devices.aio_throughput_Bps(DRIVE, 2, deep, "write", 4) == pytest.approx(1e9)
    assert devices.nvme_seconds(DRIVE, 1, deep, "read", 1, 4e9) == pytest.approx(1e-4 + 1.0)


@pytest.mark.parametrize("stage, rescaled, want", [
    # to fp32 6 + flatten 8 (fp32, FP16_Optimizer) + norm of the fp32 grads 4 + rescale 8 + Adam 28
    # + fp32 -> 16-bit 6
    (0, True, 6 + 8 + 4 + 8 + 28 + 6),
    # ZeRO-1/2: flatten at 16 bits 4, fp64 norm 2 + 8 + 8; no rescale without clipping/fp16
    (2, False, 6 + 4 + 18 + 28 + 6),
    # ZeRO-3: flatten in _prepare_fp32_grad_for_sub_group 4, fp64 norm 18, always rescaled
    (3, True, 6 + 4 + 18 + 8 + 28 + 6),
])
def test_gpu_optimizer_bytes_follow_deepspeed_step(stage, rescaled, want):
    assert devices.NORM_FP64_HBM_BYTES_PER_PARAM == 2 + 8 + 8
    assert devices.gpu_optimizer_hbm_bytes_per_param(stage=stage, rescaled=rescaled) == want


def test_optimizer_step_dram_bytes_follow_deepspeeds_step():
    """ZeRO-1/2 offload: rescale 8 + CPU Adam 28 + the fp32 -> 16-bit copy 6, no host norm read;
    stage 3: the norm's read 4 + rescale 8 + Adam 28 (+ 6 with the params offloaded)."""
    bytes_ = devices.optimizer_dram_bytes_per_param
    assert bytes_(rescaled=True, params_offloaded=False, stage=2) == 42
    assert bytes_(rescaled=False, params_offloaded=False, stage=1) == 34
    assert bytes_(rescaled=True, params_offloaded=False, stage=3) == 40
    assert bytes_(rescaled=True, params_offloaded=True, stage=3) == 46


def test_zero12_offload_step_is_the_step_the_model_counts():
    """DeepSpeed 0.19.8's own source, read from the installed package: ZeRO-1/2 offload's step
    copies the updated fp32 partition into the 16-bit CPU buffer before the H2D, and its global
    norm sums the per-parameter norms the backward took (no read of the host gradients)."""
    import inspect

    stage12 = pytest.importorskip("deepspeed.runtime.zero.stage_1_and_2")
    opt = stage12.DeepSpeedZeroOptimizer
    step = inspect.getsource(opt.step)
    assert "bit16_partition_buffer.data.copy_(fp32_partition.data)" in step
    assert step.index("bit16_partition_buffer.data.copy_") < step.index(
        "bit16_partitions[partition_id].data.copy_(bit16_partition_buffer.data, non_blocking=True)")
    norm = inspect.getsource(opt.scaled_global_norm)
    assert "if self.cpu_offload:\n                norm = self.complete_grad_norm_calculation_for_cpu_offload" in norm
    assert "norm_for_param_grads[param_id]" in inspect.getsource(
        opt.complete_grad_norm_calculation_for_cpu_offload)
