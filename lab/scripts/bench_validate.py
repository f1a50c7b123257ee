"""Print tierlab's validation figures on the committed H200 runs: predicted vs measured, MAPE and
max per metric for all cases, the training subset (where the software profile's fitted terms were
fitted) and the held-out rest. Each folder of runs is simulated on the profile calibrated beside
it; `h200x2-e`, a machine none of the fitted terms saw, is also shown alone; `h200x2-s3` has no
calibration of its own and is reported apart from the targets.

    .venv/bin/python lab/scripts/bench_validate.py [--folder NAME=PROFILE ...]
"""
from __future__ import annotations

import argparse
from pathlib import Path

from tierlab.profiles.load import load_hardware, load_software
from tierlab.records.measurement import load_measurement
from tierlab.validate.compare import (case_key, compare_measurement, find_measurements,
                                      folder_hardware, summarize, summarize_split)

from labenv import ROOT  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)
CASES = ROOT / "lab" / "cases"
PAIRED = {f: folder_hardware(CASES / f)
          for f in ("h200x2", "h200x2-b", "h200x2-c", "h200x2-d", "h200x2-e", "h200x2-f")}
"""Folder of runs -> the profile calibrated on the same machine (its validate.yaml): the targets'
set."""
UNPAIRED = {f: folder_hardware(CASES / f) for f in ("h200x2-s3",)}
"""Runs without a calibration of their own -> the nearest calibrated profile (reported apart)."""


def validation_rows(folders: dict[str, str]):
    sw = load_software()
    rows = []
    for folder, hardware in folders.items():
        hw = load_hardware(hardware)
        for d in find_measurements([CASES / folder]):
            rows += compare_measurement(hw, load_measurement(d), name=case_key(d), software=sw)
    return rows, sw


def table(title: str, rows, train) -> None:
    split = summarize_split(rows, train)
    groups = {"all": summarize(rows), "train": split["train"], "held-out": split["held_out"]}
    print(f"\n{title}")
    print(f"{'metric':26s}" + "".join(f"{g:>28s}" for g in groups))
    for metric in groups["all"]:
        cells = []
        for g in groups.values():
            s = g.get(metric)
            if s is None:
                cells.append("-")
            elif metric == "oom":
                cells.append(f"{s['n'] - len(s['mismatches'])}/{s['n']} agree")
            else:
                cells.append(f"{s['mape_pct']:5.1f}% (max {s['max_pct']:5.1f}%) n={s['n']}")
        print(f"{metric:26s}" + "".join(f"{c:>28s}" for c in cells))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--folder", action="append", default=[], metavar="NAME=PROFILE",
                   help="validate only these folders of lab/cases, each on its profile")
    a = p.parse_args()
    chosen = dict(f.split("=", 1) for f in a.folder) if a.folder else None
    paired = chosen or PAIRED
    rows, sw = validation_rows(paired)
    print(f"software profile {sw.name}; train cases: {', '.join(sw.train_cases)}")
    table("paired runs (" + ", ".join(f"{k} on {v}" for k, v in paired.items()) + ")",
          rows, sw.train_cases)
    if chosen is None:
        fresh = {"h200x2-e": PAIRED["h200x2-e"]}
        extra, _ = validation_rows(fresh)
        table("a machine the fit never saw (h200x2-e on h200x2-e; part of the paired set above)",
              extra, sw.train_cases)
        for folder, hardware in UNPAIRED.items():
            extra, _ = validation_rows({folder: hardware})
            table(f"unpaired runs ({folder} on {hardware}; not in the targets)", extra,
                  sw.train_cases)


if __name__ == "__main__":
    main()
