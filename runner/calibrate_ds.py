"""DeepSpeed's host-side costs, measured on this host through DeepSpeed's own code paths.

A training step of an offloaded model is partly host-bound: Python launches each submodule's
kernels, ZeRO-3's pre/post hooks fetch and release its parameters, ZeRO-1/2 copy each gradient
to the CPU one parameter at a time. These costs scale with the number of submodules and
parameter tensors, not with their size, so they are isolated on *narrow* Llama models (hidden
512: every GEMM is microseconds on any GPU) at two depths: the per-phase time difference divided
by the extra submodules (or parameter tensors) is the cost of one event, with the GPU work and
fixed costs divided out.

Each point is a real `tierlab run` worker (runner/train.py `run`, --breakdown) in its own process
(DeepSpeed keeps global state per process), so every path is DeepSpeed 0.19.8's:
- stage 0 (bf16, FP16_Optimizer): kernel dispatch per submodule use, forward and backward;
  optimizer host loop per parameter tensor (fp16/fused_optimizer.py `step`);
- stage 3 without offload: + the pre/post hooks (parameter_offload.py
  `_register_deepspeed_module`, partitioned_param_coordinator.py `fetch_sub_module` /
  `release_sub_module`) with parameters resident on the GPU;
- stage 3 with parameters and optimizer on the CPU, pinned and pageable (`pin_memory: false`):
  + the per-parameter `.to(cuda)` of an offloaded partition (partition_parameters.py
  `_all_gather` -> `param.ds_tensor.to(device)`), the gradient partition's D2H at the boundary
  (stage3.py `partition_grads`), the optimizer's per-sub-group bookkeeping;
- stage 2 with the optimizer on the CPU, pinned and pageable: the per-parameter gradient copy
  (stage_1_and_2.py `copy_grads_in_partition`), and with 2 micro-steps the accumulation path
  (`async_accumulate_grad_in_cpu_via_gpu`) per parameter and micro-step.
`calibrate_profile.software_document` turns the points into a software profile (slopes).
"""
from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

DEPTHS = (2, 10)
"""Decoder layers of the two narrow models; the slope between them is the per-event cost."""

NARROW = {"hidden": 512, "ffn": 1408, "n_heads": 8, "n_kv_heads": 8, "vocab": 512}
"""The narrow Llama: every projection (512 x 512 = 262,144 elements) is above ZeRO-3's default
persistence threshold (1e5) and every RMSNorm (512) below it, as in TinyLlama or Llama-3B, so
the same parameters are fetched and the same stay resident."""

SEQ, MICRO_BATCH = 64, 1

_Z3 = {"stage": 3, "stage3_param_persistence_threshold": 1e5, "overlap_comm": True,
       "contiguous_gradients": True}
_CPU = {"device": "cpu", "pin_memory": True}
_PAGEABLE = {"device": "cpu", "pin_memory": False}


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One DeepSpeed configuration whose host costs are measured."""

    name: str
    zero: dict
    """The zero_optimization block."""
    grad_accum: int = 1
    what: str = ""


VARIANTS = (
    Variant(name="stage0", zero={"stage": 0},
            what="kernel dispatch per submodule use; FP16_Optimizer host loop per tensor"),
    Variant(name="zero3", zero=dict(_Z3),
            what="ZeRO-3 hooks with parameters resident on the GPU"),
    Variant(name="zero3_offload", zero={**_Z3, "offload_param": dict(_CPU),
                                        "offload_optimizer": dict(_CPU)},
            what="ZeRO-3 hooks + fetch of CPU-resident parameters (pinned)"),
    Variant(name="zero3_offload_pageable", zero={**_Z3, "offload_param": dict(_PAGEABLE),
                                                 "offload_optimizer": dict(_PAGEABLE)},
            what="the same with pin_memory false (pageable copies)"),
    Variant(name="zero3_offload_gas2", zero={**_Z3, "offload_param": dict(_CPU),
                                             "offload_optimizer": dict(_CPU)}, grad_accum=2,
            what="ZeRO-3 offload, 2 micro-steps: the non-boundary micro-step"),
    Variant(name="zero2", zero={"stage": 2, "overlap_comm": False, "contiguous_gradients": True},
            what="ZeRO-1/2 optimizer step on the GPU: per-tensor norm and bookkeeping"),
    Variant(name="zero2_offload", zero={"stage": 2, "offload_optimizer": dict(_CPU),
                                        "overlap_comm": False, "contiguous_gradients": True},
            what="copy_grads_in_partition per parameter (pinned)"),
    Variant(name="zero2_offload_pageable", zero={"stage": 2, "offload_optimizer": dict(_PAGEABLE),
                                                 "overlap_comm": False,
                                                 "contiguous_gradients": True},
            what="copy_grads_in_partition per parameter (pageable)"),
    Variant(name="zero2_offload_gas2", zero={"stage": 2, "offload_optimizer": dict(_CPU),
                                             "overlap_comm": False, "contiguous_gradients": True},
            grad_accum=2, what="async_accumulate_grad_in_cpu_via_gpu per parameter and micro-step"),
)
VARIANT_NAMES = tuple(v.name for v in VARIANTS)


def narrow_model(layers: int) -> dict:
    """The narrow Llama of `layers` decoder layers as a tierlab Model dict."""
    from tierlab.profiles.schema import Model

    return asdict(Model(name=f"narrow-llama-{layers}L", n_layers=layers, seq_len=SEQ,
                        max_seq_len=SEQ, gated_mlp=True, tie_embeddings=False, norm="rmsnorm",
                        **NARROW))


def ds_config(variant: Variant, precision: str) -> dict:
    """The complete ds_config of one variant (DeepSpeed's own keys)."""
    cfg = {"train_micro_batch_size_per_gpu": MICRO_BATCH,
           "gradient_accumulation_steps": variant.grad_accum,
           "train_batch_size": MICRO_BATCH * variant.grad_accum,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95],
                                                     "eps": 1e-8, "weight_decay": 0.0}},
           "gradient_clipping": 1.0, "zero_optimization": json.loads(json.dumps(variant.zero)),
           "steps_per_print": 10**9, "wall_clock_breakdown": False}
    cfg["bf16" if precision == "bf16" else "fp16"] = {"enabled": True}
    return cfg


