"""Print tierlab's leave-one-class-out table over the committed runs (lab/cases, every
folder): each class of runs (stage and offload tier, mechanism, model shape, machine) predicted
by the software profile refitted without it, each run on its folder's calibrated profile. This
is the figure the README's accuracy table quotes (ARCHITECTURE rule 18).

    .venv/bin/python lab/scripts/bench_loco.py [--pool train|all] [--no-strict] [--json]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tierlab.profiles.load import load_software
from tierlab.validate.loco import format_table, loco

from labenv import CASES  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pool", choices=("train", "all"), default="train",
                   help="runs the refits draw from: the profile's train_cases (default) or "
                        "every finished run")
    p.add_argument("--no-strict", action="store_true",
                   help="skip the per-run fits that hold out every class of the run")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    a = p.parse_args()
    t0 = time.perf_counter()
    report = loco([CASES], load_software(), pool=a.pool, strict=not a.no_strict)
    took = time.perf_counter() - t0
    print(json.dumps(report.to_dict(), indent=2) if a.json else format_table(report))
    print(f"\n{len(report.classes)} classes, {report.fits} fits, pool '{a.pool}' "
          f"({len(report.pool)} runs): {took:.1f} s")


if __name__ == "__main__":
    main()
