"""`autotuning` as DeepSpeed 0.19.8's engine reads it: with `autotuning.enabled` true the engine
turns the flops profiler on from `start_profile_step` and ends the process after step
`end_profile_step` + 1 (runtime/engine.py:1463 flops_profiler_enabled, :3657 `_autotuning_exit`,
which writes the metrics and calls exit()), whether or not the launcher's --autotuning started
it: an autotuning experiment, not a training run. tierlab simulates a step of the config as
written and says so.
"""
from __future__ import annotations

from typing import Any, Mapping

END_PROFILE_STEP = 5
"""autotuning/constants.py AUTOTUNING_END_PROFILE_STEP_DEFAULT."""


def notes(cfg: Mapping[str, Any], where: str) -> list[str]:
    """The warning for a config whose autotuning block is switched on, else []."""
    block = cfg.get("autotuning")
    if not isinstance(block, Mapping) or block.get("enabled") is not True:
        return []
    end = block.get("end_profile_step", END_PROFILE_STEP)
    return [f"{where}: autotuning.enabled is true: DeepSpeed's engine profiles the first steps "
            f"and ends the run after step {end + 1 if isinstance(end, int) else end} "
            "(engine.py _autotuning_exit), an autotuning experiment, not a training run; tierlab "
            "simulates a step of the config as written"]
