"""Render the docs' figures into docs/img/ (PNG + SVG) (`make docs`): the built-in scenario,
TinyLlama-1.1B on workstation-rtx3070, micro-batch 4, seq 1024, presets no-offload / zero2-cpu /
zero3-cpu / zero3-nvme: where the step time goes (the README's picture), one step's timeline,
memory per tier. Beside them, figures.json: the numbers the figures show, which
tests/test_docs.py recomputes, so a stale picture fails the tests. And docs/accuracy.md's
validation figures: `tierlab validate lab/cases/h200x2-e`'s scatter and phase bars.

    .venv/bin/python bench/render_docs.py [--out docs/img]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import tierlab
from tierlab.profiles.load import PRESET_LADDER
from tierlab.validate import plots

ROOT = Path(__file__).resolve().parent.parent
PRESETS = PRESET_LADDER
BUILTIN = dict(model="tinyllama-1.1b", hardware="workstation-rtx3070", micro_batch=4, seq=1024)
BIG = dict(model="llama-2-70b", hardware="h200-gen5", micro_batch=4)
# the 70B what-if: ZeRO-3 with everything on CPU, ZeRO-Infinity with the optimizer on NVMe, and
# with the parameters on NVMe as well (max_in_cpu 0: all 16-bit params are swapped)
PARAMS_ON_NVME = {"zero_optimization.offload_param.device": "nvme",
                  "zero_optimization.offload_param.nvme_path": "/local_nvme",
                  "zero_optimization.offload_param.max_in_cpu": 0}
BIG_CONFIGS = {"zero3-cpu": ("zero3-cpu", {}), "zero3-nvme": ("zero3-nvme", {}),
               "zero3-nvme, params on NVMe": ("zero3-nvme", PARAMS_ON_NVME)}


def save(fig, out: Path, name: str) -> None:
    for path in plots.save(fig, out / name):
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


def builtin(out: Path) -> None:
    runs = {cfg: tierlab.simulate(ds_config=cfg, **BUILTIN) for cfg in PRESETS}
    where = "TinyLlama-1.1B on an RTX 3070 8 GB workstation"
    save(plots.bottleneck(runs, title=f"{where}: where the step time goes"), out,
         "builtin-bottleneck")
    save(plots.timeline(runs["zero3-nvme"], title=f"{where}, zero3-nvme (ZeRO-Infinity): "
                        "one step"), out, "builtin-timeline")
    save(plots.memory(runs, title=f"{where}: memory per tier against capacity"), out,
         "builtin-memory")
    (out / "figures.json").write_text(json.dumps(figures(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {out / 'figures.json'}")


VALIDATION = ROOT / "lab" / "cases" / "h200x2-e"
"""The runs docs/accuracy.md pictures (validate-h200x2-e-scatter.png, -phases.png)."""


def validation(out: Path) -> None:
    from tierlab.validate.report import phase_bars_figure, scatter_figure
    from tierlab.validate.workflow import run_validation

    report = run_validation([VALIDATION]).report
    save(scatter_figure(report.rows, scenarios=report.scenarios), out,
         "validate-h200x2-e-scatter.png")
    save(phase_bars_figure(report.rows, scenarios=report.scenarios), out,
         "validate-h200x2-e-phases.png")


def figures() -> dict:
    """What the built-in figures show, per preset: step time, exposed seconds per resource,
    memory per tier (rounded: a change a reader would see)."""
    out = {}
    for cfg in PRESETS:
        r = tierlab.simulate(ds_config=cfg, **BUILTIN)
        out[cfg] = {"step_time_s": round(r.step_time_s, 3), "bottleneck": r.bottleneck,
                    "exposed_s": {k: round(v, 3) for k, v in r.exposed_s.items()},
                    "memory_GiB": {k: round(t.used_bytes / 2**30, 2)
                                   for k, t in r.memory.tiers.items()}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = ap.parse_args()
    t0 = time.perf_counter()
    builtin(args.out)
    validation(args.out)
    print(f"rendered in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
