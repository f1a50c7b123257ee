"""Issue 31 item 2: host speed as a measured input. The four fitted host terms (host_dispatch,
zero3_hook, offload_grad_copy, stage0_step: fitted on h200x2-b, -c, -d) follow a host's own
measured CPU Adam rate (CPU.adam_params_per_s, measured by every `tierlab calibrate`): on a host
whose rate is the fit machines' (Software.fit_adam_params_per_s) divided by r they cost
1 + share x (r - 1) times their value (sim/host_costs.host_speed_factor). Prints:

1. which measure tracks a host's speed: over every calibrated machine (lab/cases' 16 and
   lab/fresh's, each on its own profile, the rule off), the Pearson r between the machine's mean
   signed step error (log of predicted / measured) and the log of each candidate calibrate
   measures, as a slowness (module call time, 1 / CPU Adam rate, PCIe 64 KiB latency); a
   measure of host speed correlates negatively (a slow host: predictions too fast); and per run,
   the module call each training process measured before deepspeed.initialize;
2. the lab's machines (lab/cases, each folder on its own calibrated profile; runs of the three fit
   machines included, where r is 0.96-1.03): pooled step MAPE of every finished run against the
   share, 0 to 1, the lowest of them ("best"), and h200x2-e (the lab machine no fit saw, issue
   5's held-out machine: tests/test_validation_cases.py) at 0, the best share and the shipped one;
3. the fresh machines (lab/fresh: no fit and no share choice saw them), each on its own default
   calibration: step MAPE and worst error at 0 and at the shipped share;
4. on the fresh machines, the same TinyLlama ZeRO-3 CPU-offload step (c-tinyllama-z3cpu-bd) on
   the fastest and slowest machine: measured and predicted ratio (the issue's "runs whose measured
   speed differs by 20%");
5. the other candidates as the rule's measure (this process swaps host_speed_factor for one
   that reads the candidate against the fit machines' median): the lab's best share and pooled
   MAPE, h200x2-e and the fresh machines at that share. The shipped measure is the one whose best
   share keeps the lab's accuracy targets (tests/test_validation_cases.py) and predicts the lab
   best among those; the module call predicts the lab a little better but breaks h200x2-e.

    .venv/bin/python lab/scripts/bench_host_scale.py [--shares 0,0.1,...]

About a minute and a half on a 2-core machine. Prints; asserts nothing.
"""
from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np

from labenv import LAB  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)

import tierlab
from tierlab.profiles.load import load_hardware
from tierlab.records.measurement import load_measurement
from tierlab.runner.train import PROBE_BEFORE_INIT
from tierlab.sim.host_costs import default_software

REFERENCE_CASE = "c-tinyllama-z3cpu-bd"
CANDIDATES = {
    "module call": lambda hw: hw.cpu.module_call_s,
    "1 / CPU Adam rate": lambda hw: 1.0 / hw.cpu.adam_params_per_s,
    "PCIe 64 KiB latency": lambda hw: hw.pcie.latency_s,
}
"""Candidate measures of a host's slowness, each read off a calibrated profile."""


def lab_machines() -> list[tuple[str, str]]:
    """(run folder, its calibrated system profile) of every calibrated lab machine."""
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
    sw = replace(default_software(), host_speed_share=share)
    v = tierlab.validate_runs([folder], hardware=profile, software=sw)
    return [r for r in v.report.rows if r.metric == "step_time_s" and r.error_pct is not None]


def mape(rows: list) -> tuple[float, float]:
    errors = [abs(r.error_pct) for r in rows]
    return statistics.mean(errors), max(errors)


def log_error(row) -> float:
    return math.log(row.predicted / row.measured)


