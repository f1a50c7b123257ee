"""Simulator speed: prints wall times (figures, not assertions).

    .venv/bin/python bench/bench_sim.py

Targets (issue 3): built-in scenario (4 configs) <= 0.2 s; 1T ZeRO-3 NVMe on 32 DGX-2 one step
<= 1 s; wall time flat in GPU count, linear in layers.
"""
from __future__ import annotations

import time
from dataclasses import replace

from tierlab.profiles.load import PRESET_LADDER, load_hardware, load_model
from tierlab.dsconfig.read import load_ds_config
from tierlab.sim import simulate
from tierlab.sim.strategy import Flags, apply_overrides, parse_ds_config

PRESETS = PRESET_LADDER


def _strategy(preset, hw, m, micro_batch, sets=()):
    cfg, _ = load_ds_config(preset)
    cfg = apply_overrides(cfg, list(sets))
    precision = None if any(isinstance(cfg.get(k), dict) and cfg[k].get("enabled") is True
                            for k in ("fp16", "bf16")) else "fp16"
    s, _ = parse_ds_config(cfg, Flags(micro_batch=micro_batch, world_size=hw.world_size,
                                      precision=precision, activation_checkpointing=True,
                                      hidden=m.hidden))
    return s


def best_of(fn, repeat=3, warm: bool = False) -> float:
    """Fastest wall time of `repeat` calls (after one untimed call when `warm`)."""
    if warm:
        fn()                                  # caches, lazy imports
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def builtin() -> None:
    hw = load_hardware("workstation-rtx3070")
    m = load_model("tinyllama-1.1b", seq_len=1024)
    strategies = [_strategy(p, hw, m, 4) for p in PRESETS]
    wall = best_of(lambda: [simulate(hw, m, s) for s in strategies])
    print(f"built-in scenario (TinyLlama-1.1B, RTX 3070, 4 configs): {wall:.3f} s  (target <= 0.2)")


def trillion() -> None:
    hw = load_hardware("dgx-2", nodes=32)
    m = load_model("dense-1t")
    s = _strategy("zero3-nvme", hw, m, 1, ("zero_optimization.offload_param.device=nvme",
                                           "zero_optimization.offload_param.nvme_path=/nvme"))
    r = None

    def once():
        nonlocal r
        r = simulate(hw, m, s)
    wall = best_of(once)
    print(f"1T ZeRO-3 NVMe, 32 x DGX-2 (512 V100): {wall:.3f} s wall (target <= 1) -> "
          f"step {r.step_time_s:.1f} s, {r.tflops_per_gpu:.1f} TFLOP/s/GPU, "
          f"bottleneck {r.bottleneck}, {len(r.spans)} spans")


def vs_gpus() -> None:
    m = load_model("gpt2-10b")
    print("wall vs GPU count (GPT-2 10B, ZeRO-3 CPU, DGX-2 nodes):")
    for gpus in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
        hw = load_hardware("dgx-2", gpus_per_node=min(gpus, 16), nodes=max(1, gpus // 16))
        s = _strategy("zero3-cpu", hw, m, 4)
        wall = best_of(lambda: simulate(hw, m, s), repeat=2)
        print(f"  {gpus:4d} GPUs: {wall * 1e3:7.1f} ms")


def vs_layers() -> None:
    hw = load_hardware("dgx-2", gpus_per_node=1)
    base = load_model("gpt2-10b")
    print("wall vs layer count (GPT-2 10B shape, ZeRO-3 CPU, 1 V100):")
    for layers in (12, 25, 50, 100, 200, 400):
        m = replace(base, n_layers=layers)
        s = _strategy("zero3-cpu", hw, m, 4)
        wall = best_of(lambda: simulate(hw, m, s), repeat=2)
        print(f"  {layers:4d} layers: {wall * 1e3:7.1f} ms")


def point_vs_range() -> None:
    """What a range costs (issue 14: at most about 3x a point simulation)."""
    print("point vs range (simulate(..., ranges=True)), wall:")
    cases = [(p, "workstation-rtx3070", "tinyllama-1.1b", 1024, 4, None) for p in PRESETS]
    cases += [("zero3-cpu", "dgx-a100", "gpt2-10b", None, 4, 4),
              ("zero3-nvme", "dgx-2", "dense-1t", None, 1, 32)]
    for preset, system, model, seq, mb, nodes in cases:
        hw = load_hardware(system, nodes=nodes)
        m = load_model(model, seq_len=seq)
        sets = (("zero_optimization.offload_param.device=nvme",
                 "zero_optimization.offload_param.nvme_path=/nvme") if model == "dense-1t" else ())
        s = _strategy(preset, hw, m, mb, sets)
        point = best_of(lambda: simulate(hw, m, s), repeat=2)
        ranged = best_of(lambda: simulate(hw, m, s, ranges=True), repeat=2)
        r = simulate(hw, m, s, ranges=True)
        lo, hi = r.step_time_range_s
        print(f"  {model} {preset} on {hw.world_size} x {system}: point {point * 1e3:7.1f} ms, "
              f"range {ranged * 1e3:7.1f} ms ({ranged / point:.1f}x) -> {r.step_time_s:.3f} s "
              f"({lo:.3f}-{hi:.3f}), {r.step_range.simulations} re-simulations")


if __name__ == "__main__":
    builtin()
    point_vs_range()
    trillion()
    vs_gpus()
    vs_layers()
