"""Issue 33 item 7: real FSDP2 CPU-offload runs (lab/fsdp2/*/, `tierlab run --engine
fsdp2-offload` on an H200) against the simulator's FSDP2 schedule (sim/fsdp2.py) on the stock
`h200-host` profile, with the stock AdamW rate (profiles/fsdp2/torch-adamw-cpu.yaml) and with the
rate measured on the run's own machine in the same device command (its adamw.json): step time,
phases where the run measured them (--breakdown), GPU peak (torch's max_memory_allocated against
the plan less the CUDA context, as validate/compare.py compares DeepSpeed's).

    .venv/bin/python lab/scripts/bench_fsdp2.py
"""
from __future__ import annotations

import json
import statistics

from labenv import LAB  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)

from tierlab.scenario import resolve
from tierlab.sim.fsdp2 import AdamwRate, load_adamw_rate, simulate_fsdp2

PHASES = ("forward_s", "backward_s", "optimizer_s")


def runs():
    """(machine folder, case, measurement) of every FSDP2 offload run that finished."""
    for m in sorted(LAB.glob("fsdp2/*/*/measurement.json")):
        rec = json.loads(m.read_text())
        if rec["status"] == "ok" and rec["run"]["engine"] == "fsdp2-offload":
            yield m.parent.parent, m.parent.name, rec


def own_rate(machine) -> AdamwRate:
    """The machine's own AdamW rate: the median of its default-implementation, clipped points."""
    pts = [p for p in json.loads((machine / "adamw.json").read_text())["points"]
           if p["impl"] == "default" and p["clip"] == 1.0]
    per_thread = statistics.median(p["params_per_s"] / p["threads"] for p in pts)
    return AdamwRate(params_per_s_per_thread=per_thread, dram_bytes_per_param=84,
                     source=f"{machine.name}/adamw.json")


def predicted(rec, adamw: AdamwRate):
    run = rec["run"]
    sc = resolve(model=rec["model"]["name"], hardware="h200-host", ds_config="no-offload",
                 micro_batch=run["micro_batch"], seq=run["seq"], gpus=1, nodes=1)
    return simulate_fsdp2(sc.hardware, sc.model, sc.strategy, adamw=adamw,
                          host_baseline_bytes=sc.software.process_baseline_bytes)


def pct(sim: float, real: float) -> str:
    return f"{100 * (sim / real - 1):+6.1f}%"


def main() -> None:
    stock, errs = load_adamw_rate(), {"stock": [], "own": []}
    print(f"{'machine/case':32} {'step real':>9} {'stock':>7} {'err':>7} {'own':>7} {'err':>7}   "
          f"{'GPU peak real':>13} {'sim':>8} {'err':>7}")
    for machine, case, rec in runs():
        s = rec["summary"]
        p, q = predicted(rec, stock), predicted(rec, own_rate(machine))
        real, peak = s["step_time_s"]["median"], s["peak_gpu_max_allocated_bytes"]
        sim_peak = p.gpu_peak_bytes - p.memory["gpu"]["cuda_context"]
        errs["stock"].append(abs(p.step_time_s / real - 1))
        errs["own"].append(abs(q.step_time_s / real - 1))
        print(f"{machine.name + '/' + case:32} {real:8.3f}s {p.step_time_s:6.3f}s "
              f"{pct(p.step_time_s, real)} {q.step_time_s:6.3f}s {pct(q.step_time_s, real)}   "
              f"{peak / 2**30:10.2f}GiB {sim_peak / 2**30:5.2f}GiB {pct(sim_peak, peak)}")
        for k in PHASES:
            if isinstance(s.get(k), dict):
                print(f"  {k:30} {s[k]['median']:8.3f}s {p.phases[k]:6.3f}s "
                      f"{pct(p.phases[k], s[k]['median'])} {q.phases[k]:6.3f}s "
                      f"{pct(q.phases[k], s[k]['median'])}")
    for name, e in errs.items():
        print(f"{name:5} AdamW rate: step MAPE {100 * statistics.mean(e):.1f}% over {len(e)} "
              f"runs (worst {100 * max(e):.1f}%)")


if __name__ == "__main__":
    main()
