"""Run the validation set (lab/plan.yaml) on a GPU host with `tierlab run`, one subprocess a
case, inside a time budget; pack every finished measurement directory into $OUT as it goes.

    python lab/scripts/gpu_validate.py --out $OUT --budget 540 [--only NAME ...] [--skip NAME ...]

A plan entry may set `timeout_s` (seconds) to override --case-timeout for that case.
--only runs the named cases in the order given (most important first: the budget cuts the tail).
A name given k times runs k times, each in its own process: the 2nd into NAME.p2, the 3rd into
NAME.p3, ... (repeats on one machine: lab/scripts/bench_repeatability.py splits process from machine).

Each case: `tierlab run --breakdown --skip-preflight -H h200-host ...` (preflight's memory verdict
would refuse the runs whose OOM we want measured; it runs separately in gpu_session.sh).
Cases needing more GPUs than the host has are skipped and listed."""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import yaml

from labenv import ROOT  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)


def command(case: dict, defaults: dict, out_dir: Path, hardware: str, swap: str,
            steps: int | None = None) -> list[str]:
    c = {**defaults, **case, **({"steps": steps} if steps else {})}
    cmd = [sys.executable, "-m", "tierlab.cli", "run", "-m", c["model"], "-c", c["config"],
           "-H", hardware, "--micro-batch", str(c["micro_batch"]), "--seq", str(c["seq"]),
           "--steps", str(c["steps"]), "--warmup-steps", str(c["warmup_steps"]),
           "--breakdown", "--skip-preflight", "--swap-dir", swap, "--out", str(out_dir), "-q"]
    if c.get("cap"):
        cmd += ["--gpu-mem-cap", c["cap"]]
    if int(c.get("grad_accum", 1)) > 1:
        cmd += ["--grad-accum", str(c["grad_accum"])]
    if c.get("checkpointing") is False:
        cmd += ["--no-checkpointing"]
    if int(c.get("gpus", 1)) > 1:
        cmd += ["--gpus", str(c["gpus"])]
    for s in c.get("set", []):
        cmd += ["--set", s]
    return cmd


def run_names(only: list[str], by_name: dict[str, dict]) -> list[tuple[str, dict]]:
    """(directory name, plan entry) per --only name, in order; the k-th time a name is given
    (k >= 2) it runs as NAME.pk."""
    seen: dict[str, int] = {}
    out = []
    for n in only:
        seen[n] = seen.get(n, 0) + 1
        out.append((n if seen[n] == 1 else f"{n}.p{seen[n]}", by_name[n]))
    return out


def case_timeout_s(case: dict, default_s: float) -> float:
    """A plan entry's own `timeout_s` (a case known to need longer, e.g. NVMe parameters on a
    slow drive) wins over --case-timeout."""
    return float(case.get("timeout_s", default_s))


def pack(work: Path, out: Path) -> None:
    tmp = out / ".validation.tar.gz"
    with tarfile.open(tmp, "w:gz") as tar:
        for d in sorted(work.iterdir()):
            if d.is_dir():
                tar.add(d, arcname=d.name)
    tmp.replace(out / "validation.tar.gz")


def run_case(cmd: list[str], log_path: Path, timeout_s: float) -> str:
    """Run one case in its own process group; past the timeout SIGTERM (the runner closes its
    Measurement as interrupted, keeping its steps), then SIGKILL."""
    import signal

    with open(log_path, "w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                rc = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                rc = proc.wait()
            rc = f"{rc} (timeout after {timeout_s:.0f} s)"
    return log_path.read_text()[-3000:] + f"\nexit {rc}\n"


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:   # noqa: BLE001 - a host without torch has no GPUs for us
        return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--plan", default=str(ROOT / "lab" / "plan.yaml"))
    ap.add_argument("--budget", type=float, default=540.0, help="seconds for all cases")
    ap.add_argument("--case-timeout", type=float, default=240.0)
    ap.add_argument("--hardware", default="h200-host")
    ap.add_argument("--swap", default="/var/tmp/tierlab-swap")
    ap.add_argument("--work", default="/tmp/tierlab-validate")
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--skip", nargs="*", default=[])
    ap.add_argument("--steps", type=int, default=None,
                    help="steps of every case, warm-up included, overriding the plan's own "
                         "(the NVMe cases' 7 too; default: the plan's)")
    args = ap.parse_args()
    t0 = time.time()
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    plan = yaml.safe_load(Path(args.plan).read_text())
    gpus = gpu_count()
    log = open(out / "validate-session.log", "a", buffering=1)
    by_name = {c["name"]: c for c in plan["cases"]}
    unknown = [n for n in (args.only or []) if n not in by_name]
    if unknown:
        print(f"error: --only {unknown[0]}: not a case of {args.plan}", file=sys.stderr)
        return 2
    for name, case in run_names(args.only, by_name) if args.only else \
            [(c["name"], c) for c in plan["cases"]]:
        if name in args.skip:
            continue
        needed = int(case.get("gpus", plan["defaults"].get("gpus", 1)))
        if needed > max(gpus, 1):   # a CPU-only host still runs the 1-process cases
            log.write(f"skip {name}: needs {needed} GPUs, host has {gpus}\n")
            continue
        left = args.budget - (time.time() - t0)
        if left < 30:
            log.write(f"skip {name}: budget spent\n")
            continue
        cmd = command(case, plan["defaults"], work / name, args.hardware, args.swap, args.steps)
        log.write(f"== {name} at {time.time() - t0:.0f} s: {shlex.join(cmd[2:])}\n")
        started = time.time()
        (work / name).mkdir(parents=True, exist_ok=True)
        log.write(run_case(cmd, work / name / "stdout.log",
                           min(case_timeout_s(case, args.case_timeout), left)))
        log.write(f"-- {name}: {time.time() - started:.0f} s\n")
        pack(work, out)
    log.write(f"total {time.time() - t0:.0f} s\n")
    pack(work, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
