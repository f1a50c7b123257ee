"""Predicted vs measured: simulate each Measurement's exact config on its host's profile.

`compare_measurement(hardware, measurement) -> list[Row]`: one row per metric with the
prediction, the measurement and the error. `summarize(rows)`: mean absolute percentage error
and max per metric. Nothing here prints or writes files (cli.py does).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from tierlab.errors import ConfigError
from tierlab.profiles.schema import Hardware, Model

# metric -> (what the simulator predicts, where the Measurement keeps it)
TIME_METRICS = ("step_time_s", "first_step_time_s", "forward_s", "backward_s", "optimizer_s")
MEMORY_METRICS = ("gpu_peak_allocated_bytes", "host_rss_bytes", "swap_bytes")


@dataclass(frozen=True, kw_only=True)
class Row:
    case: str
    metric: str
    predicted: float | None
    measured: float | None

    @property
    def error_pct(self) -> float | None:
        """(predicted - measured) / measured x 100; None where either side is missing."""
        if self.predicted is None or not self.measured:
            return None
        return 100.0 * (self.predicted - self.measured) / self.measured

    def to_dict(self) -> dict:
        return {"case": self.case, "metric": self.metric, "predicted": self.predicted,
                "measured": self.measured, "error_pct": self.error_pct}


def _run(m, *keys, default=None):
    """A runner setting by the first of `keys` present in measurement.run."""
    for key in keys:
        value = (m.run or {}).get(key)
        if value is not None:
            return value
    return default


def scenario_of(measurement, hardware: Hardware, software=None, where: str | None = None):
    """The exact scenario (tierlab.scenario.Scenario) a Measurement ran: its GPU count, memory
    cap, model, sequence length and resolved ds_config, on `hardware`, with `software`. Errors
    name `where` (the file it was read from; default: its run id)."""
    from tierlab.scenario import resolve

    where = where or f"measurement {measurement.run_id}"
    model_fields = {k: v for k, v in (measurement.model or {}).items()
                    if k in Model.__dataclass_fields__}
    if not model_fields:
        raise ConfigError(f"{where}: no model recorded")
    seq = _run(measurement, "seq", "seq_len")
    world = int(_run(measurement, "world_size", default=1))
    gpus = max(1, int(_run(measurement, "gpus", "gpus_per_node", default=world)))
    return resolve(Model(**model_fields), hardware, measurement.ds_config,
                   seq=int(seq) if seq else None, gpus=gpus, nodes=max(1, world // gpus),
                   gpu_mem_cap=_run(measurement, "gpu_mem_cap_bytes") or None,
                   checkpointing=bool(_run(measurement, "activation_checkpointing",
                                           "checkpointing", default=True)),
                   software=software, where=where)


def _median(summary: Mapping[str, Any], key: str) -> float | None:
    value = summary.get(key)
    if isinstance(value, Mapping):
        value = value.get("median")
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def measured_metrics(measurement) -> dict[str, float | None]:
    """The steady-state figures of a Measurement, in the simulator's metric names."""
    s = measurement.summary or {}
    steps = measurement.steps
    return {
        "step_time_s": _median(s, "step_time_s"),
        "first_step_time_s": steps[0].wall_s if steps else None,
        "forward_s": _median(s, "forward_s"),
        "backward_s": _median(s, "backward_s"),
        "optimizer_s": _median(s, "optimizer_s"),
        "gpu_peak_allocated_bytes": s.get("peak_gpu_max_allocated_bytes"),
        "host_rss_bytes": s.get("peak_host_rss_bytes"),
        "swap_bytes": s.get("peak_swap_bytes") or None,
    }


def predicted_metrics(result) -> dict[str, float | None]:
    plan = result.memory
    gpu = plan.tiers["gpu"] if plan else None
    return {
        "step_time_s": result.step_time_s,
        "first_step_time_s": result.first_step_time_s,
        "forward_s": result.phases.get("forward_s"),
        "backward_s": result.phases.get("backward_s"),
        "optimizer_s": result.phases.get("optimizer_s"),
        # max_memory_allocated counts tensors only: no CUDA context, no allocator slack
        "gpu_peak_allocated_bytes": (gpu.used_bytes - gpu.breakdown.get("cuda_context", 0.0)
                                     - gpu.breakdown.get("allocator_slack", 0.0)) if gpu else None,
        "host_rss_bytes": plan.tiers["host"].used_bytes / max(1, result.scenario.get(
            "gpus_per_node", 1)) if plan else None,
        # the runner's probe sizes the swap folder, which every rank of the node writes into
        "swap_bytes": (plan.tiers["nvme"].used_bytes or None) if plan else None,
    }


def compare_measurement(hardware: Hardware, measurement, name: str | None = None, *,
                        software=None) -> list[Row]:
    """Rows predicted vs measured for one Measurement (a failed run: only the OOM verdict). A
    run that neither finished nor ran out of memory (killed, interrupted, another failure) says
    nothing about OOM: no rows, rather than an "ok" verdict it never earned."""
    return _compared(hardware, measurement, name, software)[0]


