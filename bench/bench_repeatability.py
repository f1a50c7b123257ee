"""How much the same run differs between machines of one kind: for every validation case name
measured in more than one folder of validate/cases (one device command each, same plan entry in
validate/plan.yaml, so the same configuration), each metric's median per folder and its spread,
(max - min) / mean. This is the noise floor the validation errors sit on.

    .venv/bin/python bench/bench_repeatability.py
"""
from __future__ import annotations

import statistics
from pathlib import Path

from tierlab.runner.measurement import load_measurement
from tierlab.validate.compare import find_measurements, measured_metrics

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "validate" / "cases"
METRICS = ("step_time_s", "forward_s", "backward_s", "optimizer_s", "first_step_time_s",
           "gpu_peak_allocated_bytes", "host_rss_bytes")


def spread_pct(values: list[float]) -> float:
    """(max - min) / mean x 100 of one metric over the machines that ran a case."""
    return 100.0 * (max(values) - min(values)) / statistics.fmean(values)


def repeated_cases(root: Path = CASES) -> dict[str, dict[str, dict]]:
    """{case name: {folder: measured metrics}} for names found ok in 2+ folders."""
    by_name: dict[str, dict[str, dict]] = {}
    for d in find_measurements([root]):
        m = load_measurement(d)
        if m.status == "ok":
            by_name.setdefault(d.name, {})[d.parent.name] = measured_metrics(m)
    return {n: f for n, f in sorted(by_name.items()) if len(f) > 1}


def main() -> None:
    cases = repeated_cases()
    spreads: dict[str, list[float]] = {k: [] for k in METRICS}
    for name, folders in cases.items():
        print(f"\n{name}: {', '.join(folders)}")
        for metric in METRICS:
            values = [f[metric] for f in folders.values() if f.get(metric)]
            if len(values) < 2:
                continue
            s = spread_pct(values)
            spreads[metric].append(s)
            shown = "  ".join(f"{v:.3f}" if metric.endswith("_s") else f"{v / 2**30:.2f}G"
                              for v in values)
            print(f"  {metric:26s} {shown:40s} spread {s:5.1f}%")
    print("\nmedian (max) spread over the repeated cases:")
    for metric, values in spreads.items():
        if values:
            print(f"  {metric:26s} {statistics.median(values):5.1f}% ({max(values):5.1f}%) "
                  f"over {len(values)} cases")


if __name__ == "__main__":
    main()
