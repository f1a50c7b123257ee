"""Where a real run's host time goes: run plan cases (lab/plan.yaml) with `tierlab run` as
gpu_validate.py does, once plain and once under cProfile, and print DeepSpeed's functions by
cumulative and own time per optimizer step (issue 31 item 3: the host-bound classes).

    python lab/scripts/profile_case.py --out $OUT CASE [CASE ...]

Leaves $OUT/profiles.tar.gz (per case: the plain and the profiled measurement folders, the
.prof file and the text summary) and prints each summary. cProfile slows Python-heavy code; the
summary prints the plain and the profiled steady step so the distortion is on the page."""
from __future__ import annotations

import argparse
import io
import json
import pstats
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

from labenv import ROOT  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)
from gpu_validate import command

KEEP = ("deepspeed/", "torch/cuda", "{method 'synchronize'", "{method 'copy_'", "{method 'add_'",
        "{built-in method torch", "{method 'item'", "{method 'record'", "{method 'wait")
"""Rows worth reading: DeepSpeed's own code and the calls where the host waits on the GPU."""


def steady_step_s(folder: Path) -> float | None:
    """Median wall time of the steady steps of one measurement folder."""
    try:
        s = json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return (s.get("step_time_s") or {}).get("median")


def summary(prof: Path, steps: int, limit: int = 45) -> str:
    """The profile's rows under KEEP, by cumulative then own time, in ms per step."""
    out = []
    for key in ("cumulative", "tottime"):
        buf = io.StringIO()
        st = pstats.Stats(str(prof), stream=buf)
        rows = []
        for (file, line, name), (cc, nc, tt, ct, _) in st.stats.items():
            where = f"{file}:{line}({name})"
            if any(k in where for k in KEEP):
                rows.append((ct if key == "cumulative" else tt, nc, tt, ct, where))
        rows.sort(reverse=True)
        out.append(f"-- by {key} time (ms per step over {steps} steps; calls per step)")
        for _, nc, tt, ct, where in rows[:limit]:
            short = where.split("site-packages/")[-1]
            out.append(f"{ct * 1e3 / steps:9.1f} cum {tt * 1e3 / steps:9.1f} own "
                       f"{nc / steps:8.0f} calls  {short}")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--hardware", default="h200x2-b")
    ap.add_argument("--swap", default="/var/tmp/tierlab-swap")
    ap.add_argument("--steps", type=int, default=6)
    a = ap.parse_args()
    plan = yaml.safe_load((ROOT / "lab" / "plan.yaml").read_text())
    by_name = {c["name"]: c for c in plan["cases"]}
    work = Path("/tmp/tierlab-profile")
    work.mkdir(parents=True, exist_ok=True)
    for name in a.cases:
        case = by_name[name]
        for kind in ("plain", "profiled"):
            folder = work / f"{name}.{kind}"
            cmd = command(case, plan["defaults"], folder, a.hardware, a.swap, steps=a.steps)
            if kind == "profiled":
                cmd[1:3] = ["-m", "cProfile", "-o", str(work / f"{name}.prof"), "-m",
                            "tierlab.cli"]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
            (work / f"{name}.{kind}.log").write_text(done.stdout + done.stderr)
            print(f"{name} {kind}: rc {done.returncode}, steady step "
                  f"{steady_step_s(folder)} s", flush=True)
        text = (f"{name}: plain steady step {steady_step_s(work / f'{name}.plain')} s, profiled "
                f"{steady_step_s(work / f'{name}.profiled')} s\n")
        if (work / f"{name}.prof").exists():
            text += summary(work / f"{name}.prof", a.steps)
        (work / f"{name}-profile.txt").write_text(text)
        print(text, flush=True)
        with tarfile.open(a.out / "profiles.tar.gz", "w:gz") as tar:
            tar.add(work, arcname="profiles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
