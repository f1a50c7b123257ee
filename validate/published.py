"""Published offload runs on hosts nobody calibrated (lab/published.yaml), predicted from the
catalogue: the held-out check of issue 12's catalogue target and issue 14's coverage.

`load_published(path)` reads the runs (the lab's lab/published.yaml); `predict(run)` simulates one on its catalogue system (or on the
system of another hardware tree, to compare catalogue versions) and returns a `Prediction`. Pure:
nothing here prints or writes files (lab/scripts/bench_published.py prints).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tierlab.errors import ConfigError
from tierlab.profiles.load import load_hardware, load_model, model_from_hf_config, read_data
from tierlab.dsconfig.read import load_ds_config
from tierlab.profiles.schema import Hardware, Model
from tierlab.sim.strategy import Flags, Strategy, parse_ds_config

@dataclass(frozen=True, kw_only=True)
class PublishedRun:
    """One published run: the scenario as its source states it and the step time it reports."""

    name: str
    source: str
    system: str
    gpus: int
    model: Model
    strategy: Strategy
    step_s: float
    """The published result (steady step, or the average over `averaged_over` iterations)."""
    runs_s: tuple[float, ...] = ()
    """Published repeats of the same setting, if several."""
    averaged_over: int | None = None
    """Iterations the published average covers from step 1; None: a steady-step figure."""

    @property
    def measured_range_s(self) -> tuple[float, float]:
        values = self.runs_s or (self.step_s,)
        return min(values), max(values)


def _model(entry: Any, seq_len: int, where: str) -> Model:
    if isinstance(entry, str):
        return load_model(entry, seq_len=seq_len)
    if not isinstance(entry, dict) or "hf_config" not in entry or "source" not in entry:
        raise ConfigError(f"{where}: model must be a profile name or {{name, hf_config, source}}")
    m = model_from_hf_config(dict(entry["hf_config"]), where, name=str(entry.get("name", "")))
    return replace(m, seq_len=seq_len, source=str(entry["source"]))


def _strategy(run: dict, model: Model, world: int, where: str) -> Strategy:
    cfg = run["ds_config"]
    if isinstance(cfg, str):
        cfg, _ = load_ds_config(cfg)
    flags = Flags(micro_batch=int(run["micro_batch"]), world_size=world,
                  precision=run["precision"],
                  activation_checkpointing=bool(run["activation_checkpointing"]),
                  hidden=model.hidden)
    strategy, _ = parse_ds_config(cfg, flags, where=f"{where}: ds_config")
    return strategy


def load_published(path: Path) -> list[PublishedRun]:
    data = read_data(path)
    if not isinstance(data, dict) or data.get("kind") != "published-runs":
        raise ConfigError(f"{path}: kind must be 'published-runs'")
    out = []
    for run in data["runs"]:
        where = f"{path}: {run['name']}"
        hw = run["hardware"]
        model = _model(run["model"], int(run["seq_len"]), where)
        step = run["step_time"]
        out.append(PublishedRun(
            name=run["name"], source=run["source"], system=hw["system"], gpus=int(hw["gpus"]),
            model=model, strategy=_strategy(run, model, int(hw["gpus"]), where),
            step_s=float(step["value"]), runs_s=tuple(float(v) for v in step.get("runs", ())),
            averaged_over=run.get("averaged_over")))
    return out


@dataclass(frozen=True, kw_only=True)
class Prediction:
    run: PublishedRun
    step_s: float
    """What is held against the published figure: the steady step, or (first step + (n-1)
    steady steps) / n when the source averages n iterations from step 1."""
    range_s: tuple[float, float] | None
    """The central 80% interval of the steady step (sim/ranges.py), shifted as step_s is."""
    drivers: tuple[str, ...]
    result: Any

    @property
    def error(self) -> float:
        """(predicted - published) / published."""
        return self.step_s / self.run.step_s - 1

    @property
    def inside(self) -> bool | None:
        """The published figure lies inside the predicted range (None without a range)."""
        if self.range_s is None:
            return None
        return self.range_s[0] <= self.run.step_s <= self.range_s[1]


def hardware_for(run: PublishedRun, hardware_dir: Path | None = None) -> Hardware:
    """The run's system from the shipped catalogue, or from another hardware tree (the same layout
    as profiles/hardware: systems/, cpus/, gpus/, nvme/), sized to the run's GPUs."""
    name = run.system if hardware_dir is None else \
        str(Path(hardware_dir) / "systems" / f"{run.system}.yaml")
    return load_hardware(name, gpus_per_node=run.gpus)


def predict(run: PublishedRun, *, hardware_dir: Path | None = None,
            ranges: bool = True) -> Prediction:
    from tierlab.sim import simulate

    r = simulate(hardware_for(run, hardware_dir), run.model, run.strategy, ranges=ranges)
    shift = 0.0
    if run.averaged_over:
        shift = (r.first_step_time_s - r.step_time_s) / run.averaged_over
    span = r.step_time_range_s if ranges else None
    drivers = tuple(d.input for d in r.step_range.drivers[:3]) if ranges and r.step_range else ()
    return Prediction(run=run, step_s=r.step_time_s + shift,
                      range_s=(span[0] + shift, span[1] + shift) if span else None,
                      drivers=drivers, result=r)
