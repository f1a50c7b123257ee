"""Parallelism a ds_config asks DeepSpeed 0.19.8 for beyond data parallelism: tierlab simulates
ZeRO data parallelism only, so each is refused by its key, never simulated as pure DP.

- `tensor_parallel.autotp_size` (runtime/tensor_parallel/config.py:45, default 0 = off): AutoTP
  training splits every linear layer over that many ranks.
- `sequence_parallel_size` (runtime/config.py:468: the data-parallel world is the world size over
  it; engine.py:2172 sequence_parallel_size > 1): Ulysses/AutoSP sequence parallelism.
- `compile.deepcompile` (compile/config.py:15) and `compile.passes` autosp/autotp
  (compile/config.py:9, engine.py:1591-1601): DeepCompile replaces ZeRO's hooks with compiled
  passes, AutoSP/AutoTP among them.
- `pipeline.stages` (runtime/config.py:272-285, default "auto": the PipelineModule's): pipeline
  parallelism.
- `expert_parallel` (runtime/config.py:171, module_inject/auto_ep_config.py: enabled,
  autoep_size): AutoEP expert parallelism.
"""
from __future__ import annotations

from typing import Any, Mapping

NOT_MODELLED = "tierlab simulates ZeRO data parallelism only; remove it to simulate that"


def _more_than_one(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 1) or (
        isinstance(value, str) and value.strip().isdigit() and int(value) > 1)


def refusals(cfg: Mapping[str, Any]) -> list[str]:
    """One line per parallelism key of `cfg` that asks for more than data parallelism."""
    out = []
    tp = cfg.get("tensor_parallel")
    if isinstance(tp, Mapping):
        if _more_than_one(tp.get("autotp_size")):
            out.append(f"tensor_parallel.autotp_size={tp['autotp_size']!r} asks for AutoTP "
                       f"tensor parallelism; {NOT_MODELLED}")
        inner = tp.get("tp") if isinstance(tp.get("tp"), Mapping) else tp.get("tensor_parallel")
        if isinstance(inner, Mapping) and _more_than_one(inner.get("tp_size")):
            out.append(f"tensor_parallel.tp.tp_size={inner['tp_size']!r} asks for tensor "
                       f"parallelism; {NOT_MODELLED}")
    if _more_than_one(cfg.get("sequence_parallel_size")):
        out.append(f"sequence_parallel_size={cfg['sequence_parallel_size']!r} asks for sequence "
                   f"parallelism (Ulysses/AutoSP); {NOT_MODELLED}")
    comp = cfg.get("compile")
    if isinstance(comp, Mapping):
        passes = comp.get("passes") or []
        asked = [p for p in passes if p in ("autosp", "autotp")] if isinstance(passes, list) else []
        if asked:
            out.append(f"compile.passes={passes!r} asks for {' and '.join(asked)} (DeepCompile's "
                       f"sequence/tensor parallelism); {NOT_MODELLED}")
        if comp.get("deepcompile") is True:
            out.append("compile.deepcompile=true replaces ZeRO's hooks with DeepCompile's "
                       "compiled passes, which tierlab does not model; remove it to simulate "
                       "ZeRO as DeepSpeed runs it without")
    pipe = cfg.get("pipeline")
    if isinstance(pipe, Mapping) and _more_than_one(pipe.get("stages")):
        out.append(f"pipeline.stages={pipe['stages']!r} asks for pipeline parallelism; "
                   f"{NOT_MODELLED}")
    ep = cfg.get("expert_parallel")
    if isinstance(ep, Mapping) and (ep.get("enabled") is True or _more_than_one(
            ep.get("autoep_size"))):
        out.append(f"expert_parallel={dict(ep)!r} asks for AutoEP expert parallelism; "
                   f"{NOT_MODELLED}")
    return out
