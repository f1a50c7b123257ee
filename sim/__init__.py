"""Pure simulation: `simulate(hardware, model, strategy) -> SimResult`.

Exports are resolved lazily so `import tierlab.sim.strategy` stays light; nothing here imports
torch or deepspeed.
"""
from __future__ import annotations

__all__ = ["simulate", "SimResult"]


def simulate(hardware, model, strategy, *, strict: bool = False, software=None,
             ranges: bool = False):
    """One step of `strategy` on `hardware` -> SimResult (sim/engine.py `simulate`); `ranges`:
    with the step time's central 80% interval and the fits margin (sim/ranges.py)."""
    from tierlab.sim.engine import simulate as point
    from tierlab.sim.ranges import simulate_ranged

    return (simulate_ranged if ranges else point)(hardware, model, strategy, strict=strict,
                                                  software=software)


def __getattr__(name: str):
    if name == "SimResult":
        from tierlab.sim.result import SimResult
        return SimResult
    raise AttributeError(f"module 'tierlab.sim' has no attribute {name!r}")
