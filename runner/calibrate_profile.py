"""Calibration points -> profile documents (system + the measured GPU/CPU/NVMe parts) in the
loader's format, every measured number with its provenance; unmeasured numbers are copied from a
base system profile with their original sources. Also the raw record (every point, host facts,
library versions). Nothing here writes files except the loader check in a temporary directory.
"""
from __future__ import annotations

import copy
import json
import os
import platform
import re
import shutil
import socket
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from tierlab.errors import ConfigError
from tierlab.profiles.fields import software_term, yaml_key
from tierlab.runner.microbench import best, block_device_model, mount_of, usable_cores
from tierlab.units import GiB, KiB, MiB, parse_quantity
from tierlab.sim.devices import ADAM_DRAM_BYTES_PER_PARAM
from tierlab.profiles.ranges import CALIBRATED

# The YAML keys the writer fills, read off the field table (profiles/fields.py spells them)
SOCKETS = yaml_key("cpu", "sockets")
CORES = yaml_key("cpu", "cores")
DRAM_BW = yaml_key("cpu", "dram_bandwidth_Bps")
ADAM = yaml_key("cpu", "adam_params_per_s")
MODULE_CALL = yaml_key("cpu", "module_call_s")
CAST16 = yaml_key("cpu", "cast16_params_per_s")
ADAM_ONE_THREAD = yaml_key("cpu", "adam_one_thread_params_per_s")
HBM = yaml_key("gpu", "hbm_bytes")
HBM_BW = yaml_key("gpu", "hbm_bandwidth_Bps")
NVLINK = yaml_key("gpu", "nvlink_bandwidth_Bps")
CUDA_CONTEXT = yaml_key("gpu", "cuda_context_bytes")
PEAK_FLOPS = yaml_key("gpu", "peak_flops.fp32").split(".")[0]
CAPACITY = yaml_key("nvme", "capacity_bytes")
NVME_LATENCY = yaml_key("nvme", "latency_s")
PCIE_LATENCY = yaml_key("pcie", "latency_s")
GPUS_PER_NODE = yaml_key("system", "gpus_per_node")
DRAM = yaml_key("system", "dram_bytes")
NVME_DRIVES = yaml_key("system", "nvme_drives")
NODES = yaml_key("system", "nodes")

PARTS = ("gpus", "cpus", "nvme")


def _fmt_size(n: float) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n:g} B"


def _q(value: float, unit: str) -> str:
    """'12.34 GB/s'-style quantity strings the loader parses (4 significant digits)."""
    scale = {"GB/s": 1e9, "Gparams/s": 1e9, "GiB": GiB, "us": 1e-6, "TFLOP/s": 1e12}[unit]
    return f"{value / scale:.4g} {unit}"


# ----------------------------------------------------------------------------------------------
# base profile (raw YAML data, so copied entries keep their sources verbatim)

def base_documents(base: str) -> dict[str, Any]:
    """{'systems': data, 'systems_name': str, part: (name, data)} of a base system profile."""
    from tierlab.profiles import load

    try:
        path = load.find_part("systems", base)
        load.load_hardware(str(path))                       # validates it as a whole
    except ConfigError as e:
        raise ConfigError(f"--hardware {base}: {e}; see `tierlab profiles hardware`") from None
    system = load.read_data(path)
    docs: dict[str, Any] = {"systems": system, "systems_name": path.stem}
    for part, key in (("gpus", "gpu"), ("cpus", "cpu"), ("nvme", "nvme")):
        if system.get(key):
            part_path = load.find_part(part, str(system[key]), near=path)
            docs[part] = (str(system[key]), load.read_data(part_path))
    return docs


def _datasheet_gpu(device_name: str, base: dict) -> tuple[str, dict] | None:
    """The base's GPU part if it names this device, else a shipped GPU part that does."""
    from tierlab.profiles import load

    words = [w for w in device_name.lower().replace("-", " ").split()
             if w not in ("nvidia", "geforce", "tesla")]

    def matches(name: str) -> bool:
        have = name.lower().replace("-", " ").split()
        return bool(words) and all(w in have for w in words)

    if "gpus" in base and matches(str(base["gpus"][1].get("name", ""))):
        return base["gpus"]
    for path in sorted((load.HARDWARE_DIR / "gpus").glob("*.yaml")):
        data = load.read_data(path)
        if isinstance(data, Mapping) and matches(str(data.get("name", ""))):
            return path.stem, data
    return None


# ----------------------------------------------------------------------------------------------
# parts

