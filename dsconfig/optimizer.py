"""`optimizer.type` as DeepSpeed 0.19.8 builds it, and what tierlab models of it.

DeepSpeed 0.19.8 (deepspeed/runtime/config.py, engine.py, zero/utils.py):
- config.py:518-520: a name in DEEPSPEED_OPTIMIZERS (config.py:63-66) is lowercased; any other
  name is kept as written.
- engine.py:2486-2549 `_configure_basic_optimizer`: adam/adamw -> FusedAdam, DeepSpeedCPUAdam
  when the optimizer is offloaded (engine.py:2384 `get_optimizer_configuration`), torch's
  Adam/AdamW with `params.torch_adam`; adagrad -> DeepSpeedCPUAdagrad offloaded, else
  torch.optim.Adagrad; lamb -> FusedLamb (a CUDA kernel, offloaded or not); lion ->
  DeepSpeedCPULion offloaded, else FusedLion; muadam/muadamw/musgd -> mup's; muon ->
  MuonWithAuxAdam; any other name -> `getattr(torch.optim, name)` (engine.py:2548), an
  AttributeError where torch.optim has no such class (OneBitAdam, ZeroOneAdam, OneBitLamb,
  PagedAdamW: DeepSpeed 0.19.8 builds none of them).
- engine.py:2481: `params.max_grad_norm` is refused (gradient_clipping is the key).
- engine.py:2297-2301 `_do_optimizer_sanity_check`: with ZeRO (stage >= 1) a class outside
  zero/utils.py:45 ZERO_SUPPORTED_OPTIMIZERS needs `zero_allow_untested_optimizer: true`.

tierlab times Adam's step (FusedAdam on the GPU, DeepSpeedCPUAdam on the host) and sizes its two
fp32 states per parameter; another optimizer DeepSpeed builds is refused by name with its state
count, never costed as Adam.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

DEEPSPEED_OPTIMIZERS = ("adagrad", "adam", "adamw", "lamb", "muadam", "muadamw", "musgd", "lion",
                        "muon")
"""runtime/config.py:63-66 DEEPSPEED_OPTIMIZERS: the names DeepSpeed builds itself."""
TORCH_OPTIMIZERS = ("Adafactor", "Adadelta", "Adagrad", "Adam", "Adamax", "AdamW", "ASGD", "LBFGS",
                    "Muon", "NAdam", "RAdam", "RMSprop", "Rprop", "SGD", "SparseAdam")
"""torch.optim's optimizer classes (torch 2.x `torch.optim.__all__` less its helpers): the names
engine.py:2548 finds by `getattr(torch.optim, name)`; tests hold it equal to the installed torch."""
ZERO_SUPPORTED = ("torch.optim.Adam", "torch.optim.AdamW", "FusedAdam", "DeepSpeedCPUAdam",
                  "ZenFlowCPUAdam", "torch.optim.Adagrad", "DeepSpeedCPUAdagrad",
                  "DeepSpeedCPULion", "FusedLion", "MuonWithAuxAdam")
"""zero/utils.py:45-48 ZERO_SUPPORTED_OPTIMIZERS (+ MuonWithAuxAdam, added at :71-74)."""
MODELLED = ("FusedAdam", "DeepSpeedCPUAdam", "torch.optim.Adam", "torch.optim.AdamW")
"""The classes whose step tierlab times: Adam's (torch's only where it runs on the GPU)."""


@dataclass(frozen=True)
class Built:
    """What DeepSpeed 0.19.8 builds for one optimizer block."""

    name: str
    """The name as DeepSpeed keeps it: 'adamw' (lowercased) or 'SGD' (torch.optim's)."""
    cls: str
    """The class it builds: 'DeepSpeedCPUAdam', 'FusedLamb', 'torch.optim.SGD', ..."""
    fp32_states: int
    """Optimizer state tensors per parameter (fp32): Adam's exp_avg and exp_avg_sq = 2."""


def fp32_states(name: str, params: Mapping[str, Any]) -> int:
    """State tensors per parameter the optimizer keeps: Adam/AdamW/Lamb 2 (exp_avg, exp_avg_sq),
    Adagrad 1 (sum), Lion 1 (exp_avg), SGD 1 with momentum else 0, RMSprop 1 (+1 momentum,
    +1 centered), Muon 1 (momentum_buffer; its non-matrix parameters take Adam's 2)."""
    if name in ("adam", "adamw", "lamb", "muadam", "muadamw", "Adam", "AdamW", "NAdam", "RAdam",
                "Adamax"):
        return 2
    if name in ("SGD", "musgd"):
        return 1 if params.get("momentum", 0) else 0
    if name == "RMSprop":
        return 1 + bool(params.get("momentum", 0)) + bool(params.get("centered", False))
    if name in ("Adadelta",):
        return 2
    return 1


def built(block: Mapping[str, Any], offloaded: bool) -> Built | None:
    """The class DeepSpeed 0.19.8 builds for `block` (an optimizer block with a type), or None
    where it builds none (the name is neither its own nor torch.optim's)."""
    raw = block["type"]
    name = raw.lower() if raw.lower() in DEEPSPEED_OPTIMIZERS else raw
    params = block.get("params") or {}
    torch_adam = bool(params.get("torch_adam", False))
    cls = {"adam": "torch.optim.Adam" if torch_adam else
           "DeepSpeedCPUAdam" if offloaded else "FusedAdam",
           "adamw": "torch.optim.AdamW" if torch_adam else
           "DeepSpeedCPUAdam" if offloaded else "FusedAdam",
           "adagrad": "DeepSpeedCPUAdagrad" if offloaded else "torch.optim.Adagrad",
           "lamb": "FusedLamb", "lion": "DeepSpeedCPULion" if offloaded else "FusedLion",
           "muadam": "mup.MuAdam", "muadamw": "mup.MuAdamW", "musgd": "mup.MuSGD",
           "muon": "MuonWithAuxAdam"}.get(name)
    if cls is None:
        if name not in TORCH_OPTIMIZERS:
            return None
        cls = f"torch.optim.{name}"
    return Built(name, cls, fp32_states(name, params))


def judge(cfg: Mapping[str, Any], zero_stage: int, offload_device: str) -> list[str]:
    """Why DeepSpeed 0.19.8 refuses, or tierlab does not model, the optimizer block of `cfg`
    (the top-level config, for zero_allow_untested_optimizer): one line per problem, [] when it
    is an Adam tierlab times. `offload_device`: offload_optimizer.device at stage >= 1."""
    block = cfg.get("optimizer")
    if not isinstance(block, Mapping) or "type" not in block:
        return []
    raw, params = block["type"], block.get("params") or {}
    if not isinstance(raw, str):
        return [f"optimizer.type={raw!r}: DeepSpeed 0.19.8 needs a name (runtime/config.py:519 "
                "calls .lower() on it)"]
    out = []
    if isinstance(params, Mapping) and "max_grad_norm" in params:
        out.append("optimizer.params.max_grad_norm: DeepSpeed 0.19.8 refuses it (engine.py:2481); "
                   "set gradient_clipping instead")
    offloaded = zero_stage >= 1 and offload_device in ("cpu", "nvme")
    b = built(block, offloaded)
    if b is None:
        near = [n for n in (*DEEPSPEED_OPTIMIZERS, *TORCH_OPTIMIZERS) if n.lower() == raw.lower()]
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        return out + [f"optimizer.type={raw!r}: DeepSpeed 0.19.8 builds no optimizer of that name "
                      f"(its own: {', '.join(DEEPSPEED_OPTIMIZERS)}; else torch.optim's class by "
                      f"exact name, engine.py:2548){hint}"]
    if zero_stage >= 1 and b.cls not in ZERO_SUPPORTED and not cfg.get(
            "zero_allow_untested_optimizer", False):
        return out + [f"optimizer.type={raw!r}: DeepSpeed 0.19.8 builds {b.cls}, which ZeRO "
                      "refuses unless zero_allow_untested_optimizer is true (engine.py:2298)"]
    if b.cls not in MODELLED or offloaded and b.cls.startswith("torch.optim."):
        where = " on the host (offload_optimizer)" if offloaded else ""
        # torch's Adam on the host (params.torch_adam): already Adam, the switch is the fix
        fix = ("set optimizer.params.torch_adam false (DeepSpeedCPUAdam) to simulate"
               if b.name in ("adam", "adamw") else "use Adam or AdamW to simulate")
        out.append(f"optimizer.type={raw!r}: DeepSpeed 0.19.8 builds {b.cls}{where} "
                   f"({b.fp32_states} fp32 state(s) per parameter), but tierlab times and sizes "
                   f"only Adam's step (FusedAdam, DeepSpeedCPUAdam: 2 states); {fix}")
    return out
