"""`tierlab calibrate`: microbenchmarks of this host -> the numbers of a hardware profile.

Each benchmark is a small function that returns values (lists of points, each with its settings);
`calibration_tasks()` lists them for a SweepPlan so the CLI can drive a progress bar, and
`calibrate_profile.py` turns the points into profile YAML. The only files written here are the
aio test files under --nvme-path (removed afterwards) and, where permitted, '1' to
/proc/sys/vm/drop_caches. GPU benchmarks live in calibrate_gpu.py.

What each number counts:
- memcpy: one `dst.copy_(src)` of N bytes moves 2N bytes through DRAM (read N + write N); the
  bandwidth reported counts both (STREAM "Copy" convention).
- Adam: fp32 parameters updated per second by one `step()` (DeepSpeedCPUAdam, or torch.optim.Adam
  with foreach=True), for each thread count.
- aio: what DeepSpeed's `ds_io --engine aio_handle` does: one aio_handle(block_size, queue_depth,
  single_submit, overlap_events, intra_op_parallelism), a page-locked buffer of the whole file
  (handle.new_cpu_locked_tensor, or torch pinned memory on CUDA), pwrite/pread async + wait,
  files opened O_DIRECT by DeepSpeed itself; bandwidth = file bytes / wall time of the call.
  Timed writes overwrite an existing file (the first, allocating write is kept as 'write_alloc').
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable

from tierlab.errors import ConfigError
from tierlab.runner.microbench import (TMPFS, SweepPlan, Task, block_device_model,
                                       module_call_time, mount_of, usable_cores, wanted)
from tierlab.units import KiB, MiB, parse_count, parse_size

log = logging.getLogger(__name__)

SKIPPABLE = ("gpu", "pcie", "gemm", "layer", "nccl", "aio", "adam", "memcpy", "dispatch",
             "deepspeed", "overflow", "cast")


def quick_plan(deepspeed: bool = False) -> SweepPlan:
    """Under a minute on a 2-core CPU box (most time goes to the aio sweep and Adam);
    `deepspeed` also measures DeepSpeed's host costs."""
    return SweepPlan(repeats=2, pcie_sizes=(64 * KiB, 1 * MiB, 16 * MiB, 256 * MiB),
                     gemm_models=("llama-0.5b", "llama-2-7b"), gemm_tokens=(2048,),
                     layer_models=("llama-0.5b",), layer_tokens=(2048,),
                     nccl_sizes=(16 * MiB,), aio_file_size=64 * MiB,
                     aio_block_sizes=(128 * KiB, 1 * MiB), aio_queue_depths=(4, 32),
                     aio_parallelism=(1, 2), aio_latency_reads=16, adam_params=4 * 2**20,
                     adam_threads=(), memcpy_size=128 * MiB, deepspeed=deepspeed,
                     host_processes=2, overflow_elements=2**24, cast_params=2**24)


def sweep_value(text: str, key: str) -> int:
    """One `--sweep` value: a size (K/M/G = SI, Ki/Mi/Gi = binary, as everywhere: 1MiB, 8Mi) for
    the *_size(s) keys, a count ('4Mi' params) for adam_params. O_DIRECT needs whole 4 KiB blocks."""
    where = f"--sweep {key}"
    if key == "adam_params":
        return int(parse_count(text, where))
    nbytes = int(parse_size(text, where))
    if key.startswith("aio") and nbytes % (4 * KiB):
        raise ConfigError(f"{where}={text.strip()}: {nbytes:,} bytes is not a whole number of "
                          f"4 KiB blocks (O_DIRECT); sizes are SI unless binary: 1MiB, not 1M")
    return nbytes


