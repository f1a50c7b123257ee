"""How far one process's draw of a host rate is from the next one's, on one machine, and what
taking the median of several processes does to the predictions (runner/calibrate_process.py).

    .venv/bin/python lab/scripts/bench_process_spread.py

1. Per machine calibrated in more than one process (lab/fresh: h100-i by `calibrate` itself, three
   processes; h100-g, h100-h by merging their repeated calibrations,
   lab/scripts/merge_process_raws.py):
   each host rate's value in each process (the best / fastest / median repeat, as the profile
   picks it), the spread between processes (max / min) and inside the calibrating process (its
   repeats' max / min).
2. The same machine's runs predicted with the profile built from the calibrating process alone
   (what calibrate wrote before) and from the median of the processes (what it writes now): step
   MAPE, worst, optimizer MAPE, runs inside the 80% range.
Prints; asserts nothing. About 20 s."""
from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

from labenv import LAB  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)

import tierlab
from tierlab.runner import calibrate as cal
from tierlab.runner.calibrate_profile import best_of, fastest_of, median_of, per_process

FRESH = LAB / "fresh"
RATES = (("CPU Adam", "adam", "params_per_s", best_of, {"optimizer": "deepspeed"}, 1e9, "G/s"),
         ("16-bit cast", "cast", "params_per_s", median_of, {}, 1e9, "G/s"),
         ("module call", "dispatch", "seconds_per_call", fastest_of, {}, 1e-6, "us"))


def raw_with_processes(folder: Path) -> Path | None:
    """The machine's raw record that holds points of more than one process."""
    for path in sorted(folder.glob("*raw.json")):
        results = json.loads(path.read_text())["results"]
        if any(p.get("process") for p in results.get("adam", [])):
            return path
    return None


def spread_lines(results: dict) -> list[str]:
    lines = []
    for label, group, key, pick, where, scale, unit in RATES:
        points = [p for p in results.get(group, []) if all(p.get(k) == v for k, v in where.items())]
        b, picks, _ = per_process(points, key, pick, **where)
        if b is None:
            continue
        first = [p[key] for p in points if not p.get("process")
                 and p.get("threads") == b.get("threads")]
        vals = sorted(p[key] for p in picks)
        lines.append(f"  {label:12s} per process {' / '.join(f'{v / scale:.3g}' for v in vals)} "
                     f"{unit} (median {b[key] / scale:.3g}): between processes x"
                     f"{vals[-1] / vals[0]:.2f}, inside the first x{max(first) / min(first):.2f}")
    return lines


def first_process_only(raw: dict) -> dict:
    return {**raw, "results": {g: [p for p in pts if not p.get("process")]
                               for g, pts in raw["results"].items()}}


def accuracy(folder: Path, raw: dict, where: Path) -> str:
    c = cal.from_raw(raw, name=folder.name)
    system = None
    for kind, text in c.texts.items():
        path = where / "hardware" / kind / f"{folder.name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if kind == "systems":
            system = path
    v = tierlab.validate_runs([str(folder)], hardware=str(system))
    err = {m: [abs(r.error_pct) for r in v.report.rows if r.metric == m and r.error_pct is not None]
           for m in ("step_time_s", "optimizer_s")}
    inside = f"inside range {v.coverage['inside']} of {v.coverage['n']}"
    return (f"step MAPE {statistics.mean(err['step_time_s']):5.1f}%  worst "
            f"{max(err['step_time_s']):5.1f}%  optimizer "
            f"{statistics.mean(err['optimizer_s']):5.1f}%"
            f"  {inside}")


def main() -> int:
    for folder in sorted(p for p in FRESH.iterdir() if (p / "validate.yaml").is_file()):
        path = raw_with_processes(folder)
        if path is None:
            continue
        raw = json.loads(path.read_text())
        print(f"{folder.name} ({path.name})")
        print("\n".join(spread_lines(raw["results"])))
        with tempfile.TemporaryDirectory() as tmp:
            first = accuracy(folder, first_process_only(raw), Path(tmp) / "a")
            print(f"  first process only    {first}")
            print(f"  median of processes   {accuracy(folder, raw, Path(tmp) / 'b')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
