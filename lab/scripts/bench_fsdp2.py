"""Issue 33 item 7: real FSDP2 CPU-offload runs (lab/fsdp2/*/, `tierlab run --engine
fsdp2-offload` on an H200) against the simulator's FSDP2 schedule (sim/fsdp2.py) on the stock
`h200-host` profile: step time, phases where the run measured them (--breakdown), GPU peak
(torch's max_memory_allocated against the plan less the CUDA context, as validate/compare.py
compares DeepSpeed's).

    .venv/bin/python lab/scripts/bench_fsdp2.py
"""
from __future__ import annotations

import json

from labenv import LAB  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)

from tierlab.scenario import resolve

PHASES = ("forward_s", "backward_s", "optimizer_s")


def runs():
    """(machine, case, measurement) of every FSDP2 run that finished."""
    for m in sorted(LAB.glob("fsdp2/*/*/measurement.json")):
        rec = json.loads(m.read_text())
        if rec["status"] == "ok" and rec["run"]["engine"] == "fsdp2-offload":
            yield m.parent.parent.name, m.parent.name, rec


def predicted(rec):
    run = rec["run"]
    sc = resolve(model=rec["model"]["name"], hardware="h200-host", ds_config="no-offload",
                 micro_batch=run["micro_batch"], seq=run["seq"], gpus=1, nodes=1)
    return sc.simulate(engine="fsdp2-offload")


def pct(sim: float, real: float) -> str:
    return f"{100 * (sim / real - 1):+6.1f}%"


def main() -> None:
    errs = []
    print(f"{'machine/case':34} {'step real':>9} {'sim':>7} {'err':>7}   "
          f"{'GPU peak real':>13} {'sim':>8} {'err':>7}")
    for machine, case, rec in runs():
        s, p = rec["summary"], predicted(rec)
        real = s["step_time_s"]["median"]
        peak = s["peak_gpu_max_allocated_bytes"]
        sim_peak = p.gpu_peak_bytes - p.memory["gpu"]["cuda_context"]
        errs.append(abs(p.step_time_s / real - 1))
        print(f"{machine + '/' + case:34} {real:8.3f}s {p.step_time_s:6.3f}s "
              f"{pct(p.step_time_s, real)}   {peak / 2**30:10.2f}GiB {sim_peak / 2**30:5.2f}GiB "
              f"{pct(sim_peak, peak)}")
        for k in PHASES:
            if isinstance(s.get(k), dict):
                print(f"  {k:32} {s[k]['median']:8.3f}s {p.phases[k]:6.3f}s "
                      f"{pct(p.phases[k], s[k]['median'])}")
    print(f"step MAPE {100 * sum(errs) / len(errs):.1f}% over {len(errs)} runs "
          f"(worst {100 * max(errs):.1f}%)")


if __name__ == "__main__":
    main()