def apply_sweep_overrides(plan: SweepPlan, items: list[str]) -> SweepPlan:
    """`--sweep aio_block_sizes=1M,8M --sweep repeats=2` -> a new plan (sizes with a unit: 1MiB, 8MiB; K/M/G = SI)."""
    kinds = {f.name: f.type for f in fields(SweepPlan)}
    changes: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or key not in kinds:
            raise ConfigError(f"--sweep {item!r}: expected KEY=V1,V2 with KEY one of "
                              f"{', '.join(kinds)}")
        parts = [p for p in text.split(",") if p.strip()]
        typ = str(kinds[key])
        try:
            if "bool" in typ:
                vals = [p.strip().lower() in ("1", "true", "yes", "on") for p in parts]
            elif "str" in typ:
                vals = [p.strip() for p in parts]
            elif key.endswith("size") or key.endswith("sizes") or key == "adam_params":
                vals = [sweep_value(p, key) for p in parts]
            else:
                vals = [int(p) for p in parts]
        except ConfigError:
            raise
        except ValueError:
            raise ConfigError(f"--sweep {item!r}: cannot read the values") from None
        if not typ.startswith("tuple"):
            if len(vals) != 1:
                raise ConfigError(f"--sweep {key} takes one value, got {text!r}")
            vals = vals[0]
        changes[key] = tuple(vals) if isinstance(vals, list) else vals
    try:
        return replace(plan, **changes)
    except ValueError as e:
        raise ConfigError(f"--sweep: {e}") from None


# ----------------------------------------------------------------------------------------------
# host facts and the --nvme-path check


def check_nvme_path(path: str | Path, open_file: Callable[..., int] = os.open) -> Path:
    """The --nvme-path must be an existing writable directory on a filesystem that takes O_DIRECT
    and is a drive, not RAM; anything else is a one-line ConfigError naming the path and the fix.
    `open_file` opens the O_DIRECT probe (`os.open`; a caller may pass a filesystem's refusal)."""
    p = Path(path).expanduser()
    fix = "point --nvme-path at a directory on the NVMe drive, e.g. /var/tmp/tierlab-cal"
    if not p.exists():
        raise ConfigError(f"--nvme-path {p}: no such directory; create it (mkdir -p {p}) or {fix}")
    if not p.is_dir():
        raise ConfigError(f"--nvme-path {p}: not a directory; {fix}")
    if not os.access(p, os.W_OK | os.X_OK):
        raise ConfigError(f"--nvme-path {p}: not writable by this user; {fix}")
    _, fstype, _ = mount_of(p)
    if fstype in TMPFS:
        raise ConfigError(f"--nvme-path {p} is on {fstype} (RAM, not a drive; DeepSpeed's O_DIRECT "
                          f"swap files are refused there before Linux 6.6 and would measure "
                          f"memory): {fix}")
    probe = p / f".tierlab-odirect-probe-{os.getpid()}"
    try:
        fd = open_file(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_DIRECT", 0),
                       0o600)
    except OSError as e:
        raise ConfigError(f"--nvme-path {p}: the filesystem ({fstype}) refuses O_DIRECT "
                          f"({e.strerror}), which DeepSpeed's aio needs; {fix}") from None
    try:
        import mmap

        buf = mmap.mmap(-1, 4096)      # page-aligned, as O_DIRECT requires
        os.write(fd, buf)
    except OSError as e:
        raise ConfigError(f"--nvme-path {p}: an O_DIRECT write fails there ({e.strerror}) on "
                          f"{fstype}; {fix}") from None
    finally:
        os.close(fd)
        probe.unlink(missing_ok=True)
    return p


def drop_page_cache() -> str:
    """Write 1 to /proc/sys/vm/drop_caches (root only); returns what happened, for provenance."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return "page cache dropped before each read via /proc/sys/vm/drop_caches"
    except OSError as e:
        return (f"page cache not dropped ({e.strerror or e}: /proc/sys/vm/drop_caches needs root); "
                f"O_DIRECT bypasses it anyway")


def _has_fileno(stream) -> bool:
    try:
        stream.fileno()
        return True
    except (AttributeError, OSError, io.UnsupportedOperation):
        return False


@contextlib.contextmanager
def quiet_deepspeed():
    """Import/load DeepSpeed ops without its stdout chatter (accelerator notice, SSD warning).

    DeepSpeed's JIT compatibility check (OpBuilder.has_function) dup2()s sys.stderr's file
    descriptor and reports 'not compatible' when sys.stderr has none (click's CliRunner, pytest
    capture), so stderr is pointed at the process's real one meanwhile."""
    ds_log = logging.getLogger("DeepSpeed")
    level = ds_log.level
    ds_log.setLevel(logging.ERROR)
    err = sys.stderr if _has_fileno(sys.stderr) else sys.__stderr__
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            yield
    finally:
        ds_log.setLevel(level)


