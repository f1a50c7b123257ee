"""Does calibrate's held-out rule (issue 31: a measured DeepSpeed host cost is kept only where
calibrate's own held-out configurations are predicted better with it) make predictions better on
real training runs? For every folder of lab/cases whose raw calibration has DeepSpeed points, the
profile is rebuilt from the raw record with today's rules (`tierlab calibrate --from-raw`), and
that machine's finished runs (none of them used by the rule, by any fit, or by the derivation)
are simulated three ways:

- stock:    the machine's calibrated hardware, every DeepSpeed host cost from the software profile
- all:      every term the calibration measured (the rule before issue 31)
- kept:     only the terms the held-out rule kept (what `calibrate --host-costs` writes now)

    .venv/bin/python lab/scripts/bench_host_cost_rule.py

Prints per machine and pooled: step MAPE, worst step error, forward MAPE."""
from __future__ import annotations

import json
import statistics
from dataclasses import replace

from labenv import CASES  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)

from tierlab.profiles.fields import HOST_COST_FIELDS
from tierlab.profiles.load import load_software
from tierlab.records.measurement import load_measurement
from tierlab.runner.calibrate import from_raw
from tierlab.runner.calibrate_host import TERMS, derive
from tierlab.validate.compare import case_key, compare_measurement, find_measurements

DS_TERMS = {t[0] for t in TERMS}
LABELS = ("stock", "all", "kept")


def profiles(raw: dict, name: str):
    """(stock, all, kept) Hardware of one raw record."""
    kept = from_raw(raw, name=name).hardware
    others = {k: v for k, v in kept.cpu.host_costs.items() if k not in DS_TERMS}
    stock = replace(kept, cpu=replace(kept.cpu, host_costs=others))
    values, _, _ = derive(raw["results"]["deepspeed"], stock, load_software())
    every = replace(kept, cpu=replace(kept.cpu, host_costs={**others, **values}))
    assert set(values) <= set(HOST_COST_FIELDS)
    return stock, every, kept


def errors(hw, folder, sw) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"step_time_s": [], "forward_s": []}
    for d in find_measurements([folder]):
        for r in compare_measurement(hw, load_measurement(d), name=case_key(d), software=sw):
            if r.metric in out and r.error_pct is not None:
                out[r.metric].append(abs(r.error_pct))
    return out


def line(name: str, errs: dict[str, dict[str, list[float]]]) -> str:
    cells = []
    for label in LABELS:
        s, f = errs[label]["step_time_s"], errs[label]["forward_s"]
        cells.append(f"{statistics.mean(s):5.1f}% {max(s):5.1f}% {statistics.mean(f):5.1f}%"
                     if s else f"{'-':>20s}")
    return f"{name:10s} " + "   ".join(cells) + f"   n={len(errs['stock']['step_time_s'])}"


def main() -> int:
    sw = load_software()
    pooled = {label: {"step_time_s": [], "forward_s": []} for label in LABELS}
    print(f"{'machine':10s} " + "   ".join(f"{label + ': step, worst, fwd':>20s}"
                                           for label in LABELS))
    for raw_path in sorted(CASES.glob("*/*-raw.json")):
        raw = json.loads(raw_path.read_text())
        if not raw["results"].get("deepspeed"):
            continue
        folder = raw_path.parent
        errs = {label: errors(hw, folder, sw) for label, hw in
                zip(LABELS, profiles(raw, f"rule-{folder.name}"))}
        if not errs["stock"]["step_time_s"]:
            continue
        for label in LABELS:
            for metric, values in errs[label].items():
                pooled[label][metric] += values
        print(line(folder.name, errs))
    print(line("pooled", pooled))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
