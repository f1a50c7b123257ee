"""What every calibration benchmark shares (runner/calibrate.py drives them; calibrate_gpu.py,
calibrate_ds.py, calibrate_profile.py and train.py use the same pieces): sizes, the sweep plan,
the task list's entries, best-of, this host's cores, mounts and drive, and the hooked
module-call timer that `calibrate` and every training run record."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable

from tierlab.units import GiB, KiB, MiB

TMPFS = {"tmpfs", "ramfs", "devtmpfs"}
"""Filesystems in RAM: `calibrate --nvme-path` and preflight refuse them as swap paths."""


@dataclass(frozen=True, kw_only=True)
class SweepPlan:
    """Which points each benchmark measures (every tuple is swept; `repeats` per point)."""

    repeats: int = 3
    """Timed repetitions per point; profiles take the best, raw data keeps all."""
    pcie_sizes: tuple[int, ...] = tuple(64 * KiB * 4**i for i in range(8))
    """Host<->GPU transfer sizes, bytes (64 KiB, 256 KiB, ... 1 GiB; larger ones are capped)."""
    gemm_models: tuple[str, ...] = ("llama-0.5b", "tinyllama-1.1b", "llama-3b", "llama-2-7b",
                                    "llama-3-8b", "llama-2-13b", "llama-3-70b")
    """Model profiles whose per-layer matmul shapes are timed."""
    gemm_tokens: tuple[int, ...] = (512, 2048, 8192)
    """Rows (micro-batch x sequence tokens) of each GEMM."""
    gemm_dtypes: tuple[str, ...] = ("bf16", "fp16")
    layer_models: tuple[str, ...] = ("llama-0.5b", "tinyllama-1.1b", "llama-3b", "llama-2-7b")
    """Model profiles whose real Hugging Face decoder layer is timed (bf16, forward + backward)."""
    layer_tokens: tuple[int, ...] = (2048, 8192)
    """Tokens (micro-batch x sequence) of each layer point."""
    nccl_sizes: tuple[int, ...] = (1 * MiB, 16 * MiB, 256 * MiB)
    aio_file_size: int = 1 * GiB
    aio_block_sizes: tuple[int, ...] = (128 * KiB, 1 * MiB, 8 * MiB)
    aio_queue_depths: tuple[int, ...] = (4, 32, 128)
    aio_parallelism: tuple[int, ...] = (1, 2, 4, 8, 16)
    """intra_op_parallelism values (capped at the usable cores)."""
    aio_single_submit: tuple[bool, ...] = (False,)
    aio_overlap_events: tuple[bool, ...] = (True,)
    aio_latency_reads: int = 64
    """4 KiB O_DIRECT reads at queue depth 1 for the drive's latency."""
    adam_params: int = 64 * 2**20
    overflow_elements: int = 2**28
    """fp16 elements of the overflow-check benchmark's host buffer (512 MiB)."""
    cast_params: int = 2**28
    """fp32 parameters of the cast benchmark (1 GiB of fp32 into 512 MiB of bf16)."""
    adam_threads: tuple[int, ...] = ()
    """Thread counts; () = 1, 2, 4, ... up to the usable cores, and the usable cores."""
    adam_torch: bool = True
    """Also time torch.optim.Adam (foreach) at the same thread counts."""
    memcpy_size: int = 1 * GiB
    host_processes: int = 3
    """Processes the host rates (DeepSpeed's CPU Adam, the 16-bit cast, the module call)
    are measured in: this one and host_processes - 1 fresh ones, after every other benchmark; the
    profile takes the median of the processes and their spread as its range (one process's
    draw is not the next one's: runner/calibrate_process.py)."""
    deepspeed: bool = False
    """Measure DeepSpeed's host costs (calibrate_ds.py: each point trains a narrow model, 5-8
    min on an H200 host; `calibrate --host-costs`). Off by default: measured terms made fresh
    machines' predictions worse than the stock ones (lab/notes/host-costs.md), and each is now
    kept only where calibrate's held-out configurations predict better with it."""
    ds_steps: int = 8
    """Steps of each DeepSpeed host-cost point (calibrate_ds.py), warm-up included."""
    ds_warmup: int = 3
    """Warm-up steps of each point (step 1 has no ZeRO-3 prefetch trace; CPU Adam allocates)."""
    ds_variants: tuple[str, ...] = ()
    """DeepSpeed configurations measured (calibrate_ds.VARIANT_NAMES); () = all of them."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            values = value if isinstance(value, tuple) else (value,)
            for v in values:
                if isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0:
                    raise ValueError(f"SweepPlan.{f.name} must be > 0, got {v!r}")


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def mount_of(path: Path) -> tuple[str, str, str]:
    """(mount point, filesystem type, source device) of the filesystem holding `path`."""
    path = Path(path).resolve()
    best = ("/", "unknown", "unknown")
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return best
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        if (path == Path(mnt) or Path(mnt) in path.parents) and len(mnt) >= len(best[0]):
            best = (mnt, parts[2], parts[0])
    return best


def block_device_model(path: Path) -> str | None:
    """The drive model under `path` from /sys (None when it cannot be found, e.g. overlayfs)."""
    st = os.stat(path)
    base = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    for cand in (base / "device" / "model", base / ".." / "device" / "model"):
        try:
            return cand.read_text().strip() or None
        except OSError:
            continue
    return None


def module_call_time(cuda: bool, repeats: int, calls: int = 4000, width: int = 64) -> list[dict]:
    """Host seconds per forward call of a small nn.Linear with a forward pre-hook and post-hook,
    autograd recording, on the GPU when there is one: Python + hook + torch dispatch + kernel
    launch, the per-submodule work the software profile's fitted host terms stand for. The GPU
    work (a 8 x width x width GEMM) is far shorter than the launch, so the time is the host's;
    one synchronize per rep, amortised over `calls`."""
    import torch

    dev = "cuda" if cuda else "cpu"
    layers = [torch.nn.Linear(width, width, bias=False).to(dev) for _ in range(40)]
    uses: dict[int, int] = {}

    def pre(mod, args):
        uses[id(mod)] = uses.get(id(mod), 0) + 1

    def post(mod, args, out):
        return None

    for layer in layers:
        layer.register_forward_pre_hook(pre)
        layer.register_forward_hook(post)
    x = torch.zeros(8, width, device=dev)

    def one_pass(n_rounds: int) -> None:
        for _ in range(n_rounds):
            y = x
            for layer in layers:
                y = layer(y)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    one_pass(10)                                # warm-up: allocator, kernels, autograd paths
    sync()
    rounds = max(1, calls // len(layers))
    points = []
    for i in range(repeats):
        t0 = time.perf_counter()
        one_pass(rounds)
        sync()
        dt = time.perf_counter() - t0
        points.append({"device": dev, "calls": rounds * len(layers), "rep": i, "seconds": dt,
                       "seconds_per_call": dt / (rounds * len(layers))})
    return points


@dataclass(frozen=True)
class Task:
    group: str
    """Result key in the raw data: 'memcpy', 'adam', 'aio', 'aio_latency', 'pcie', 'gemm', ..."""
    label: str
    run: Callable[[], list[dict]]


def wanted(name: str, skip: set[str], skipped: dict[str, str]) -> bool:
    """False (and the reason noted in `skipped`) when --skip names this benchmark."""
    if name in skip:
        skipped[name] = f"--skip {name}"
        return False
    return True


def best(points: list[dict], key: str, **where) -> dict | None:
    """The point with the largest `key` among those matching `where` (None if none)."""
    match = [p for p in points if all(p.get(k) == v for k, v in where.items())]
    return max(match, key=lambda p: p[key]) if match else None


def torch_cpu_adamw_time(model_name: str = "tinyllama-1.1b", *, repeats: int = 3,
                         impl: str = "default", clip: float | None = 1.0) -> list[dict]:
    """Seconds of one torch.optim.AdamW step (+ clip_grad_norm_ when `clip`) on fp32 CPU
    tensors shaped like `model_name`'s parameters (one tensor per weight, as FSDP2's CPU shards
    at one rank are): what FSDP2 CPU offload runs after backward (runner/fsdp2.py). `impl`
    "default" leaves foreach/fused None (on CPU torch picks `_single_tensor_adam`,
    torch/optim/adam.py), "fused" passes fused=True. Uses torch's intra-op threads as set."""
    import torch

    from transformers import LlamaForCausalLM

    from tierlab.profiles.load import load_model
    from tierlab.runner.model import llama_config

    with torch.device("meta"):           # the runner's own model, its tensors' sizes only
        net = LlamaForCausalLM(llama_config(load_model(model_name)))
    shapes = [p.numel() for p in net.parameters()]
    params = [torch.nn.Parameter(torch.zeros(n)) for n in shapes]
    for p in params:
        p.grad = torch.full_like(p, 1e-3)
    kw = {"fused": True} if impl == "fused" else {}
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, **kw)
    n = sum(shapes)

    def step() -> None:
        if clip:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()

    step()                                   # warm-up: allocates m and v (first step)
    points = []
    for i in range(repeats):
        t0 = time.perf_counter()
        step()
        dt = time.perf_counter() - t0
        points.append({"model": model_name, "impl": impl, "clip": clip, "rep": i,
                       "n_params": n, "n_tensors": len(shapes), "seconds": dt,
                       "params_per_s": n / dt, "threads": torch.get_num_threads()})
    return points