# ----------------------------------------------------------------------------------------------
# CPU: memcpy and Adam

def memcpy_bandwidth(nbytes: int, repeats: int) -> list[dict]:
    """Host memcpy with torch's parallel copy (all threads). Bps counts the DRAM traffic of a
    copy with ordinary (write-allocate) stores: read the source, read the destination line for
    ownership, write it back = 3 x nbytes. STREAM's 2 x nbytes convention leaves the RFO read out
    and so understates what DRAM sustains: on the 2x H200 host it gave 103 GB/s while
    DeepSpeedCPUAdam moved 5.66 G params/s x 28 B = 158 GB/s (lab/cases/h200x2)."""
    import torch

    src = torch.ones(nbytes, dtype=torch.uint8)
    dst = torch.empty_like(src)
    dst.copy_(src)                                    # fault the pages in before timing
    points = []
    for i in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        dt = time.perf_counter() - t0
        points.append({"nbytes": nbytes, "rep": i, "seconds": dt, "threads": torch.get_num_threads(),
                       "bytes_moved": 3 * nbytes, "Bps": 3 * nbytes / dt})
    return points


def adam_thread_counts(plan: SweepPlan) -> tuple[int, ...]:
    if plan.adam_threads:
        return plan.adam_threads
    cores = usable_cores()
    counts = {cores}
    n = 1
    while n < cores:
        counts.add(n)
        n *= 2
    return tuple(sorted(counts))


def adam_throughput(kind: str, n_params: int, threads: int, repeats: int) -> list[dict]:
    """fp32 params/s of one optimizer step: kind 'deepspeed' (DeepSpeedCPUAdam) or 'torch'."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)   # DeepSpeedCPUAdam's OpenMP shares torch's runtime
    try:
        p = torch.nn.Parameter(torch.zeros(n_params))
        p.grad = torch.full((n_params,), 1e-3)
        if kind == "deepspeed":
            with quiet_deepspeed():
                from deepspeed.ops.adam import DeepSpeedCPUAdam

                opt = DeepSpeedCPUAdam([p], lr=1e-3)
        elif kind == "torch":
            opt = torch.optim.Adam([p], lr=1e-3, foreach=True)
        else:
            raise ValueError(f"adam kind must be 'deepspeed' or 'torch', got {kind!r}")
        opt.step()                       # allocates m and v
        points = []
        for i in range(repeats):
            t0 = time.perf_counter()
            opt.step()
            dt = time.perf_counter() - t0
            points.append({"optimizer": kind, "threads": threads, "n_params": n_params, "rep": i,
                           "seconds": dt, "params_per_s": n_params / dt})
        return points
    finally:
        torch.set_num_threads(before)


def overflow_scan_time(n_elements: int, repeats: int, dtype: str = "float16") -> list[dict]:
    """Seconds per element of ZeRO-3's fp16 overflow check with the optimizer offloaded, run as
    DeepSpeed 0.19.8 runs it (stage3.py `has_overflow`): `torch.isinf(buf).any()` and
    `torch.isnan(buf).any()` OR-ed into a bool tracker, over `grad_partitions_flat_buffer` in host
    memory (pinned where there is a GPU, as DeepSpeed pins it), with torch's default threads. That
    buffer has the gradient-accumulation dtype, which is the model's (engine.py `get_data_types`:
    fp16 unless `data_types.grad_accum_dtype` says otherwise), hence float16 by default."""
    import torch

    buf = torch.full((n_elements,), 1e-3, dtype=getattr(torch, dtype))
    if torch.cuda.is_available():
        buf = buf.pin_memory()
    tracker = torch.zeros(1, dtype=torch.bool)

    def scan() -> float:
        t0 = time.perf_counter()
        tracker.logical_or_(torch.isinf(buf).any())
        tracker.logical_or_(torch.isnan(buf).any())
        bool(tracker)           # DeepSpeed reads it (all_reduce, then .item())
        return time.perf_counter() - t0

    scan()                      # first touch of the result allocations
    points = []
    for i in range(repeats):
        dt = scan()
        points.append({"n_elements": n_elements, "dtype": dtype, "rep": i, "seconds": dt,
                       "s_per_element": dt / n_elements})
    return points


def cast16_time(n_params: int, repeats: int) -> list[dict]:
    """fp32 parameters per second copied into a 16-bit host buffer, as DeepSpeed 0.19.8's CPU
    optimizer step copies the updated fp32 partition after CPU Adam
    (stage_1_and_2.py 3092-3096 `bit16_partition_buffer.data.copy_(fp32_partition.data)`;
    stage3 `_reassign_or_swap_out_partitioned_parameters` with offloaded params): torch `copy_`
    of an fp32 tensor into a bf16 one, pinned where there is a GPU (DeepSpeed pins it), with
    torch's default threads."""
    import torch

    src = torch.full((n_params,), 1e-3, dtype=torch.float32)
    dst = torch.empty(n_params, dtype=torch.bfloat16)
    if torch.cuda.is_available():
        dst = dst.pin_memory()
    dst.copy_(src)              # first touch of both buffers
    points = []
    for i in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        dt = time.perf_counter() - t0
        points.append({"n_params": n_params, "dtype": "bfloat16", "threads":
                       torch.get_num_threads(), "rep": i, "seconds": dt,
                       "params_per_s": n_params / dt})
    return points


