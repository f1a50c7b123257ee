"""DeepSpeed's host-side costs per event, as the engine charges them (pure functions).

The software profile (profiles/software/*.yaml) holds values for hosts nobody calibrated; a CPU
profile written by `tierlab calibrate` carries the values measured on that host
(`deepspeed_host_costs`, runner/calibrate_ds.py), which override them: `with_host_costs`.
`use_cost_s` and `step_cost_s` say which term an event pays, so workload.py, engine.py and the
calibration's own derivation (runner/calibrate_host.py) read one rule.
"""
from __future__ import annotations

import functools
from dataclasses import replace

from tierlab.profiles.fields import SCALED_BY_HOST_SPEED
from tierlab.profiles.ranges import calibrated
from tierlab.profiles.schema import Hardware, Software
from tierlab.sim.strategy import Strategy


@functools.lru_cache(maxsize=1)
def default_software() -> Software:
    """profiles/software/deepspeed-0.19.8.yaml, read once per process (a sweep simulates
    hundreds of points; parsing it took ~3 ms of a ~12 ms small simulation)."""
    from tierlab.profiles.load import load_software

    return load_software()


def software_for(hardware: Hardware, software: Software | None = None) -> Software:
    """The software profile every verb uses on `hardware`: `software` (default: the shipped
    one) with the host costs the hardware's CPU profile measured. The one place the default is
    chosen, so memory, simulate, plan, sweep and preflight agree."""
    return with_host_costs(default_software() if software is None else software, hardware)


CARRIED_BY_DISPATCH = ("checkpoint_s_per_block", "checkpoint_bwd_s_per_block")
"""Host costs the software profile's fitted `host_dispatch_s_per_module` already carries: it was
fitted on checkpointed runs with these at 0. A CPU profile's measured values of them apply only
beside its own measured dispatch, or the checkpoint machinery is charged twice."""


def host_speed_rates(software: Software, hardware: Hardware) -> tuple[float, float] | None:
    """(the fit machines' CPU Adam rate, this host's) where the host-speed rule applies: the
    software profile has a fit rate and a share above 0, and `tierlab calibrate` measured this
    host's rate (DeepSpeedCPUAdam on every core: the host's cores, clock and memory system under
    DeepSpeed's own CPU kernel, repeatable within a few percent); None where the host's figure is
    a datasheet figure, an estimate (every shipped profile) or a figure not measured on the host
    by calibrate (a range's midpoint from notes, as the lab's stock h200-host)."""
    ref = software.fit_adam_params_per_s
    source = hardware.cpu.sources.get("adam_params_per_s", "")
    if ref is None or not software.host_speed_share or not calibrated(source):
        return None
    return ref, hardware.cpu.adam_params_per_s


def host_speed_factor(software: Software, hardware: Hardware) -> float:
    """What the fitted host terms cost on `hardware` relative to the machines they were fitted
    on: 1 + share x (the fit machines' CPU Adam rate / this host's - 1); 1 where the rule does
    not apply (host_speed_rates)."""
    rates = host_speed_rates(software, hardware)
    if rates is None:
        return 1.0
    return 1.0 + software.host_speed_share * (rates[0] / rates[1] - 1.0)


def measured_costs(values: dict[str, float]) -> dict[str, float]:
    """Host costs measured on a host ({Software field: seconds}) with what they imply for the
    software profile: a measured dispatch term carries no checkpoint wrapper (DeepSpeed's host
    costs are measured on narrow models trained without checkpointing), so
    checkpoint_carried_s_per_block goes to 0 beside it. The one rule with_host_costs and the
    calibration's derivation and held-out check (runner/calibrate_host.py) apply."""
    if "host_dispatch_s_per_module" in values:
        return {**values, "checkpoint_carried_s_per_block": 0.0}
    return dict(values)


def with_host_costs(software: Software, hardware: Hardware) -> Software:
    """`software` with the host costs `hardware`'s CPU profile measured (sources kept); the
    checkpoint terms only with a measured dispatch term (CARRIED_BY_DISPATCH); the fitted host
    terms it did not measure scaled by host_speed_factor (their ranges with them). Applied again
    to its own result, or to another hardware, it gives the same as once."""
    measured = measured_costs(hardware.cpu.host_costs)
    if "host_dispatch_s_per_module" not in measured:
        for key in CARRIED_BY_DISPATCH:
            measured.pop(key, None)
    speed = host_speed_factor(software, hardware)
    ratio = speed / software.host_speed
    scaled = {k: getattr(software, k) * ratio for k in SCALED_BY_HOST_SPEED
              if k not in measured} if ratio != 1.0 else {}
    if not measured and not scaled:
        return software
    sources = {**software.sources}
    for key in measured:
        sources[key] = hardware.cpu.sources.get(f"host_costs.{key}",
                                                f"{hardware.cpu.name} CPU profile")
    if "host_dispatch_s_per_module" in measured:
        sources["checkpoint_carried_s_per_block"] = (
            "0: the dispatch term was measured on this host, without checkpointing")
    ranges = {**software.ranges, **{k: (software.ranges[k][0] * ratio,
                                        software.ranges[k][1] * ratio)
                                    for k in scaled if k in software.ranges}}
    return replace(software, **measured, **scaled, host_speed=speed, sources=sources,
                   ranges=ranges)


