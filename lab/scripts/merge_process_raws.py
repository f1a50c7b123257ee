"""One raw calibration record from several calibrations of one machine, as `calibrate` now
records its own separate processes (runner/calibrate_process.py): the first record whole, and
from each later one its host-rate points (DeepSpeed's CPU Adam thread sweep, the 16-bit cast,
the module call) tagged `process` 1, 2, ... For machines calibrated more than once before
calibrate measured the host rates in separate processes itself (lab/fresh/h100-g, h100-h).

    .venv/bin/python lab/scripts/merge_process_raws.py OUT.json FIRST-raw.json LATER-raw.json ...

then `tierlab calibrate --from-raw OUT.json ...` builds the profile (median of the processes,
their spread as the range)."""
from __future__ import annotations

import json
import sys

GROUPS = ("adam", "cast", "dispatch")


def merged(records: list[dict]) -> dict:
    first = json.loads(json.dumps(records[0]))
    for k, rec in enumerate(records[1:], start=1):
        for group in GROUPS:
            points = rec["results"].get(group, [])
            if group == "adam":        # DeepSpeed's thread sweep, as a fresh process measures it
                points = [p for p in points if p["optimizer"] == "deepspeed"]
            first["results"].setdefault(group, []).extend({**p, "process": k} for p in points)
    first["merged_from"] = len(records)
    return first


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    records = [json.loads(open(path).read()) for path in argv[1:]]
    with open(argv[0], "w") as f:
        json.dump(merged(records), f, indent=1)
    print(f"{argv[0]}: {len(records)} calibrations' host rates as processes 0-{len(records) - 1}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
