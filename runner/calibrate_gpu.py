"""GPU microbenchmarks of `tierlab calibrate` (CUDA only): PCIe copies, GEMMs, HBM copy, CUDA
context size, NCCL collectives. Each returns a list of points (dicts with their settings).

Timing: wall clock around the operation and a `torch.cuda.synchronize()`, so small transfers
include the launch and synchronisation cost the simulator calls PCIe latency.
"""
from __future__ import annotations

import logging
import os
import time

from tierlab.runner.microbench import SweepPlan, Task, wanted
from tierlab.units import GiB

log = logging.getLogger(__name__)

_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def pcie_curve(sizes: tuple[int, ...], repeats: int, device: int = 0) -> list[dict]:
    """H2D and D2H bandwidth of `copy_` for pinned and pageable host buffers at each size."""
    import torch

    dev = torch.device("cuda", device)
    points = []
    for memory in ("pinned", "pageable"):
        for n in sorted({min(s, GiB) for s in sizes}):
            host = torch.ones(n, dtype=torch.uint8)
            if memory == "pinned":
                host = host.pin_memory()
            gpu = torch.empty(n, dtype=torch.uint8, device=dev)
            for direction in ("h2d", "d2h"):
                dst, src = (gpu, host) if direction == "h2d" else (host, gpu)
                dst.copy_(src, non_blocking=memory == "pinned")
                torch.cuda.synchronize(dev)
                for i in range(repeats):
                    t0 = time.perf_counter()
                    dst.copy_(src, non_blocking=memory == "pinned")
                    torch.cuda.synchronize(dev)
                    dt = time.perf_counter() - t0
                    points.append({"direction": direction, "memory": memory, "nbytes": n,
                                   "rep": i, "seconds": dt, "Bps": n / dt})
            del host, gpu
    return points


def gemm_shapes(models: tuple[str, ...], tokens: tuple[int, ...]) -> list[dict]:
    """(m, k, n) of the forward matmuls of one block of each model profile, per token count
    (q/k/v fused as one; gate and up are separate Linear layers in Hugging Face Llama, as `up`)."""
    from tierlab.profiles.load import load_model

    shapes = {}
    for name in models:
        mdl = load_model(name)
        h, f, kv = mdl.hidden, mdl.ffn, mdl.kv_dim
        for t in tokens:
            for op, (k, n) in {"qkv": (h, h + 2 * kv), "o": (h, h), "up": (h, f),
                               "down": (f, h)}.items():
                shapes[(t, k, n)] = {"model": name, "op": op, "m": t, "k": k, "n": n}
    return list(shapes.values())


def gemm_point(m: int, k: int, n: int, dtype: str, device: int = 0,
               min_seconds: float = 0.02) -> float:
    """Achieved FLOP/s of `a @ b` ((m x k) @ (k x n)), 2*m*k*n FLOPs, CUDA-event timed."""
    import torch

    dt = getattr(torch, _DTYPES[dtype])
    a = torch.randn(m, k, device=f"cuda:{device}", dtype=dt)
    b = torch.randn(k, n, device=f"cuda:{device}", dtype=dt)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    a @ b
    end.record()
    end.synchronize()
    iters = max(3, min(1000, int(min_seconds / max(start.elapsed_time(end) / 1e3, 1e-6))))
    start.record()
    for _ in range(iters):
        a @ b
    end.record()
    end.synchronize()
    return 2.0 * m * k * n * iters / (start.elapsed_time(end) / 1e3)


def gemm_curve(shapes: list[dict], dtypes: tuple[str, ...]) -> list[dict]:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    points = []
    for s in shapes:
        for dtype in dtypes:
            flops = 2.0 * s["m"] * s["k"] * s["n"]
            points.append({**s, "dtype": dtype, "flops": flops,
                           "flops_per_s": gemm_point(s["m"], s["k"], s["n"], dtype)})
    return points


