"""Sweep speed: 1,000 configurations of the built-in TinyLlama scenario (target <= 60 s on the
2-core dev box). Prints wall time, per-config cost and the simulator's share; no assertions.

    .venv/bin/python bench/bench_sweep.py [--jobs N]
"""
from __future__ import annotations

import argparse
import os
import time

from tierlab.sweeps.run import Base, parse_vary, run_sweep
from tierlab.sweeps.keys import _load_cached

# 4 presets x 5 micro-batches x 5 NVMe drive counts x 5 CPU Adam rates x 2 checkpointing = 1,000
GRID = ["config=no-offload,zero2-cpu,zero3-cpu,zero3-nvme",
        "micro_batch=1,2,4,8,16",
        "nvme.drives=1,2,4,8,16",
        "cpu.adam_throughput=0.5e9,1e9,2e9,4e9,8e9",
        "checkpointing=true,false"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: all cores)")
    args = ap.parse_args()
    from tierlab.sim.engine import simulate

    axes = [parse_vary(v) for v in GRID]
    base = Base(seq=1024)
    t0 = time.perf_counter()
    out = run_sweep(base, axes, simulator=simulate, jobs=args.jobs)
    wall = time.perf_counter() - t0
    df = out.frame
    cores = len(os.sched_getaffinity(0))
    print(f"sweep: {len(df)} configurations of TinyLlama-1.1B on workstation-rtx3070 (seq 1024), "
          f"{args.jobs or cores} worker(s) on {cores} core(s)")
    print(f"  wall {wall:.2f} s  ({wall / len(df) * 1e3:.1f} ms per configuration; target <= 60 s)")
    print(f"  errors {out.errors}, fits {int(df['fits'].fillna(False).sum())}, bottlenecks "
          f"{df['bottleneck'].value_counts().to_dict()}")
    # the simulator alone, in this process, for a sample of 40 points
    from tierlab.sweeps.run import resolve

    points = [dict(zip([a.key for a in axes], vals)) for vals in
              zip(*(a.values * 8 for a in axes))][:40]
    _load_cached.cache_clear()
    t0 = time.perf_counter()
    scs = [resolve(base, p) for p in points]
    t_resolve = time.perf_counter() - t0
    t0 = time.perf_counter()
    for sc in scs:
        simulate(sc.hardware, sc.model, sc.strategy)
    t_sim = time.perf_counter() - t0
    # what `simulate`/`sweep` users get: the ranged answer (step, step 1, 80% range), with the
    # engine's workload cache emptied first (each point builds its workload) and then warm
    from tierlab.sim import workload

    workload.clear_workload_cache()
    t0 = time.perf_counter()
    for sc in scs:
        sc.simulate(ranges=True)
    t_cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    for sc in scs:
        sc.simulate(ranges=True)
    t_warm = time.perf_counter() - t0
    n = len(points)
    print(f"  per configuration, one process: resolve {t_resolve / n * 1e3:.2f} ms, "
          f"simulate (point) {t_sim / n * 1e3:.2f} ms, ranged {t_cold / n * 1e3:.2f} ms "
          f"(workloads built) / {t_warm / n * 1e3:.2f} ms (cached)")


if __name__ == "__main__":
    main()
