"""What PyTorch FSDP2 runs: the runner's model (runner/model.py) under `fully_shard` per decoder
layer and at the root, optionally with `CPUOffloadPolicy(pin_memory=True)`, trained by torch's
AdamW on the (CPU-resident, when offloaded) fp32 shards. runner/train.py drives it like a
DeepSpeed engine (`engine(...)`, `engine.backward(loss)`, `engine.step()`), so the loop, the
data, the probes and the Measurement are the DeepSpeed runner's own.

What torch 2.13 does (torch/distributed/fsdp/_fully_shard/):
- `_fsdp_param.py` FSDPParam.__init__: `offload_to_cpu` under CPUOffloadPolicy; the sharded
  fp32 parameter is copied to the CPU and `.pin_memory()`'d (`_init_sharded_param`).
- `_fsdp_param.py` `all_gather_inputs`: with `offload_to_cpu` each shard is copied
  `.to(device, non_blocking=True)` then cast to `param_dtype` (bf16) before the all-gather.
- `_fsdp_collectives.py` `foreach_reduce`: after the reduce-scatter (in `reduce_dtype`, fp32)
  the grad shard is copied `.to(torch.device("cpu"), non_blocking=...)` on the post-reduce
  stream, an event recorded (`grad_offload_event`), waited in `finalize_backward`
  (`_fsdp_param_group.py`).
- The optimizer then runs on the CPU shards. torch/optim/adam.py: with foreach and fused both
  None, `_default_to_fused_or_foreach(params, differentiable, use_fused=False)` decides;
  `foreach` needs every param on a device of `_get_foreach_kernels_supported_devices()`
  (cuda, xpu, mtia, privateuse1: not cpu), so CPU params get `_single_tensor_adam`, a Python
  loop over the parameters (`fused=True` would pick `_fused_adam`, which cpu supports). This
  runner uses the default users get and records which one ran (`adam_impl`).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from tierlab.errors import ConfigError

from tierlab.sim.fsdp2 import ENGINES  # noqa: F401 (one home: the engines run and sim know)

RUN_KEYS = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size",
            "bf16", "fp16", "optimizer", "gradient_clipping")
"""The ds_config keys an FSDP2 run keeps (batch, precision, AdamW's hyper-parameters, clipping);
zero_optimization and the rest are DeepSpeed's and are dropped from its record."""


def fsdp2_config(engine: str, precision: str, *, pin_memory: bool = True) -> dict:
    """The FSDP2 settings of an `engine` (recorded in the Measurement's run.fsdp)."""
    if engine not in ENGINES[1:]:
        raise ConfigError(f"--engine {engine}: not an FSDP2 engine (one of {', '.join(ENGINES)})")
    if precision not in ("bf16", "fp32"):
        raise ConfigError(f"--engine {engine}: precision {precision}: FSDP2 runs here in bf16 "
                          "(MixedPrecisionPolicy param_dtype) or fp32; fp16 needs a loss scaler")
    return {"offload": engine == "fsdp2-offload", "pin_memory": pin_memory and
            engine == "fsdp2-offload", "param_dtype": precision, "reduce_dtype": "fp32",
            "reshard_after_forward": True, "wrap": "each decoder layer + root",
            "optimizer": "torch.optim.AdamW (foreach/fused left to torch's default)"}


def fsdp2_spec(spec, engine: str):
    """`spec` (a runner.train.RunSpec) trained by FSDP2: its ds_config cut to RUN_KEYS, its
    engine and fsdp settings set."""
    if engine == "deepspeed":
        return spec
    cfg = {k: v for k, v in spec.ds_config.items() if k in RUN_KEYS}
    return replace(spec, ds_config=cfg, engine=engine,
                   fsdp=fsdp2_config(engine, spec.precision))


class Fsdp2Engine:
    """The DeepSpeed-engine surface runner.train.train_steps drives: forward, backward (the loss
    divided by the accumulation steps, as DeepSpeed does), step (clip + AdamW + zero_grad at the
    accumulation boundary)."""

    def __init__(self, net, optimizer, device, *, grad_accum: int, clip: float | None):
        self.net, self.optimizer, self.device = net, optimizer, device
        self.grad_accum, self.clip, self.micro_steps = grad_accum, clip, 0

    def __call__(self, **kw):
        return self.net(**kw)

    def backward(self, loss) -> None:
        (loss / self.grad_accum if self.grad_accum > 1 else loss).backward()

    def step(self) -> None:
        import torch

        self.micro_steps += 1
        if self.micro_steps % self.grad_accum:
            return
        if self.clip:
            torch.nn.utils.clip_grad_norm_(self.net.parameters(), self.clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def adam_impl(params) -> str:
    """Which of torch's AdamW implementations runs on `params` with foreach/fused left None
    (torch/optim/adam.py: `_default_to_fused_or_foreach(..., use_fused=False)`)."""
    from torch.optim.optimizer import _default_to_fused_or_foreach

    _, foreach = _default_to_fused_or_foreach(list(params), False, use_fused=False)
    return "multi_tensor (foreach)" if foreach else "single_tensor"


def _shard(net, fsdp: dict) -> None:
    """fully_shard each decoder layer, then the root (embedding, final norm, lm_head)."""
    import torch
    from torch.distributed.fsdp import (CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy,
                                        fully_shard)

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}
    kw = {"mp_policy": MixedPrecisionPolicy(param_dtype=dtype[fsdp["param_dtype"]],
                                            reduce_dtype=dtype[fsdp["reduce_dtype"]]),
          "offload_policy": (CPUOffloadPolicy(pin_memory=fsdp["pin_memory"])
                             if fsdp["offload"] else OffloadPolicy()),
          "reshard_after_forward": fsdp["reshard_after_forward"]}
    for layer in net.model.layers:
        fully_shard(layer, **kw)
    fully_shard(net, **kw)


def setup_fsdp2(spec, local_rank: int = 0) -> tuple[Fsdp2Engine, int]:
    """init_process_group (nccl on CUDA, gloo on the CPU), the runner's model built in fp32,
    fully_shard'ed per `spec.fsdp`, torch AdamW with the ds_config's hyper-parameters; returns
    (engine, n_params). engine.record holds what ran (adam_impl, backend)."""
    import torch
    import torch.distributed as dist

    from tierlab.profiles.schema import Model
    from tierlab.runner.model import build_model, count_params

    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend, device_id=(torch.device("cuda", local_rank)
                                                    if cuda else None))
    net = build_model(Model(**spec.model), ds_config={}, precision=spec.precision,
                      model_path=spec.model_path, checkpointing=spec.checkpointing,
                      seed=spec.seed, seq_len=spec.seq)
    n_params = count_params(net)
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if not spec.fsdp["offload"]:
        net.to(device)
    fsdp = {**spec.fsdp, "pin_memory": spec.fsdp["pin_memory"] and cuda}   # no pinning on a
    _shard(net, fsdp)                                 # CPU-only host (torch needs an accelerator)
    params = [p for p in net.parameters() if p.requires_grad]
    opt_cfg = (spec.ds_config.get("optimizer") or {}).get("params") or {}
    opt = torch.optim.AdamW(params, **_adamw_kwargs(opt_cfg))
    engine = Fsdp2Engine(net, opt, device, grad_accum=spec.grad_accum,
                         clip=spec.ds_config.get("gradient_clipping"))
    engine.record = {"adam_impl": adam_impl(params), "backend": backend,
                     "pin_memory_applied": fsdp["pin_memory"],
                     "param_device": params[0].device.type, "param_pinned":
                     bool(params[0].to_local().is_pinned()) if hasattr(params[0], "to_local")
                     else None}
    return engine, n_params


def _adamw_kwargs(params: dict[str, Any]) -> dict:
    """torch AdamW's keyword arguments from the ds_config optimizer params (DeepSpeed names)."""
    out = {k: params[k] for k in ("lr", "eps", "weight_decay") if k in params}
    if "betas" in params:
        out["betas"] = tuple(params["betas"])
    return out
