"""tierlab beside its analytic peers (issue 32, item 5): the warm ranged answer of tierlab and the
warm answer of Calculon and llm-analysis on bench_speed's three scenarios, with ratios.

    .venv/bin/python bench/bench_peers.py [--venv PATH] [--calculon-src DIR] [--repeat N]

The peers live in their own venv (default /tmp/tierlab-peers-venv; created with `python3 -m venv`
and `pip install calculon llm-analysis` when missing; --no-install never calls pip). Each peer's
own model is called in a child process of that venv on its translation of the scenario
(`calculon_inputs`, `llm_analysis_inputs`), one untimed warm-up then the median of N calls;
tierlab's ranged answer (`Scenario.simulate(ranges=True)`, as bench_speed) is timed the same way
in this process, the scenario resolved once outside the timing.

Calculon: the package named `calculon` on the package registry (1.1.1) is not NVIDIA's Calculon
(calculon-ai/calculon, the LLM co-design model) but an unrelated producer-consumer library; the
bench checks what it installed and, unless --calculon-src names a checkout (or a git directory)
of NVIDIA's Calculon, prints that column as n/a with the reason. A peer that cannot be installed
or cannot express a scenario prints "n/a (reason)"; the script always exits 0. Prints figures;
asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_speed import SCENARIOS, _reschedule  # noqa: E402  (bench/, the script's own folder)

DEFAULT_VENV = "/tmp/tierlab-peers-venv"
PACKAGES = ("calculon", "llm-analysis")
CALCULON_DEPS = ("pandas", "psutil")   # NVIDIA Calculon's imports (its setup.py lists none)

# Calculon's shipped A100 system file's efficiency curves (systems/a100_80g.json), used for the
# systems the bench builds from tierlab's profiles where Calculon ships none (V100, RTX 3070).
_CURVES = {
    "matrix": [[128, 0.95], [16, 0.9], [1, 0.6], [0, 0.1]],
    "vector": [[16, 0.95], [1, 0.5], [0, 0.1]],
    "mem1": [[100, 0.90], [10, 0.75], [1, 0.6], [0, 0.3]],
    "mem2": [[100, 0.95], [10, 0.9], [1, 0.7], [0, 0.3]],
}
_NET_OPS = {
    "nvlink": {"p2p": [1.0, None], "reduce_scatter": [1.5, -1], "all_gather": [1.5, -1],
               "all_reduce": [2.0, -1]},
    "ib": {"p2p": [1.0, None], "reduce_scatter": [1.0, 0], "all_gather": [1.0, 0],
           "all_reduce": [1.0, 0]},
}

# What each peer models, read from its installed source (llm_analysis/analysis.py 0.2.2;
# calculon/llm/llm.py and calculon/system.py of calculon-ai/calculon).
PEER_NOTES = {
    "calculon": (
        "Calculon (NVIDIA, calculon-ai/calculon): analytic Megatron-style model (TP x PP x DP) of "
        "one batch per processor: per-layer FLOP and memory times on a roofline/no-overlap "
        "processor, TP/PP/DP collective times per network tier, pipeline bubble, recompute. Two "
        "memory tiers only (mem1 = HBM, mem2 = one offload tier): weight/activation/optimizer "
        "offload to mem2 is a bandwidth-bound transfer overlapped per block; the optimizer step "
        "runs on the accelerator (no CPU Adam); no NVMe tier (the bench makes mem2 the NVMe for "
        "the NVMe scenario); optimizer sharding is ZeRO-1 (no gradient or parameter partitioning: "
        "no ZeRO-2/3); no GQA (multi-head or multi-query), no gated MLP (feedforward set to 1.5x "
        "ffn, the same matmul FLOPs), no embedding/LM-head time; states over a tier's capacity are "
        "refused (the bench asks again with the capacities raised and flags 'no fit'); no "
        "contention, no DeepSpeed buckets, no swap buffers, no step-1 cost, no range."),
    "llm-analysis": (
        "llm-analysis (cli99/llm_analysis): closed-form latency and memory of a transformer "
        "layer (GEMM FLOPs / peak x efficiency, or memory-bound time) times layers and "
        "micro-batches, plus TP/PP/DP communication; DeepSpeed ZeRO stages 0-3 change only the "
        "memory estimate (and its DP all-gather); no offload of any kind (no CPU Adam, no "
        "host/NVMe tier, no PCIe), so the offload scenarios are answered as all-GPU steps; "
        "efficiencies default to 1 (peak); states that do not fit the card fail an assertion (the "
        "bench asks again with the card's memory raised and flags 'no fit'); no contention, no "
        "step-1 cost, no range."),
}


# ---------------------------------------------------------------- scenario -> plain facts

def scenario_facts(sc) -> dict:
    """The numbers of a resolved tierlab Scenario that the peers can take (plain data)."""
    m, h, s = sc.model, sc.hardware, sc.strategy
    g = h.gpu
    prec = s.precision or "fp16"
    return {
        "model": m.name, "layers": m.n_layers, "hidden": m.hidden, "ffn": m.ffn,
        "heads": m.n_heads, "kv_heads": m.n_kv_heads or m.n_heads, "vocab": m.vocab,
        "seq": m.seq_len, "max_seq": max(m.max_seq_len or 0, m.seq_len),
        "gated_mlp": bool(m.gated_mlp),
        "gpu": g.name, "hbm_bytes": g.hbm_bytes, "hbm_Bps": g.hbm_bandwidth_Bps,
        "peak_flops": g.peak_flops.get(prec, g.peak_flops.get("fp16")),
        "fp32_flops": g.peak_flops.get("fp32", 0.0), "nvlink_Bps": g.nvlink_bandwidth_Bps,
        "gpus_per_node": h.gpus_per_node, "world": h.world_size,
        "dram_bytes": h.dram_bytes, "pcie_Bps": h.pcie.h2d_pinned_Bps,
        "nvme_bytes": (h.nvme.capacity_bytes * h.nvme_drives) if h.nvme else 0.0,
        "nvme_read_Bps": (h.nvme.read_bandwidth_Bps * h.nvme_drives) if h.nvme else 0.0,
        "nic_Bps": h.network.nic_bandwidth_Bps if h.network else 0.0,
        "zero": s.zero.stage, "offload_param": s.zero.offload_param.device or "none",
        "offload_optimizer": s.zero.offload_optimizer.device or "none",
        "precision": prec, "micro_batch": s.train_micro_batch_size_per_gpu,
        "grad_accum": s.gradient_accumulation_steps, "dp": s.data_parallel_size,
        "checkpointing": bool(s.activation_checkpointing),
    }


# ---------------------------------------------------------------- facts -> Calculon inputs

def _calculon_shipped_system(f: dict) -> str | None:
    """The system file Calculon ships for this GPU (systems/ of its source), if any."""
    name = f["gpu"].upper()
    if "A100" in name and f["hbm_bytes"] >= 64 * 2**30:
        return "a100_80g.json"
    if "H100" in name:
        return "h100_80g_nvl8.json"
    return None          # no V100, no consumer card among Calculon's systems


def calculon_system(f: dict) -> dict:
    """A Calculon system JSON built from tierlab's hardware numbers: matrix = the precision's
    tensor peak, vector = 2x the FP32 peak, mem1 = HBM, mem2 = the scenario's offload tier (host
    DRAM over pinned PCIe, or the node's NVMe drives for NVMe offload, per GPU), network tier 0 =
    NVLink (PCIe where a card has none) across a node, tier 1 = the node's NIC per GPU; efficiency
    curves as Calculon's A100 file."""
    per = max(f["gpus_per_node"], 1)
    nvme = "nvme" in (f["offload_param"], f["offload_optimizer"])
    if nvme:
        mem2 = (f["nvme_bytes"] / per, f["nvme_read_Bps"] / per)
    else:
        mem2 = (f["dram_bytes"] / per, f["pcie_Bps"])
    intra = f["nvlink_Bps"] or f["pcie_Bps"]
    return {
        "matrix": {"float16": {"tflops": f["peak_flops"] / 1e12,
                               "gflops_efficiency": _CURVES["matrix"]},
                   "bfloat16": {"tflops": f["peak_flops"] / 1e12,
                                "gflops_efficiency": _CURVES["matrix"]}},
        "vector": {"float16": {"tflops": 2 * f["fp32_flops"] / 1e12,
                               "gflops_efficiency": _CURVES["vector"]},
                   "bfloat16": {"tflops": 2 * f["fp32_flops"] / 1e12,
                                "gflops_efficiency": _CURVES["vector"]}},
        "mem1": {"GiB": f["hbm_bytes"] / 2**30, "GBps": f["hbm_Bps"] / 1e9,
                 "MB_efficiency": _CURVES["mem1"]},
        "mem2": {"GiB": mem2[0] / 2**30, "GBps": mem2[1] / 1e9,
                 "MB_efficiency": _CURVES["mem2"]},
        "processing_mode": "no_overlap",
        "networks": [
            {"bandwidth": intra / 1e9, "efficiency": 0.65, "size": per, "latency": 1e-5,
             "ops": _NET_OPS["nvlink"], "must_be_filled": True, "processor_usage": 0.15},
            {"bandwidth": max(f["nic_Bps"] / per, 1e6) / 1e9, "efficiency": 0.9, "size": 65536,
             "latency": 2e-5, "ops": _NET_OPS["ib"], "must_be_filled": False,
             "processor_usage": 0.02},
        ],
    }