def candidates(machines: list[tuple[str, str]]) -> None:
    """Section 1: r between each machine's mean log step error (rule off) and each candidate."""
    means, hws = [], []
    for folder, prof in machines:
        rows = step_rows(folder, prof, 0.0)
        if rows:
            means.append(statistics.mean(log_error(r) for r in rows))
            hws.append(load_hardware(prof))
    for name, read in CANDIDATES.items():
        pairs = [(math.log(read(hw)), e) for hw, e in zip(hws, means) if read(hw)]
        x, y = np.array(pairs).T
        print(f"   {name:20s} r = {np.corrcoef(x, y)[0, 1]:+.2f} over {len(pairs)} machines")
    runs = []
    for folder, prof in machines:
        for r in step_rows(folder, prof, 0.0):
            host = load_measurement(LAB / Path(folder).parent.name / r.case).host or {}
            if PROBE_BEFORE_INIT in str(host.get("module_call_source", "")):
                runs.append((math.log(host["module_call_s"]), log_error(r)))
    x, y = np.array(runs).T
    print(f"   {'module call per run':20s} r = {np.corrcoef(x, y)[0, 1]:+.2f} over {len(runs)} "
          f"runs (each run's own process, {PROBE_BEFORE_INIT})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shares", default="0,0.1,0.2,0.3,0.35,0.4,0.5,0.75,1",
                    help="the shares the lab's machines are tried at (comma-separated)")
    args = ap.parse_args()
    sw = default_software()
    shipped = sw.host_speed_share
    print(f"software profile: fit_adam_throughput {sw.fit_adam_params_per_s / 1e9:.3f} G params/s, "
          f"host_speed_share {shipped:g}")
    lab, fresh = lab_machines(), fresh_machines()
    print(f"1. host-speed candidates against each machine's mean step error ({len(lab)} lab + "
          f"{len(fresh)} fresh machines, the rule off)")
    candidates(lab + fresh)
    print(f"2. lab machines ({len(lab)}, each on its calibrated profile): pooled step MAPE")
    pooled = {}
    for share in (float(s) for s in args.shares.split(",")):
        rows = [r for folder, prof in lab for r in step_rows(folder, prof, share)]
        pooled[share] = mape(rows)
        print(f"   share {share:4.2f}: {pooled[share][0]:5.2f}%  worst {pooled[share][1]:5.1f}%  "
              f"({len(rows)} runs)")
    best = min(pooled, key=lambda s: pooled[s][0])
    near = [s for s in pooled if pooled[s][0] <= pooled[best][0] + 0.05]
    print(f"   lowest at {best:g} (within 0.05 points: {min(near):g}-{max(near):g})")
    for share in sorted({0.0, best, shipped}):
        rows = [r for folder, prof in lab if folder.endswith("h200x2-e")
                for r in step_rows(folder, prof, share)]
        print(f"   h200x2-e (the lab machine no fit saw), share {share:g}: step MAPE "
              f"{mape(rows)[0]:.2f}%, worst {mape(rows)[1]:.1f}%")
    print("3. fresh machines, each on its default calibration: step MAPE / worst")
    both: dict[float, list] = {0.0: [], shipped: []}
    reference: dict[float, dict[str, tuple[float, float]]] = {s: {} for s in both}
    for folder, prof in fresh:
        hw = load_hardware(prof)
        cells = []
        for share in both:
            rows = step_rows(folder, prof, share)
            both[share] += rows
            cells.append("%5.1f%% / %5.1f%%" % mape(rows))
            for r in rows:
                if r.case.endswith(REFERENCE_CASE):
                    reference[share][hw.name] = (r.measured, r.predicted)
        print(f"   {hw.name:8s} CPU Adam {hw.cpu.adam_params_per_s / 1e9:4.2f} G/s: share 0 "
              f"{cells[0]}   share {shipped:g} {cells[-1]}")
    for share, rows in both.items():
        print(f"   pooled, share {share:g}: step MAPE {mape(rows)[0]:.2f}%, worst "
              f"{mape(rows)[1]:.1f}% ({len(rows)} runs)")
    print(f"4. {REFERENCE_CASE} on the fresh machines, slowest / fastest")
    reference_ratios(reference)
    print("5. the other candidates as the rule's measure (lab: best share; then h200x2-e, fresh)")
    for name in ("module call", "PCIe 64 KiB latency"):
        other_measure(name, lab, fresh, [float(s) for s in args.shares.split(",")])
    return 0


def reference_ratios(reference: dict) -> None:
    for share, runs in reference.items():
        slow = max(runs, key=lambda k: runs[k][0])
        fast = min(runs, key=lambda k: runs[k][0])
        print(f"   share {share:g}: {slow} / {fast}: measured {runs[slow][0]:.3f} / "
              f"{runs[fast][0]:.3f} s = {runs[slow][0] / runs[fast][0]:.3f}, predicted "
              f"{runs[slow][1]:.3f} / {runs[fast][1]:.3f} s = {runs[slow][1] / runs[fast][1]:.3f}")


def other_measure(name: str, lab: list, fresh: list, shares: list[float]) -> None:
    """Section 5: the rule with candidate `name` in place of the CPU Adam rate."""
    import tierlab.sim.host_costs as host_costs
    read = CANDIDATES[name]
    fit = [load_hardware(f"h200x2-{x}") for x in "bcd"]
    ref = statistics.median(read(hw) for hw in fit)
    shipped = host_costs.host_speed_factor

    def factor(software, hardware):
        value = read(hardware)
        return 1.0 if value is None else 1.0 + software.host_speed_share * (value / ref - 1.0)
    host_costs.host_speed_factor = factor
    try:
        lab_mape = {s: mape([r for f, p in lab for r in step_rows(f, p, s)]) for s in shares}
        best = min(lab_mape, key=lambda s: lab_mape[s][0])
        e = mape([r for f, p in lab if f.endswith("h200x2-e") for r in step_rows(f, p, best)])
        new = mape([r for f, p in fresh for r in step_rows(f, p, best)])
    finally:
        host_costs.host_speed_factor = shipped
    print(f"   {name:20s} lab best at {best:g}: {lab_mape[best][0]:5.2f}% (0: "
          f"{lab_mape[0.0][0]:.2f}%); h200x2-e {e[0]:.2f}% worst {e[1]:.1f}%; fresh {new[0]:.2f}% "
          f"worst {new[1]:.1f}%")


if __name__ == "__main__":
    raise SystemExit(main())