def _or(value: float | None, fallback: float) -> float:
    return fallback if value is None else value


def use_cost_s(sw: Software, strategy: Strategy, kind: str) -> float:
    """Host seconds of one use ('fwd', 'recompute' or 'bwd') of one parameter-holding submodule:
    kernel dispatch, plus ZeRO-3's hooks under stage 3 (with offloaded parameters or optimizer
    their own measured cost; a pageable gradient copy stalls the backward), plus ZeRO-1/2's
    gradient hook in backward without offload_optimizer (with it, the per-tensor gradient copy:
    grad_event_cost_s)."""
    bwd = kind == "bwd"
    dispatch = (_or(sw.host_dispatch_bwd_s_per_module, sw.host_dispatch_s_per_module) if bwd
                else sw.host_dispatch_s_per_module)
    if strategy.zero.stage != 3:
        if bwd and strategy.zero.stage in (1, 2) and strategy.optimizer_device == "none":
            return dispatch + sw.zero12_hook_bwd_s_per_module
        return dispatch
    hook_fwd = sw.zero3_hook_s_per_module
    hook_bwd = _or(sw.zero3_hook_bwd_s_per_module, hook_fwd)
    if bwd and strategy.optimizer_device != "none":
        hook = _or(sw.zero3_offload_hook_bwd_s_per_module, hook_bwd)
        if not strategy.zero.offload_optimizer.pin_memory:
            hook += sw.zero3_pageable_bwd_s_per_module
    elif bwd:
        hook = hook_bwd
    elif strategy.param_device != "none":
        hook = _or(sw.zero3_offload_hook_s_per_module, hook_fwd)
    else:
        hook = hook_fwd
    return dispatch + hook


def checkpoint_cost_s(sw: Software, strategy: Strategy, kind: str = "fwd") -> float:
    """Host seconds of the activation-checkpoint machinery per block use: the wrapper in its
    forward ('fwd'), the unpack hooks and recompute bookkeeping in backward ('recompute');
    0 without checkpointing."""
    if not strategy.activation_checkpointing:
        return 0.0
    return sw.checkpoint_bwd_s_per_block if kind == "recompute" else sw.checkpoint_s_per_block


def checkpoint_carried_s(sw: Software, strategy: Strategy) -> float:
    """Host seconds a block's forward is charged less without activation checkpointing: the
    checkpoint wrapper's share of a fitted dispatch term (Software.checkpoint_carried_s_per_block);
    0 with checkpointing, whose wrapper the dispatch term already pays."""
    if strategy.activation_checkpointing:
        return 0.0
    return sw.checkpoint_carried_s_per_block


def overflow_scan_cost_s(sw: Software, strategy: Strategy) -> float:
    """Host seconds per gradient element of the fp16 overflow check on the host-memory gradient
    partition (ZeRO-3 with offload_optimizer and fp16 only; 0 otherwise)."""
    if (strategy.zero.stage == 3 and strategy.optimizer_device != "none"
            and strategy.precision == "fp16"):
        return sw.overflow_scan_s_per_element
    return 0.0


def grad_event_cost_s(sw: Software, boundary: bool) -> float:
    """ZeRO-1/2 with offload_optimizer, per parameter tensor: the copy into the fp32 partition
    at the boundary (`copy_grads_in_partition`), else the CPU accumulation round trip
    (`async_accumulate_grad_in_cpu_via_gpu`, ZeRO-2 with micro-steps: every micro-step, the
    boundary's as well as its copy)."""
    if boundary:
        return sw.offload_grad_s_per_param
    return _or(sw.offload_accum_s_per_param, sw.offload_grad_s_per_param)


def step_cost_s(sw: Software, strategy: Strategy) -> float:
    """Host seconds per parameter tensor of the optimizer step beyond the modelled Adam and
    copies: FP16_Optimizer's loop (stage 0), the partitioned optimizer's per-tensor work on the
    GPU (ZeRO-1/2, ZeRO-3), the offloaded optimizer's bookkeeping."""
    if strategy.zero.stage == 0:
        return sw.stage0_step_s_per_param
    if strategy.optimizer_device == "none":
        return sw.zero3_step_s_per_param if strategy.zero.stage == 3 else sw.zero12_step_s_per_param
    if not strategy.zero.offload_optimizer.pin_memory:
        return _or(sw.offload_step_pageable_s_per_param, sw.offload_step_s_per_param)
    return sw.offload_step_s_per_param
