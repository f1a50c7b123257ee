"""Where does the host-bound forward's time go, and how stable is it? (GPU host, ~5 min)

The stage-0 dispatch term (runner/calibrate_ds.py: narrow Llama, 2 vs 10 layers, one process per
depth) came out 0.067-0.222 ms per submodule use on six machines of one kind, while TinyLlama's
forward on the same machines differed far less. This probe measures, on the machine it runs on:
- `inproc`: the narrow Llama at 2 and 10 layers *in one process*, alternated, REPS times each
  (plain transformers forward and backward, bf16, synchronised): the per-layer slope without
  process-to-process variation; with the same loop pinned to single cores (taskset) too;
- `floor`: per-op host cost of tiny CUDA ops (torch.add on 1 element) and a pure-Python loop:
  candidate micro-benchmarks for the dispatch term;
- `tiny`: TinyLlama's forward at the dispatch floor (mb1, seq 64) and at the validation case's
  shape (mb4, seq 1024, checkpointing), with the GPU kernel time of one profiled forward;
- `procs`: calibrate_ds.run_point (the calibration's own path) for stage 0 at both depths,
  3 times each in fresh processes: the calibration's process-to-process spread.

    OUT=/path python3 lab/scripts/dispatch_probe.py        # writes $OUT/dispatch-probe.json
    python3 lab/scripts/dispatch_probe.py --inproc-only     # one process's `inproc` + `floor` as JSON
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPS = 25


def _sync():
    import torch

    torch.cuda.synchronize()


def _narrow(layers: int):
    import torch
    from transformers import LlamaForCausalLM

    from tierlab.profiles.schema import Model
    from tierlab.runner import calibrate_ds as cds
    from tierlab.runner.model import llama_config

    return LlamaForCausalLM(llama_config(Model(**cds.narrow_model(layers)))).to(
        "cuda", torch.bfloat16)


def _fwd_bwd(net, ids) -> tuple[float, float]:
    _sync()
    t0 = time.perf_counter()
    loss = net(input_ids=ids, labels=ids).loss
    _sync()
    t1 = time.perf_counter()
    loss.backward()
    _sync()
    t2 = time.perf_counter()
    net.zero_grad(set_to_none=True)
    return t1 - t0, t2 - t1


def inproc(reps: int = REPS) -> dict:
    import torch

    nets = {2: _narrow(2), 10: _narrow(10)}
    ids = torch.randint(0, 512, (1, 64), device="cuda")
    times = {d: {"fwd": [], "bwd": []} for d in nets}
    for _ in range(3):
        for net in nets.values():
            _fwd_bwd(net, ids)
    for _ in range(reps):
        for d, net in nets.items():
            f, b = _fwd_bwd(net, ids)
            times[d]["fwd"].append(f)
            times[d]["bwd"].append(b)
    med = {d: {k: statistics.median(v) for k, v in t.items()} for d, t in times.items()}
    return {"median_s": med, "samples_s": times,
            "fwd_slope_s_per_layer": (med[10]["fwd"] - med[2]["fwd"]) / 8,
            "bwd_slope_s_per_layer": (med[10]["bwd"] - med[2]["bwd"]) / 8}


def floor() -> dict:
    import torch

    x = torch.zeros(1, device="cuda")
    out = {}
    for _ in range(2):
        _sync()
        t0 = time.perf_counter()
        for _ in range(5000):
            x = x + 1
        t1 = time.perf_counter()
        _sync()
        out["cuda_add_s_per_op"] = (t1 - t0) / 5000
    t0 = time.perf_counter()
    s = 0
    for i in range(2_000_000):
        s += i
    out["python_loop_s_per_iter"] = (time.perf_counter() - t0) / 2_000_000
    lin = torch.nn.Linear(64, 64, device="cuda", dtype=torch.bfloat16)
    h = torch.zeros(1, 64, device="cuda", dtype=torch.bfloat16)
    best = []
    for _ in range(3):
        _sync()
        t0 = time.perf_counter()
        for _ in range(2000):
            lin(h)
        _sync()
        best.append((time.perf_counter() - t0) / 2000)
    out["linear_call_s"] = min(best)
    return out


def tiny() -> dict:
    import torch
    from transformers import LlamaForCausalLM

    from tierlab.profiles.load import load_model
    from tierlab.runner.model import llama_config

    net = LlamaForCausalLM(llama_config(load_model("tinyllama-1.1b"), seq_len=1024)).to(
        "cuda", torch.bfloat16)
    out = {}
    for name, (mb, seq, ckpt) in {"mb1_s64": (1, 64, False), "mb4_s1024_ckpt": (4, 1024, True)
                                  }.items():
        if ckpt:
            net.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        net.train()
        ids = torch.randint(0, 32000, (mb, seq), device="cuda")
        f, b = [], []
        for i in range(13):
            fi, bi = _fwd_bwd(net, ids)
            if i >= 3:
                f.append(fi)
                b.append(bi)
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            net(input_ids=ids, labels=ids).loss
            _sync()
        kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
        gpu_us = sum(e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
                     for e in kernels)
        out[name] = {"fwd_s": f, "bwd_s": b, "fwd_median_s": statistics.median(f),
                     "bwd_median_s": statistics.median(b), "fwd_gpu_kernel_s": gpu_us * 1e-6,
                     "fwd_kernels": len(kernels)}
    return out


def procs() -> list[dict]:
    import tempfile

    from tierlab.runner import calibrate_ds as cds

    v = cds.variant_named("stage0")
    points = []
    with tempfile.TemporaryDirectory(prefix="probe-") as tmp:
        for rep in range(3):
            for d in cds.DEPTHS:
                p = cds.run_point(v, d, steps=10, warmup=3, precision="bf16", timeout_s=240,
                                  workdir=Path(tmp) / f"r{rep}")
                p["rep"] = rep
                points.append(p)
                print(json.dumps({k: p.get(k) for k in ("rep", "layers", "forward_s",
                                                         "backward_s", "status")}), flush=True)
    return points


def _child(cores: str | None) -> dict:
    cmd = [sys.executable, __file__, "--inproc-only"]
    if cores is not None:
        cmd = ["taskset", "-c", cores, *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode:
        return {"error": proc.stderr[-500:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    if "--inproc-only" in sys.argv:
        print(json.dumps({"inproc": inproc(), "floor": floor()}))
        return
    out = Path(os.environ.get("OUT", "."))
    res: dict = {"host": os.uname().nodename, "started": time.strftime("%FT%TZ", time.gmtime())}
    path = out / "dispatch-probe.json"

    def save():
        path.write_text(json.dumps(res, indent=1))

    for cores in (None, "0", "7", "15", "0,1", None):
        key = f"inproc[{cores or 'all'}]"
        key += "#2" if key in res else ""
        r = _child(cores)
        res[key] = r
        ip = r.get("inproc", {})
        print(key, "fwd slope ms/layer", round(ip.get("fwd_slope_s_per_layer", 0) * 1e3, 3),
              "bwd", round(ip.get("bwd_slope_s_per_layer", 0) * 1e3, 3), "floor",
              {k: round(v * 1e6, 2) for k, v in r.get("floor", {}).items()}, flush=True)
        save()
    res["tiny"] = tiny()
    print("tiny", {k: {kk: round(vv, 4) for kk, vv in v.items() if not isinstance(vv, list)}
                   for k, v in res["tiny"].items()}, flush=True)
    save()
    res["procs"] = procs()
    save()


if __name__ == "__main__":
    main()