def calculon_inputs(f: dict) -> dict:
    """Calculon's application, execution and system for the scenario, closest it allows:
    data parallel only (DeepSpeed ZeRO), optimizer sharding = ZeRO-1 where DP > 1, weight and
    optimizer offload to mem2 as the scenario offloads, full recompute as activation
    checkpointing. 'system_file' names a file Calculon ships (used when found), 'system' is the
    one built from tierlab's numbers (used otherwise). 'notes' says what was approximated."""
    notes = []
    dp = f["dp"]
    ffn = f["ffn"] * 3 // 2 if f["gated_mlp"] else f["ffn"]
    if f["gated_mlp"]:
        notes.append(f"gated MLP as feedforward {ffn} (1.5x {f['ffn']})")
    if f["kv_heads"] != f["heads"]:
        notes.append(f"GQA ({f['kv_heads']} kv heads) as multi-head")
    if f["zero"] >= 2:
        notes.append(f"ZeRO-{f['zero']} as optimizer sharding (ZeRO-1)" if dp > 1
                     else f"ZeRO-{f['zero']} on one GPU: no sharding")
    if "nvme" in (f["offload_param"], f["offload_optimizer"]):
        notes.append("NVMe offload as mem2 = the node's NVMe per GPU")
    if f["offload_optimizer"] != "none":
        notes.append("optimizer step on the GPU (no CPU Adam)")
    if f["precision"] == "bf16":
        notes.append("bf16 as float16")
    app = {"hidden": f["hidden"], "feedforward": ffn, "seq_size": f["seq"],
           "attn_heads": f["heads"], "attn_size": f["hidden"] // f["heads"],
           "num_blocks": f["layers"]}
    system = calculon_system(f)
    per = max(f["gpus_per_node"], 1)
    dp_net = 0 if dp <= per and per % dp == 0 else 1
    exe = {
        "num_procs": dp, "tensor_par": 1, "pipeline_par": 1, "data_par": dp,
        "tensor_par_net": 0, "pipeline_par_net": 0, "data_par_net": dp_net,
        "batch_size": f["micro_batch"] * f["grad_accum"] * dp,
        "microbatch_size": f["micro_batch"],
        "datatype": "float16",      # bf16 too: the same 2 bytes; Calculon's A100 file has only it
        "fused_activation": True, "attention_type": "multihead",
        "activation_recompute": "full" if f["checkpointing"] else "none",
        "pipeline_interleaving": 1, "optimizer_sharding": dp > 1,
        "tensor_par_comm_type": "ar", "tensor_par_overlap": "none", "seq_par_ag_redo": False,
        "data_par_overlap": dp > 1,
        "weight_offload": f["offload_param"] != "none",
        "activations_offload": False,
        "optimizer_offload": f["offload_optimizer"] != "none",
        "training": True,
    }
    return {"application": app, "execution": exe, "system": system,
            "system_file": _calculon_shipped_system(f), "notes": notes}


