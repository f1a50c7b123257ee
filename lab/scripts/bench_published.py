"""Published offload runs on hosts nobody calibrated, predicted from the catalogue
(lab/published.yaml; issue 12's catalogue target: within 20% or inside the predicted range).

    .venv/bin/python lab/scripts/bench_published.py                      # the shipped catalogue
    .venv/bin/python lab/scripts/bench_published.py --hardware-dir DIR    # another catalogue tree
    .venv/bin/python lab/scripts/bench_published.py --at REV              # the catalogue at a git revision

`--at REV` extracts profiles/hardware at that revision (git archive) into a temporary folder and
predicts from it; a system that did not exist there yet is reported as missing. Prints, per run:
the published step (and the spread of its repeats), the prediction, its 80% range, the error,
whether the published figure lies inside the range, and the inputs that widen the range most; then
the MAPE and the share inside the range.
"""
from __future__ import annotations

import argparse
import subprocess
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

from tierlab.errors import ConfigError
from tierlab.validate.published import load_published, predict

from labenv import ROOT  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)


def hardware_at(rev: str, out: Path) -> Path:
    """profiles/hardware of git revision `rev`, extracted under `out`."""
    blob = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "profiles/hardware"],
                          check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(blob)) as tar:
        tar.extractall(out, filter="data")
    return out / "profiles" / "hardware"


def report(hardware_dir: Path | None, label: str) -> None:
    print(f"catalogue: {label}")
    print(f"{'run':44s} {'published s':>17s} {'predicted s':>11s} {'80% range s':>15s} "
          f"{'error':>7s} {'inside':>6s}  widest inputs")
    errors, inside = [], []
    for run in load_published(ROOT / "lab" / "published.yaml"):
        lo, hi = run.measured_range_s
        pub = f"{run.step_s:.3f}" + (f" ({lo:.2f}-{hi:.2f})" if hi > lo else "")
        try:
            p = predict(run, hardware_dir=hardware_dir)
        except ConfigError as e:
            print(f"{run.name:44s} {pub:>17s}  missing: {e}")
            continue
        span = f"{p.range_s[0]:.3f}-{p.range_s[1]:.3f}" if p.range_s else "-"
        errors.append(abs(p.error))
        inside.append(bool(p.inside))
        print(f"{run.name:44s} {pub:>17s} {p.step_s:11.3f} {span:>15s} {p.error:+7.1%} "
              f"{'yes' if p.inside else 'no':>6s}  {', '.join(p.drivers)}")
    if errors:
        print(f"MAPE {sum(errors) / len(errors):.1%} over {len(errors)} runs; worst "
              f"{max(errors):.1%}; within 20%: {sum(e <= 0.20 for e in errors)}/{len(errors)}; "
              f"inside the range: {sum(inside)}/{len(inside)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hardware-dir", type=Path, help="a hardware tree laid out as profiles/hardware")
    ap.add_argument("--at", metavar="REV", help="the catalogue at this git revision")
    args = ap.parse_args()
    if args.at:
        with tempfile.TemporaryDirectory() as tmp:
            report(hardware_at(args.at, Path(tmp)), f"profiles/hardware at {args.at}")
    else:
        report(args.hardware_dir, str(args.hardware_dir or "shipped"))


if __name__ == "__main__":
    main()
