"""Pure simulation: `simulate(hardware, model, strategy) -> SimResult`.

Exports are resolved lazily so `import tierlab.sim.strategy` stays light; nothing here imports
torch or deepspeed.
"""
from __future__ import annotations

__all__ = ["simulate", "SimResult"]


def __getattr__(name: str):
    if name == "simulate":
        from tierlab.sim.engine import simulate
        return simulate
    if name == "SimResult":
        from tierlab.sim.result import SimResult
        return SimResult
    raise AttributeError(f"module 'tierlab.sim' has no attribute {name!r}")