# ---------------------------------------------------------------- facts -> llm-analysis inputs

_LLA_GPUS = {("A100", 80): "a100-sxm-80gb", ("A100", 40): "a100-sxm-40gb",
             ("V100", 32): "v100-sxm-32gb", ("V100", 16): "v100-sxm-16gb",
             ("H100", 80): "h100-sxm-80gb"}


def llm_analysis_inputs(f: dict) -> dict:
    """llm-analysis's configs and `training()` arguments for the scenario: its shipped GPU config
    where it has one for the card ('gpu_name'), else one built from tierlab's numbers ('gpu');
    data parallel over every GPU with the scenario's ZeRO stage; offload is dropped (it has
    none), noted in 'notes'."""
    notes = []
    gib = round(f["hbm_bytes"] / 2**30)
    name = next((v for (kind, size), v in _LLA_GPUS.items()
                 if kind in f["gpu"].upper() and size == gib), None)
    gpu = {"name": f["gpu"], "mem_per_GPU_in_GB": f["hbm_bytes"] / 2**30,
           "hbm_bandwidth_in_GB_per_sec": f["hbm_Bps"] / 1e9,
           "intra_node_bandwidth_in_GB_per_sec": (f["nvlink_Bps"] or f["pcie_Bps"]) / 1e9,
           "intra_node_min_message_latency": 8e-6, "peak_fp16_TFLOPS": f["peak_flops"] / 1e12,
           "inter_node_bandwidth_in_GB_per_sec": max(f["nic_Bps"], 1e6) / 1e9}
    off = sorted({d for d in (f["offload_param"], f["offload_optimizer"]) if d != "none"})
    if off:
        notes.append(f"{'/'.join(off)} offload dropped (no offload in llm-analysis)")
    model = {"name": f["model"], "num_layers": f["layers"], "n_head": f["heads"],
             "hidden_dim": f["hidden"], "vocab_size": f["vocab"], "max_seq_len": f["max_seq"],
             "num_key_value_heads": f["kv_heads"], "ffn_embed_dim": f["ffn"],
             "expansion_ratio": f["ffn"] / f["hidden"]}   # given: it asserts ffn % hidden
    training = {"batch_size_per_gpu": f["micro_batch"],
                "gradient_accumulation_steps": f["grad_accum"], "seq_len": f["seq"],
                "activation_recomputation": "FULL" if f["checkpointing"] else "NONE",
                "ds_zero": f["zero"], "flash_attn": True,
                "mlp_gated_linear_units": f["gated_mlp"]}
    return {"model": model, "gpu_name": name, "gpu": gpu, "dtype": "w16a16e16",
            "parallelism": {"dp_size": f["dp"]}, "training": training, "notes": notes}


