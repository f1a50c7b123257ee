"""`python -m tierlab.runner.fsdp2_bench --out FILE`: the host costs FSDP2 CPU offload adds,
measured on this host: torch's CPU AdamW step (+ clip_grad_norm_) over a model's fp32 tensors
(runner.microbench.torch_cpu_adamw_time), with torch's default implementation (single-tensor on
CPU) and fused=True, and without clipping. Writes one JSON record (points + host + versions):
the provenance of the simulator's stock value (profiles/software/fsdp2.yaml says where)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def measure(models: list[str], repeats: int) -> dict:
    """Every point, the host's facts and the library versions."""
    from tierlab.runner import probes
    from tierlab.runner.microbench import torch_cpu_adamw_time

    points = []
    for name in models:
        for impl, clip in (("default", 1.0), ("default", None), ("fused", 1.0)):
            points += torch_cpu_adamw_time(name, repeats=repeats, impl=impl, clip=clip)
    return {"benchmark": "torch_cpu_adamw", "measured_unix": time.time(),
            "host": probes.host_facts([]), "versions": probes.library_versions(),
            "points": points}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--models", default="tinyllama-1.1b", help="comma-separated model profiles")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    rec = measure(args.models.split(","), args.repeats)
    Path(args.out).write_text(json.dumps(rec, indent=1, default=str))
    for p in rec["points"]:
        print(f"{p['model']} {p['impl']} clip={p['clip']}: {p['seconds']:.3f} s, "
              f"{p['params_per_s'] / 1e9:.2f} G params/s ({p['threads']} threads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
