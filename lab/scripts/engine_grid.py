"""Write tests/data/engine_grid.json: the engine's ranged answers on tests/test_engine_grid.py's
GRID, which the test then holds bit for bit (issue 32).

    .venv/bin/python lab/scripts/engine_grid.py

Run it only when a change is meant to move the simulator's figures; a speed-up must not.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.test_engine_grid import DATA, GRID, compute, key  # noqa: E402


def main() -> None:
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    points = {}
    for p in GRID:
        t0 = time.perf_counter()
        points[key(p)] = compute(p)
        print(f"{time.perf_counter() - t0:7.3f} s  {key(p)}", file=sys.stderr)
    DATA.write_text(json.dumps({"written_at_commit": commit, "points": points}, indent=1,
                               sort_keys=True) + "\n")
    print(f"wrote {DATA.relative_to(ROOT)}: {len(points)} points", file=sys.stderr)


if __name__ == "__main__":
    main()