# ---------------------------------------------------------------- the peers' child process

PEER_CHILD = r'''
import json, logging, os, statistics, sys, time
req = json.load(sys.stdin)
n = req["repeat"]
out = []

def timed(fn):
    first = fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return first, statistics.median(times)

for job in req["jobs"]:
    try:
        if job["peer"] == "calculon":
            from calculon.llm import Llm
            from calculon.system import System
            log = logging.getLogger("calculon-bench")
            log.setLevel(logging.WARNING)
            x = job["inputs"]
            system = x["system"]
            shipped = None
            if x.get("system_file") and req.get("calculon_systems"):
                p = os.path.join(req["calculon_systems"], x["system_file"])
                if os.path.exists(p):
                    system, shipped = json.load(open(p)), x["system_file"]
            def call():
                app = Llm.Application(x["application"])
                exe = Llm.Execution.from_json(x["execution"])
                syst = System(system)
                m = Llm(app, log)
                m.compile(syst, exe)
                m.run(syst)
                return m.get_total_time()
            fits, why = True, None
            try:
                call()
            except Llm.Error as e:
                if "Mem tier" not in str(e):
                    raise
                # the states do not fit its memory tiers: asked again with both raised (its
                # times do not read the capacities), flagged
                fits, why = False, str(e)
                system = json.loads(json.dumps(system))
                system["mem1"]["GiB"] = system["mem2"]["GiB"] = 1e9
            step, s = timed(call)
            out.append({"ok": True, "ms": s * 1e3, "step_s": step, "fits": fits,
                        "fit_error": why, "system": shipped or "built from tierlab's profile"})
        else:
            from llm_analysis.logger import logger
            logger.setLevel(logging.ERROR)
            from llm_analysis.analysis import LLMAnalysis, DSZeRO, ActivationRecomputation
            from llm_analysis.config import (ModelConfig, GPUConfig, DtypeConfig,
                                             ParallelismConfig, get_gpu_config_by_name,
                                             get_dtype_config_by_name)
            x = job["inputs"]
            kw = dict(x["training"])
            kw["ds_zero"] = DSZeRO(kw["ds_zero"])
            kw["activation_recomputation"] = ActivationRecomputation[kw["activation_recomputation"]]
            gpu = get_gpu_config_by_name(x["gpu_name"]) if x["gpu_name"] else GPUConfig(**x["gpu"])
            dtype = get_dtype_config_by_name(x["dtype"])
            def call():
                a = LLMAnalysis(ModelConfig(**x["model"]), gpu, dtype,
                                ParallelismConfig(**x["parallelism"]))
                return a.training(**kw)
            fits, why = True, None
            try:
                call()
            except AssertionError as e:
                if "max_batch_size_per_gpu" not in str(e):
                    raise
                why = "model states + activations exceed the card's memory (no offload)"
                # the states do not fit in HBM (it has no offload): asked again with the card's
                # memory raised; its latency model does not read the capacity
                import dataclasses
                gpu = dataclasses.replace(gpu, mem_per_GPU_in_GB=1e6)
                fits = False
            r, s = timed(call)
            out.append({"ok": True, "ms": s * 1e3, "step_s": r["latency_per_iter"],
                        "fits": fits and r["memory_left_per_gpu"] >= 0, "fit_error": why,
                        "system": x["gpu_name"] or "built from tierlab's profile"})
    except BaseException as e:
        msg = str(e).splitlines()[0].split(", note")[0] if str(e) else ""
        out.append({"ok": False, "error": f"{type(e).__name__}: {msg}"[:160]})
print(json.dumps(out))
'''

