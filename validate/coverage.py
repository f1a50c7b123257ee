"""Are the ranges honest? How many measured runs fall inside their predicted step-time range.

Each finished run is simulated on its profile with `ranges=True` (sim/ranges.py) and its measured
median steady step is checked against the central 80% interval. An honest 80% interval holds
about 80% of the runs (issue 14's target: >= 80%), and a calibrated profile's should stay narrow
(target: high/low <= 1.6): a wide range is honest only where the inputs are unknown.
Pure: returns values, cli.py and lab/scripts/bench_ranges.py print them.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

TARGET_INSIDE = 0.80
TARGET_WIDTH = 1.6
"""high/low a calibrated profile's range should stay within."""


@dataclass(frozen=True, kw_only=True)
class Covered:
    """One run: its measured steady step and the predicted point and range."""

    case: str
    hardware: str
    measured_s: float
    predicted_s: float
    low_s: float
    high_s: float
    driver: str
    """The input that widens the range most ('' if none)."""

    @property
    def inside(self) -> bool:
        return self.low_s <= self.measured_s <= self.high_s

    @property
    def width(self) -> float:
        """high / low."""
        return self.high_s / self.low_s if self.low_s > 0 else float("inf")

    def to_dict(self) -> dict:
        return {"case": self.case, "hardware": self.hardware, "measured_s": self.measured_s,
                "predicted_s": self.predicted_s, "low_s": self.low_s, "high_s": self.high_s,
                "inside": self.inside, "width": self.width, "driver": self.driver}


def covered_run(measurement, hardware, software, case: str) -> Covered | None:
    """The run against its range (the software's simulator_error included); None for a run
    without a measured steady step or not trained by DeepSpeed (no range for another engine)."""
    from tierlab.sim import simulate
    from tierlab.validate.compare import measured_metrics, run_engine, scenario_of

    if measurement.status != "ok" or run_engine(measurement) != "deepspeed":
        return None         # FSDP2's schedule (sim/fsdp2.py) has no range model
    measured = measured_metrics(measurement).get("step_time_s")
    if measured is None:
        return None
    sc = scenario_of(measurement, hardware, software)
    r = simulate(sc.hardware, sc.model, sc.strategy, software=sc.software, ranges=True)
    lo, hi = r.step_time_range_s
    drivers = r.step_range.drivers
    return Covered(case=case, hardware=hardware.name, measured_s=measured,
                   predicted_s=r.step_time_s, low_s=lo, high_s=hi,
                   driver=drivers[0].input if drivers else "")


def coverage(paths: Iterable[str | Path], software, *, hardware: str | None = None
             ) -> list[Covered]:
    """Every finished run under `paths`, on `hardware` (None: the profile its folder's
    validate.yaml names)."""
    from tierlab.records.measurement import load_measurement
    from tierlab.validate.compare import case_key, find_measurements, with_profiles

    out = []
    for d, hw in with_profiles(find_measurements(paths), hardware):
        c = covered_run(load_measurement(d), hw, software, case_key(d))
        if c is not None:
            out.append(c)
    return out


def cross_validated(paths: Iterable[str | Path], software) -> list[Covered]:
    """Coverage with the simulator error taken out of sample: each machine's (folder's) runs
    get the 10th-90th percentile of measured / predicted over the held-out runs (not in
    train_cases) of the OTHER machines, combined with the inputs' range as sim/ranges does.
    Each run on its folder's calibrated profile."""
    from dataclasses import replace

    ranges = {k: v for k, v in software.ranges.items() if k != "simulator_error"}
    bare = coverage(paths, replace(software, ranges=ranges))
    out = []
    for c in bare:
        folder = c.case.split("/")[0]
        ratios = [o.measured_s / o.predicted_s for o in bare
                  if o.case.split("/")[0] != folder and o.case not in software.train_cases]
        q = statistics.quantiles(ratios, n=10, method="inclusive")
        f_lo, f_hi = min(q[0], 1.0), max(q[-1], 1.0)
        p = c.predicted_s
        low = p - ((p - c.low_s) ** 2 + ((1.0 - f_lo) * p) ** 2) ** 0.5
        high = p + ((c.high_s - p) ** 2 + ((f_hi - 1.0) * p) ** 2) ** 0.5
        out.append(replace(c, low_s=low, high_s=high))
    return out


def summarize_coverage(runs: list[Covered]) -> dict:
    """n, inside, fraction inside, median/max width (high/low), the runs outside."""
    if not runs:
        return {"n": 0, "inside": 0, "inside_frac": None, "width_median": None,
                "width_max": None, "outside": []}
    widths = [c.width for c in runs]
    return {"n": len(runs), "inside": sum(c.inside for c in runs),
            "inside_frac": sum(c.inside for c in runs) / len(runs),
            "width_median": statistics.median(widths), "width_max": max(widths),
            "outside": [c.case for c in runs if not c.inside]}


def format_coverage(label: str, runs: list[Covered]) -> str:
    """One line: '<label>: 45 of 52 runs inside their 80% range (86.5%; target >= 80%), range
    high/low median 1.31x, max 1.52x'."""
    s = summarize_coverage(runs)
    if not s["n"]:
        return (f"{label}: no finished DeepSpeed run with a steady step time (other engines have "
                "no range)")
    return (f"{label}: {s['inside']} of {s['n']} runs inside their 80% range "
            f"({s['inside_frac']:.1%}; target >= {TARGET_INSIDE:.0%}), range high/low median "
            f"{s['width_median']:.2f}x, max {s['width_max']:.2f}x")