def cpu_document(results: dict, facts: dict, base: dict, m: str) -> dict:
    """`m` is the provenance prefix 'measured <date> by tierlab calibrate'."""
    from tierlab.runner.probes import physical_cores

    base_cpu = base["cpus"][1] if "cpus" in base else {}
    cores = facts.get("cores_physical") or physical_cores() or os.cpu_count() or 1
    usable = facts.get("cores_usable") or usable_cores()
    doc: dict[str, Any] = {
        "kind": "cpu", "name": facts["cpu_model"],
        SOCKETS: {"value": facts["sockets"], "source": f"{m}: distinct 'physical id' in /proc/cpuinfo"},
        CORES: {"value": cores, "source": f"{m}: psutil.cpu_count(logical=False) "
                                            f"({usable} usable by this process)"}}
    mc = best(results.get("memcpy", []), "Bps")
    if mc:
        copy_how = (f"torch uint8 tensor copy_ of {_fmt_size(mc['nbytes'])} with {mc['threads']} "
                    f"threads, counting source read + destination read-for-ownership + write (3 "
                    f"x {_fmt_size(mc['nbytes'])} per copy), best of {_reps(results['memcpy'])}")
        doc[DRAM_BW] = measured_entry(mc["Bps"], "GB/s", f"{m}: {copy_how}",
                                               results["memcpy"], "Bps", mc)
    else:
        doc[DRAM_BW] = copy.deepcopy(base_cpu[DRAM_BW])
    ad, ad_reps, ad_how = per_process(results.get("adam", []), "params_per_s", best_of,
                                      optimizer="deepspeed")
    if mc and ad:
        # The DRAM rate the optimizer step streams at is CPU Adam's own traffic, not a plain
        # copy's peak. Above the copy figure the copy is only a lower bound (h200x2-e: copy
        # 141.1 GB/s, Adam 5.47 G/s x 28 B = 153); below it the copy is a peak that DeepSpeed's
        # optimizer work does not reach: h200-u and h200-v (lab/fresh) ran the same optimizer
        # phases in the same time (TinyLlama ZeRO-2 offload 0.47 vs 0.49 s) with the same CPU
        # Adam (4.13 G/s) and copies of 111 vs 155 GB/s, and the copy figure made h200-v's
        # predictions twice as wrong as the stock profile's (lab/scripts/bench_fresh_calibration.py).
        # Only when both were measured here: a base profile's figure keeps its own source.
        traffic = ad["params_per_s"] * ADAM_DRAM_BYTES_PER_PARAM
        reps = [{**p, "Bps": p["params_per_s"] * ADAM_DRAM_BYTES_PER_PARAM}
                for p in ad_reps]                  # the range from CPU Adam's repeats
        side = "above" if traffic > mc["Bps"] else "used instead of"
        doc[DRAM_BW] = measured_entry(traffic, "GB/s", (
            f"{m}: DeepSpeedCPUAdam's measured {ad['params_per_s'] / 1e9:.2f} G params/s x "
            f"{ADAM_DRAM_BYTES_PER_PARAM} B of DRAM traffic per parameter (sim/devices.py), "
            f"{side} the copy benchmark's {mc['Bps'] / 1e9:.1f} GB/s ({copy_how})"), reps, "Bps",
            {**ad, "Bps": traffic})
    if ad:
        per_t = _adam_summary(results["adam"])
        doc[ADAM] = measured_entry(ad["params_per_s"], "Gparams/s", (
            f"{m}: DeepSpeedCPUAdam.step on {ad['n_params'] / 2**20:g} Mi fp32 params, best at "
            f"{ad['threads']} threads (threads: params/s {per_t}){ad_how}; torch Adam in the raw "
            f"data"), ad_reps, "params_per_s", ad, spans(ad_how))
    else:
        doc[ADAM] = copy.deepcopy(base_cpu[ADAM])
    one = one_thread_entry(results.get("adam", []), m)
    if one:
        doc[ADAM_ONE_THREAD] = one
    fastest, calls, calls_how = per_process(results.get("dispatch", []), "seconds_per_call",
                                            fastest_of)
    if fastest:
        doc[MODULE_CALL] = measured_entry(fastest["seconds_per_call"], "us", (
            f"{m}: forward of a hooked 64x64 nn.Linear on {fastest['device']}, autograd on, "
            f"{fastest['calls']} calls per rep, fastest of {_reps(results['dispatch'])} reps"
            f"{calls_how} "
            f"(runner/calibrate.py module_call_time)"), calls, "seconds_per_call", fastest,
            spans(calls_how))
    elif MODULE_CALL in base_cpu:
        doc[MODULE_CALL] = copy.deepcopy(base_cpu[MODULE_CALL])
    # the median of the repeats: a step's copy is one of many, not the best
    mid, cast, cast_how = per_process(results.get("cast", []), "params_per_s", median_of)
    if mid:
        doc[CAST16] = measured_entry(mid["params_per_s"], "Gparams/s", (
            f"{m}: torch copy_ of {mid['n_params'] / 2**20:g} Mi fp32 params into a "
            f"{'pinned ' if facts.get('n_gpus') else ''}bf16 buffer with {mid['threads']} threads "
            f"(DeepSpeed's 16-bit copy after CPU Adam), median of {_reps(results['cast'])}"
            f"{cast_how} "
            f"(runner/calibrate.py cast16_time)"), cast, "params_per_s", mid, spans(cast_how))
    return doc


