"""Candidate measures of how fast a host runs the Python side of training (issue 31 item 2),
each cheap (the whole probe ~10-20 s), printed as one JSON object: which of them tracks the
host-bound part of DeepSpeed's step across machines is what lab/scripts/bench_host_probe.py
asks of the runs measured beside it.

    python3 lab/scripts/host_probe.py [--tag before] > $OUT/probe-before.json

Measures (each the fastest and the median of 5 repeats, seconds per call):
- python_loop: a fixed pure-Python loop of attribute/dict/call work (interpreter speed: clock,
  IPC, cache), per iteration;
- torch_cpu_op: `torch.add` of two 1-element CPU tensors (ATen dispatch without a device);
- cuda_launch: `torch.add` of two 1-element CUDA tensors, 5,000 calls then one synchronize
  (Python + dispatch + kernel launch: the floor of a host-bound forward);
- module_call: a hooked 64x64 nn.Linear forward (tierlab calibrate's `dispatch` benchmark,
  runner/microbench.module_call_time);
- h2d_64KiB: a synchronous pinned 64 KiB host-to-device copy (launch + PCIe latency);
- memcpy_64MiB: a 64 MiB host copy (torch `copy_`), bytes per second;
plus facts: CPU model, online cores, MHz per /proc/cpuinfo (mean), load average, the share of
CPU time stolen (/proc/stat `steal`) and idle during the probe, NUMA nodes.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPEATS = 5


def timed(fn, calls: int) -> dict:
    """Seconds per call of `fn(calls)`, fastest and median of REPEATS."""
    fn(max(1, calls // 10))                       # warm-up
    per = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn(calls)
        per.append((time.perf_counter() - t0) / calls)
    return {"min_s": min(per), "median_s": statistics.median(per), "calls": calls}


def python_loop(n: int) -> None:
    d = {"a": 1}

    class O:
        x = 0
    o = O()
    for i in range(n):
        o.x = d["a"] + i
        d["a"] = len(d)


def cpu_stat() -> tuple[int, int, int]:
    """(total, idle, steal) jiffies of all CPUs."""
    f = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    v = [int(x) for x in f]
    return sum(v), v[3] + (v[4] if len(v) > 4 else 0), v[7] if len(v) > 7 else 0


def facts() -> dict:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    mhz = [float(l.split(":")[1]) for l in info.splitlines() if l.startswith("cpu MHz")]
    model = next((l.split(":")[1].strip() for l in info.splitlines() if l.startswith("model name")), "")
    numa = sorted(p.name for p in Path("/sys/devices/system/node").glob("node[0-9]*"))
    return {"cpu_model": model, "cores_online": os.cpu_count(),
            "cores_usable": len(os.sched_getaffinity(0)),
            "cpu_mhz_mean": statistics.mean(mhz) if mhz else None,
            "loadavg": os.getloadavg(), "numa_nodes": len(numa)}


def torch_probes() -> dict:
    import torch
    out = {}
    a, b = torch.ones(1), torch.ones(1)
    out["torch_cpu_op"] = timed(lambda n: [torch.add(a, b) for _ in range(n)], 20000)
    src = torch.empty(64 * 2**20, dtype=torch.uint8)
    dst = torch.empty_like(src)
    t = timed(lambda n: [dst.copy_(src) for _ in range(n)], 20)
    out["memcpy_64MiB"] = {**t, "Bps": src.numel() / t["min_s"]}
    if torch.cuda.is_available():
        ca, cb = torch.ones(1, device="cuda"), torch.ones(1, device="cuda")

        def launch(n: int) -> None:
            for _ in range(n):
                torch.add(ca, cb)
            torch.cuda.synchronize()
        out["cuda_launch"] = timed(launch, 5000)
        host = torch.empty(64 * 1024, dtype=torch.uint8).pin_memory()
        dev = torch.empty_like(host, device="cuda")

        def h2d(n: int) -> None:
            for _ in range(n):
                dev.copy_(host, non_blocking=False)
        out["h2d_64KiB"] = timed(h2d, 2000)
        out["gpu"] = torch.cuda.get_device_name(0)
    from tierlab.runner.microbench import module_call_time
    pts = module_call_time(torch.cuda.is_available(), repeats=REPEATS, calls=2000)
    per = [p["seconds_per_call"] for p in pts]
    out["module_call"] = {"min_s": min(per), "median_s": statistics.median(per),
                          "calls": pts[0]["calls"]}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tag", default="", help="a label stored with the figures (e.g. before)")
    args = ap.parse_args()
    t0, s0 = time.time(), cpu_stat()
    out = {"tag": args.tag, "host": os.uname().nodename,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **facts()}
    out["python_loop"] = timed(python_loop, 200000)
    out.update(torch_probes())
    s1 = cpu_stat()
    total = max(1, s1[0] - s0[0])
    out["steal_share"] = (s1[2] - s0[2]) / total
    out["idle_share"] = (s1[1] - s0[1]) / total
    out["probe_s"] = time.time() - t0
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