def run_point(variant: Variant, layers: int, *, steps: int, warmup: int, precision: str,
              timeout_s: float, workdir: Path) -> dict:
    """Train the narrow model with `variant` in a worker process; one point (or a failure)."""
    from tierlab.records.measurement import load_measurement
    from tierlab.runner.train import RunSpec

    out = workdir / f"{variant.name}-{layers}L"
    spec = RunSpec(model=narrow_model(layers), ds_config=ds_config(variant, precision),
                   precision=precision, micro_batch=MICRO_BATCH, grad_accum=variant.grad_accum,
                   seq=SEQ, steps=steps, warmup_steps=warmup, out_dir=str(out), breakdown=True,
                   checkpointing=False, label=f"calibrate {variant.name}")
    spec_path = workdir / f"{variant.name}-{layers}L.json"
    spec_path.write_text(spec.to_json())
    point = {"variant": variant.name, "layers": layers, "grad_accum": variant.grad_accum,
             "steps": steps, "warmup_steps": warmup}
    try:
        proc = subprocess.run([sys.executable, "-m", "tierlab.runner.train", "--spec",
                               str(spec_path)], capture_output=True, text=True,
                              timeout=timeout_s, env=_worker_env())
    except subprocess.TimeoutExpired:
        return {**point, "status": "failed", "reason": f"timeout after {timeout_s:.0f} s"}
    try:
        m = load_measurement(out)
    except (OSError, ValueError) as e:
        tail = (proc.stderr or "").strip().splitlines()[-1:] or [str(e)]
        return {**point, "status": "failed", "reason": tail[0][:300]}
    if m.status != "ok":
        return {**point, "status": m.status, "reason": (m.reason or "")[:300]}
    return {**point, "status": "ok", **phase_medians(m.steps, warmup)}


def _worker_env() -> dict:
    """A single-rank worker: its own port, the caller's threads."""
    from tierlab.runner.launch import free_port

    env = dict(os.environ)
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1",
               LOCAL_RANK="0")
    return env


def phase_medians(steps, warmup: int) -> dict:
    """Median forward/backward/optimizer seconds of the steady steps (each summed over the
    micro-steps of its optimizer step) and their spread (min, max)."""
    out: dict = {}
    steady = [s for s in steps if s.step >= warmup]
    for key in ("forward_s", "backward_s", "optimizer_s"):
        vals = [getattr(s, key) for s in steady if getattr(s, key) is not None]
        if vals:
            out[key] = statistics.median(vals)
            out[key.replace("_s", "_range_s")] = [min(vals), max(vals)]
    out["measured_steps"] = len(steady)
    return out


def host_cost_points(variants=VARIANTS, depths=DEPTHS, *, steps: int = 8, warmup: int = 3,
                     precision: str = "bf16", timeout_s: float = 240.0) -> list[dict]:
    """Every (variant, depth) point; failed points are kept with their reason."""
    with tempfile.TemporaryDirectory(prefix="tierlab-dscal-") as tmp:
        return [run_point(v, d, steps=steps, warmup=warmup, precision=precision,
                          timeout_s=timeout_s, workdir=Path(tmp))
                for v in variants for d in depths]


def variant_named(name: str) -> Variant:
    for v in VARIANTS:
        if v.name == name:
            return v
    raise KeyError(name)