PEER_PROBE = r'''
import json, os, sys
out = {}
try:
    import calculon
    d = os.path.dirname(calculon.__file__)
    nvidia = os.path.exists(os.path.join(d, "llm", "llm.py"))
    systems = os.path.join(os.path.dirname(d), "systems")
    out["calculon"] = {"file": calculon.__file__, "nvidia": nvidia,
                       "version": getattr(calculon, "__version__", None),
                       "systems": systems if os.path.isdir(systems) else None}
except BaseException as e:
    out["calculon"] = {"error": f"{type(e).__name__}: {e}"}
if "error" in out["calculon"] or not out["calculon"].get("nvidia"):
  try:
    import importlib.metadata as md
    meta = md.metadata("calculon")
    out["calculon"]["dist"] = {"version": meta["Version"], "summary": meta["Summary"],
                               "home": meta["Home-page"]}
  except BaseException:
    pass
try:
    import llm_analysis, llm_analysis.analysis
    import importlib.metadata as md
    out["llm-analysis"] = {"file": llm_analysis.__file__, "version": md.version("llm-analysis"),
                           "ok": hasattr(llm_analysis.analysis, "LLMAnalysis")}
except BaseException as e:
    out["llm-analysis"] = {"error": f"{type(e).__name__}: {e}"}
print(json.dumps(out))
'''


# ---------------------------------------------------------------- venv and peers

def _pip(py: str, pkg: str, mod: str) -> None:
    if subprocess.run([py, "-c", f"import {mod}"], capture_output=True).returncode == 0:
        return
    r = subprocess.run([py, "-m", "pip", "install", "-q", pkg], capture_output=True, text=True,
                       timeout=900)
    if r.returncode != 0:
        print(f"pip install {pkg} failed: {r.stderr.strip()[-300:]}", file=sys.stderr)


