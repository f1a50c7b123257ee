"""Render every plot kind into docs/img/ (PNG + SVG) for the README:

- the built-in scenario: TinyLlama-1.1B on workstation-rtx3070, micro-batch 4, seq 1024, presets
  no-offload / zero2-cpu / zero3-cpu / zero3-nvme;
- a 70B-on-one-node what-if: Llama-2-70B on h200-gen5 (8x H200, 8 Gen5 NVMe drives).

    .venv/bin/python bench/render_docs.py [--out docs/img]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import tierlab
from tierlab.validate import plots

ROOT = Path(__file__).resolve().parent.parent
PRESETS = ("no-offload", "zero2-cpu", "zero3-cpu", "zero3-nvme")
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
    df = tierlab.sweep({"config": list(PRESETS), "micro_batch": "1..16:x2"},
                       **{k: v for k, v in BUILTIN.items() if k != "micro_batch"})
    save(plots.sweep(df, "micro_batch", by="config",
                     title=f"{where}: step time and throughput vs micro-batch"), out,
         "builtin-sweep")


def big(out: Path) -> None:
    runs = {label: tierlab.simulate(ds_config=cfg, overrides=sets, **BIG)
            for label, (cfg, sets) in BIG_CONFIGS.items()}
    where = "Llama-2-70B on one 8x H200 node (h200-gen5)"
    save(plots.bottleneck(runs, title=f"{where}: where the step time goes"), out, "70b-bottleneck")
    save(plots.timeline(runs["zero3-nvme"], title=f"{where}, zero3-nvme: one step"), out,
         "70b-timeline")
    save(plots.memory(runs, title=f"{where}: memory per tier against capacity"), out,
         "70b-memory")
    frames = []
    for label, (cfg, sets) in BIG_CONFIGS.items():
        df = tierlab.sweep({"nvme.drives": "1..64:x2"}, ds_config=cfg, overrides=sets, **BIG)
        df["config"] = label
        frames.append(df)
    import pandas as pd

    df = pd.concat(frames, ignore_index=True)
    save(plots.sweep(df, "nvme.drives", by="config", mark=(8, "this node: 8 drives"),
                     title=f"{where}: how many NVMe drives until NVMe stops binding?"), out,
         "70b-sweep")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = ap.parse_args()
    t0 = time.perf_counter()
    builtin(args.out)
    big(args.out)
    print(f"rendered in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
