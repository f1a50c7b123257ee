"""Measured DeepSpeed host costs (issue 12): what `tierlab calibrate` derived on each machine
whose folder has DeepSpeed points, and what they change on that machine's runs.

    .venv/bin/python lab/scripts/bench_host_costs.py

For each folder of lab/cases whose raw calibration has 'deepspeed' points: the derived terms
(per submodule use / per parameter tensor) with the stock software profile's value beside them,
the check slopes, then every finished run's steady step and phase errors simulated on the
folder's calibrated profile twice: with the stock software terms only ("stock") and with the
measured host costs ("measured"); where the GPU profile has a measured layer-time curve
(calibrate's `layer` benchmark), also without it. No run of these folders entered any fit."""
from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from labenv import ROOT  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)
sys.path.insert(0, str(ROOT.parent))


def other_hosts_checkpoint_s() -> tuple[float, str]:
    """The checkpoint wrapper's host cost measured on other H200 hosts (lab/results: the layer
    benchmark of `tierlab calibrate` and bench_layer_overlap.py), median and where from."""
    from tierlab.runner.calibrate_gpu import checkpoint_cost

    found = []
    for path in sorted((ROOT / "lab" / "results").glob("*.json")):
        data = json.loads(path.read_text())
        if "rows" in data:              # bench_layer_overlap.py output
            pts = [{**r["plain"], "ckpt_fwd_s": r["ckpt"]["fwd_s"]} for r in data["rows"]]
        elif "results" in data:         # a calibrate raw record
            pts = data["results"].get("layer", [])
        else:                           # another record (e.g. overflow-h200-n.json)
            continue
        value, _ = checkpoint_cost(pts)
        if value is not None:
            found.append((value, path.name))
    return (statistics.median(v for v, _ in found),
            ", ".join(f"{n} {v * 1e3:.2f} ms" for v, n in found)) if found else (0.0, "")


def main() -> int:
    from tierlab.profiles.load import load_hardware, load_software
    from tierlab.runner.calibrate_host import derive
    from tierlab.records.measurement import load_measurement
    from tierlab.validate.compare import (case_key, compare_measurement, find_measurements,
                                          folder_hardware)

    t0 = time.perf_counter()
    sw = load_software()
    ckpt_s, ckpt_from = other_hosts_checkpoint_s()      # read once, applied per machine
    for raw in sorted((ROOT / "lab" / "cases").glob("*/*-raw.json")):
        points = json.loads(raw.read_text())["results"].get("deepspeed")
        if not points:
            continue
        folder = raw.parent
        hw = load_hardware(folder_hardware(folder))
        values, how, problems = derive(points, hw, sw)
        print(f"== {folder.name}: DeepSpeed host costs (us), measured vs stock software profile")
        for field, value in values.items():
            stock = getattr(sw, field)
            print(f"  {field:38s} {value * 1e6:8.1f}   stock {'-' if stock is None else f'{stock * 1e6:.1f}'}")
        for key, text in how.items():
            if key.startswith("check:"):
                print(f"  check: {text}")
        for p in problems:
            print(f"  not derived: {p}")
        stock_hw = replace(hw, cpu=replace(hw.cpu, host_costs={}))
        no_curve = replace(hw, gpu=replace(hw.gpu, layer_time_curve=()))
        with_ckpt = (replace(hw, cpu=replace(hw.cpu, host_costs={
            **hw.cpu.host_costs, "checkpoint_s_per_block": ckpt_s}))
            if ckpt_s and "checkpoint_s_per_block" not in hw.cpu.host_costs else None)
        errs: dict[str, dict[str, list[float]]] = {"stock": {}, "measured": {}, "no_curve": {},
                                                   "ckpt": {}}
        print(f"  {'run':34s} {'metric':12s} {'stock':>8s} {'measured':>9s}")
        for d in find_measurements([folder]):
            m = load_measurement(d)
            for label, h in (("stock", stock_hw), ("measured", hw), ("no_curve", no_curve),
                             ("ckpt", with_ckpt)):
                if h is None:
                    continue
                for r in compare_measurement(h, m, name=case_key(d), software=sw):
                    if r.metric in ("step_time_s", "forward_s", "backward_s", "optimizer_s") \
                            and r.error_pct is not None:
                        errs[label].setdefault(r.metric, []).append(abs(r.error_pct))
                        errs[label].setdefault(f"{r.case}|{r.metric}", []).append(r.error_pct)
            for metric in ("step_time_s",):
                k = f"{case_key(d)}|{metric}"
                if k in errs["stock"]:
                    print(f"  {case_key(d).split('/')[1]:34s} {metric:12s} "
                          f"{errs['stock'][k][0]:+7.1f}% {errs['measured'][k][0]:+8.1f}%")
        if hw.gpu.layer_time_curve:
            n = errs["no_curve"].get("step_time_s", [])
            print(f"  measured host costs without the layer-time curve (kernel model only): "
                  f"step MAPE {statistics.mean(n):.1f}% (max {max(n):.1f}%), forward "
                  f"{statistics.mean(errs['no_curve']['forward_s']):.1f}%, backward "
                  f"{statistics.mean(errs['no_curve']['backward_s']):.1f}%")
        if with_ckpt is not None:
            c = errs["ckpt"]
            print(f"  + the checkpoint wrapper's host cost measured on other H200 hosts "
                  f"({ckpt_from}; median {ckpt_s * 1e3:.2f} ms/block, not this machine's): step "
                  f"MAPE {statistics.mean(c['step_time_s']):.1f}% (max {max(c['step_time_s']):.1f}%)"
                  f", forward {statistics.mean(c['forward_s']):.1f}%")
        for metric in ("step_time_s", "forward_s", "backward_s", "optimizer_s"):
            s, m = errs["stock"].get(metric, []), errs["measured"].get(metric, [])
            if s:
                print(f"  MAPE {metric:12s} stock {statistics.mean(s):5.1f}% (max {max(s):5.1f}%)"
                      f"   measured {statistics.mean(m):5.1f}% (max {max(m):5.1f}%)   n={len(s)}")
    print(f"took {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
