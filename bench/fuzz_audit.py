"""Issue 34's generated audit: the class table over the fuzz suite's cases (tests/_fuzzgen.py,
the same cases tests/test_fuzz_generated.py runs), per verb and per input kind, and one line per
case outside `ok`. Exits 0 (a figure, not a test).

    .venv/bin/python bench/fuzz_audit.py                 # every case (~2 minutes)
    .venv/bin/python bench/fuzz_audit.py --kind output   # one input kind (or --verb VERB)
    .venv/bin/python bench/fuzz_audit.py --seed 7        # other draws of the random cases
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("DS_ACCELERATOR", "cpu")

import _fuzzgen  # noqa: E402


def table(rows: dict[str, Counter], title: str) -> None:
    cols = _fuzzgen.CLASSES
    print(f"\n{title:<14}" + "".join(f"{c:>15}" for c in ("cases", *cols)))
    for name in sorted(rows):
        c = rows[name]
        print(f"{name:<14}" + f"{sum(c.values()):>15}" + "".join(f"{c[k]:>15}" for k in cols))
    total = sum(rows.values(), Counter())
    print(f"{'total':<14}" + f"{sum(total.values()):>15}" + "".join(f"{total[k]:>15}"
                                                                   for k in cols))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=_fuzzgen.SEED)
    ap.add_argument("--kind")
    ap.add_argument("--verb")
    a = ap.parse_args()
    cases = [c for c in _fuzzgen.cases(a.seed) if (not a.kind or c.kind == a.kind)
             and (not a.verb or c.verb == a.verb)]
    tmp = Path(tempfile.mkdtemp(prefix="tierlab-fuzz-"))
    by_verb: dict[str, Counter] = {}
    by_kind: dict[str, Counter] = {}
    t0 = time.monotonic()
    slow = []
    try:
        for i, case in enumerate(cases):
            out = _fuzzgen.run_case(case, tmp / str(i))
            shutil.rmtree(tmp / str(i), ignore_errors=True)
            by_verb.setdefault(case.verb, Counter())[out.cls] += 1
            by_kind.setdefault(case.kind, Counter())[out.cls] += 1
            slow.append((out.seconds, case.id))
            if out.cls != "ok":
                print(f"{out.cls.upper():<14} {case.id}: {' '.join(case.args)[:150]}\n"
                      f"{'':<15}{out.detail[:300]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    table(by_verb, "verb")
    table(by_kind, "input kind")
    slow.sort(reverse=True)
    print(f"\n{len(cases)} cases in {time.monotonic() - t0:.0f} s (seed {a.seed}); slowest: " +
          ", ".join(f"{cid} {s:.1f} s" for s, cid in slow[:5]))


if __name__ == "__main__":
    main()
