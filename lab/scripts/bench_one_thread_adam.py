"""Issue 31 item 2, a candidate not adopted: which CPU Adam rate the fitted host terms follow. The
shipped rule (sim/host_costs.host_speed_factor) reads the best-thread rate on every core
(CPU.adam_params_per_s), which also counts cores: the fit machines are 32-core hosts (5.1-5.5 G
params/s), the lab's later hosts and the fresh ones 16-core (mostly 3.5-4.6), so every 16-core
host looks slow, while the fitted terms (dispatch, ZeRO-3 hooks, per-tensor gradient copies, the
stage-0 loop) are one Python thread's work. The candidate reads DeepSpeedCPUAdam on ONE thread
(CPU.adam_one_thread_params_per_s, the median process's one-thread point: fit machines 0.64-0.80
G params/s, h100-f 1.12) against the fit machines' median (from their CPU profiles).

    .venv/bin/python lab/scripts/bench_one_thread_adam.py [--shares 0,0.35,0.5]
    .venv/bin/python lab/scripts/bench_one_thread_adam.py --split A:B,... [--machines NAME ...]

Default: per share, the shipped measure (every core) and the one-thread rate: the lab's 16 calibrated
machines (pooled step MAPE, worst, runs), h200x2-e (the lab machine no fit saw) and the fresh
machines' step and forward MAPE. --split: the per-submodule terms (dispatch, its
checkpoint-wrapper share, the ZeRO-3 hook) by the one-thread rate at share A, the per-parameter
ones (stage-0 loop, gradient copy) by the all-core rate at share B. --machines: only these
lab/fresh folders in the fresh rows. About a minute per share on a 2-core machine. Prints;
asserts nothing.
"""
from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

from labenv import LAB  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)

import bench_host_scale as scale
import tierlab
import tierlab.sim.host_costs as host_costs
from tierlab.profiles.load import load_hardware
from tierlab.sim.host_costs import default_software

FIT = ("h200x2-b", "h200x2-c", "h200x2-d")
PER_MODULE = ("host_dispatch_s_per_module", "zero3_hook_s_per_module",
              "checkpoint_carried_s_per_block")
"""The fitted terms charged per submodule; the rest of SCALED_BY_HOST_SPEED per parameter tensor."""


def rows(machines, share: float, metric: str = "step_time_s") -> list:
    sw = replace(default_software(), host_speed_share=share)
    out = []
    for folder, profile in machines:
        v = tierlab.validate_runs([folder], hardware=profile, software=sw)
        out += [r for r in v.report.rows if r.metric == metric and r.error_pct is not None]
    return out


def mape(rs: list) -> str:
    errors = [abs(r.error_pct) for r in rs]
    return f"{statistics.mean(errors):5.2f}% (worst {max(errors):4.1f}%, n={len(errors)})"


def one_thread_fit() -> float:
    """The fit machines' median one-thread CPU Adam rate (their CPU profiles)."""
    return statistics.median(load_hardware(n).cpu.adam_one_thread_params_per_s for n in FIT)


def factors(software, hardware, a: float, b: float, per_param_one_thread: bool = False
            ) -> tuple[float, float] | None:
    """(per-submodule factor by the one-thread rate at share a, per-parameter factor at share
    b by the all-core rate, or by the one-thread rate too); None where the shipped rule does not
    apply (no calibrated all-core rate) or the host has no one-thread rate."""
    rates = host_costs.host_speed_rates(replace(software, host_speed_share=1.0), hardware)
    one = hardware.cpu.adam_one_thread_params_per_s
    if rates is None or one is None:
        return None
    slow_one = one_thread_fit() / one - 1
    return (1 + a * slow_one,
            1 + b * (slow_one if per_param_one_thread else rates[0] / rates[1] - 1))


def swapped(shipped, a: float, b: float, per_param_one_thread: bool = False):
    """`shipped` (host_costs.with_host_costs) with each fitted term scaled by factors() at the
    shares a and b instead of the shipped rule."""
    def with_costs(software, hardware):
        if MARK in software.sources:        # already applied (the pipeline applies it again)
            return software
        base = shipped(replace(software, host_speed_share=0.0), hardware)
        f = factors(software, hardware, a, b, per_param_one_thread)
        if f is None:
            return base
        return replace(base, sources={**base.sources, MARK: "swapped"},
                       **{k: getattr(base, k) * (f[0] if k in PER_MODULE else f[1])
                          for k in host_costs.SCALED_BY_HOST_SPEED
                          if k not in hardware.cpu.host_costs})
    return with_costs


MARK = "bench_one_thread_adam"
"""A sources key on a profile the swapped rule made: applying it again gives what once does."""


def run(label: str, lab, fresh, share: float) -> None:
    e = [m for m in lab if m[0].endswith("h200x2-e")]
    print(f"{label}: lab {mape(rows(lab, share))}; h200x2-e {mape(rows(e, share))}")
    print(f"    fresh step {mape(rows(fresh, share))}, forward "
          f"{mape(rows(fresh, share, 'forward_s'))}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shares", default="0,0.35,0.5")
    ap.add_argument("--split", help="A:B pairs, comma-separated (see above)")
    ap.add_argument("--machines", nargs="+", metavar="NAME", help="only these lab/fresh folders "
                    "in the fresh rows")
    args = ap.parse_args()
    lab = scale.lab_machines()
    fresh = [m for m in scale.fresh_machines()
             if not args.machines or m[0].rsplit("/", 1)[-1] in args.machines]
    sw = default_software()
    print(f"fit machines' CPU Adam: one thread {one_thread_fit() / 1e9:.4f}, "
          f"every core {sw.fit_adam_params_per_s / 1e9:.3f} G params/s")
    shipped = host_costs.with_host_costs
    pairs = ([tuple(float(x) for x in p.split(":")) for p in args.split.split(",")]
             if args.split else [])
    try:
        if pairs:
            run(f"shipped (every core, share {sw.host_speed_share:g})", lab, fresh,
                sw.host_speed_share)
        for a, b in pairs:
            host_costs.with_host_costs = swapped(shipped, a, b)
            run(f"split one-thread {a:4.2f} / all-core {b:4.2f}", lab, fresh, 0.0)
        for share in ([] if pairs else [float(s) for s in args.shares.split(",")]):
            host_costs.with_host_costs = shipped
            run(f"share {share:4.2f}, every core (shipped)", lab, fresh, share)
            host_costs.with_host_costs = swapped(shipped, share, share, per_param_one_thread=True)
            run(f"share {share:4.2f}, one thread", lab, fresh, 0.0)
    finally:
        host_costs.with_host_costs = shipped
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
