"""Runner-side ds_config resolution on top of `tierlab.sim.strategy` (which does all parsing):
Strategy -> the exact dict handed to deepspeed.initialize, plus the swap paths it uses."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Mapping

from tierlab.sim.strategy import Strategy, to_ds_config

# DeepSpeed creates its swap files under <nvme_path>/zero_stage_3 (stage3.py
# _configure_tensor_swapping; partitioned_param_swapper.py _configure_aio)
SWAP_SUBDIR = "zero_stage_3"


def runner_ds_config(strategy: Strategy) -> dict:
    """The resolved ds_config for a real run: every modelled key explicit (to_ds_config), the
    runner's logging settings, and nothing tierlab-private (keys starting with '_')."""
    cfg = to_ds_config(strategy)
    cfg.setdefault("steps_per_print", 1_000_000_000)   # DeepSpeed's own per-step prints off
    cfg.setdefault("wall_clock_breakdown", False)
    return cfg


def swap_paths(ds_config: Mapping[str, Any]) -> list[str]:
    """The distinct nvme_path directories a config swaps to (params and/or optimizer)."""
    zero = ds_config.get("zero_optimization") or {}
    out = []
    for key in ("offload_param", "offload_optimizer"):
        block = zero.get(key) or {}
        if block.get("device") == "nvme" and block.get("nvme_path"):
            if key == "offload_param" and int(zero.get("stage", 0)) != 3:
                continue
            path = str(block["nvme_path"])
            if path not in out:
                out.append(path)
    return out


def swap_dirs(ds_config: Mapping[str, Any]) -> list[Path]:
    """The directories DeepSpeed itself creates (and the runner removes after a run)."""
    return [Path(p) / SWAP_SUBDIR for p in swap_paths(ds_config)]