# ----------------------------------------------------------------------------------------------
# NVMe through DeepSpeed's aio handle (what ds_io --engine aio_handle does)

def load_aio():
    """DeepSpeed's async_io op (JIT-built on first use); a ConfigError names the fix (a stale
    build lock included: the load would wait on it forever)."""
    from tierlab.runner.preflight import refuse_stale_lock

    refuse_stale_lock("async_io")
    try:
        with quiet_deepspeed():
            from deepspeed.ops.op_builder import AsyncIOBuilder

            return AsyncIOBuilder().load(verbose=False)
    except RuntimeError as e:
        raise ConfigError(f"DeepSpeed's async_io op cannot be built here ({str(e).splitlines()[0]}"
                          f"): install libaio-dev (apt-get install libaio-dev) or pass --skip aio"
                          ) from None
    except ImportError as e:
        raise ConfigError(f"cannot import DeepSpeed ({e}); pip install 'tierlab[runner]' or pass "
                          f"--skip aio") from None


def _locked_buffer(handle, nbytes: int, pinned=None):
    """(buffer, free) a page-locked buffer: `pinned` (torch pinned memory on CUDA, shared by all
    settings, as ds_io --use_accelerator_pin_memory), else the handle's own
    new_cpu_locked_tensor (ds_io's default), freed after the setting."""
    import torch

    if pinned is not None and pinned.numel() >= nbytes:
        return pinned[:nbytes], (lambda: None)
    buf = handle.new_cpu_locked_tensor(nbytes, torch.empty(0, dtype=torch.uint8))
    return buf, (lambda: handle.free_cpu_locked_tensor(buf))


