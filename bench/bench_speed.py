"""What users wait for (issue 32): the warm ranged answer in-process and whole-process CPU time of
the CLI verbs, beside the issue's targets, and against an earlier commit when --at names one.

    .venv/bin/python bench/bench_speed.py [--at COMMIT] [--repeat N] [--no-cli]

The ranged answer is what `tierlab simulate` prints for one scenario: the steady step, step 1 and
the step's 80% range (`Scenario.simulate(ranges=True)`), timed best of N after a warm-up call in
one process, the scenario resolved once outside the timing (so profiles are parsed; the engine
answers a repeated question off its kept schedule); 'new schedule' is the same with the kept
schedules emptied before each call (a sweep point whose rates are new), 'cold workload' with
every engine cache emptied (what a sweep point with a new workload pays). The point answer
(`ranges=False`) is shown beside it. CLI rows are the CPU seconds (user + system) of a
fresh `tierlab ...` process, best of N. With --at, the same figures are taken on that commit's
tree (`git archive` into a temporary folder, imported in place of the checkout) and each row
shows old / new. Prints figures; asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_sim import best_of  # noqa: E402  (bench/, the script's own folder)

ROOT = Path(__file__).resolve().parents[1]

PARAM_NVME = ("zero_optimization.offload_param.device=nvme",
              "zero_optimization.offload_param.nvme_path=/nvme")

# (name, resolve kwargs, target for the warm ranged answer in ms: issue 32)
SCENARIOS = (
    ("TinyLlama-1.1B, RTX 3070 8 GB, ZeRO-2 CPU offload",
     dict(model="tinyllama-1.1b", hardware="workstation-rtx3070", ds_config="zero2-cpu"), 5.0),
    ("Llama-2-70B, 8x A100 (dgx-a100), ZeRO-3 params+optimizer CPU, mb 4, seq 4096",
     dict(model="llama-2-70b", hardware="dgx-a100", ds_config="zero3-cpu", micro_batch=4,
          seq=4096), 15.0),
    ("dense-1T, 512 V100 (32 x dgx-2), ZeRO-3 NVMe (params and optimizer)",
     dict(model="dense-1t", hardware="dgx-2", ds_config="zero3-nvme", nodes=32,
          overrides=PARAM_NVME), 60.0),
)

CLI = (
    ("tierlab simulate", ("simulate",), 0.25),
    ("tierlab plan -m llama-2-70b -H dgx-a100", ("plan", "-m", "llama-2-70b", "-H", "dgx-a100"),
     1.5),
)




def _forget():
    """Drop the engine's per-workload caches where this tree has them (a sweep point whose
    workload is new): the 'cold' figure. The kept schedules and FLOP terms (issue 32) go too,
    so 'cold' times the whole simulation; the warm figures reuse them (the same question asked
    again is answered off the kept schedule)."""
    from tierlab.sim import engine, workload

    getattr(workload, "clear_workload_cache", lambda: None)()
    getattr(engine, "_shapes", {}).clear()
    getattr(engine, "clear_schedule_cache", lambda: None)()
    getattr(engine, "_terms", {}).clear()
    _forget_ranges()


def _reschedule():
    """Drop only the kept schedules and FLOP terms (a point whose workload is kept but whose
    rates are new): the 'new schedule' figure. The range's kept end changes and perturbed
    parts go too (sim/ranges.clear_range_cache): a point with new rates has none kept."""
    from tierlab.sim import engine

    getattr(engine, "clear_schedule_cache", lambda: None)()
    getattr(engine, "_terms", {}).clear()
    _forget_ranges()


def _forget_ranges():
    from tierlab.sim import ranges

    getattr(ranges, "clear_range_cache", lambda: None)()


def _in_process(repeat: int) -> dict:
    from tierlab.scenario import resolve

    out = {}
    for name, kw, _ in SCENARIOS:
        sc = resolve(**kw)
        ranged = best_of(lambda: sc.simulate(ranges=True), repeat, warm=True)
        point = best_of(lambda: sc.simulate(), repeat, warm=True)
        cold = best_of(lambda: (_forget(), sc.simulate(ranges=True)), repeat, warm=True)
        fresh = best_of(lambda: (_reschedule(), sc.simulate(ranges=True)), repeat, warm=True)
        r = sc.simulate(ranges=True)
        out[name] = {"ranged_s": ranged, "point_s": point, "cold_s": cold, "fresh_s": fresh,
                     "step_time_s": r.step_time_s, "range_s": list(r.step_time_range_s)}
    return out


def _cpu_s(args, repeat: int) -> float | None:
    code = "import sys; from tierlab.cli import main; sys.argv[0] = 'tierlab'; main()"
    best = float("inf")
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run([sys.executable, "-c", code, *args],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if done.returncode != 0:
            return None           # reported as failed (a checkout mid-edit, a broken tree)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        best = min(best, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return best


def measure(repeat: int, cli: bool) -> dict:
    """Every figure, with `tierlab` as this process imports it (the checkout, or --at's tree)."""
    import tierlab

    out = {"tree": str(Path(tierlab.__file__).resolve().parent), "answers": _in_process(repeat)}
    if cli:     # the child imports the same tree: PYTHONPATH is inherited (--at sets it)
        out["cli"] = {name: _cpu_s(args, repeat) for name, args, _ in CLI}
    return out


def _at(commit: str, repeat: int, cli: bool) -> dict:
    """`measure` on `commit`'s tree, in a child process that imports it instead of the checkout."""
    with tempfile.TemporaryDirectory() as tmp:
        pkg = Path(tmp) / "tierlab"
        pkg.mkdir()
        arch = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True,
                              capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(pkg)], input=arch, check=True)
        args = [sys.executable, __file__, "--json", "--repeat", str(repeat)]
        if not cli:
            args.append("--no-cli")
        got = subprocess.run(args, env={**os.environ, "PYTHONPATH": tmp}, cwd=tmp, check=True,
                             capture_output=True, text=True).stdout
    return json.loads(got)


