"""A tiny analytic stand-in for `simulate()` that returns the real SimResult, for testing the
sweep engine's and the planner's rules on figures chosen to be monotone in every bandwidth
(deterministic). Not a model of DeepSpeed: only the direction of effects matters; the real type
means the tests still catch a change in SimResult's contract."""
from __future__ import annotations

from tierlab.sim.devices import Span
from tierlab.sim.memory import plan_memory
from tierlab.sim.resources import BYTE_RESOURCES, RESOURCES
from tierlab.sim.result import SimResult


def simulate(hardware, model, strategy, *, strict=False, software=None, ranges=False):
    n, dp = model.n_params, strategy.data_parallel_size
    part = n / dp
    mb, gas = strategy.train_micro_batch_size_per_gpu, strategy.gradient_accumulation_steps
    tokens = mb * gas * model.seq_len
    flops = (8 if strategy.activation_checkpointing else 6) * n * tokens
    peak = max(hardware.gpu.peak_flops.values())
    busy = dict.fromkeys(RESOURCES, 0.0)
    busy["gpu_compute"] = flops / (peak * min(0.6, 0.15 * mb ** 0.5))
    pcie = hardware.pcie
    if strategy.optimizer_device != "none":
        busy["pcie_d2h"] += 4 * part / pcie.d2h_pinned_Bps
        busy["pcie_h2d"] += 2 * part / pcie.h2d_pinned_Bps
        busy["cpu_adam"] = part * hardware.gpus_per_node / hardware.cpu.adam_params_per_s
    if strategy.param_device != "none":
        busy["pcie_h2d"] += 4 * gas * part / pcie.h2d_pinned_Bps
    if strategy.optimizer_device == "nvme":
        drives = max(1, hardware.nvme_drives)
        sub = strategy.zero.sub_group_size
        eff = 1.0 if sub >= 1e8 else 0.8
        busy["nvme_read"] = 16 * part * hardware.gpus_per_node / (
            hardware.nvme.read_bandwidth_Bps * drives * eff)
        busy["nvme_write"] = 12 * part * hardware.gpus_per_node / (
            hardware.nvme.write_bandwidth_Bps * drives * eff)
    if dp > 1:
        busy["gpu_comm"] = 2 * 2 * n / max(hardware.gpu.nvlink_bandwidth_Bps, 1e10)
    compute_phase = busy["gpu_compute"] + max(busy["pcie_h2d"] - busy["gpu_compute"], 0)
    opt = busy["cpu_adam"] + busy["nvme_read"] + busy["nvme_write"]
    step = compute_phase + max(busy["pcie_d2h"], busy["gpu_comm"]) * 0.2 + opt
    exposed = dict.fromkeys(RESOURCES, 0.0)
    exposed["gpu_compute"] = busy["gpu_compute"]
    exposed["pcie_h2d"] = max(busy["pcie_h2d"] - busy["gpu_compute"], 0)
    exposed["pcie_d2h"] = busy["pcie_d2h"] * 0.2 if busy["pcie_d2h"] >= busy["gpu_comm"] else 0
    exposed["gpu_comm"] = busy["gpu_comm"] * 0.2 if busy["gpu_comm"] > busy["pcie_d2h"] else 0
    for r in ("cpu_adam", "nvme_read", "nvme_write"):
        exposed[r] = busy[r]
    bottleneck = max(exposed, key=exposed.get)
    lower = max(busy.values())
    mem = plan_memory(hardware, model, strategy, software=software)
    fwd = busy["gpu_compute"] / (4 if strategy.activation_checkpointing else 3)
    spans, t = [], 0.0
    for r in RESOURCES:
        if busy[r]:
            spans.append(Span(r, f"{r} work", t, t + busy[r]))
            spans.append(Span(r, f"{r} more", t + busy[r] * 1.2, t + busy[r] * 1.5))
            t += exposed[r]
    return SimResult(step_time_s=step, first_step_time_s=step * 1.3,
                     phases={"forward_s": fwd, "backward_s": compute_phase - fwd,
                             "optimizer_s": step - compute_phase},
                     busy_s=busy, exposed_s=exposed, bottleneck=bottleneck, memory=mem,
                     fits=mem.fits, binding_tier=mem.binding_tier,
                     tokens_per_s=tokens * hardware.world_size / step,
                     tflops_per_gpu=flops / step / 1e12, lower_bound_s=lower,
                     efficiency=lower / step, bytes_moved=dict.fromkeys(BYTE_RESOURCES, 0.0),
                     spans=tuple(spans))