def aio_point(lib, folder: Path, nbytes: int, block_size: int, queue_depth: int,
              intra_op_parallelism: int, single_submit: bool, overlap_events: bool,
              repeats: int, drop_caches: bool, pinned=None) -> list[dict]:
    """Write then read one file of `nbytes` with one handle configuration; one dict per op x rep."""
    handle = lib.aio_handle(block_size, queue_depth, single_submit, overlap_events,
                            intra_op_parallelism)
    buf, free = _locked_buffer(handle, nbytes, pinned)
    buf.random_(0, 128)
    path = folder / f"tierlab-cal-{os.getpid()}-{block_size}-{queue_depth}-{intra_op_parallelism}.bin"
    settings = {"nbytes": nbytes, "block_size": block_size, "queue_depth": queue_depth,
                "intra_op_parallelism": intra_op_parallelism, "single_submit": single_submit,
                "overlap_events": overlap_events}
    points = []
    try:
        # the first write of a new file also allocates its blocks (slower on ext4/xfs); it is kept
        # as op 'write_alloc', and the timed writes overwrite, as DeepSpeed's swapper does each step
        for op, reps in (("write_alloc", 1), ("write", repeats), ("read", repeats)):
            for i in range(reps):
                if op == "read" and drop_caches:
                    drop_page_cache()
                t0 = time.perf_counter()
                rc = (handle.async_pread if op == "read" else handle.async_pwrite)(buf, str(path))
                done = handle.wait() if rc == 0 else -1
                dt = time.perf_counter() - t0
                if rc != 0 or done < 1:
                    raise ConfigError(f"--nvme-path {folder}: DeepSpeed aio {op} of {path} failed "
                                      f"(rc {rc}); check free space and O_DIRECT support there")
                points.append({**settings, "op": op, "rep": i, "seconds": dt, "Bps": nbytes / dt})
    finally:
        free()
        path.unlink(missing_ok=True)
    return points


def aio_latency(lib, folder: Path, reads: int) -> list[dict]:
    """4 KiB O_DIRECT reads at queue depth 1 (handle block 4 KiB, qd 1) at random offsets of a
    64 MiB file; each time includes the Python call (~10 us)."""
    handle = lib.aio_handle(4 * KiB, 1, True, False, 1)
    span = 64 * MiB
    big, free_big = _locked_buffer(handle, span)
    small, free_small = _locked_buffer(handle, 4 * KiB)
    path = folder / f"tierlab-cal-{os.getpid()}-latency.bin"
    rng = random.Random(0)
    points = []
    try:
        handle.sync_pwrite(big, str(path))
        drop_page_cache()
        for i in range(reads):
            offset = rng.randrange(span // (4 * KiB)) * 4 * KiB
            t0 = time.perf_counter()
            handle.sync_pread(small, str(path), offset)
            points.append({"nbytes": 4 * KiB, "offset": offset, "seconds": time.perf_counter() - t0})
    finally:
        free_small()
        free_big()
        path.unlink(missing_ok=True)
    return points


def aio_grid(plan: SweepPlan) -> list[dict]:
    """Every (block, qd, parallelism, single_submit, overlap) setting of the plan, as dicts."""
    cores = usable_cores()
    pars = sorted({min(p, cores) for p in plan.aio_parallelism})
    grid = []
    for bs in plan.aio_block_sizes:
        for qd in plan.aio_queue_depths:
            for par in pars:
                for ss in plan.aio_single_submit:
                    for ov in plan.aio_overlap_events:
                        grid.append({"block_size": bs, "queue_depth": qd,
                                     "intra_op_parallelism": par, "single_submit": ss,
                                     "overlap_events": ov})
    return grid


# ----------------------------------------------------------------------------------------------
# the task list the CLI walks (one progress-bar tick each)


def calibration_tasks(plan: SweepPlan, *, nvme_path: Path | None, skip: set[str],
                      cuda: bool, n_gpus: int, facts: dict) -> tuple[list[Task], dict[str, str]]:
    """(tasks to run, {benchmark: why skipped}). `facts` receives settings the profile cites."""
    tasks: list[Task] = []
    skipped: dict[str, str] = {}
    if wanted("memcpy", skip, skipped):
        tasks.append(Task("memcpy", f"memcpy {plan.memcpy_size / MiB:.0f} MiB",
                          lambda: memcpy_bandwidth(plan.memcpy_size, plan.repeats)))
    if wanted("adam", skip, skipped):
        kinds = ("deepspeed", "torch") if plan.adam_torch else ("deepspeed",)
        for kind in kinds:
            for t in adam_thread_counts(plan):
                tasks.append(Task("adam", f"{kind} Adam x{t} threads",
                                  lambda k=kind, t=t: adam_throughput(k, plan.adam_params, t,
                                                                      plan.repeats)))
    if wanted("overflow", skip, skipped):
        tasks.append(Task("overflow", f"fp16 overflow check {plan.overflow_elements / 2**20:.0f}M",
                          lambda: overflow_scan_time(plan.overflow_elements, plan.repeats)))
    if wanted("cast", skip, skipped):
        tasks.append(Task("cast", f"fp32 -> bf16 copy {plan.cast_params / 2**20:.0f}M",
                          lambda: cast16_time(plan.cast_params, max(3, plan.repeats))))
    if wanted("dispatch", skip, skipped):
        tasks.append(Task("dispatch", "hooked module call",
                          lambda: module_call_time(cuda, max(3, plan.repeats))))
    tasks += _aio_tasks(plan, nvme_path, skip, skipped, facts)
    tasks += _deepspeed_tasks(plan, skip, skipped)
    from tierlab.runner import calibrate_gpu

    tasks += calibrate_gpu.gpu_tasks(plan, skip, skipped, cuda=cuda, n_gpus=n_gpus, facts=facts)
    tasks += host_process_tasks(plan, skip, skipped, cuda)
    return tasks, skipped


PROCESS_MARK = "POINTS "
"""The line prefix of a fresh process's points on its stdout (runner/calibrate_process.py)."""
PROCESS_TIMEOUT_S = 300


def in_fresh_process(spec: dict, process: int) -> list[dict]:
    """runner/calibrate_process.py `measure(spec)` in a new Python process (`python -m`), each
    point tagged with `process` (the calling process is 0). A process that fails or times out
    raises RuntimeError naming the benchmark and its last line of output."""
    cmd = [sys.executable, "-m", "tierlab.runner.calibrate_process", json.dumps(spec)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{spec.get('bench')} in fresh process {process}: no result within "
                           f"{PROCESS_TIMEOUT_S} s") from None
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(PROCESS_MARK)]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"{spec.get('bench')} in fresh process {process}: exit "
                           f"{done.returncode}: {tail}")
    return [{**p, "process": process} for p in json.loads(lines[-1][len(PROCESS_MARK):])]