def ensure_venv(venv: Path, install: bool) -> str | None:
    """The venv's python, created and given the peers' packages when missing; None with the
    reason printed on stderr where it cannot be had."""
    py = venv / "bin" / "python"
    if not py.exists():
        if not install:
            print(f"no peer venv at {venv} (--no-install)", file=sys.stderr)
            return None
        r = subprocess.run(["python3", "-m", "venv", str(venv)], capture_output=True, text=True)
        if r.returncode != 0 or not py.exists():
            r = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True,
                               text=True)
        if r.returncode != 0 or not py.exists():
            print(f"python3 -m venv {venv} failed: {r.stderr.strip()[-300:]}", file=sys.stderr)
            return None
    if install:
        for pkg in PACKAGES:
            # registry calculon is importable only as its dist: ask pip, not import
            have = subprocess.run([str(py), "-m", "pip", "show", "-q", pkg],
                                  capture_output=True)
            if have.returncode != 0:
                _pip(str(py), pkg, "__no_such_module__")
    return str(py)


def calculon_source(src: str | None, venv: Path) -> tuple[str | None, str | None]:
    """(a folder to put first on the peer's PYTHONPATH holding NVIDIA's calculon/, its commit or
    None) from --calculon-src: a checkout, or a git directory (its HEAD exported once into the
    venv)."""
    if not src:
        return None, None
    p = Path(src)
    commit = subprocess.run(["git", "--git-dir", str(p / ".git") if (p / ".git").exists()
                             else str(p), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or None
    if (p / "calculon" / "llm" / "llm.py").exists():
        return str(p), commit
    if commit:
        dest = venv / f"calculon-src-{commit}"
        if not (dest / "calculon" / "llm" / "llm.py").exists():
            dest.mkdir(parents=True, exist_ok=True)
            arch = subprocess.run(["git", "--git-dir", str(p), "archive", "HEAD"],
                                  capture_output=True)
            if arch.returncode == 0:
                subprocess.run(["tar", "-x", "-C", str(dest)], input=arch.stdout)
        if (dest / "calculon" / "llm" / "llm.py").exists():
            return str(dest), commit
    return None, None


def calculon_reason(c: dict) -> str | None:
    """Why the Calculon column is n/a (None when the probe found NVIDIA's Calculon)."""
    if c.get("nvidia"):
        return None
    d = c.get("dist")
    if d and not c.get("nvidia"):
        home = (d.get("home") or "?").rstrip("/").split("/")[-2:]
        return (f"registry 'calculon' {d.get('version', '?')} is {'/'.join(home)}, "
                f"a producer-consumer library, not NVIDIA's Calculon; pass --calculon-src")
    return f"calculon not importable: {c.get('error', '?')[:80]}"


def probe(py: str, env: dict) -> dict:
    r = subprocess.run([py, "-c", PEER_PROBE], capture_output=True, text=True, env=env,
                       timeout=300)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"calculon": {"error": r.stderr.strip()[-200:]},
                "llm-analysis": {"error": r.stderr.strip()[-200:]}}


def run_peer_jobs(py: str, env: dict, jobs: list[dict], repeat: int,
                  systems: str | None) -> list[dict]:
    req = {"repeat": repeat, "jobs": jobs, "calculon_systems": systems}
    try:
        r = subprocess.run([py, "-c", PEER_CHILD], input=json.dumps(req), capture_output=True,
                           text=True, env=env, timeout=600)
        return json.loads(r.stdout.strip().splitlines()[-1])
    except Exception as e:  # noqa: BLE001  (a peer that breaks is a column of n/a)
        return [{"ok": False, "error": f"peer process: {type(e).__name__}"}] * len(jobs)


# ---------------------------------------------------------------- tierlab

def tierlab_times(repeat: int) -> dict:
    """Per scenario name: warm ranged answer, median of `repeat` after one warm-up (ms): 'ms' the
    question asked again (answered off the engine's kept schedule, bench_speed's 'ranged'),
    'fresh_ms' with the kept schedules emptied before each call (bench_speed's 'new schedule':
    a sweep point whose rates are new); the step, and the facts the peers are given."""
    from tierlab.scenario import resolve

    out = {}
    for name, kw, _ in SCENARIOS:
        sc = resolve(**kw)
        r = sc.simulate(ranges=True)                   # warm-up
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            sc.simulate(ranges=True)
            times.append(time.perf_counter() - t)
        fresh = []
        for _ in range(repeat):
            _reschedule()
            t = time.perf_counter()
            sc.simulate(ranges=True)
            fresh.append(time.perf_counter() - t)
        out[name] = {"ms": statistics.median(times) * 1e3,
                     "fresh_ms": statistics.median(fresh) * 1e3, "step_s": r.step_time_s,
                     "range_s": tuple(r.step_time_range_s), "facts": scenario_facts(sc)}
    return out


# ---------------------------------------------------------------- the table

def peer_cell(res: dict | None, reason: str | None = None) -> str:
    """A peer's time cell: 'x.xx ms' (with ' [no fit]' where the peer says the GPU memory is
    exceeded) or 'n/a (reason)'."""
    if res is None:
        return f"n/a ({reason or 'not run'})"
    if not res.get("ok"):
        err = res.get("error", reason or "failed")
        if "max_batch_size_per_gpu" in err:       # llm-analysis: the model states do not fit
            err = "does not fit in GPU memory without offload"
        return f"n/a ({err})"
    return f"{res['ms']:.2f} ms" + ("" if res.get("fits", True) else " [no fit]")  # see notes


def ratio_cell(tier_ms: float, res: dict | None, fresh_ms: float | None = None) -> str:
    """tierlab / peer: 'k.kx' for the kept-schedule answer, ' / f.fx' for the new-schedule one."""
    if not res or not res.get("ok") or not res.get("ms"):
        return "n/a"
    def x(v):
        return f"{v:.2g}x" if v < 100 else f"{v:.0f}x"

    out = x(tier_ms / res["ms"])
    return out if fresh_ms is None else f"{out} / {x(fresh_ms / res['ms'])}"


def format_table(rows: list[dict]) -> str:
    """rows: {'scenario', 'tierlab_ms', 'tierlab_fresh_ms' (optional), 'calculon':
    result|None, 'calculon_reason', 'llm_analysis': result|None, 'llm_analysis_reason'} -> a
    Markdown table, one line a scenario: tierlab's warm ranged ms (kept schedule / new
    schedule), each peer's warm ms and tierlab / peer."""
    head = ("| scenario | tierlab warm ranged (kept / new schedule) | Calculon warm "
            "| llm-analysis warm | tierlab / Calculon | tierlab / llm-analysis |")
    lines = [head, "|---|---|---|---|---|---|"]
    for r in rows:
        c, a = r.get("calculon"), r.get("llm_analysis")
        fresh = r.get("tierlab_fresh_ms")
        tier = f"{r['tierlab_ms']:.2f} ms" + ("" if fresh is None else f" / {fresh:.2f} ms")
        lines.append(
            f"| {r['scenario']} | {tier} "
            f"| {peer_cell(c, r.get('calculon_reason'))} "
            f"| {peer_cell(a, r.get('llm_analysis_reason'))} "
            f"| {ratio_cell(r['tierlab_ms'], c, fresh)} "
            f"| {ratio_cell(r['tierlab_ms'], a, fresh)} |")
    return "\n".join(lines)


def format_steps(rows: list[dict]) -> str:
    """The step each one predicts (context for the times: the peers answer another question)."""
    def step(res):
        return f"{res['step_s']:.3g} s" if res and res.get("ok") else "n/a"

    lines = ["| scenario | tierlab step (80% range) | Calculon step | llm-analysis step |",
             "|---|---|---|---|"]
    for r in rows:
        lo, hi = r["tierlab_range_s"]
        lines.append(f"| {r['scenario']} | {r['tierlab_step_s']:.3g} s ({lo:.3g}-{hi:.3g}) "
                     f"| {step(r.get('calculon'))} | {step(r.get('llm_analysis'))} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", default=DEFAULT_VENV, help="the peers' venv (created if missing)")
    ap.add_argument("--calculon-src", default=os.environ.get("TIERLAB_CALCULON_SRC"),
                    help="a checkout or git directory of NVIDIA's Calculon (calculon-ai/calculon)"
                         "; $TIERLAB_CALCULON_SRC")
    ap.add_argument("--repeat", type=int, default=20, help="timed calls per figure (median)")
    ap.add_argument("--no-install", action="store_true", help="never create the venv or pip")
    args = ap.parse_args()

    venv = Path(args.venv)
    tier = tierlab_times(args.repeat)
    py = ensure_venv(venv, not args.no_install)
    cal_reason = lla_reason = None
    ident: dict = {}
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    cal_env = dict(env)
    src, commit = calculon_source(args.calculon_src, venv)
    if src:
        cal_env["PYTHONPATH"] = src
        if py and not args.no_install:
            for dep in CALCULON_DEPS:
                _pip(py, dep, dep)
    if args.calculon_src and not src:
        print(f"--calculon-src {args.calculon_src}: no calculon/llm/llm.py there",
              file=sys.stderr)
    if py is None:
        cal_reason = lla_reason = f"no peer venv at {venv}"
    else:
        ident = probe(py, cal_env)
        cal_reason = calculon_reason(ident.get("calculon", {}))
        a = ident.get("llm-analysis", {})
        if "error" in a or not a.get("ok"):
            lla_reason = f"llm-analysis not importable: {a.get('error', '?')[:80]}"

    rows = []
    cal_jobs, lla_jobs = [], []
    for name, _, _ in SCENARIOS:
        f = tier[name]["facts"]
        cal_jobs.append({"peer": "calculon", "inputs": calculon_inputs(f)})
        lla_jobs.append({"peer": "llm-analysis", "inputs": llm_analysis_inputs(f)})
    cal_res = (run_peer_jobs(py, cal_env, cal_jobs, args.repeat,
                             ident.get("calculon", {}).get("systems"))
               if py and not cal_reason else [None] * len(SCENARIOS))
    lla_res = (run_peer_jobs(py, env, lla_jobs, args.repeat, None)
               if py and not lla_reason else [None] * len(SCENARIOS))
    for (name, _, _), c, a in zip(SCENARIOS, cal_res, lla_res):
        t = tier[name]
        rows.append({"scenario": name, "tierlab_ms": t["ms"], "tierlab_fresh_ms": t["fresh_ms"],
                     "tierlab_step_s": t["step_s"],
                     "tierlab_range_s": t["range_s"], "calculon": c,
                     "calculon_reason": cal_reason, "llm_analysis": a,
                     "llm_analysis_reason": lla_reason})

    c, a = ident.get("calculon", {}), ident.get("llm-analysis", {})
    print(f"tierlab beside its peers ({os.cpu_count()} CPU(s), load {os.getloadavg()[0]:.2f}; "
          f"median of {args.repeat} warm calls after one warm-up; peers in {venv})")
    if c.get("nvidia"):
        print(f"  Calculon {c.get('version')} (NVIDIA, calculon-ai/calculon"
              f"{f' {commit}' if commit else ''}) from {Path(c['file']).parent}")
    a_v = f"{a['version']} (cli99/llm_analysis)" if a.get("version") else "not installed"
    print(f"  llm-analysis {a_v}")
    print()
    print(format_table(rows))
    print()
    print(format_steps(rows))
    print()
    for (name, _, _), cj, lj, cr, lr in zip(SCENARIOS, cal_jobs, lla_jobs, cal_res, lla_res):
        cn = "; ".join(cj["inputs"]["notes"]) or "as is"
        sysname = (cr or {}).get("system") or "-"
        if (cr or {}).get("fit_error"):
            cn += f"; no fit: {cr['fit_error']}, timed with its memory raised"
        if (lr or {}).get("fit_error"):
            lj["inputs"]["notes"].append(f"no fit: {lr['fit_error']}, timed with HBM raised")
        ln = "; ".join(lj["inputs"]["notes"]) or "as is"
        print(f"{name}:\n  Calculon: {cn}; system: {sysname}\n  llm-analysis: {ln}; "
              f"GPU: {(lr or {}).get('system') or '-'}")
    print()
    for peer, note in PEER_NOTES.items():
        print(f"{peer}: {note}")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001  (the bench prints what it could and exits 0)
        print(f"bench_peers: {type(e).__name__}: {e}", file=sys.stderr)
    sys.exit(0)
