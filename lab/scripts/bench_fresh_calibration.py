"""Issue 31's table: on machines no fit has seen (lab/fresh/*: each folder one machine, calibrated
in the same device command as its runs), how do the machine's own calibrations predict its runs,
against the stock `h200-host` profile?

    .venv/bin/python lab/scripts/bench_fresh_calibration.py [--machines h100-g h100-h ...]

--machines: only these folders (pooled over them), e.g. the machines measured after every choice
of the software profile (their validate.yaml notes say so).
Rows per machine, then pooled: the stock profile; the machine's **default** calibration (`tierlab
calibrate`: hardware benchmarks only, the software profile's DeepSpeed host costs kept); and, where
the device command also measured DeepSpeed's host costs (DS=1 in lab/scripts/gpu_paired.sh), the
`--host-costs` calibration (a measured term kept only where calibrate's held-out check improves).
Profiles: <folder>-profiles/hardware/systems/<machine>.yaml and <machine>-hc.yaml. Columns: step
MAPE, worst step error, forward MAPE, runs inside the 80% range, OOM verdicts right. Targets
(issue 31): the default calibration never worse than stock (pooled step MAPE), step MAPE <= 8%,
worst <= 20%, forward <= 15%, >= 80% inside the range."""
from __future__ import annotations

import argparse
import statistics

from labenv import LAB  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)

import tierlab
from tierlab.validate.workflow import ValidationRun

FRESH = LAB / "fresh"
PROFILES = (("stock h200-host", None), ("its default calibration", ""),
            ("its --host-costs calibration", "-hc"))
"""(label, profile): a stock profile by name, or the machine's own with this suffix."""


def profile_of(folder, suffix: str | None) -> str | None:
    """The system profile a row predicts with: stock h200-host, or the machine's own calibration
    (None where that calibration was not made on this machine)."""
    if suffix is None:
        return "h200-host"
    path = FRESH / f"{folder.name}-profiles" / "hardware" / "systems" / f"{folder.name}{suffix}.yaml"
    return str(path) if path.is_file() else None


def rows_of(v: ValidationRun, metric: str) -> list[float]:
    return [abs(r.error_pct) for r in v.report.rows
            if r.metric == metric and r.error_pct is not None]


def line(label: str, step: list[float], fwd: list[float], inside: int, n: int, oom: str) -> str:
    return (f"  {label:30s} step MAPE {statistics.mean(step):5.1f}%  worst {max(step):5.1f}%  "
            f"forward {statistics.mean(fwd):5.1f}%  inside range {inside} of {n}  OOM {oom}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--machines", nargs="+", metavar="NAME",
                    help="only these lab/fresh folders (default: all)")
    only = ap.parse_args().machines
    folders = sorted(p for p in FRESH.iterdir() if (p / "validate.yaml").is_file())
    unknown = sorted(set(only or ()) - {p.name for p in folders})
    if unknown:
        ap.error(f"--machines {', '.join(unknown)}: no such folder in {FRESH}")
    pooled = {label: ([], [], 0, 0) for label, _ in PROFILES}
    for folder in (p for p in folders if not only or p.name in only):
        print(folder.name)
        for label, suffix in PROFILES:
            hardware = profile_of(folder, suffix)
            if hardware is None:
                print(f"  {label:30s} not measured on this machine")
                continue
            v = tierlab.validate_runs([str(folder)], hardware=hardware)
            step, fwd = rows_of(v, "step_time_s"), rows_of(v, "forward_s")
            oom = v.report.summary["oom"]
            verdicts = f"{oom['n'] - len(oom['mismatches'])} of {oom['n']}"
            cov = v.coverage
            print(line(label, step, fwd, cov["inside"], cov["n"], verdicts))
            s, f, i, n = pooled[label]
            pooled[label] = (s + step, f + fwd, i + cov["inside"], n + cov["n"])
    print("pooled")
    for label, (s, f, i, n) in pooled.items():
        if s:
            print(line(label, s, f, i, n, "-"))
    print("(pooled over the machines each row was measured on)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
