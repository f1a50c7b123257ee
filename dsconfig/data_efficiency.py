"""`data_efficiency` as DeepSpeed 0.19.8 reads it, and what tierlab models of it: nothing, so a
feature that changes what a step computes is refused by its key, never simulated as a full step.

DeepSpeed 0.19.8 (deepspeed/runtime/data_pipeline/config.py, engine.py):
- `data_routing.random_ltd.enabled` (config.py:163 get_random_ltd_enabled, read whatever
  `data_efficiency.enabled` and `data_routing.enabled` say; engine.py:1420 random_ltd_enabled):
  Random-LTD drops tokens in the layers `convert_to_random_ltd` wrapped
  (data_routing/helper.py), the kept count growing on a schedule (engine.py:2942 update_seq):
  fewer FLOPs in those layers than the sequence length implies.
- `data_sampling.curriculum_learning.enabled` (config.py:115; engine.py:1414): the data sampler
  DeepSpeed builds (deepspeed_io) orders and truncates samples by difficulty, the sequence
  length rising on a schedule (metric seqlen_truncate / seqlen_reshape).
The legacy top-level `curriculum_learning` is refused by DeepSpeed itself (config.py:111).
"""
from __future__ import annotations

from typing import Any, Mapping

NOT_MODELLED = ("tierlab simulates every step at the full sequence length; remove it to "
                "simulate that")


def _on(block: Any, *path: str) -> bool:
    for key in path:
        block = block.get(key) if isinstance(block, Mapping) else None
    return block is True


def refusals(cfg: Mapping[str, Any]) -> list[str]:
    """One line per data_efficiency feature of `cfg` that changes the work of a step."""
    de = cfg.get("data_efficiency")
    out = []
    if _on(de, "data_routing", "random_ltd", "enabled"):
        out.append("data_efficiency.data_routing.random_ltd.enabled=true: DeepSpeed drops tokens "
                   "in the layers convert_to_random_ltd wraps (Random-LTD), fewer FLOPs than the "
                   f"sequence length implies; {NOT_MODELLED}")
    if _on(de, "data_sampling", "curriculum_learning", "enabled"):
        out.append("data_efficiency.data_sampling.curriculum_learning.enabled=true: DeepSpeed's "
                   "data sampler truncates samples on a difficulty schedule (curriculum "
                   f"learning); {NOT_MODELLED}")
    return out
