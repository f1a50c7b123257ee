"""Issue 31 item 2, a candidate not adopted: DeepSpeed's CPU Adam at ONE thread as the measure of
host speed for the fitted host terms, in place of its best-thread rate (the shipped rule,
sim/host_costs.host_speed_factor). The fitted terms (dispatch, ZeRO-3 hooks, gradient copies,
stage-0 loop) are single-thread Python and launch work; the best-thread rate also counts cores
(the fit machines are 32-core hosts, 5.1-5.5 G params/s; the 16-core lab and fresh hosts mostly
3.5-4.6), while the one-thread rate reads the core's own speed (fit machines 0.63-0.80, h100-f
1.11 G params/s). Each machine's one-thread rate is read from its raw calibration record
(`results.adam`, optimizer 'deepspeed', threads 1, the best repeat), the fit machines' median is
the reference, and the shares are tried as bench_host_scale.py tries them.

    .venv/bin/python lab/scripts/bench_one_thread_adam.py [--shares 0,0.35,0.5,0.75,1]

Prints per share: the lab's 16 calibrated machines (pooled step MAPE, worst, runs), h200x2-e (the
lab machine no fit saw), and the fresh machines' step, forward, backward and optimizer MAPE.
About a minute per share on a 2-core machine. Prints; asserts nothing.

--split A:B,...: the split rule instead (docs/calibration.md "Host-bound classes against their
machine's reference"): the per-submodule terms (dispatch, its checkpoint-wrapper share, the ZeRO-3
hook) by the one-thread rate at share A, the per-parameter ones (stage-0 loop, gradient copy) by
the all-core CPU Adam rate at share B; first the shipped rule for comparison. --machines NAME...:
only these lab/fresh folders in the fresh rows (e.g. the machines measured after a choice).
"""
from __future__ import annotations

import argparse
import glob
import json
import statistics
from dataclasses import replace

from labenv import LAB  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)

import bench_host_scale as scale
import tierlab
import tierlab.sim.host_costs as host_costs
from tierlab.sim.host_costs import default_software


def one_thread_rate(raw: str) -> float | None:
    """The best one-thread DeepSpeedCPUAdam rate (params/s) in a raw calibration record."""
    points = json.loads(open(raw).read())["results"].get("adam") or []
    rates = [p["params_per_s"] for p in points
             if p.get("threads") == 1 and p.get("optimizer") == "deepspeed"]
    return max(rates) if rates else None


def rates_by_machine() -> dict[str, float | None]:
    """{profile name: one-thread rate} of the lab's and the fresh machines' raw records."""
    out = {f.split("/")[-1].removesuffix("-raw.json"): one_thread_rate(f)
           for f in glob.glob(str(LAB / "cases" / "*" / "*-raw.json"))}
    for f in glob.glob(str(LAB / "fresh" / "*" / "*-raw.json")):
        folder = f.split("/")[-2]
        if f.endswith(f"/{folder}-raw.json"):
            out[folder] = one_thread_rate(f)
    return out


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


PER_MODULE = ("host_dispatch_s_per_module", "zero3_hook_s_per_module",
              "checkpoint_carried_s_per_block")
"""The fitted terms charged per submodule (Python on one core); the rest of SCALED_BY_HOST_SPEED
is charged per parameter tensor."""


def split_rule(shipped, rate: dict, ref: float, a: float, b: float):
    """`shipped` (host_costs.with_host_costs) with the split rule: PER_MODULE terms by the
    one-thread rate (`rate`, the fit machines' `ref`) at share a, the others by the all-core rate
    at share b."""
    def with_costs(software, hardware):
        base = shipped(replace(software, host_speed_share=0.0), hardware)
        rates = host_costs.host_speed_rates(replace(software, host_speed_share=1.0), hardware)
        one = rate.get(hardware.name)
        if rates is None or not one:
            return base
        fa, fb = 1 + a * (ref / one - 1), 1 + b * (rates[0] / rates[1] - 1)
        return replace(base, **{k: getattr(base, k) * (fa if k in PER_MODULE else fb)
                                for k in host_costs.SCALED_BY_HOST_SPEED
                                if k not in hardware.cpu.host_costs})
    return with_costs


def split(rate: dict, ref: float, pairs: list[tuple[float, float]], only=None) -> None:
    lab, fresh = scale.lab_machines(), scale.fresh_machines()
    fresh = [m for m in fresh if not only or m[0].rsplit("/", 1)[-1] in only]
    shipped_share = default_software().host_speed_share
    print(f"shipped rule (all four by the all-core rate, share {shipped_share:g}): "
          f"lab {mape(rows(lab, shipped_share))}; fresh {mape(rows(fresh, shipped_share))}")
    shipped = host_costs.with_host_costs
    try:
        for a, b in pairs:
            host_costs.with_host_costs = split_rule(shipped, rate, ref, a, b)
            print(f"split one-thread {a:4.2f} / all-core {b:4.2f}: lab {mape(rows(lab, 0.0))}; "
                  f"fresh {mape(rows(fresh, 0.0))}, forward {mape(rows(fresh, 0.0, 'forward_s'))}")
    finally:
        host_costs.with_host_costs = shipped


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shares", default="0,0.35,0.5,0.75,1")
    ap.add_argument("--split", help="A:B pairs, comma-separated (see above)")
    ap.add_argument("--machines", nargs="+", metavar="NAME", help="with --split: only these "
                    "lab/fresh folders in the fresh rows")
    args = ap.parse_args()
    shares = [float(s) for s in args.shares.split(",")]
    rate = rates_by_machine()
    ref = statistics.median(rate[f"h200x2-{x}"] for x in "bcd")
    print(f"fit machines' one-thread DeepSpeed CPU Adam, median: {ref / 1e9:.3f} G params/s")
    if args.split:
        split(rate, ref, [tuple(float(x) for x in p.split(":")) for p in args.split.split(",")],
              args.machines)
        return 0

    def factor(software, hardware):
        value = rate.get(hardware.name)
        return 1.0 if not value else 1.0 + software.host_speed_share * (ref / value - 1.0)
    shipped = host_costs.host_speed_factor
    host_costs.host_speed_factor = factor
    try:
        lab, fresh = scale.lab_machines(), scale.fresh_machines()
        e = [m for m in lab if m[0].endswith("h200x2-e")]
        for share in shares:
            print(f"share {share:4.2f}: lab {mape(rows(lab, share))}; h200x2-e "
                  f"{mape(rows(e, share))}")
            print(f"            fresh step {mape(rows(fresh, share))}")
            for metric in ("forward_s", "backward_s", "optimizer_s"):
                print(f"            fresh {metric:11s} {mape(rows(fresh, share, metric))}")
    finally:
        host_costs.host_speed_factor = shipped
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