def _report(new: dict, old: dict | None, commit: str | None) -> None:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "sim"],
                           capture_output=True, text=True).stdout.strip()
    print(f"tierlab speed (checkout {head}{' + uncommitted sim/ changes' if dirty else ''}"
          f"{f', against {commit}' if commit else ''}; {os.cpu_count()} CPU(s), "
          f"load {os.getloadavg()[0]:.2f})")
    print("warm answer in-process (best of N): ranged = step + step 1 + 80% range")
    for name, _, target in SCENARIOS:
        a = new["answers"][name]
        fresh = f"  new schedule {a['fresh_s'] * 1e3:8.2f} ms" if "fresh_s" in a else ""
        line = (f"  {name}\n    ranged {a['ranged_s'] * 1e3:8.2f} ms (target <= {target:g})"
                f"{fresh}  cold workload {a['cold_s'] * 1e3:8.2f} ms  point "
                f"{a['point_s'] * 1e3:8.2f} ms"
                f"  -> step {a['step_time_s']:.4g} s ({a['range_s'][0]:.4g}-{a['range_s'][1]:.4g})")
        if old:
            b = old["answers"][name]
            same = b["step_time_s"] == a["step_time_s"] and b["range_s"] == a["range_s"]
            line += (f"\n    at {commit}: ranged {b['ranged_s'] * 1e3:8.2f} ms, cold "
                     f"{b['cold_s'] * 1e3:8.2f} ms, point {b['point_s'] * 1e3:8.2f} ms  => "
                     f"{b['ranged_s'] / a['ranged_s']:.1f}x / {b['cold_s'] / a['cold_s']:.1f}x / "
                     f"{b['point_s'] / a['point_s']:.1f}x faster; answer "
                     f"{'identical' if same else 'DIFFERS'}")
        print(line)
    if "cli" in new:
        print("whole process, CPU s (user + system, best of N)")
        def fig(x):
            return "failed" if x is None else f"{x:6.2f} s"

        for name, _, target in CLI:
            a = new["cli"][name]
            line = f"  {name:45s} {fig(a)} (target <= {target:g})"
            if old and "cli" in old:
                b = old["cli"][name]
                line += f"   at {commit}: {fig(b)}"
                if a and b:
                    line += f" => {b / a:.2f}x"
            print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--at", help="also measure this commit's tree and print old / new")
    ap.add_argument("--repeat", type=int, default=5, help="timed repeats per figure (best of)")
    ap.add_argument("--no-cli", action="store_true", help="skip the whole-process CLI rows")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.json:
        print(json.dumps(measure(args.repeat, not args.no_cli)))
        return
    old = _at(args.at, args.repeat, not args.no_cli) if args.at else None
    _report(measure(args.repeat, not args.no_cli), old, args.at)


if __name__ == "__main__":
    main()