def host_process_tasks(plan: SweepPlan, skip: set[str], skipped: dict[str, str], cuda: bool,
                       launch: Callable[[dict, int], list[dict]] | None = None) -> list[Task]:
    """CPU Adam (DeepSpeed's, its thread sweep), the cast and the module call again, each in
    plan.host_processes - 1 fresh processes (runner/calibrate_process.py), last of all so the
    draws are minutes apart. A process that fails is listed in `skipped` with its reason and the
    profile uses the processes that measured. `launch` runs one (`in_fresh_process`; a caller may
    pass a process that fails)."""
    launch = launch or in_fresh_process
    specs = {"adam": {"bench": "adam", "n_params": plan.adam_params,
                      "threads": list(adam_thread_counts(plan)), "repeats": plan.repeats},
             "cast": {"bench": "cast", "n_params": plan.cast_params,
                      "repeats": max(3, plan.repeats)},
             "dispatch": {"bench": "dispatch", "cuda": cuda, "repeats": max(3, plan.repeats)}}

    def run(group: str, k: int) -> list[dict]:
        try:
            return launch(specs[group], k)
        except RuntimeError as e:
            skipped[f"{group} in fresh process {k}"] = str(e)
            return []

    return [Task(group, f"{group} in fresh process {k} of {plan.host_processes - 1}",
                 lambda g=group, k=k: run(g, k))
            for k in range(1, plan.host_processes)
            for group in specs if group not in skip]


