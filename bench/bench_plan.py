"""Planner speed: `plan` for Llama-2-70B on one 8-GPU node (target <= 30 s). Prints wall time,
the number of simulations and the answer; no assertions.

    .venv/bin/python bench/bench_plan.py [--hardware dgx-a100] [--jobs N]
"""
from __future__ import annotations

import argparse
import time

from tierlab.profiles.load import load_hardware, load_model
from tierlab.planner.search import format_plan, plan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-2-70b")
    ap.add_argument("--hardware", default="dgx-a100")
    ap.add_argument("--global-batch", type=int, default=None)
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args()
    hw, model = load_hardware(args.hardware), load_model(args.model)
    t0 = time.perf_counter()
    result = plan(hw, model, global_batch=args.global_batch, jobs=args.jobs)
    wall = time.perf_counter() - t0
    print(format_plan(result))
    print(f"\nplan: {model.name} on {hw.name} ({hw.world_size} GPUs): wall {wall:.2f} s, "
          f"{result.simulations} simulations ({wall / max(result.simulations, 1) * 1e3:.0f} ms "
          f"each incl. search; target <= 30 s), {args.jobs} job(s)")


if __name__ == "__main__":
    main()