def _compared(hardware: Hardware, measurement, name: str | None, software,
              where: str | None = None) -> tuple[list[Row], dict]:
    """compare_measurement's rows and the simulated scenario (SimResult.scenario; {} if none);
    errors name `where` (scenario_of)."""
    case = name or measurement.run_id
    if measurement.status != "ok" and measurement.failure_kind != "oom":
        return [], {}
    engine = run_engine(measurement)
    check_simulated(engine, where or f"measurement {measurement.run_id}")
    sc = scenario_of(measurement, hardware, software, where)
    if engine == "deepspeed":
        result = sc.simulate()
        pred, scenario = predicted_metrics(result), dict(result.scenario)
    else:           # the run's own engine, its own schedule (sim/fsdp2.py), not DeepSpeed's
        result = sc.simulate(engine=engine)
        pred, scenario = fsdp2_predicted_metrics(result), {}
    oom_measured = 1.0 if measurement.failure_kind == "oom" else 0.0
    rows = [Row(case=case, metric="oom", predicted=0.0 if result.fits else 1.0,
                measured=oom_measured)]
    if measurement.status != "ok":
        return rows, scenario
    meas = measured_metrics(measurement)
    for metric in TIME_METRICS + MEMORY_METRICS:
        if meas.get(metric) is not None and (metric in pred or engine == "deepspeed"):
            rows.append(Row(case=case, metric=metric, predicted=pred.get(metric),
                            measured=float(meas[metric])))
    return rows, scenario


def run_engine(measurement) -> str:
    """Who trained the run (`run.engine`, tierlab run --engine); records older than the flag
    are DeepSpeed's."""
    return str(_run(measurement, "engine", default="deepspeed"))


def check_simulated(engine: str, where: str) -> None:
    """ConfigError (naming the file) for a run whose engine (`run.engine`: tierlab run
    --engine) the simulator has no schedule for: it would be compared with DeepSpeed's."""
    from tierlab.sim.fsdp2 import ENGINES, SIMULATED_ENGINES

    if engine not in SIMULATED_ENGINES:
        what = "is not one tierlab knows" if engine not in ENGINES else "has no schedule"
        raise ConfigError(f"{where}: run.engine {engine!r} {what} in the simulator (it models "
                          f"{' and '.join(SIMULATED_ENGINES)}); leave this run out of validate")


def fsdp2_predicted_metrics(result) -> dict[str, float]:
    """The metrics an FSDP2 schedule predicts (sim/fsdp2.Fsdp2Result), in measured_metrics'
    names: the steady step and its phases, the GPU's tensors (max_memory_allocated: the plan
    without the CUDA context) and the host's bytes; no step-1 or swap figure (not modelled)."""
    return {"step_time_s": result.step_time_s, **{k: result.phases[k] for k in
                                                  ("forward_s", "backward_s", "optimizer_s")},
            "gpu_peak_allocated_bytes": result.gpu_peak_bytes
            - result.memory["gpu"].get("cuda_context", 0.0),
            "host_rss_bytes": result.host_bytes}


def summarize(rows: Iterable[Row]) -> dict[str, dict]:
    """Per metric: n, MAPE (%), max |error| (%) and the worst case; for 'oom', agreement."""
    by_metric: dict[str, list[Row]] = {}
    for row in rows:
        by_metric.setdefault(row.metric, []).append(row)
    out = {}
    for metric, group in by_metric.items():
        if metric == "oom":
            wrong = [r.case for r in group if r.predicted != r.measured]
            out[metric] = {"n": len(group), "mismatches": wrong}
            continue
        errs = [(abs(r.error_pct), r.case) for r in group if r.error_pct is not None]
        if errs:
            worst = max(errs)
            out[metric] = {"n": len(errs), "mape_pct": sum(e for e, _ in errs) / len(errs),
                           "max_pct": worst[0], "worst_case": worst[1]}
    return out


def summarize_split(rows: Iterable[Row], train: Iterable[str]) -> dict[str, dict]:
    """summarize() of the training cases (where fitted software terms were fitted) and of the
    held-out rest, separately (issue 5: report the error on the cases not fitted on)."""
    rows, names = list(rows), set(train)
    return {"train": summarize(r for r in rows if r.case in names),
            "held_out": summarize(r for r in rows if r.case not in names)}


def case_key(directory: str | Path) -> str:
    """A case's name in reports and in a software profile's train_cases: 'folder/run', e.g.
    'h200x2-b/c-tinyllama-z3cpu-bd' (runs of one configuration repeat across folders)."""
    d = Path(directory)
    return f"{d.parent.name}/{d.name}"


FOLDER_FILE = "validate.yaml"
"""Beside a folder's runs: `hardware: PROFILE`, the profile calibrated with them."""


