"""Issue 31 item 3: are the host-bound classes' misses mechanisms or host speed? On each fresh
machine (lab/fresh: no fit saw them), each run of a host-bound class is compared with the same
machine's reference run of its stage (TinyLlama ZeRO-2 or ZeRO-3 CPU offload, micro-batch 4,
seq 1024, 8 GiB cap), both predicted with the machine's default calibration: the ratio of their
errors, (predicted / measured of the class) / (predicted / measured of the reference) - 1, takes
out what the machine's speed does to both and leaves what the simulator gets wrong about the
class itself. Per class: the machines, the median and range of that relative step error, and the
median relative error of each phase; then each reference class's own phase errors (what the
relative figures are relative to), and the references' measured and predicted seconds on the
lab's machines beside the fresh ones.

    .venv/bin/python lab/scripts/bench_mechanisms.py
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict

from labenv import LAB  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)

import tierlab

FRESH = LAB / "fresh"
METRICS = ("step_time_s", "forward_s", "backward_s", "optimizer_s")
REFERENCES = {2: "c-tinyllama-z2cpu-bd", 3: "c-tinyllama-z3cpu-bd"}
CLASSES = {"w-tinyllama-z2cpu-gas8-mb1": 2, "w-tinyllama-z2cpu-nooverlap": 2,
           "w-0.5b-z1cpu-nooverlap": 2, "w-tinyllama-z3cpu-noac": 3,
           "w-tinyllama-z3cpu-mb1-gas4": 3}
"""Host-bound class -> the stage of the reference it is compared with (ZeRO-1 with ZeRO-2's:
both run stage_1_and_2.py)."""


def predicted_measured(root=FRESH) -> dict[tuple[str, str], dict[str, tuple[float, float]]]:
    """(machine, case) -> {metric: (predicted, measured)}, each machine of `root` on its own
    calibration (lab/fresh: its `-profiles` folder; lab/cases: the profile its validate.yaml
    names)."""
    out: dict[tuple[str, str], dict[str, tuple[float, float]]] = defaultdict(dict)
    for folder in sorted(p for p in root.iterdir() if (p / "validate.yaml").is_file()):
        own = root / f"{folder.name}-profiles" / "hardware" / "systems" / f"{folder.name}.yaml"
        hw = str(own) if own.is_file() else None
        for r in tierlab.validate_runs([str(folder)], hardware=hw).report.rows:
            if r.metric in METRICS and r.error_pct is not None:
                machine, case = r.case.split("/", 1)
                out[(machine, case.split("/")[-1])][r.metric] = (r.predicted, r.measured)
    return out


def log_errors(root=FRESH) -> dict[tuple[str, str], dict[str, float]]:
    """(machine, case) -> {metric: log(predicted / measured)} on each machine's default
    calibration."""
    return {key: {k: math.log(p / m) for k, (p, m) in runs.items()}
            for key, runs in predicted_measured(root).items()}


def reference_seconds(root) -> dict[str, tuple[int, dict[str, tuple[float, float]]]]:
    """Reference case -> (runs, {metric: (median predicted, median measured)}) on `root`'s
    machines (a repeat `.pK` counts as a run)."""
    runs = predicted_measured(root)
    out = {}
    for ref in REFERENCES.values():
        got = [r for (m, c), r in runs.items() if c.split(".p")[0] == ref]
        if got:
            out[ref] = (len(got), {k: (statistics.median(r[k][0] for r in got if k in r),
                                       statistics.median(r[k][1] for r in got if k in r))
                                   for k in METRICS})
    return out


def pct(x: float) -> str:
    return f"{100 * (math.exp(x) - 1):+6.1f}%"


def main() -> int:
    errs = log_errors()
    machines = sorted({m for m, _ in errs})
    print(f"{'class (vs its stage reference)':34s} {'n':>2s} {'step median':>12s} {'range':>16s}"
          + "".join(f"{m[:-2]:>10s}" for m in METRICS[1:]))
    for case, stage in CLASSES.items():
        ref = REFERENCES[stage]
        pairs = [(errs[(m, case)], errs[(m, ref)]) for m in machines
                 if (m, case) in errs and (m, ref) in errs]
        if len(pairs) < 2:
            continue
        rel = {k: [c[k] - r[k] for c, r in pairs if k in c and k in r] for k in METRICS}
        step = rel["step_time_s"]
        print(f"{case:34s} {len(pairs):>2d} {pct(statistics.median(step)):>12s} "
              f"{pct(min(step)) + ' to ' + pct(max(step)).strip():>16s}"
              + "".join(f"{pct(statistics.median(rel[k])):>10s}" for k in METRICS[1:]))
    print("\nthe references themselves (error on the machine's default calibration)")
    for stage, ref in REFERENCES.items():
        runs = [errs[(m, ref)] for m in machines if (m, ref) in errs]
        print(f"{ref:34s} {len(runs):>2d} "
              + "  ".join(f"{k[:-2]} median {pct(statistics.median(r[k] for r in runs))}"
                          for k in METRICS))
    print("\nthe references on the lab's machines (lab/cases, where the host-speed rule and the "
          "stock\nmedians were chosen) and on the fresh ones: median seconds, measured / predicted")
    for name, root in (("lab", LAB / "cases"), ("fresh", FRESH)):
        for ref, (n, med) in reference_seconds(root).items():
            print(f"{name:6s}{ref:28s} {n:>2d} "
                  + "  ".join(f"{k[:-2]} {m:.3f} / {p:.3f}" for k, (p, m) in med.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
