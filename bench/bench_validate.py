"""Print tierlab's validation figures on the committed h200x2 runs: predicted vs measured, MAPE
and max per metric for all cases, the training subset (where the software profile's fitted terms
were fitted) and the held-out rest.

    .venv/bin/python bench/bench_validate.py [CASES_DIR] [-H PROFILE]
"""
from __future__ import annotations

import argparse
from pathlib import Path

from tierlab.profiles.load import load_hardware, load_software
from tierlab.runner.measurement import load_measurement
from tierlab.validate.compare import (compare_measurement, find_measurements, summarize,
                                      summarize_split)

ROOT = Path(__file__).resolve().parents[1]


def validation_rows(cases_dir: Path, hardware: str):
    hw, sw = load_hardware(hardware), load_software()
    rows = []
    for d in find_measurements([cases_dir]):
        rows += compare_measurement(hw, load_measurement(d), name=d.name, software=sw)
    return rows, sw


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cases", nargs="?", default=str(ROOT / "validate" / "cases" / "h200x2"))
    p.add_argument("-H", "--hardware", default="h200x2-host")
    a = p.parse_args()
    rows, sw = validation_rows(Path(a.cases), a.hardware)
    split = summarize_split(rows, sw.train_cases)
    groups = {"all": summarize(rows), "train": split["train"], "held-out": split["held_out"]}
    print(f"software profile {sw.name}; train cases: {', '.join(sw.train_cases)}")
    print(f"{'metric':26s}" + "".join(f"{g:>24s}" for g in groups))
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
        print(f"{metric:26s}" + "".join(f"{c:>24s}" for c in cells))


if __name__ == "__main__":
    main()