def _deepspeed_tasks(plan: SweepPlan, skip: set[str], skipped: dict[str, str]) -> list[Task]:
    """One task per (DeepSpeed configuration, depth) of calibrate_ds; skipped, and listed, when
    deepspeed cannot be imported (its value then comes from the base software profile)."""
    if not wanted("deepspeed", skip, skipped):
        return []
    if not plan.deepspeed:
        skipped["deepspeed"] = ("not asked: the software profile's host costs stay (--host-costs "
                                "measures them, 5-8 min)")
        return []
    try:
        import deepspeed  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        skipped["deepspeed"] = f"cannot import {e.name} (pip install 'tierlab[runner]')"
        return []
    from tierlab.runner import calibrate_ds as cds

    unknown = [n for n in plan.ds_variants if n not in cds.VARIANT_NAMES]
    if unknown:
        raise ConfigError(f"--sweep ds_variants={unknown[0]}: choose from "
                          f"{', '.join(cds.VARIANT_NAMES)}")
    chosen = [cds.variant_named(n) for n in plan.ds_variants] or list(cds.VARIANTS)
    return [Task("deepspeed", f"DeepSpeed {v.name} {d} layers",
                 lambda v=v, d=d: cds.host_cost_points([v], (d,), steps=plan.ds_steps,
                                                       warmup=plan.ds_warmup))
            for v in chosen for d in cds.DEPTHS]


def _aio_tasks(plan, nvme_path, skip, skipped, facts) -> list[Task]:
    if not wanted("aio", skip, skipped):
        return []
    if nvme_path is None:
        skipped["aio"] = "no --nvme-path given"
        return []
    folder = check_nvme_path(nvme_path)
    lib = load_aio()
    cache = drop_page_cache()
    facts["aio_page_cache"] = cache
    drop = cache.startswith("page cache dropped")
    shared: dict = {}

    def pinned():
        import torch

        if torch.cuda.is_available() and "buf" not in shared:
            shared["buf"] = torch.empty(plan.aio_file_size, dtype=torch.uint8).pin_memory()
        return shared.get("buf")

    tasks = [Task("aio", f"aio bs {g['block_size'] // KiB}K qd {g['queue_depth']} "
                         f"par {g['intra_op_parallelism']}",
                  lambda g=g: aio_point(lib, folder, plan.aio_file_size, repeats=plan.repeats,
                                        drop_caches=drop, pinned=pinned(), **g))
             for g in aio_grid(plan)]
    tasks.append(Task("aio_latency", "aio 4 KiB QD1 latency",
                      lambda: aio_latency(lib, folder, plan.aio_latency_reads)))
    tasks.append(Task("aio_done", "release pinned buffer", lambda: shared.clear() or []))
    return tasks


def median(values) -> float:
    return statistics.median(values)


# ----------------------------------------------------------------------------------------------
# the whole calibration

@dataclass(frozen=True)
class Calibration:
    """What `calibrate()` returns: profile documents, their YAML text, the raw record."""

    documents: dict
    """{'systems': system data, 'gpus'/'cpus'/'nvme': measured part data}."""
    texts: dict
    """The same as YAML text in the loader's format, checked to load."""
    raw: dict
    skipped: dict
    hardware: Any
    """The loaded `Hardware` (the round trip through tierlab.profiles.load)."""
    host_costs: list = field(default_factory=list)
    """DeepSpeed's host-cost terms measured (--host-costs): a calibrate_host.TermDecision each
    (stock, measured, kept or not and why), then ("held-out", stock %, kept %, n)."""


