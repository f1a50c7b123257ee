"""Does anything calibrate measures predict how fast a machine runs the Python side of training?
And where do single slow steps come from? Prints, from the committed runs (no GPU needed):

1. per machine of lab/cases calibrated with its runs: the calibrated module-call time, CPU
   Adam rate and DRAM figure beside the steady step time of the same TinyLlama-1.1B runs (no
   offload, ZeRO-2 CPU, ZeRO-3 CPU; micro-batch 4, seq 1024, 8 GiB cap for the offload ones);
2. the module-call time each run measured in its own process (runs that took it before
   deepspeed.initialize, as calibrate does);
3. Python's garbage collector per run (runs recorded since stop 10): generation-2 collections in
   the steady steps, their seconds, and the median step with and without one.

    .venv/bin/python lab/scripts/bench_host_speed.py
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

from tierlab.profiles.load import load_hardware
from tierlab.records.measurement import load_measurement
from tierlab.runner.train import PROBE_BEFORE_INIT
from tierlab.validate.compare import find_measurements, folder_hardware

from labenv import CASES  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)
RUNS = {"no offload": ("c-tinyllama-noofl-bd", "c-tinyllama-noofl"),
        "ZeRO-2 CPU": ("c-tinyllama-z2cpu-bd", "c-tinyllama-z2cpu-8g"),
        "ZeRO-3 CPU": ("c-tinyllama-z3cpu-bd", "c-tinyllama-z3cpu-8g")}


def step_s(folder: Path, names: tuple[str, ...]) -> float | None:
    for name in names:
        if (folder / name / "measurement.json").is_file():
            m = load_measurement(folder / name)
            return m.summary["step_time_s"]["median"] if m.status == "ok" else None
    return None


def machines() -> None:
    print(f"{'machine':10s} {'module call':>12s} {'CPU Adam':>10s} {'DRAM':>10s}"
          + "".join(f"{k:>13s}" for k in RUNS))
    for folder in sorted(p for p in CASES.iterdir() if list(p.glob("*raw.json"))):
        cpu = load_hardware(folder_hardware(folder)).cpu
        call = f"{cpu.module_call_s * 1e6:.2f} us" if cpu.module_call_s else "-"
        steps = [step_s(folder, names) for names in RUNS.values()]
        print(f"{folder.name:10s} {call:>12s} {cpu.adam_params_per_s / 1e9:>6.2f} G/s "
              f"{cpu.dram_bandwidth_Bps / 1e9:>5.1f} GB/s"
              + "".join(f"{s:>11.3f} s" if s else f"{'-':>13s}" for s in steps))


def in_run_probes() -> None:
    for folder in sorted(p for p in CASES.iterdir() if p.is_dir()):
        vals = []
        for d in find_measurements([folder]):
            host = load_measurement(d).host or {}
            if PROBE_BEFORE_INIT in str(host.get("module_call_source", "")):
                vals.append(host["module_call_s"] * 1e6)
        if vals:
            print(f"{folder.name:10s} {len(vals)} runs: {min(vals):.1f}-{max(vals):.1f} us "
                  f"(median {statistics.median(vals):.1f})")


def collector() -> None:
    print(f"{'run':36s} {'steady':>6s} {'gen-2':>6s} {'their gc s':>11s} "
          f"{'step w/o':>9s} {'step with':>10s}")
    for folder in sorted(p for p in CASES.iterdir() if p.is_dir()):
        for d in find_measurements([folder]):
            m = load_measurement(d)
            steady = m.steps[int(m.summary.get("warmup_steps") or 0):]
            if not steady or steady[0].gc_collections is None:
                continue
            full = [s for s in steady if s.gc_collections[2]]
            rest = [s.wall_s for s in steady if not s.gc_collections[2]] or [math.nan]
            print(f"{folder.name + '/' + d.name:36s} {len(steady):>6d} {len(full):>6d} "
                  f"{sum(s.gc_s for s in full):>11.3f} {statistics.median(rest):>7.3f} s "
                  + (f"{statistics.median(s.wall_s for s in full):>8.3f} s" if full else
                     f"{'-':>10s}"))


def main() -> None:
    print("1. calibrated figures vs the same TinyLlama runs' steady step time\n")
    machines()
    print("\n2. module-call time measured in each run's process, before deepspeed.initialize\n")
    in_run_probes()
    print("\n3. Python's garbage collector in the steady steps\n")
    collector()


if __name__ == "__main__":
    main()
