"""Issue 31 item 2: do cheap host probes tell machines apart by the speed of their host-bound work?
Prints, for every fresh machine that ran lab/scripts/host_probe.py before and after its runs
(lab/fresh/*/probe-*.json), each probe's fastest figure before and after, and the steady step
times of the runs the machines share; a probe can only scale host costs if its before/after
spread on one machine is well below its spread between machines.

    .venv/bin/python lab/scripts/bench_host_probe.py
"""
from __future__ import annotations

import json
from pathlib import Path

from labenv import LAB  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)

from tierlab.records.measurement import load_measurement

PROBES = ("python_loop", "torch_cpu_op", "cuda_launch", "module_call", "h2d_64KiB")


def probes(folder: Path) -> dict[str, dict]:
    return {t: json.loads((folder / f"probe-{t}.json").read_text()) for t in ("before", "after")
            if (folder / f"probe-{t}.json").is_file()}


def steady_s(folder: Path) -> dict[str, float]:
    out = {}
    for run in sorted(p for p in folder.iterdir() if (p / "measurement.json").is_file()):
        m = load_measurement(run)
        if m.status == "ok":
            out[run.name] = m.summary["step_time_s"]["median"]
    return out


def main() -> int:
    machines = {f.name: f for f in sorted((LAB / "fresh").iterdir())
                if f.is_dir() and (f / "probe-before.json").is_file()}
    print(f"{'machine':8s} {'when':6s} " + " ".join(f"{p:>13s}" for p in PROBES) + "  (us per call)")
    for name, folder in machines.items():
        for tag, d in probes(folder).items():
            print(f"{name:8s} {tag:6s} " + " ".join(f"{d[p]['min_s'] * 1e6:13.2f}" for p in PROBES))
    steps = {n: steady_s(f) for n, f in machines.items()}
    shared = sorted(set.intersection(*(set(s) for s in steps.values()))) if steps else []
    print(f"\n{'run (steady step, s)':32s} " + " ".join(f"{n:>8s}" for n in machines))
    for run in shared:
        print(f"{run:32s} " + " ".join(f"{steps[n][run]:8.3f}" for n in machines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