def calibrate(*, name: str, base: str, nvme_path: str | Path | None, plan: SweepPlan,
              skip: set[str] = frozenset(), date: str | None = None,
              progress: Callable[[list[Task]], Any] | None = None,
              save_raw: Callable[[dict], None] | None = None,
              tasks_of: Callable[..., tuple[list[Task], dict]] | None = None) -> Calibration:
    """Measure what this host has, fill the rest from the `base` system profile.

    `save_raw` receives the raw record after every benchmark (`complete: false`, with the tasks
    done so far) and once more, complete, before the profile is built: a calibration that is
    killed, or whose profile cannot be built, keeps every point it measured (rebuild with
    `calibrate --from-raw`). `tasks_of(plan, **facts)` lists the benchmarks
    (`calibration_tasks`; a caller may pass its own)."""
    import datetime

    import torch

    from tierlab.runner import calibrate_profile as cp

    unknown = set(skip) - set(SKIPPABLE)
    if unknown:
        raise ConfigError(f"--skip {sorted(unknown)[0]!r}: choose from {', '.join(SKIPPABLE)}")
    if not name or "/" in name or name.startswith("."):
        raise ConfigError(f"--name {name!r}: use a plain profile name such as h200-host")
    date = date or datetime.date.today().isoformat()
    base_docs = cp.base_documents(base)
    cuda = torch.cuda.is_available()
    cpu_model, sockets = cp.cpu_identity()
    facts: dict[str, Any] = {"cpu_model": cpu_model, "sockets": sockets,
                             "n_gpus": torch.cuda.device_count() if cuda else 0,
                             "nvme_path": str(Path(nvme_path).resolve()) if nvme_path else None}
    if nvme_path:
        facts["nvme_mount"] = dict(zip(("mount", "fstype", "device"), mount_of(Path(nvme_path))))
        if Path(nvme_path).is_dir():       # a bad path is refused by check_nvme_path below
            facts["nvme_model"] = block_device_model(Path(nvme_path))
            facts["nvme_capacity_bytes"] = shutil.disk_usage(nvme_path).total
    tasks, skipped = (tasks_of or calibration_tasks)(
        plan, nvme_path=Path(nvme_path) if nvme_path else None, skip=set(skip), cuda=cuda,
        n_gpus=facts["n_gpus"], facts=facts)
    results: dict[str, list] = {}
    elapsed: dict[str, float] = {}

    def record(done: int) -> dict:
        raw = cp.raw_record(name, date, base_docs["systems_name"], plan, results, skipped,
                            facts, elapsed)
        return {**raw, "complete": done == len(tasks), "tasks_done": done,
                "tasks_total": len(tasks)}

    for done, task in enumerate(progress(tasks) if progress else tasks, start=1):
        t0 = time.perf_counter()
        points = task.run()
        if points:
            results.setdefault(task.group, []).extend(points)
        elapsed[task.group] = round(elapsed.get(task.group, 0.0) + time.perf_counter() - t0, 3)
        if save_raw and done < len(tasks):
            save_raw(record(done))
    for group, why in skipped.items():
        log.info("calibrate: skipped %s (%s)", group, why)
    raw = record(len(tasks))
    if save_raw:
        save_raw(raw)
    left: dict[str, str] = {}
    rows: list = []
    docs = cp.build_documents(name, date, results, facts, base_docs, left, rows)
    texts = {kind: cp.render_yaml(doc) for kind, doc in docs.items()}
    hardware = cp.check_loadable(texts, name)
    return Calibration(docs, texts, raw, {**skipped, **left}, hardware, rows)


def from_raw(raw: Any, *, name: str | None = None, where: str = "raw record") -> Calibration:
    """Re-express a raw record (`calibrate --raw`) as profile documents, measuring nothing: the
    profile a calibration on another host wrote, rebuilt with this version's rules (e.g. when
    only the raw JSON came back, or a rule such as the DRAM byte count changed)."""
    from tierlab.runner import calibrate_profile as cp

    have = raw if isinstance(raw, dict) else {}
    for key in ("name", "date", "base", "host", "results"):
        if key not in have:
            raise ConfigError(f"{where}: not a tierlab calibrate raw record (missing {key!r})")
    name = name or raw["name"]
    if not name or "/" in name or name.startswith("."):
        raise ConfigError(f"--name {name!r}: use a plain profile name such as h200-host")
    if raw.get("complete") is False:
        log.warning("%s: a partial record (%s of %s benchmarks measured before it stopped): what "
                    "was not measured comes from the base profile", where, raw.get("tasks_done"),
                    raw.get("tasks_total"))
    base_docs = cp.base_documents(raw["base"])
    left: dict[str, str] = {}
    rows: list = []
    docs = cp.build_documents(name, raw["date"], raw["results"], raw["host"], base_docs, left,
                              rows)
    texts = {kind: cp.render_yaml(doc) for kind, doc in docs.items()}
    return Calibration(docs, texts, raw, {**dict(raw.get("skipped") or {}), **left},
                       cp.check_loadable(texts, name), rows)
