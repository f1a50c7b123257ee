"""Are the ranges honest? Coverage of the committed H200 runs by their predicted 80% ranges
(figures, not assertions; issue 14).

    .venv/bin/python lab/scripts/bench_ranges.py [CASES ...]      # default lab/cases

Prints, for the calibrated profiles (each folder's validate.yaml), for the same runs with the
simulator's error taken out of sample (each machine's runs get the error of the others' held-out
runs: the honest figure), and for the stock h200-host profile: runs inside their range, and the
range's high/low (median, max). Targets: >= 80% inside; a calibrated range <= 1.6x.
"""
from __future__ import annotations

import sys
import time

from labenv import CASES  # noqa: F401  (sets $TIERLAB_PROFILES to the lab)
from tierlab.profiles.load import load_software
from tierlab.validate.coverage import (TARGET_WIDTH, coverage, cross_validated, format_coverage,
                                       summarize_coverage)


def main(paths: list[str]) -> None:
    sw = load_software()
    lo, hi = sw.ranges["simulator_error"]
    print(f"software profile {sw.name}: simulator_error {lo:.3f}-{hi:.3f} (measured / predicted, "
          f"P10-P90 of the held-out runs)")
    for label, runs in (
            ("calibrated profiles", lambda: coverage(paths, sw)),
            ("calibrated, simulator error out of sample", lambda: cross_validated(paths, sw)),
            ("stock profile h200-host", lambda: coverage(paths, sw, hardware="h200-host"))):
        t = time.perf_counter()
        got = runs()
        wide = [c for c in got if c.width > TARGET_WIDTH]
        print(format_coverage(label, got))
        print(f"    [{label}: {time.perf_counter() - t:.1f} s]", file=sys.stderr)
        s = summarize_coverage(got)
        print(f"    outside: {', '.join(s['outside']) or 'none'}")
        if wide and label.startswith("calibrated"):       # a stock range may be wide
            print(f"    wider than {TARGET_WIDTH}x: " + ", ".join(
                f"{c.case} {c.width:.2f}x ({c.driver})" for c in wide))


if __name__ == "__main__":
    main(sys.argv[1:] or ["lab/cases"])
