"""Issue 31 item 2: host speed as a measured input. The four fitted host terms (host_dispatch,
zero3_hook, offload_grad_copy, stage0_step: fitted on h200x2-b, -c, -d) can follow a host's own
module call (CPU.module_call_s, measured by every `tierlab calibrate`): on a host whose module
call is r times the fit machines' (Software.fit_module_call_s) they cost 1 + share x (r - 1)
times their value (sim/host_costs.host_speed_factor). The shipped profile's module_call_share is
0 (off); this prints what a share would do, the fitted terms as shipped:

1. the lab's machines (lab/cases, each folder on its own calibrated profile; runs of the three fit
   machines included, where r is 0.94-1.02): pooled step MAPE of every finished run against the
   share, 0 to 1, the lowest of them ("best"), and h200x2-e (the lab machine no fit saw, issue
   5's held-out machine: tests/test_validation_cases.py) at 0 and at the best share;
2. the fresh machines (lab/fresh: no fit and no share choice saw them), each on its own default
   calibration: step MAPE and worst error at 0 and at the best share;
3. on the fresh machines, the same TinyLlama ZeRO-3 CPU-offload step (c-tinyllama-z3cpu-bd) on
   the fastest and slowest machine: measured and predicted ratio (the issue's "runs whose measured
   speed differs by 20%").

    .venv/bin/python lab/scripts/bench_host_scale.py [--shares 0,0.1,...]

About a minute on a 2-core machine. Prints; asserts nothing.
"""
from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

from labenv import LAB  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)

import tierlab
from tierlab.profiles.load import load_hardware
from tierlab.sim.host_costs import default_software

REFERENCE_CASE = "c-tinyllama-z3cpu-bd"


def lab_machines() -> list[tuple[str, str]]:
    """(run folder, its calibrated system profile) of every lab machine with a module call."""
    out = []
    for folder in sorted(p for p in (LAB / "cases").iterdir() if p.is_dir()):
        prof = LAB / "profiles" / "hardware" / "systems" / f"{folder.name}.yaml"
        if prof.is_file() and load_hardware(str(prof)).cpu.module_call_s is not None:
            out.append((str(folder), str(prof)))
    return out


def fresh_machines() -> list[tuple[str, str]]:
    """(run folder, its default calibration) of every fresh machine (lab/fresh/README.md)."""
    fresh = LAB / "fresh"
    return [(str(f), str(fresh / f"{f.name}-profiles" / "hardware" / "systems" / f"{f.name}.yaml"))
            for f in sorted(p for p in fresh.iterdir() if (p / "validate.yaml").is_file())]


def step_rows(folder: str, profile: str, share: float) -> list:
    """The step-time rows of one machine's runs, predicted with `share`."""
    sw = replace(default_software(), module_call_share=share)
    v = tierlab.validate_runs([folder], hardware=profile, software=sw)
    return [r for r in v.report.rows if r.metric == "step_time_s" and r.error_pct is not None]


def mape(rows: list) -> tuple[float, float]:
    errors = [abs(r.error_pct) for r in rows]
    return statistics.mean(errors), max(errors)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shares", default="0,0.1,0.2,0.25,0.3,0.35,0.4,0.5,0.75,1",
                    help="the shares the lab's machines are tried at (comma-separated)")
    args = ap.parse_args()
    sw = default_software()
    print(f"software profile: fit_module_call {sw.fit_module_call_s * 1e6:.2f} us, "
          f"module_call_share {sw.module_call_share:g}")
    lab = lab_machines()
    print(f"1. lab machines ({len(lab)}, each on its calibrated profile): pooled step MAPE")
    pooled = {}
    for share in (float(s) for s in args.shares.split(",")):
        rows = [r for folder, prof in lab for r in step_rows(folder, prof, share)]
        pooled[share] = mape(rows)
        print(f"   share {share:4.2f}: {pooled[share][0]:5.2f}%  worst {pooled[share][1]:5.1f}%  "
              f"({len(rows)} runs)")
    best = min(pooled, key=lambda s: pooled[s][0])
    near = [s for s in pooled if pooled[s][0] <= pooled[best][0] + 0.05]
    print(f"   lowest at {best:g} (within 0.05 points: {min(near):g}-{max(near):g})")
    for share in (0.0, best):
        rows = [r for folder, prof in lab if folder.endswith("h200x2-e")
                for r in step_rows(folder, prof, share)]
        print(f"   h200x2-e (the lab machine no fit saw), share {share:g}: step MAPE "
              f"{mape(rows)[0]:.2f}%, worst {mape(rows)[1]:.1f}%")
    print("2. fresh machines, each on its default calibration: step MAPE / worst")
    both: dict[float, list] = {0.0: [], best: []}
    reference: dict[float, dict[str, tuple[float, float]]] = {s: {} for s in both}
    for folder, prof in fresh_machines():
        hw = load_hardware(prof)
        cells = []
        for share in both:
            rows = step_rows(folder, prof, share)
            both[share] += rows
            cells.append("%5.1f%% / %5.1f%%" % mape(rows))
            for r in rows:
                if r.case.endswith(REFERENCE_CASE):
                    reference[share][hw.name] = (r.measured, r.predicted)
        print(f"   {hw.name:8s} module call {hw.cpu.module_call_s * 1e6:5.1f} us: share 0 "
              f"{cells[0]}   share {best:g} {cells[1]}")
    for share, rows in both.items():
        print(f"   pooled, share {share:g}: step MAPE {mape(rows)[0]:.2f}%, worst "
              f"{mape(rows)[1]:.1f}% ({len(rows)} runs)")
    print(f"3. {REFERENCE_CASE} on the fresh machines, slowest / fastest")
    for share, runs in reference.items():
        slow = max(runs, key=lambda k: runs[k][0])
        fast = min(runs, key=lambda k: runs[k][0])
        print(f"   share {share:g}: {slow} / {fast}: measured {runs[slow][0]:.3f} / "
              f"{runs[fast][0]:.3f} s = {runs[slow][0] / runs[fast][0]:.3f}, predicted "
              f"{runs[slow][1]:.3f} / {runs[fast][1]:.3f} s = {runs[slow][1] / runs[fast][1]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
