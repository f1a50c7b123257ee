"""`tierlab plan --fsdp2`: PyTorch FSDP2 with CPUOffloadPolicy as a candidate beside DeepSpeed's
ZeRO stages, simulated by its own schedule (sim/fsdp2.py) where that schedule exists: one GPU,
no gradient accumulation. Not a DeepSpeed config: it is launched with `tierlab run --engine
fsdp2-offload` (runner/fsdp2.py) or the user's own fully_shard script."""
from __future__ import annotations

from typing import Any, Mapping

from tierlab.sim.fsdp2 import simulate_fsdp2
from tierlab.sim.strategy import Strategy

LABEL = "FSDP2 CPU offload (PyTorch fully_shard + CPUOffloadPolicy, not DeepSpeed)"


def fsdp2_candidate(hardware, model, *, micro_batch: int, checkpointing: bool, precision: str,
                    headroom=None, grad_accum: int = 1) -> Mapping[str, Any]:
    """The FSDP2 CPU-offload candidate's verdict, step time and launch hint, or why it has no
    schedule (several GPUs, gradient accumulation)."""
    out: dict[str, Any] = {"placement": LABEL, "engine": "fsdp2-offload",
                           "micro_batch": micro_batch, "activation_checkpointing": checkpointing}
    if hardware.world_size != 1 or grad_accum != 1:
        return {**out, "verdict": "not modelled",
                "reason": "the FSDP2 schedule is one GPU without gradient accumulation "
                          f"(here {hardware.world_size} GPUs, grad_accum {grad_accum})"}
    strategy = Strategy(precision=precision, train_micro_batch_size_per_gpu=micro_batch,
                        train_batch_size=micro_batch, activation_checkpointing=checkpointing)
    r = simulate_fsdp2(hardware, model, strategy)
    fits = r.fits
    if headroom is not None:
        gpu_cap, host_cap = hardware.gpu.hbm_bytes, hardware.dram_bytes
        fits = (r.gpu_peak_bytes <= gpu_cap - headroom.of("gpu").bytes_of(gpu_cap)
                and r.host_bytes <= host_cap - headroom.of("host").bytes_of(host_cap))
    ckpt = "" if checkpointing else " --no-checkpointing"
    return {**out, "verdict": "fits" if fits else "does not fit", "fits": fits,
            "step_time_s": r.step_time_s, "tokens_per_s": r.tokens_per_s,
            "phases": dict(r.phases), "gpu_peak_bytes": r.gpu_peak_bytes,
            "host_bytes": r.host_bytes,
            "launch": f"tierlab run --engine fsdp2-offload --model {model.name} "
                      f"--micro-batch {micro_batch} --precision {precision}{ckpt}"}


def format_fsdp2(c: Mapping[str, Any]) -> str:
    """One line (two with the launch hint) for format_plan."""
    if "step_time_s" not in c:
        return f"FSDP2 CPU offload: {c['verdict']}: {c['reason']}"
    return (f"{LABEL}: mb {c['micro_batch']}, ckpt "
            f"{'on' if c['activation_checkpointing'] else 'off'}: {c['step_time_s']:.3f} s, "
            f"{c['tokens_per_s']:,.0f} tokens/s, GPU {c['gpu_peak_bytes'] / 2**30:.1f} GiB, "
            f"host {c['host_bytes'] / 2**30:.1f} GiB: {c['verdict']}\n"
            f"    launch: {c['launch']}")
