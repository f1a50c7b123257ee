"""How much the same run differs between machines of one kind, and between processes on one
machine: the noise floor the validation errors sit on.

    .venv/bin/python lab/scripts/bench_repeatability.py [--root lab/fresh]

--root lab/fresh reads the fresh machines instead (lab/fresh/README.md: each folder on its own
default calibration, no fit saw them), where one TinyLlama case ran on up to 16 machines.

1. Between machines: every validation case name measured in more than one folder of
   lab/cases (one device command each, same plan entry in lab/plan.yaml, so the same
   configuration): each metric's value per folder and its spread, (max - min) / mean.
2. Between processes on one machine: a case run k times in one device command (`--only NAME`
   given k times in lab/scripts/gpu_validate.py: NAME, NAME.p2, NAME.p3, ...), the same spread.
3. The floor of a machine-blind prediction: each run of a case measured on 3+ machines,
   predicted by the median of the *other* machines' runs of that case (a predictor that knows the
   exact configuration's measured result elsewhere and nothing about this machine). Its MAPE and
   worst error per metric bound what any prediction that does not know the machine can reach.
4. The same floor within one machine: each repeat predicted by the median of the other repeats of
   its case in the same command (2+ processes: a predictor that knows the machine, not the
   process).
Beside 3 and 4: `tierlab validate`'s own error on the same runs (each simulated on its folder's
calibrated profile), so the simulator's error can be read against the floor.
"""
from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path

from tierlab.records.measurement import load_measurement
from tierlab.validate.compare import find_measurements, measured_metrics

from labenv import ROOT  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)
CASES = ROOT / "lab" / "cases"
METRICS = ("step_time_s", "forward_s", "backward_s", "optimizer_s", "first_step_time_s",
           "gpu_peak_allocated_bytes", "host_rss_bytes")
FLOOR_METRICS = ("step_time_s", "forward_s", "backward_s", "optimizer_s")
REPEAT = re.compile(r"^(?P<case>.+)\.p(?P<k>\d+)$")


def spread_pct(values: list[float]) -> float:
    """(max - min) / mean x 100 of one metric over the machines that ran a case."""
    return 100.0 * (max(values) - min(values)) / statistics.fmean(values)


def case_of(name: str) -> str:
    """The plan entry a measurement directory ran: NAME.pK -> NAME (a repeat in one command)."""
    m = REPEAT.match(name)
    return m["case"] if m else name


def finished_runs(root: Path = CASES) -> list[tuple[str, str, str, dict]]:
    """(case, folder, directory name, measured metrics) of every finished run under root."""
    out = []
    for d in find_measurements([root]):
        m = load_measurement(d)
        if m.status == "ok":
            out.append((case_of(d.name), d.parent.name, d.name, measured_metrics(m)))
    return out


def repeated_cases(runs: list[tuple[str, str, str, dict]]) -> dict[str, dict[str, dict]]:
    """{case: {folder: metrics of its first run there}} for cases found ok in 2+ folders."""
    by_name: dict[str, dict[str, dict]] = {}
    for case, folder, dirname, metrics in runs:
        if dirname == case:
            by_name.setdefault(case, {})[folder] = metrics
    return {n: f for n, f in sorted(by_name.items()) if len(f) > 1}


def process_repeats(runs: list[tuple[str, str, str, dict]]) -> dict[tuple[str, str], list[dict]]:
    """{(folder, case): [metrics of each process]} for cases run 2+ times in one folder."""
    by: dict[tuple[str, str], list[dict]] = {}
    for case, folder, _dirname, metrics in runs:
        by.setdefault((folder, case), []).append(metrics)
    return {k: v for k, v in sorted(by.items()) if len(v) > 1}


def loo_median_errors(groups: list[list[tuple[str, float]]], min_size: int
                      ) -> dict[str, float]:
    """{run: percent error of its value against the median of the others of its group}, over the
    groups with at least min_size (run, value) pairs: (median of the rest - value) / value x 100."""
    errors = {}
    for members in groups:
        if len(members) < min_size:
            continue
        for i, (run, v) in enumerate(members):
            rest = [x for _, x in members[:i] + members[i + 1:]]
            errors[run] = 100.0 * (statistics.median(rest) - v) / v
    return errors


