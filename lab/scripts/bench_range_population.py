"""Issue 31's "inside the range" target, by where the simulator's spread is measured. The software
profile's `simulator_error` range is the 10th-90th percentile of measured / predicted steady step
over the lab's held-out runs (lab/scripts/spread.py). Here the same percentiles are taken over
three pools of held-out runs, each run on its own machine's calibrated profile (the fresh
machines' default calibration), and each range is scored on the fresh machines measured last
(as a ratio range: the other drivers of a run's range are left out, so the counts are close to,
not equal to, validate's):

    .venv/bin/python lab/scripts/bench_range_population.py [--late h100-g,h100-h,...]

Pools: the lab's runs (what the shipped range is), the lab's and the earlier fresh machines',
the earlier fresh machines' alone. Prints each range and how many of the late machines' runs
(and of the earlier ones') fall inside; asserts nothing. About two minutes on 2 cores.
"""
from __future__ import annotations

import argparse

import numpy as np

from labenv import LAB  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)

import bench_host_scale as scale
import tierlab
from tierlab.sim.host_costs import default_software

LATE = "h100-g,h100-h,h100-i,h100-j,h100-k,h100-l"


def ratios(machines) -> dict[str, list[float]]:
    """{machine folder name: measured / predicted steady step of its runs no fit took}."""
    train = set(default_software().train_cases)
    out = {}
    for folder, profile in machines:
        v = tierlab.validate_runs([folder], hardware=profile)
        out[folder.rsplit("/", 1)[-1]] = [r.measured / r.predicted for r in v.report.rows
                                          if r.metric == "step_time_s"
                                          and r.error_pct is not None and r.case not in train]
    return out


def inside(low: float, high: float, values: list[float]) -> str:
    return f"{sum(low <= x <= high for x in values)} of {len(values)}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--late", default=LATE, help="fresh machines scored, comma-separated")
    late_names = set(ap.parse_args().late.split(","))
    lab = [x for v in ratios(scale.lab_machines()).values() for x in v]
    fresh = ratios(scale.fresh_machines())
    unknown = sorted(late_names - set(fresh))
    if unknown:
        ap.error(f"--late {', '.join(unknown)}: no such folder in {LAB / 'fresh'}")
    late = [x for name, v in fresh.items() if name in late_names for x in v]
    early = [x for name, v in fresh.items() if name not in late_names for x in v]
    print(f"late: {', '.join(sorted(late_names))} ({len(late)} runs); earlier fresh: "
          f"{len(fresh) - len(late_names)} machines ({len(early)} runs)")
    for label, pool in (("lab", lab), ("lab + earlier fresh", lab + early),
                        ("earlier fresh", early)):
        low, high = np.percentile(pool, [10, 90])
        print(f"{label:20s} n={len(pool):3d}  range [{low:.3f}, {high:.3f}]  late inside "
              f"{inside(low, high, late)}, earlier fresh inside {inside(low, high, early)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
