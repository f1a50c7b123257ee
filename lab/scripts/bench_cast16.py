"""The fp32 -> 16-bit host copy of the offloaded optimizer step, timed by a measured cast rate
(CPU.cast16_params_per_s) instead of its 6 bytes at the DRAM rate: what it does to the optimizer
phase on the machines where the rate was measured in the same device command as the runs.

Per machine, each finished run's optimizer-phase and step error with the machine's default
calibration as written (the byte rule), and with the cast rate its device command measured:
`tierlab calibrate`'s `cast` benchmark where the calibration has it (the profile as written), else
lab/scripts/opt_host_ops.py's `copy16` (the median at its largest size, put into the profile in
memory here). Runs whose optimizer makes no 16-bit copy (ZeRO-3 without offloaded parameters)
are unchanged and left out.

    .venv/bin/python lab/scripts/bench_cast16.py
"""
from __future__ import annotations

import json
import statistics
from dataclasses import replace

from labenv import LAB  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)

from tierlab.profiles.load import load_hardware
from tierlab.records.measurement import load_measurement
from tierlab.sim.host_costs import default_software
from tierlab.validate.compare import compare_measurement, find_measurements

FRESH = LAB / "fresh"


def ops_rate(folder) -> float | None:
    """opt_host_ops.py's copy16 rate at its largest size (median of its repeats), params/s."""
    path = folder / "opt-host-ops.json"
    if not path.is_file():
        return None
    sizes = json.loads(path.read_text())["sizes"]
    n = max(sizes, key=int)
    return 1.0 / statistics.median(sizes[n]["copy16"])


def errors(hw, folder) -> dict[str, dict[str, float]]:
    """{run: {metric: error %}} for the optimizer phase and the step."""
    out: dict[str, dict[str, float]] = {}
    for d in find_measurements([folder]):
        for r in compare_measurement(hw, load_measurement(d), name=d.name,
                                     software=default_software()):
            if r.metric in ("optimizer_s", "step_time_s") and r.error_pct is not None:
                out.setdefault(r.case, {})[r.metric] = r.error_pct
    return out


def main() -> int:
    pooled: dict[str, list[float]] = {"bytes": [], "cast": [], "step bytes": [], "step cast": []}
    for folder in sorted(p for p in FRESH.iterdir() if (p / "validate.yaml").is_file()):
        hw = load_hardware(str(FRESH / f"{folder.name}-profiles" / "hardware" / "systems"
                               / f"{folder.name}.yaml"))
        if hw.cpu.cast16_params_per_s is not None:
            cast_hw, how = hw, "calibrate's cast benchmark"
            hw = replace(hw, cpu=replace(hw.cpu, cast16_params_per_s=None))
        elif (rate := ops_rate(folder)) is not None:
            cast_hw, how = replace(hw, cpu=replace(hw.cpu, cast16_params_per_s=rate)), \
                "opt_host_ops.py copy16"
        else:
            continue
        rate = cast_hw.cpu.cast16_params_per_s
        print(f"{folder.name}: cast {rate / 1e9:.2f} G params/s ({how}); byte rule "
              f"{hw.cpu.adam_params_per_s * 28 / 6 / 1e9:.2f} (CPU Adam x 28 B / 6 B)")
        before, after = errors(hw, folder), errors(cast_hw, folder)
        for run in sorted(before):
            if after[run] == before[run]:
                continue
            b, a = before[run], after[run]
            pooled["bytes"].append(abs(b["optimizer_s"]))
            pooled["cast"].append(abs(a["optimizer_s"]))
            pooled["step bytes"].append(abs(b["step_time_s"]))
            pooled["step cast"].append(abs(a["step_time_s"]))
            print(f"  {run:34s} optimizer {b['optimizer_s']:+6.1f}% -> {a['optimizer_s']:+6.1f}%"
                  f"   step {b['step_time_s']:+6.1f}% -> {a['step_time_s']:+6.1f}%")
    if pooled["bytes"]:
        print(f"optimizer MAPE over {len(pooled['bytes'])} runs: byte rule "
              f"{statistics.mean(pooled['bytes']):.1f}%, measured cast "
              f"{statistics.mean(pooled['cast']):.1f}%; step MAPE "
              f"{statistics.mean(pooled['step bytes']):.1f}% -> "
              f"{statistics.mean(pooled['step cast']):.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