def best_of(points: list[dict], key: str) -> dict:
    return best(points, key)


def fastest_of(points: list[dict], key: str) -> dict:
    return min(points, key=lambda p: p[key])


def median_of(points: list[dict], key: str) -> dict:
    return sorted(points, key=lambda p: p[key])[len(points) // 2]


def per_process(points: list[dict], key: str, pick: Callable[[list[dict], str], dict],
                **where) -> tuple[dict | None, list[dict], str]:
    """(the point a host rate is taken at, the points its range spans, what the source adds) of
    a benchmark measured in one or more processes (`process` on each point; 0, the calibrating
    process, where absent: runner/calibrate_process.py). One process: `pick` over its points
    matching `where` (the best, fastest or median repeat), its repeats spanning the range. More:
    `pick` per process at the setting process 0's pick was taken at, the median process's point,
    the processes' picks spanning the range: a training process is one more draw."""
    match = [p for p in points if all(p.get(k) == v for k, v in where.items())]
    first = [p for p in match if not p.get("process")]
    if not first:
        return None, [], ""
    b = pick(first, key)
    groups: dict[int, list[dict]] = {}
    setting = {k: v for k, v in b.items() if k != "process"}
    for p in match:
        if _same(p, setting):
            groups.setdefault(p.get("process") or 0, []).append(p)
    if len(groups) < 2:
        return b, points, ""
    picks = sorted((pick(g, key) for g in groups.values()), key=lambda p: p[key])
    mid = picks[(len(picks) - 1) // 2]
    return ({**mid, "process": 0}, [{**p, "process": 0} for p in picks],
            f", median of {len(picks)} processes (each its {pick.__name__[:-3]}: "
            f"{', '.join(_fmt_rate(p[key]) for p in picks)}; runner/calibrate_process.py)")


def spans(how: str) -> str:
    """What a range from per_process spans: its processes where it says so, else repeats."""
    return "processes" if how else "repeats"


def _fmt_rate(v: float) -> str:
    return f"{v * 1e6:.3g} us" if v < 1e-3 else f"{v / 1e9:.3g} G"


def _same(p: dict, b: dict) -> bool:
    """`p` is a repeat of `b`'s setting: equal in everything but its repeat index and the
    measured floats."""
    return all(p.get(k) == v for k, v in b.items() if k != "rep" and not isinstance(v, float))


def measured_entry(value: float, unit: str, source: str, points: list[dict] | None = None,
                   key: str = "", b: dict | None = None, what: str = "repeats") -> dict:
    """`{value, range, source}`: the range is the min to max of `key` over the repeats of the
    setting `b` the value was taken at (docs/ranges.md), when there are two or more that
    differ; else `{value, source}` (the loader then uses the default for measured figures).
    `what` the points are, for the source: repeats, or processes (per_process)."""
    entry: dict[str, Any] = {"value": _q(value, unit)}
    reps = [p[key] for p in points or () if b is not None and _same(p, b)]
    if len(reps) > 1 and _q(min(reps), unit) != _q(max(reps), unit):
        entry["range"] = [_q(min(min(reps), value), unit), _q(max(max(reps), value), unit)]
        source += f"; range: min-max of its {len(reps)} {what}"
    entry["source"] = source
    return entry


def one_thread_entry(points: list[dict], m: str) -> dict | None:
    """The CPU profile's one-thread CPU Adam entry from the `adam` benchmark's points: the best
    repeat of DeepSpeedCPUAdam at one thread in each process's thread sweep, the median process
    (its spread the range: per_process), or the calibrating process's repeats where it ran
    alone; None where no sweep has a one-thread point. `m` is the provenance prefix ('measured
    <date> by tierlab calibrate')."""
    one, reps, how = per_process(points, "params_per_s", best_of, optimizer="deepspeed",
                                 threads=1)
    if one is None:
        return None
    return measured_entry(one["params_per_s"], "Gparams/s", (
        f"{m}: DeepSpeedCPUAdam.step on {one['n_params'] / 2**20:g} Mi fp32 params on one "
        f"thread, best of {_reps(points)}{how} (the thread sweep's one-thread point: a recorded "
        f"fact, docs/calibration.md#host-speed)"), reps, "params_per_s", one, spans(how))


def _reps(points: list[dict]) -> int:
    """Repeats per setting in the calibrating process."""
    return max(p.get("rep", 0) for p in points if not p.get("process")) + 1


def _adam_summary(points: list[dict]) -> str:
    points = [p for p in points if not p.get("process")]       # this process's thread sweep
    ts = sorted({p["threads"] for p in points if p["optimizer"] == "deepspeed"})
    return ", ".join(f"{t}: {best(points, 'params_per_s', optimizer='deepspeed', threads=t)['params_per_s'] / 1e9:.3g}G"
                     for t in ts)


def nvme_document(results: dict, facts: dict, m: str, base: dict) -> dict | None:
    aio = results.get("aio")
    if not aio:
        return None
    path = Path(facts["nvme_path"])
    if "nvme_mount" in facts:                 # recorded where it was measured (also --from-raw)
        mnt, fstype, dev = (facts["nvme_mount"][k] for k in ("mount", "fstype", "device"))
        model = facts.get("nvme_model")
    else:
        mnt, fstype, dev = mount_of(path)
        model = block_device_model(path)
    doc: dict[str, Any] = {"kind": "nvme", "name": f"{model or dev} ({fstype} at {mnt})"}
    n_settings = len({(p["block_size"], p["queue_depth"], p["intra_op_parallelism"],
                       p["single_submit"], p["overlap_events"]) for p in aio})
    for op in ("read", "write"):
        b = best(aio, "Bps", op=op)
        doc[yaml_key("nvme", f"{op}_bandwidth_Bps")] = measured_entry(b["Bps"], "GB/s", (
            f"{m}: DeepSpeed aio {'pread' if op == 'read' else 'pwrite'} O_DIRECT, block "
            f"{_fmt_size(b['block_size'])}, qd {b['queue_depth']}, intra_op "
            f"{b['intra_op_parallelism']}, single_submit {str(b['single_submit']).lower()}, "
            f"overlap_events {str(b['overlap_events']).lower()}, {_fmt_size(b['nbytes'])} file on "
            f"{path}{' overwritten' if op == 'write' else ''} (best of {n_settings} settings x "
            f"{_reps(aio)} reps; "
            f"{facts.get('aio_page_cache', '')})"), aio, "Bps", b)
    capacity = facts.get("nvme_capacity_bytes")
    if capacity is None and path.exists():
        capacity = shutil.disk_usage(path).total
    if capacity is not None:
        doc[CAPACITY] = {"value": _q(capacity, "GiB"),
                           "source": f"{m}: size of the {fstype} filesystem at {mnt} (statvfs)"}
    elif "nvme" in base:          # --from-raw of a record without it: the base drive's figure
        doc[CAPACITY] = copy.deepcopy(base["nvme"][1][CAPACITY])
    lat = results.get("aio_latency")
    if lat:
        med = statistics.median(p["seconds"] for p in lat)
        doc[NVME_LATENCY] = {"value": _q(med, "us"), "source": (
            f"{m}: median of {len(lat)} DeepSpeed aio sync_pread 4 KiB O_DIRECT reads at queue "
            f"depth 1, random offsets of a 64 MiB file on {path} (includes ~10 us of Python call)")}
    return doc


def _gemm_curve(points: list[dict], dtype: str, peak: float) -> list[list[float]]:
    by_flops: dict[float, list[float]] = {}
    for p in points:
        if p["dtype"] == dtype:
            by_flops.setdefault(p["flops"], []).append(min(p["flops_per_s"] / peak, 1.0))
    return [[f, round(statistics.median(e), 4)] for f, e in sorted(by_flops.items())]


def gpu_document(results: dict, facts: dict, base: dict, m: str) -> dict | None:
    info = (results.get("gpu") or [None])[0]
    if info is None:
        return None
    sheet = _datasheet_gpu(info["name"], base)
    sd = copy.deepcopy(sheet[1]) if sheet else {}
    sheet_name = sheet[0] if sheet else None
    doc: dict[str, Any] = {"kind": "gpu", "name": sd.get("name", info["name"]),
                           HBM: {"value": _q(info["total_memory_bytes"], "GiB"), "source": (
                               f"{m}: torch.cuda.get_device_properties().total_memory of "
                               f"{info['name']}")}}
    hbm = best(results.get("hbm", []), "Bps")
    if HBM_BW in sd:
        doc[HBM_BW] = sd[HBM_BW]
    else:
        doc[HBM_BW] = {"value": _q(hbm["Bps"], "GB/s"), "source": (
            f"{m}: device-to-device copy_ of {_fmt_size(hbm['nbytes'])}, read + write counted "
            f"(achievable, not the datasheet peak: no datasheet profile names this GPU)")}
    gemm = results.get("gemm", [])
    dtypes = facts.get("gemm_dtypes", ["bf16"])
    if PEAK_FLOPS in sd:
        doc[PEAK_FLOPS] = sd[PEAK_FLOPS]
    else:
        doc[PEAK_FLOPS] = {d: {"value": _q(best(gemm, "flops_per_s", dtype=d)["flops_per_s"],
                                             "TFLOP/s"),
                                 "source": f"{m}: best {d} GEMM of the sweep (no datasheet profile "
                                           f"names {info['name']}: efficiencies are relative to it)"}
                             for d in dtypes if best(gemm, "flops_per_s", dtype=d)}
        fp32 = best(results.get("gemm_fp32", []), "flops_per_s")
        if fp32:
            doc[PEAK_FLOPS]["fp32"] = {"value": _q(fp32["flops_per_s"], "TFLOP/s"),
                                         "source": f"{m}: fp32 GEMM 4096^3 without TF32"}
    nccl = best(results.get("nccl", []), "busbw_Bps", op="all_gather")
    if nccl:
        doc[NVLINK] = {"value": _q(nccl["busbw_Bps"], "GB/s"), "source": (
            f"{m}: NCCL all_gather_into_tensor bus bandwidth over {nccl['world']} GPUs, "
            f"{_fmt_size(nccl['nbytes'])} gathered (nccl-tests busbw = algbw x (n-1)/n)")}
    elif NVLINK in sd:
        doc[NVLINK] = sd[NVLINK]
    doc[CUDA_CONTEXT] = {"value": _q(max(info["context_bytes"], 1), "GiB"), "source": (
        f"{m}: cudaMemGetInfo used - torch reserved after CUDA init and a first cuBLAS matmul")}
    main_dtype = next((d for d in dtypes if d in _peaks(doc)), None)
    if gemm and main_dtype:
        peak = _peaks(doc)[main_dtype]
        models = sorted({p["model"] for p in gemm})
        tokens = sorted({p["m"] for p in gemm})
        doc["matmul_efficiency"] = {"source": (
            f"{m}: torch {main_dtype} matmul of the forward GEMM shapes (qkv, o, up, down) of "
            f"{', '.join(models)} at {', '.join(map(str, tokens))} tokens, CUDA-event timed; "
            f"efficiency = achieved / peak_flops.{main_dtype}, median per FLOP count "
            f"(other dtypes in the raw data)"),
            "points": _gemm_curve(gemm, main_dtype, peak)}
    elif "matmul_efficiency" in sd:
        doc["matmul_efficiency"] = sd["matmul_efficiency"]
        if "layer_time" in sd and not results.get("layer"):
            # the base's layer points were modelled with this very GEMM curve: they carry over
            doc["layer_time"] = sd["layer_time"]
    else:
        raise ConfigError("no GEMM measured and no datasheet profile for this GPU: drop "
                          "--skip gemm or add a profile under profiles/hardware/gpus/")
    doc.update(_layer_fields(results.get("layer", []), doc, m))
    facts["gpu_datasheet"] = sheet_name
    return doc


def _layer_fields(points: list[dict], doc: dict, m: str) -> dict:
    """layer_time from the `layer` benchmark, modelled with this document's own GEMM curve
    (calibrate_gpu.layer_curve); {} without layer points (failed points are left out)."""
    from tierlab.profiles.load import gpu_from_data
    from tierlab.runner.calibrate_gpu import layer_curve

    ok = [p for p in points if p.get("fwd_s", 0) > 0 and p.get("bwd_s", 0) > 0]
    if not ok:
        return {}
    curve, how = layer_curve(ok, gpu_from_data(doc, "calibrated GPU document"))
    return {"layer_time": {"source": (
        f"{m}: Hugging Face LlamaDecoderLayer (SDPA, bf16, autograd on) forward and backward, "
        f"{ok[0]['layers']} layers back to back, CUDA-event timed, median of repeats; {how}"),
        "points": curve}}


def _peaks(doc: dict) -> dict[str, float]:
    return {d: parse_quantity(e["value"], "flop/s", d) for d, e in doc[PEAK_FLOPS].items()}


# ----------------------------------------------------------------------------------------------
# system

def system_document(name: str, results: dict, facts: dict, base: dict, parts: dict,
                    m: str, date: str) -> dict:
    """The system YAML: measured parts by name, measured host numbers, the rest from the base."""
    from tierlab.runner.probes import ram_bytes

    doc = copy.deepcopy(base["systems"])
    not_measured = ["network"]
    doc["name"] = name
    for key, part in (("gpu", "gpus"), ("cpu", "cpus"), ("nvme", "nvme")):
        if parts.get(part):
            doc[key] = name
        elif key in doc:
            not_measured.append(key)
    if facts.get("n_gpus"):
        doc[GPUS_PER_NODE] = {"value": facts["n_gpus"], "source": f"{m}: torch.cuda.device_count()"}
    else:
        not_measured.append(GPUS_PER_NODE)
    doc[DRAM] = {"value": _q(facts.get("ram_bytes") or ram_bytes(), "GiB"),
                   "source": f"{m}: psutil.virtual_memory().total"}
    if parts.get("nvme"):
        doc[NVME_DRIVES] = {"value": 1, "source": (
            f"{m}: the filesystem at {facts['nvme_path']} is measured as one drive")}
    pcie_doc = doc.setdefault("pcie", {})
    pcie = results.get("pcie", [])
    if pcie:
        _pcie_entries(pcie_doc, pcie, m)
    else:
        not_measured.append("pcie")
    not_measured += [what for key, what in (("gemm", "GEMM curve"), ("layer", "decoder-layer times"))
                     if not results.get(key)]
    doc["description"] = (f"{name}: calibrated {date} by tierlab calibrate on "
                          f"{socket.gethostname()}; not measured, from {base['systems_name']}: "
                          f"{', '.join(not_measured)}")
    order = ["kind", "name", "description", "gpu", GPUS_PER_NODE, "cpu", DRAM, "nvme",
             NVME_DRIVES, "pcie", "network", NODES]
    return {k: doc[k] for k in order if k in doc} | {k: v for k, v in doc.items() if k not in order}


def _pcie_entries(pcie_doc: dict, pcie: list[dict], m: str) -> None:
    sizes = sorted({p["nbytes"] for p in pcie})
    span = f"{_fmt_size(sizes[0])}–{_fmt_size(sizes[-1])}"
    for direction in ("h2d", "d2h"):
        for memory in ("pinned", "pageable"):
            b = best(pcie, "Bps", direction=direction, memory=memory)
            pcie_doc[yaml_key("pcie", f"{direction}_{memory}_Bps")] = measured_entry(b["Bps"], "GB/s", (
                f"{m}: torch copy_ {direction.upper()} with {memory} host memory, best at "
                f"{_fmt_size(b['nbytes'])} over {span} (best of {_reps(pcie)} reps; curve in the "
                f"raw data)"), pcie, "Bps", b)
    small = [p for p in pcie if p["nbytes"] == sizes[0] and p["memory"] == "pinned"]
    peak = {d: best(pcie, "Bps", direction=d, memory="pinned")["Bps"] for d in ("h2d", "d2h")}
    lat = min(p["seconds"] - p["nbytes"] / peak[p["direction"]] for p in small)
    pcie_doc[PCIE_LATENCY] = {"value": _q(max(lat, 1e-7), "us"), "source": (
        f"{m}: fastest pinned {_fmt_size(sizes[0])} copy minus its size / best bandwidth "
        f"(launch + DMA setup + synchronize)")}


def build_documents(name: str, date: str, results: dict, facts: dict, base: dict,
                    problems: dict[str, str] | None = None,
                    decisions: list | None = None) -> dict[str, dict]:
    """{'systems': ..., 'gpus'/'cpus'/'nvme': ... (only the measured parts)}. `problems`, when
    given, receives {'deepspeed:<term>': why} for each host-cost term left to the software
    profile (not measured at two depths, or at or below zero: runner/calibrate_host.py).
    `decisions`, when given, receives a calibrate_host.TermDecision per measured host-cost term
    (kept or not by the held-out check) and ("held-out", stock error %, kept error %, n)."""
    m = f"measured {date} {CALIBRATED}"
    parts = {"cpus": cpu_document(results, facts, base, m),
             "nvme": nvme_document(results, facts, m, base),
             "gpus": gpu_document(results, facts, base, m)}
    if parts["nvme"] is not None and NVME_LATENCY not in parts["nvme"]:
        parts["nvme"][NVME_LATENCY] = copy.deepcopy(base["nvme"][1][NVME_LATENCY])
    docs = {k: v for k, v in parts.items() if v is not None}
    docs["systems"] = system_document(name, results, facts, base, docs, m, date)
    if results.get("deepspeed") and "cpus" in docs:
        costs, left, rows = host_costs_document(results["deepspeed"], docs, name, m)
        if decisions is not None:
            decisions.extend(rows)
        if problems is not None:
            problems.update({f"deepspeed:{p.split(':', 1)[0]}":
                             f"{p.split(': ', 1)[1]}; the software profile's value stays"
                             for p in left})
        if costs:
            docs["cpus"]["deepspeed_host_costs"] = costs
    if "cpus" in docs:
        for key, entry in _checkpoint_cost_entries(results.get("layer", []), m).items():
            docs["cpus"].setdefault("deepspeed_host_costs", {})[key] = entry
        scan = _overflow_scan_entry(results.get("overflow", []), m)
        if scan:
            key = software_term("overflow_scan_s_per_element").key
            docs["cpus"].setdefault("deepspeed_host_costs", {})[key] = scan
    return docs


def _overflow_scan_entry(points: list[dict], m: str) -> dict | None:
    """fp16 ZeRO-3 overflow check per gradient element (median of the repeats), None without
    points."""
    values = sorted(p["s_per_element"] for p in points if p.get("s_per_element"))
    if not values:
        return None
    mid = values[len(values) // 2]
    return {"value": f"{mid * 1e9:.4g} ns",
            "range": [f"{values[0] * 1e9:.4g} ns", f"{values[-1] * 1e9:.4g} ns"],
            "source": f"{m} (overflow benchmark): torch.isinf(buf).any() + torch.isnan(buf).any() "
                      f"over {points[0]['n_elements']:,} {points[0].get('dtype', 'float32')} host "
                      f"elements, as stage3.py "
                      f"has_overflow runs them; median of {len(values)}"}


def _checkpoint_cost_entries(points: list[dict], m: str) -> dict[str, dict]:
    """The checkpoint machinery's host costs per block (forward wrapper, backward recompute)
    from the `layer` benchmark (host costs: they go beside DeepSpeed's in the CPU profile);
    empty without checkpointed points."""
    from tierlab.runner.calibrate_gpu import checkpoint_bwd_cost, checkpoint_cost

    out = {}
    for field, derive in (("checkpoint_s_per_block", checkpoint_cost),
                          ("checkpoint_bwd_s_per_block", checkpoint_bwd_cost)):
        value, how = derive(points)
        if value is not None:
            out[software_term(field).key] = {"value": f"{value * 1e3:.4g} ms", "source": f"{m} (layer benchmark): {how}"}
    return out


def host_costs_document(points: list[dict], docs: dict, name: str, m: str
                        ) -> tuple[dict, list[str], list]:
    """(`deepspeed_host_costs` of the CPU profile, [terms left to the software profile, why],
    [the held-out check's TermDecisions, then ("held-out", stock %, kept %, n)]): each term
    derived (runner/calibrate_host.py) on the hardware these documents describe, and kept only
    where it makes calibrate's held-out configurations' prediction better (calibrate_host.adopt);
    the checks go into the first kept term's source."""
    from tierlab.profiles.load import load_software
    from tierlab.runner.calibrate_host import adopt, derive, held_out_error

    hardware = check_loadable({k: render_yaml(v) for k, v in docs.items()}, name)
    base = load_software()
    values, how, problems = derive(points, hardware, base)
    kept, decisions, stock_err, kept_err = adopt(points, hardware, base, values)
    problems += [f"{d.field}: measured {d.measured_s * 1e6:.1f} us, not kept ({d.why})"
                 for d in decisions if not d.adopted]
    _, n = held_out_error(points, hardware, base)
    checks = "; ".join(v for k, v in how.items() if k.startswith("check:"))
    if stock_err is not None:
        checks = (f"held-out error {stock_err:.1f}% with the stock terms, {kept_err:.1f}% with "
                  f"those kept ({n} phases)" + (f"; {checks}" if checks else ""))
    out = {}
    for i, (field, value) in enumerate(kept.items()):
        note = f"; checks: {checks}" if i == 0 and checks else ""
        out[software_term(field).key] = {"value": f"{value * 1e3:.4g} ms",
                                      "source": f"{m} (DeepSpeed host costs, "
                                                f"runner/calibrate_ds.py): {how[field]}{note}"}
    return out, problems, [*decisions, ("held-out", stock_err, kept_err, n)]


# ----------------------------------------------------------------------------------------------
# YAML text, layout, loader check

def _scalar(value: Any) -> str:
    """A plain YAML scalar where it reads back as the same string (24 GB/s), else quoted JSON."""
    if isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9][\w .()/+-]*", value):
        try:
            if yaml.safe_load(f"k: {value}") == {"k": value}:
                return value
        except yaml.YAMLError:
            pass
    return json.dumps(value, ensure_ascii=False)


def render_yaml(doc: Mapping, indent: str = "") -> str:
    """The shipped profiles' style: `key: {value: 24 GB/s, source: "..."}` one per line."""
    lines = []
    for key, value in doc.items():
        if isinstance(value, Mapping) and set(value) in ({"value", "source"},
                                                         {"value", "range", "source"}):
            span = (f"range: [{', '.join(_scalar(v) for v in value['range'])}], "
                    if "range" in value else "")
            lines.append(f"{indent}{key}: {{value: {_scalar(value['value'])}, {span}"
                         f"source: {json.dumps(str(value['source']), ensure_ascii=False)}}}")
        elif isinstance(value, Mapping):
            lines.append(f"{indent}{key}:")
            lines.append(render_yaml(value, indent + "  ").rstrip("\n"))
        elif key == "source":
            lines.append(f"{indent}{key}: {json.dumps(value, ensure_ascii=False)}")
        else:
            lines.append(f"{indent}{key}: {_scalar(value)}")
    return "\n".join(lines) + "\n"


def layout(out: Path, name: str) -> dict[str, Path]:
    """Where each document goes: the system at `out`; parts in gpus/, cpus/, nvme/ beside the
    systems/ folder when `out` is in one (profiles/hardware/systems/NAME.yaml), else beside `out`."""
    out = Path(out)
    root = out.parent.parent if out.parent.name == "systems" else out.parent
    return {"systems": out, **{p: root / p / f"{name}.yaml" for p in PARTS}}


def check_loadable(texts: dict[str, str], name: str):
    """Load the documents through tierlab.profiles.load from a temporary hardware tree (a system
    resolves the parts beside it first, then the shipped ones); a ConfigError if rejected."""
    from tierlab.profiles import load

    with tempfile.TemporaryDirectory(prefix="tierlab-cal-") as tmp:
        hw = Path(tmp) / "hardware"
        for kind, text in texts.items():
            (hw / kind).mkdir(parents=True, exist_ok=True)
            (hw / kind / f"{name}.yaml").write_text(text)
        try:
            return load.load_hardware(str(hw / "systems" / f"{name}.yaml"))
        except ConfigError as e:       # named as the document, not as the temporary tree
            raise ConfigError(str(e).replace(f"{hw}/", "the rebuilt profile's ")) from None


def raw_record(name: str, date: str, base: str, plan, results: dict, skipped: dict, facts: dict,
               elapsed: dict) -> dict:
    """Every point measured, with settings, host facts and library versions (for --raw)."""
    from dataclasses import asdict

    return {"tool": "tierlab calibrate", "name": name, "date": date, "base": base,
            "host": host_facts(facts), "versions": versions(), "plan": asdict(plan),
            "skipped": skipped, "elapsed_s": elapsed, "results": results}


def host_facts(facts: dict) -> dict:
    import psutil

    return {"hostname": socket.gethostname(), "platform": platform.platform(),
            "kernel": platform.release(), "cpu_model": facts.get("cpu_model"),
            "sockets": facts.get("sockets"), "cores_physical": psutil.cpu_count(logical=False),
            "cores_logical": psutil.cpu_count(), "cores_usable": usable_cores(),
            "ram_bytes": psutil.virtual_memory().total, "uid": os.getuid(),
            **{k: v for k, v in facts.items() if k not in ("cpu_model", "sockets")}}


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": sys.version.split()[0]}
    for pkg in ("tierlab", "torch", "deepspeed", "psutil", "nvidia-ml-py"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    try:
        import torch

        out["torch_cuda"] = torch.version.cuda
        out["cudnn"] = torch.backends.cudnn.version() if torch.cuda.is_available() else None
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
    except Exception:       # versions are informative; never fail a calibration over them
        pass
    return out


def cpu_identity() -> tuple[str, int]:
    """(model name, sockets) from /proc/cpuinfo, falling back to platform.processor()."""
    model, ids = None, set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model is None:
                model = value.strip()
            elif key.strip() == "physical id":
                ids.add(value.strip())
    except OSError:
        pass
    return model or platform.processor() or "unknown CPU", max(len(ids), 1)