def simulator_errors(root: Path = CASES) -> dict[tuple[str, str], float]:
    """{(folder/dirname, metric): tierlab validate's percent error} over `root` (each folder on
    the profile its validate.yaml names)."""
    from tierlab.profiles.load import load_software
    from tierlab.validate.compare import validate_cases

    report = validate_cases([root], load_software())
    return {(r.case, r.metric): r.error_pct for r in report.rows if r.error_pct is not None}


def summarize(errors) -> str:
    a = [abs(e) for e in errors]
    if not a:
        return "-"
    return f"MAPE {statistics.fmean(a):5.1f}%  max {max(a):5.1f}%  n={len(a)}"


def print_spreads(title: str, groups: dict, values_of) -> None:
    spreads: dict[str, list[float]] = {k: [] for k in METRICS}
    for key, members in groups.items():
        print(f"\n{title(key, members)}")
        for metric in METRICS:
            values = [v for v in values_of(members, metric) if v]
            if len(values) < 2:
                continue
            s = spread_pct(values)
            spreads[metric].append(s)
            shown = "  ".join(f"{v:.3f}" if metric.endswith("_s") else f"{v / 2**30:.2f}G"
                              for v in values)
            print(f"  {metric:26s} {shown:40s} spread {s:5.1f}%")
    print("\nmedian (max) spread over these cases:")
    for metric, values in spreads.items():
        if values:
            print(f"  {metric:26s} {statistics.median(values):5.1f}% ({max(values):5.1f}%) "
                  f"over {len(values)} cases")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=CASES,
                    help="folder of machine folders, relative to the repository root (default "
                         "lab/cases; lab/fresh: the fresh machines)")
    root = ap.parse_args().root
    root = root if root.is_absolute() else ROOT / root     # as the docs run it, from anywhere
    if not root.is_dir():
        ap.error(f"--root {root}: no such folder")
    runs = finished_runs(root)
    machines = repeated_cases(runs)
    print("== 1. the same case on different machines (first run of each command)")
    print_spreads(lambda name, folders: f"{name}: {', '.join(folders)}", machines,
                  lambda folders, metric: [f.get(metric) for f in folders.values()])
    repeats = process_repeats(runs)
    print("\n== 2. the same case in separate processes of one command (one machine)")
    if repeats:
        print_spreads(lambda key, ms: f"{key[1]} x{len(ms)} on {key[0]}", repeats,
                      lambda ms, metric: [m.get(metric) for m in ms])
    else:
        print("  none recorded")
    by_folder_case: dict[tuple[str, str], list[tuple[str, dict]]] = {}
    for case, folder, dirname, metrics in runs:
        by_folder_case.setdefault((folder, case), []).append((f"{folder}/{dirname}", metrics))
    sim = simulator_errors(root)
    print("\n== 3./4. floor of a prediction that knows the case's measured result elsewhere")
    print("  (each run predicted by the median of the others; tierlab: validate's error on the "
          "same runs)")
    for metric in FLOOR_METRICS:
        across = loo_median_errors(
            [[(f"{folder}/{name}", m[metric]) for folder, m in folders.items() if m.get(metric)]
             for name, folders in machines.items()], 3)
        within = loo_median_errors(
            [[(run, m[metric]) for run, m in members if m.get(metric)]
             for members in by_folder_case.values()], 2)
        for label, errors in (("machine-blind (3+ machines)", across),
                              ("same machine (2+ processes)", within)):
            ours = [sim[(run, metric)] for run in errors if (run, metric) in sim]
            print(f"  {metric if label.startswith('machine') else '':14s} {label}: "
                  f"{summarize(errors.values()):34s} tierlab {summarize(ours)}")


if __name__ == "__main__":
    main()
