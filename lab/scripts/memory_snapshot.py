"""What is alive on the GPU at a training step's peak: a real DeepSpeed run under PyTorch's
memory history (torch.cuda.memory._record_memory_history), replayed to the moment of the largest
allocated total and grouped by the code that allocated each block.

It answers "which buffer did sim/memory.py miss?" with a measurement instead of a guess. One run
per invocation, on one GPU (the device host):

    python3 lab/scripts/memory_snapshot.py --model tinyllama-1.1b --ds-config zero2-cpu \
        --micro-batch 2 --grad-accum 4 --steps 3 --out $OUT/snap-z2cpu-gas4.json

Prints one line per step (peak allocated, GiB) and the live set at the recorded peak, largest
first; writes the same as JSON (--out). The history is recorded from --record-from (default: the
second step, after DeepSpeed's lazy first-step allocations) to the end. Needs CUDA.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

# the frames that name an allocation: the innermost frame in one of these packages wins
OWNERS = ("deepspeed/", "transformers/", "tierlab/", "torch/utils/checkpoint", "torch/nn/")


def owner(frames: list[dict]) -> str:
    """'file.py:line function' of the innermost frame in an OWNERS package (else the first)."""
    for f in frames:
        name = f.get("filename", "")
        if any(o in name for o in OWNERS):
            short = name.split("site-packages/")[-1]
            return f"{short}:{f.get('line')} {f.get('name')}"
    f = frames[0] if frames else {}
    return f"{f.get('filename', '?')}:{f.get('line')} {f.get('name')}"


def live_at_peak(trace: list[dict]) -> tuple[int, int, dict[str, int]]:
    """(peak change of allocated bytes over the recorded trace, bytes allocated before recording
    and freed by then, {owner: bytes allocated while recording and alive at the peak}),
    replaying alloc / free_completed events in order. A block allocated before recording is
    known only by its free: it lowers the total, under 'freed (allocated before recording)'."""
    live: dict[int, tuple[int, str]] = {}
    total = peak = freed_old = 0
    at_peak: dict[int, tuple[int, str]] = {}
    freed_at_peak = 0
    for ev in trace:
        action, addr, size = ev.get("action"), ev.get("addr"), ev.get("size", 0)
        if action == "alloc":
            live[addr] = (size, owner(ev.get("frames", [])))
            total += size
            if total > peak:
                peak, at_peak, freed_at_peak = total, dict(live), freed_old
        elif action == "free_completed":
            if addr in live:
                total -= live.pop(addr)[0]
            else:
                total -= size
                freed_old += size
    groups: dict[str, int] = defaultdict(int)
    for size, who in at_peak.values():
        groups[who] += size
    return peak, freed_at_peak, dict(sorted(groups.items(), key=lambda kv: -kv[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tinyllama-1.1b")
    ap.add_argument("--ds-config", default="zero2-cpu")
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--grad-accum", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--record-from", type=int, default=1, help="first step recorded (0-based)")
    ap.add_argument("--out", required=True, help="JSON file to write")
    a = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("memory_snapshot: needs a CUDA GPU", file=sys.stderr)
        return 2
    for k, v in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29531", "RANK": "0",
                 "WORLD_SIZE": "1", "LOCAL_RANK": "0"}.items():
        os.environ.setdefault(k, v)
    from tierlab.runner.train import make_spec_batches, setup_engine, spec_from_strategy, \
        train_steps
    from tierlab.scenario import resolve

    from tierlab.errors import ConfigError

    try:
        sc = resolve(a.model, "h200-host", a.ds_config, overrides=a.overrides,
                     micro_batch=a.micro_batch, grad_accum=a.grad_accum, seq=a.seq, gpus=1,
                     nodes=1)
    except ConfigError as e:
        print(f"memory_snapshot: {e}", file=sys.stderr)
        return 2
    spec = spec_from_strategy(sc.model, sc.strategy, out_dir="/tmp/tierlab-snap",
                              steps=a.steps, warmup_steps=0)
    engine, _ = setup_engine(spec)
    batches = make_spec_batches(spec)
    steps: list[dict] = []

    def on_step(step, wall, loss, phases):
        peak = torch.cuda.max_memory_allocated()
        steps.append({"step": step, "wall_s": wall, "peak_allocated_bytes": peak, **phases})
        print(f"step {step}: {wall:.3f} s, peak allocated {peak / 2**30:.3f} GiB", flush=True)
        torch.cuda.reset_peak_memory_stats()
        if step + 1 == a.record_from:
            start()

    base = {}

    def start():
        base["bytes"] = torch.cuda.memory_allocated()
        torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")

    if a.record_from == 0:
        start()
    train_steps(engine, batches, steps=a.steps, grad_accum=spec.grad_accum, breakdown=True,
                on_step=on_step)
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = [ev for dev in snap.get("device_traces", []) for ev in dev]
    peak, freed_old, groups = live_at_peak(trace)
    old = base.get("bytes", 0)
    print(f"allocated when recording began: {old / 2**30:.3f} GiB; at the recorded peak "
          f"{(old + peak) / 2**30:.3f} GiB: {(old - freed_old) / 2**30:.3f} GiB of it from "
          f"before, and alive from the recorded steps, largest first:")
    for who, size in list(groups.items())[:25]:
        print(f"  {size / 2**30:8.3f} GiB  {who}")
    Path(a.out).write_text(json.dumps({
        "model": a.model, "ds_config": a.ds_config, "overrides": a.overrides,
        "micro_batch": a.micro_batch, "grad_accum": a.grad_accum, "seq": a.seq,
        "steps": steps, "allocated_when_recording_began_bytes": old,
        "peak_allocated_bytes": old + peak, "from_before_at_peak_bytes": old - freed_old,
        "alive_at_peak_bytes": groups,
        "versions": {"torch": torch.__version__,
                     "deepspeed": __import__("deepspeed").__version__}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