def folder_hardware(folder: str | Path) -> str | None:
    """The profile a folder of runs names in its validate.yaml (None without one)."""
    from tierlab.profiles.load import read_data

    path = Path(folder) / FOLDER_FILE
    if not path.is_file():
        return None
    data = read_data(path)
    if not isinstance(data, dict) or not isinstance(data.get("hardware"), str) \
            or set(data) - {"hardware", "note"}:
        raise ConfigError(f"{path}: expected `hardware: PROFILE` (and an optional `note:`), "
                          f"got {data!r}")
    beside = Path(folder) / data["hardware"]     # a profile shipped with the runs, by its path
    return str(beside.resolve()) if beside.is_file() else data["hardware"]


def with_profiles(dirs: Iterable[Path], hardware: str | None = None,
                  default: str | None = None) -> list[tuple[Path, Hardware]]:
    """Each measurement directory with the profile it is simulated on: `hardware` for all when
    given, else the one its folder's validate.yaml names, else `default` (None: a ConfigError
    naming the folder). Each profile is loaded once."""
    from tierlab.profiles.load import load_hardware

    loaded: dict[str, Hardware] = {}
    out = []
    for d in dirs:
        name = hardware or folder_hardware(d.parent) or default
        if name is None:
            raise ConfigError(f"{d.parent}: no validate.yaml naming its profile (or pass -H)")
        if name not in loaded:
            loaded[name] = load_hardware(name)
        out.append((d, loaded[name]))
    return out


def find_measurements(paths: Iterable[str | Path]) -> list[Path]:
    """Measurement directories under the given paths (a dir holding measurement.json, or its
    parents), sorted by name."""
    found = []
    for p in map(Path, paths):
        if not p.exists():
            raise ConfigError(f"{p}: no such file or directory")
        if (p / "measurement.json").is_file():
            found.append(p)
        else:   # rank1/, rank2/ ... inside a multi-GPU run are that run's other ranks
            found.extend(q.parent for q in p.rglob("measurement.json")
                         if not (q.parent.parent / "measurement.json").is_file())
    if not found:
        raise ConfigError(f"no measurement.json under {', '.join(map(str, paths))}")
    return sorted(set(found))


EXAMPLE_CASES = Path(__file__).resolve().parent / "example"
"""Two measured runs shipped with tierlab (`tierlab validate --example`), with the calibration of
the machine they ran on: a copy of the lab's, held equal to it by tests/test_package_data.py."""


def run_scenario(measurement, where: str | Path, hardware: str | None = None):
    """The scenario a measured run ran (scenario_of) on `hardware`, else the profile the
    validate.yaml of the folder holding its run folder `where` names."""
    run_dir = Path(where) if Path(where).is_dir() else Path(where).parent
    [(_, hw)] = with_profiles([run_dir], hardware)
    return scenario_of(measurement, hw)


@dataclass(frozen=True)
class Validation:
    """`tierlab validate`'s result: rows, per-metric summary, train/held-out split, and the runs
    left out because they neither finished nor ran out of memory, or because the simulator has
    no schedule for their engine."""

    rows: list[Row]
    summary: dict
    split: dict
    unfinished: list[str]
    scenarios: dict = field(default_factory=dict)
    """Per case: the scenario it was simulated as (SimResult.scenario), for the figures."""
    unsimulated: list = field(default_factory=list)
    """'case (engine)' of the runs left out because their engine has no schedule in the
    simulator (sim/fsdp2.SIMULATED_ENGINES: FSDP2 without offload)."""

    def csv(self) -> str:
        import csv
        import io

        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=["case", "metric", "predicted", "measured",
                                            "error_pct"])
        w.writeheader()
        for r in self.rows:
            w.writerow(r.to_dict())
        return buf.getvalue()


def validate_cases(paths: Iterable[str | Path], software, *, hardware: str | None = None,
                   train: Iterable[str] = ()) -> Validation:
    """Every measurement under `paths` simulated on its profile with `software`, against what
    was measured; `train`: the case names the software's fitted terms were fitted on."""
    from tierlab.records.measurement import MEASUREMENT_FILE, load_measurement

    from tierlab.sim.fsdp2 import ENGINES, SIMULATED_ENGINES

    rows, unfinished, scenarios, unsimulated = [], [], {}, []
    for d, hw in with_profiles(find_measurements(paths), hardware):
        m = load_measurement(d)
        if run_engine(m) in ENGINES and run_engine(m) not in SIMULATED_ENGINES:
            unsimulated.append(f"{case_key(d)} ({run_engine(m)})")
            continue
        case_rows, scenario = _compared(hw, m, case_key(d), software,
                                        where=str(Path(d) / MEASUREMENT_FILE))
        rows += case_rows
        if not case_rows:
            unfinished.append(case_key(d))
        else:
            scenarios[case_key(d)] = scenario
    return Validation(rows, summarize(rows), summarize_split(rows, train), unfinished,
                      scenarios, unsimulated)