def hbm_copy(nbytes: int = 2 * GiB, repeats: int = 5) -> list[dict]:
    """Device-to-device copy; Bps counts read + write (2 x nbytes), like the memcpy benchmark."""
    import torch

    src = torch.ones(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    points = []
    for i in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        points.append({"nbytes": nbytes, "rep": i, "seconds": dt, "Bps": 2 * nbytes / dt})
    return points


def gpu_facts(device: int = 0) -> list[dict]:
    """Name, memory and the memory the CUDA context + cuBLAS take before any tensor (used - reserved
    after a first matmul; includes other processes on a shared GPU)."""
    import torch

    props = torch.cuda.get_device_properties(device)
    a = torch.ones(256, 256, device=f"cuda:{device}")
    (a @ a).sum().item()
    free, total = torch.cuda.mem_get_info(device)
    context = total - free - torch.cuda.memory_reserved(device)
    return [{"name": props.name, "total_memory_bytes": props.total_memory,
             "capability": f"{props.major}.{props.minor}", "sm_count": props.multi_processor_count,
             "context_bytes": context, "device_count": torch.cuda.device_count()}]


def _nccl_worker(rank: int, world: int, sizes: tuple[int, ...], port: int, queue) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    points = []
    for total in sizes:
        shard = total // world
        full = torch.empty(shard * world, dtype=torch.uint8, device="cuda")
        part = torch.ones(shard, dtype=torch.uint8, device="cuda")
        for op in ("all_gather", "reduce_scatter"):
            def call():
                if op == "all_gather":
                    dist.all_gather_into_tensor(full, part)
                else:
                    dist.reduce_scatter_tensor(part, full)
            for _ in range(3):
                call()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            iters = 10
            for _ in range(iters):
                call()
            torch.cuda.synchronize()
            dt = (time.perf_counter() - t0) / iters
            # nccl-tests: algbw = total bytes / time; busbw = algbw x (n - 1) / n
            points.append({"op": op, "world": world, "nbytes": shard * world, "seconds": dt,
                           "algbw_Bps": shard * world / dt,
                           "busbw_Bps": shard * world / dt * (world - 1) / world})
    if rank == 0:
        queue.put(points)
    dist.destroy_process_group()


def nccl_busbw(sizes: tuple[int, ...], world: int) -> list[dict]:
    """All-gather and reduce-scatter bus bandwidth over `world` local GPUs (one process each)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    procs = [ctx.Process(target=_nccl_worker, args=(r, world, sizes, port, queue))
             for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode for p in procs) or queue.empty():
        raise RuntimeError(f"NCCL benchmark failed (exit codes {[p.exitcode for p in procs]})")
    return queue.get()


def gpu_tasks(plan: SweepPlan, skip: set[str], skipped: dict[str, str], *, cuda: bool,
              n_gpus: int, facts: dict) -> list[Task]:
    """The GPU benchmarks of the plan, or the reasons they are skipped."""
    names = ("pcie", "gemm", "layer", "nccl")
    if not cuda:
        for name in names:
            skipped[name] = "no CUDA device (torch.cuda.is_available() is False)"
        return []
    if "gpu" in skip:
        for name in names:
            skipped[name] = "--skip gpu"
        return []
    tasks = [Task("gpu", "GPU facts and CUDA context", gpu_facts),
             Task("hbm", "HBM device copy", hbm_copy)]
    if wanted("pcie", skip, skipped):
        tasks.append(Task("pcie", f"PCIe {len(plan.pcie_sizes)} sizes",
                          lambda: pcie_curve(plan.pcie_sizes, plan.repeats)))
    if wanted("gemm", skip, skipped):
        tasks.append(Task("gemm_fp32", "GEMM fp32 4096^3",
                          lambda: gemm_curve([{"model": "-", "op": "square", "m": 4096, "k": 4096,
                                               "n": 4096}], ("fp32",))))
        for s in gemm_shapes(plan.gemm_models, plan.gemm_tokens):
            tasks.append(Task("gemm", f"GEMM {s['m']}x{s['k']}x{s['n']}",
                              lambda s=s: gemm_curve([s], plan.gemm_dtypes)))
    if wanted("layer", skip, skipped):
        for name in plan.layer_models:
            for t in plan.layer_tokens:
                tasks.append(Task("layer", f"decoder layer {name} x{t} tokens",
                                  lambda n=name, t=t: [_layer_or_failure(n, t)]))
    if "nccl" in skip:
        skipped["nccl"] = "--skip nccl"
    elif n_gpus < 2:
        skipped["nccl"] = f"{n_gpus} GPU: collectives need 2 or more"
    else:
        tasks.append(Task("nccl", f"NCCL x{n_gpus}", lambda: nccl_busbw(plan.nccl_sizes, n_gpus)))
    facts["gemm_dtypes"] = list(plan.gemm_dtypes)
    return tasks


def layer_point(model_name: str, tokens: int, dtype: str = "bf16", *, layers: int = 4,
                iters: int = 5, device: str = "cuda", seq: int | None = None,
                checkpointing: bool = False) -> dict:
    """Forward and backward seconds of one real Hugging Face Llama decoder layer (the runner's
    model code, SDPA attention, causal) at `model_name`'s width and `tokens` = micro-batch x seq.

    `layers` stacked layers run back to back, as in training, so the Python thread runs ahead of
    the GPU; times are per layer. Forward runs with autograd recording (as a training forward);
    backward is the plain backward of the stack, or with `checkpointing` (non-reentrant, as the
    runner trains) recompute + backward. `seq` (default min(model context, tokens)) sets the
    sequence length, micro-batch = tokens // seq. CUDA: CUDA-event timed; CPU (tests and CPU
    hosts): wall clock."""
    import torch
    from transformers.models.llama import modeling_llama as hf

    from tierlab.profiles.load import load_model
    from tierlab.runner.model import llama_config

    mdl = load_model(model_name)
    seq = seq or min(mdl.seq_len, tokens)
    batch = max(1, tokens // seq)
    cfg = llama_config(mdl, seq_len=seq)
    cfg._attn_implementation = "sdpa"
    dt = getattr(torch, _DTYPES[dtype])
    torch.manual_seed(0)
    stack = torch.nn.ModuleList(hf.LlamaDecoderLayer(cfg, layer_idx=i) for i in range(layers))
    stack = stack.to(device=device, dtype=dt)
    rope = hf.LlamaRotaryEmbedding(cfg).to(device)
    x0 = torch.randn(batch, seq, mdl.hidden, device=device, dtype=dt)
    pos = torch.arange(seq, device=device).unsqueeze(0).expand(batch, -1)
    cos_sin = rope(x0, pos)

    def forward():
        x = x0.detach().requires_grad_(True)
        h = x
        for layer in stack:
            if checkpointing:
                h = torch.utils.checkpoint.checkpoint(layer, h, position_embeddings=cos_sin,
                                                      use_reentrant=False)
            else:
                h = layer(h, position_embeddings=cos_sin)
            h = h[0] if isinstance(h, tuple) else h
        return h

    cuda = device.startswith("cuda")

    def timed(fn):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            end.synchronize()
            return out, start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - t0

    fwd, bwd = [], []
    for i in range(iters + 2):                        # 2 warm-up iterations (cuBLAS heuristics)
        h, f_s = timed(forward)
        grad = torch.ones_like(h)
        _, b_s = timed(lambda: h.backward(grad))
        stack.zero_grad(set_to_none=True)
        if i >= 2:
            fwd.append(f_s / layers)
            bwd.append(b_s / layers)
    return {"model": model_name, "tokens": batch * seq, "micro_batch": batch, "seq": seq,
            "dtype": dtype, "layers": layers, "device": device, "checkpointing": checkpointing,
            "fwd_s": sorted(fwd)[len(fwd) // 2], "bwd_s": sorted(bwd)[len(bwd) // 2],
            "fwd_range_s": [min(fwd), max(fwd)], "bwd_range_s": [min(bwd), max(bwd)]}


def _layer_or_failure(model_name: str, tokens: int) -> dict:
    """One bf16 layer point; a point that cannot run (out of memory, a model the runner cannot
    build) is recorded with its reason and left out of the derivation."""
    import torch

    try:
        point = layer_point(model_name, tokens, "bf16")
        ckpt = layer_point(model_name, tokens, "bf16", checkpointing=True)
        return {**point, "ckpt_fwd_s": ckpt["fwd_s"], "ckpt_bwd_s": ckpt["bwd_s"]}
    except (RuntimeError, ValueError, torch.cuda.OutOfMemoryError) as e:
        log.warning("layer point %s x%d failed: %s", model_name, tokens, e)
        return {"model": model_name, "tokens": tokens, "failed": f"{type(e).__name__}: {e}"[:300]}
    finally:
        torch.cuda.empty_cache()


def _host_bound_median(points: list[dict], keys: tuple[str, ...], diff, what: str
                       ) -> tuple[float | None, str]:
    """(median of `diff`(point), clipped at 0, over the host-bound layer points that carry every
    key of `keys`, how): host-bound where the GPU cannot hide host work, plain forward <
    flops.HOST_BOUND_MARGIN x the fastest; None without such points."""
    import statistics

    from tierlab.sim import flops

    pts = [p for p in points if all(p.get(k, 0) > 0 for k in keys)]
    if not pts:
        return None, "no checkpointed layer point"
    host = [p for p, ok in zip(pts, flops.gpu_bound([p["fwd_s"] for p in pts])) if not ok]
    diffs = [max(0.0, diff(p)) for p in host]
    each = ", ".join(f"{p['model']} x{p['tokens']} {d * 1e3:.2f} ms" for p, d in zip(host, diffs))
    return statistics.median(diffs), (
        f"torch.utils.checkpoint (non-reentrant) {what} of the host-bound HF Llama layers "
        f"(< {flops.HOST_BOUND_MARGIN} x the fastest plain forward), median of: {each}")


def checkpoint_cost(points: list[dict]) -> tuple[float | None, str]:
    """(host seconds the activation-checkpoint wrapper adds per block forward, how): checkpointed
    minus plain forward over the host-bound layer points (`_host_bound_median`)."""
    return _host_bound_median(points, ("ckpt_fwd_s", "fwd_s"),
                              lambda p: p["ckpt_fwd_s"] - p["fwd_s"],
                              "forward minus plain forward")


def checkpoint_bwd_cost(points: list[dict]) -> tuple[float | None, str]:
    """(host seconds checkpointing adds to each block's backward beyond re-running its forward,
    how): checkpointed backward - plain backward - plain forward over the host-bound layer
    points (`_host_bound_median`)."""
    return _host_bound_median(points, ("ckpt_bwd_s", "bwd_s", "fwd_s"),
                              lambda p: p["ckpt_bwd_s"] - p["bwd_s"] - p["fwd_s"],
                              "backward minus plain backward minus plain forward")


def layer_curve(points: list[dict], gpu, precision: str = "bf16"
                ) -> tuple[list[list[float]], str]:
    """(layer_time points [[modelled fwd s, measured fwd s, measured bwd s], ...], how) from
    `layer_point`s on this GPU profile (its own GEMM curve models each point).

    The simulator scales a block's kernel model by the measured/modelled ratios of the GPU-bound
    points (flops.block_seconds); host-bound points are kept as data (their time is the Python
    dispatch floor, charged to cpu_host). `how` gives each GPU-bound point's error when predicted
    from the other points (leave-one-point-out): the check that it carries to unmeasured shapes."""
    from dataclasses import replace

    from tierlab.profiles.load import load_model
    from tierlab.sim import flops

    rows = []
    for p in points:
        mdl = replace(load_model(p["model"]), seq_len=p["seq"])
        model_s = flops.layer_forward_seconds(gpu, precision,
                                              flops.layer_forward(mdl, p["micro_batch"]))
        rows.append(([model_s, p["fwd_s"], p["bwd_s"]], f"{p['model']} x{p['tokens']}"))
    rows.sort(key=lambda r: r[0][0])
    floor = min(r[0][1] for r in rows)
    errs, host = [], []
    bound = flops.gpu_bound([r[0][1] for r in rows])
    for i, (pt, label) in enumerate(rows):
        if not bound[i]:
            host.append(label)
            continue
        others = tuple(tuple(r[0]) for j, r in enumerate(rows) if j != i)
        fwd, bwd = flops.kernel_ratios(others, pt[0])
        errs.append(f"{label} fwd {100 * (fwd * pt[0] / pt[1] - 1):+.0f}% "
                    f"bwd {100 * (bwd * 2 * pt[0] / pt[2] - 1):+.0f}%")
    how = (f"{len(rows)} points, modelled forward (GEMM curve + attention + HBM kernels at "
           f"{gpu.hbm_bandwidth_Bps / 1e9:.0f} GB/s) beside measured forward and backward per "
           f"layer; GPU-bound points' leave-one-point-out errors: {'; '.join(errs) or 'none'}"
           f"; host-bound (< {flops.HOST_BOUND_MARGIN} x the fastest, {floor * 1e3:.2f} ms): "
           f"{', '.join(host) or 'none'}")
    return [[float(f"{v:.4g}") for v in r[0]] for r in rows], how
