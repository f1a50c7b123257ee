"""DeepSpeed's own verdict on a ds_config, for the tests (not a test module): the file opened as
DeepSpeed opens it (hjson, duplicate keys refused), "auto" filled as the HF Trainer fills it with
its defaults (per_device_train_batch_size 8, gradient_accumulation_steps 1, no --fp16/--bf16,
max_grad_norm 1.0, a model of hidden size 4096), then deepspeed.runtime.config.DeepSpeedConfig
with the world size given (dist.get_rank/get_world_size stubbed: no process group on a CPU
test host)."""
import json
from dataclasses import dataclass
from typing import Any

HIDDEN = 4096
MICRO = 8


def hf_filled(cfg: dict, gpus: int) -> dict:
    """The dict the HF Trainer hands DeepSpeed: "auto" filled (batch 8 per GPU, no fp16/bf16
    flag, max_grad_norm 1, hidden 4096)."""
    cfg = json.loads(json.dumps(cfg))
    for key, value in (("train_micro_batch_size_per_gpu", MICRO),
                       ("gradient_accumulation_steps", 1), ("train_batch_size", MICRO * gpus),
                       ("gradient_clipping", 1.0)):
        if cfg.get(key) == "auto":
            cfg[key] = value
    if "train_batch_size" not in cfg and "train_micro_batch_size_per_gpu" not in cfg:
        cfg["train_micro_batch_size_per_gpu"] = MICRO
    for block in ("fp16", "bf16"):
        if isinstance(cfg.get(block), dict) and cfg[block].get("enabled") == "auto":
            cfg[block]["enabled"] = False
    zero = cfg.get("zero_optimization") or {}
    if zero.get("reduce_bucket_size") == "auto":
        zero["reduce_bucket_size"] = HIDDEN * HIDDEN
    if zero.get("stage") == 3:
        for key, value in (("stage3_prefetch_bucket_size", int(0.9 * HIDDEN * HIDDEN)),
                           ("stage3_param_persistence_threshold", 10 * HIDDEN)):
            if zero.get(key) == "auto":
                zero[key] = value
    return cfg


def open_as_deepspeed(path) -> dict:
    import hjson
    from deepspeed.runtime.config_utils import dict_raise_error_on_duplicate_keys

    with open(path) as f:
        return hjson.load(f, object_pairs_hook=dict_raise_error_on_duplicate_keys)


@dataclass(frozen=True)
class Verdict:
    """DeepSpeedConfig's verdict: `error` (its message) or the effective values tierlab models."""

    error: str | None = None
    values: dict[str, Any] | None = None


def _device(block) -> str:
    device = getattr(block, "device", "none") if block is not None else "none"
    return getattr(device, "value", device)


def effective(ds) -> dict[str, Any]:
    """What a DeepSpeedConfig resolved, in the terms tierlab's Strategy keeps them."""
    z, stage = ds.zero_config, ds.zero_optimization_stage
    precision = ("fp16" if ds.float16_config.enabled else
                 "bf16" if ds.bfloat16_config.enabled else "fp32")
    return dict(stage=stage,
                offload_param=_device(z.offload_param) if stage == 3 else "none",
                offload_optimizer=_device(z.offload_optimizer) if stage >= 1 else "none",
                reduce_bucket_size=int(z.reduce_bucket_size),
                allgather_bucket_size=int(z.allgather_bucket_size),
                overlap_comm=bool(z.overlap_comm),
                prefetch_bucket_size=int(z.prefetch_bucket_size) if stage == 3 else None,
                persistence_threshold=int(z.param_persistence_threshold) if stage == 3 else None,
                max_live_parameters=int(z.max_live_parameters) if stage == 3 else None,
                sub_group_size=int(z.sub_group_size) if stage == 3 else None,
                gradient_clipping=float(ds.gradient_clipping), precision=precision,
                batch=(ds.train_batch_size, ds.train_micro_batch_size_per_gpu,
                       ds.gradient_accumulation_steps),
                optimizer=ds.optimizer_name)


def ranks_seen_by_deepspeed(monkeypatch, ranks: int):
    """deepspeed.runtime.config with `ranks` ranks and this process rank 0, as DeepSpeedConfig
    reads them (dist.get_rank / get_world_size), without a process group: the module, whose
    DeepSpeedConfig then judges a config as `ranks` GPUs would."""
    from deepspeed.runtime import config as dsc

    monkeypatch.setattr(dsc.dist, "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(dsc.dist, "get_world_size", lambda *a, **k: ranks)
    return dsc


def deepspeed_verdict(cfg: dict, gpus: int, monkeypatch) -> Verdict:
    """DeepSpeedConfig on the HF-filled config, `gpus` ranks."""
    dsc = ranks_seen_by_deepspeed(monkeypatch, gpus)
    try:
        ds = dsc.DeepSpeedConfig(hf_filled(cfg, gpus))
    except Exception as e:   # noqa: BLE001 - DeepSpeed raises ValidationError, its own, asserts
        return Verdict(error=" ".join(str(e).split()))
    return Verdict(values=effective(ds))


def deepspeed_builds_optimizer(name: str) -> bool:
    """Whether deepspeed.initialize 0.19.8 builds an optimizer of this `optimizer.type`: one of
    its own (runtime/config.py DEEPSPEED_OPTIMIZERS, lowercased) or torch.optim's class of that
    exact name (engine.py `_configure_basic_optimizer`, getattr(torch.optim, name))."""
    import torch
    from deepspeed.runtime.config import DEEPSPEED_OPTIMIZERS

    return name.lower() in DEEPSPEED_OPTIMIZERS or isinstance(getattr(torch.optim, name, None),
                                                              type)
