"""Time, on this host, each host operation of DeepSpeed 0.19.8's ZeRO-1/2 CPU-offload optimizer
step (issue 31 item 2: what the optimizer phase pays beyond CPU Adam), at sizes beyond any cache:

- `rescale`: `unscale_and_clip_grads`' in-place `grad.mul_(1 / combined_scale)` on the fp32
  gradient partition (stage_1_and_2.py 3193-3215; runs with gradient_clipping or fp16);
- `adam`: DeepSpeedCPUAdam.step on the fp32 partition (stage_1_and_2.py `_optimizer_step`);
- `copy16`: `bit16_partition_buffer.data.copy_(fp32_partition.data)`, the fp32 -> 16-bit copy
  into the pinned CPU buffer before the H2D (stage_1_and_2.py 3092-3096);
- `norm`: `torch.linalg.vector_norm` of the fp32 gradients (ZeRO-3 offload's host norm read);
- `sequence`: rescale + adam + copy16 back to back, as one ZeRO-2 offload step runs them.

Each is timed `--repeats` times on fresh data; prints seconds per element (best, median) and the
GB/s it implies at the bytes sim/devices.py counts; writes --json.

    python3 lab/scripts/opt_host_ops.py --params 256Mi 1100M --json $OUT/opt-host-ops.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

BYTES = {"rescale": 8, "adam": 28, "copy16": 6, "norm": 4, "sequence": 42}


def count(text: str) -> int:
    mult = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 10**3, "M": 10**6, "G": 10**9}
    for k in sorted(mult, key=len, reverse=True):
        if text.endswith(k):
            return int(float(text[:-len(k)]) * mult[k])
    return int(text)


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def measure(n: int, repeats: int, pin: bool) -> dict[str, list[float]]:
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    p = torch.nn.Parameter(torch.randn(n, dtype=torch.float32) * 0.02)
    p.grad = torch.randn(n, dtype=torch.float32) * 1e-3
    opt = DeepSpeedCPUAdam([p], lr=1e-4, betas=(0.9, 0.95), adamw_mode=True)
    opt.step()                                   # allocates m, v (first touch outside the timing)
    buf = torch.empty(n, dtype=torch.bfloat16)
    if pin and torch.cuda.is_available():
        buf = buf.pin_memory()
    buf.copy_(p.data)
    out: dict[str, list[float]] = {k: [] for k in BYTES}
    for _ in range(repeats):
        out["rescale"].append(timed(lambda: p.grad.mul_(0.999)))
        out["adam"].append(timed(opt.step))
        out["copy16"].append(timed(lambda: buf.copy_(p.data)))
        out["norm"].append(timed(lambda: torch.linalg.vector_norm(p.grad).item()))
        out["sequence"].append(timed(lambda: (p.grad.mul_(0.999), opt.step(), buf.copy_(p.data))))
    return {k: [s / n for s in v] for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", nargs="+", default=["256Mi"], help="sizes, e.g. 256Mi 1100M")
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--no-pin", action="store_true", help="pageable 16-bit buffer")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    doc = {"torch": torch.__version__, "threads": torch.get_num_threads(), "sizes": {}}
    for text in a.params:
        n = count(text)
        per = measure(n, a.repeats, not a.no_pin)
        doc["sizes"][str(n)] = per
        for k, v in per.items():
            best, med = min(v), statistics.median(v)
            print(f"{n:>12,d} {k:9s} best {best * 1e9:7.3f} ns/elem  median {med * 1e9:7.3f}  "
                  f"({BYTES[k] / best / 1e9:6.1f} GB/s at {BYTES[k]} B)  x{n:,} = {med * n:.3f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
