"""tierlab: will a DeepSpeed ZeRO offload run fit, how fast is a step, which tier binds?

The Python API for notebooks (profile names or objects everywhere; nothing heavy is imported
until a function is called — `import tierlab` never imports torch, SimPy, pandas or matplotlib):

    import tierlab
    r = tierlab.simulate("tinyllama-1.1b", "workstation-rtx3070", "zero3-nvme",
                         micro_batch=4, seq=1024)
    r.step_time_s, r.bottleneck, r.exposed_s
    df = tierlab.sweep({"nvme.drives": [1, 2, 4, 8], "micro_batch": "1..16:x2"},
                       ds_config="zero3-nvme", seq=1024)
    p = tierlab.plan("llama-2-70b", "dgx-a100")
    print(p.best.label, p.notes); p.ds_config        # ready for `deepspeed --deepspeed`
    tierlab.plot("bottleneck", [r])                  # a matplotlib Figure
    problems = tierlab.preflight("tinyllama-1.1b", "dgx-a100", "zero3-nvme")   # [] if fine
    v = tierlab.validate_runs(example=True)          # the two shipped runs; v.report.summary
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from tierlab.planner.variants import PlanResult
    from tierlab.runner.preflight import Problem
    from tierlab.sim.result import SimResult
    from tierlab.validate.workflow import ValidationRun

from tierlab.scenario import DEFAULT_CONFIG, DEFAULT_HARDWARE, DEFAULT_MODEL

__version__ = "0.1.0"
__all__ = ["simulate", "memory", "sweep", "plan", "plot", "scenario", "preflight", "validate_runs",
           "__version__"]


def scenario(model: Any = DEFAULT_MODEL, hardware: Any = DEFAULT_HARDWARE,
             ds_config: Any = DEFAULT_CONFIG, **options):
    """The tierlab.scenario.Scenario the CLI would build (hardware, model, strategy, software;
    `.memory()`, `.simulate()`). Options as `simulate`, plus gpu_mem_cap and swap_dir."""
    from tierlab.scenario import resolve

    return resolve(model, hardware, ds_config, **options)


def simulate(model: Any = DEFAULT_MODEL, hardware: Any = DEFAULT_HARDWARE,
             ds_config: Any = DEFAULT_CONFIG, *, strict: bool = False, ranges: bool = True,
             **options) -> "SimResult":
    """Simulate one step. `model`/`hardware`: profile names, paths or profile objects;
    `ds_config`: a preset name, a path, a dict or a Strategy. Options: micro_batch, grad_accum,
    seq, gpus, nodes, precision, checkpointing, gpu_mem_cap, gpu_headroom/host_headroom ('5%',
    '4GiB'), overrides ({"dotted.key": value} or ["dotted.key=value"]). `ranges` (default on, as the CLI): the step time's 80% range
    (`step_time_range_s`, `step_range.drivers`) and the fits margin, at ~2-3x the cost.
    Raises ConfigError on bad input."""
    return scenario(model, hardware, ds_config, **options).simulate(strict=strict, ranges=ranges)


def memory(model: Any = DEFAULT_MODEL, hardware: Any = DEFAULT_HARDWARE,
           ds_config: Any = DEFAULT_CONFIG, **options):
    """The per-tier MemoryPlan (GPU per rank, host and NVMe per node). Options as `simulate`."""
    return scenario(model, hardware, ds_config, **options).memory()


def sweep(vary: Mapping[str, Any], model: Any = DEFAULT_MODEL, hardware: Any = DEFAULT_HARDWARE,
          ds_config: Any = DEFAULT_CONFIG, *, out: str | None = None, jobs: int | None = None,
          memory_only: bool = False, strict: bool = False, progress: bool = False, **options):
    """A what-if grid -> pandas DataFrame, one row per point (`error` says why a point failed).

    `vary`: {key: values}, values a list or text ("1,2,4", "1..64:x2", "8GB/s,16GB/s"); keys as
    `tierlab sweep --list-keys`. `out`: a .csv/.parquet file to resume from and write
    (atomically). Other options (micro_batch, seq, gpus, ...) as `simulate`."""
    from tierlab.errors import ConfigError
    from tierlab.sweeps.run import Base, make_axis, run_grid

    if not isinstance(vary, Mapping) or not vary:
        raise ConfigError("empty grid: sweep(vary={key: [values], ...}) needs at least one key")
    axes = [make_axis(k, v) for k, v in vary.items()]
    base = Base(model=model, hardware=hardware, ds_config=ds_config, **options)
    bar = {}

    def start(todo, skipped):
        if progress:
            from tqdm.auto import tqdm
            bar["bar"] = tqdm(total=todo, unit="config", desc="sweep")

    def rows(batch):
        if "bar" in bar:
            bar["bar"].update(len(batch))

    try:    # a broken base: one error, not N rows; + step_time_low_s / _high_s
        outcome = run_grid(base, axes, memory_only=memory_only, strict=strict, jobs=jobs,
                           out=out, on_start=start, on_rows=rows)
    finally:
        if "bar" in bar:
            bar["bar"].close()
    return outcome.frame


def plan(model: Any, hardware: Any, *, gpus: int | None = None, nodes: int | None = None,
         seq: int | None = None, max_gpu_mem: float | str | None = None,
         **options) -> "PlanResult":
    """The fastest configuration that fits every tier, ranked alternatives with why each lost,
    practical notes, and the winner's ds_config (`.ds_config`). Options: global_batch,
    grad_accum, micro_batch, checkpointing, precision, min_tokens_per_s, nvme_path,
    max_micro_batch, jobs (see tierlab.planner.search.plan)."""
    from tierlab.scenario import machine_and_model
    from tierlab.units import parse_size
    from tierlab.planner.search import plan as run

    hw, mdl, _ = machine_and_model(model, hardware, seq=seq, gpus=gpus, nodes=nodes)
    cap = parse_size(max_gpu_mem, "max_gpu_mem") if max_gpu_mem is not None else None
    return run(hw, mdl, max_gpu_mem_bytes=cap, **options)


def plot(kind: str, data, **options):
    """A matplotlib Figure: kind 'bottleneck' / 'memory' (SimResults: one, a list, or
    {label: result}), 'timeline' (one SimResult, optional measurement=...), 'sweep' (a sweep
    DataFrame, x=KEY, by=...), 'loss' (Measurements: one, [(label, m)] or {label: m}). Save with
    fig.savefig(...) or tierlab.validate.plot_style.save
    (`from tierlab.validate.plot_style import save`)."""
    from tierlab.errors import ConfigError
    from tierlab.validate import plots
    from tierlab.validate.plot_loss import loss_figure

    fns = {"bottleneck": plots.bottleneck, "memory": plots.memory, "timeline": plots.timeline,
           "sweep": plots.sweep, "loss": loss_figure}
    if kind not in fns:
        raise ConfigError(f"unknown plot kind {kind!r}; choose {', '.join(fns)}")
    if kind == "timeline" and isinstance(data, (list, tuple)):
        data = data[0]
    return fns[kind](data, **options)


def preflight(model: Any = DEFAULT_MODEL, hardware: Any = DEFAULT_HARDWARE,
              ds_config: Any = DEFAULT_CONFIG, *, probe: bool = False, check_memory: bool = True,
              **options) -> "list[Problem]":
    """The pre-flight problems of a launch (each `.severity` "error"/"warning", `.line()` the
    text `tierlab preflight` prints); [] when there are none. `probe=False` (the default, as
    `tierlab preflight --no-probe`) judges the named hardware profile only; `probe=True` also
    checks this machine (libaio/async_io, the swap path, its RAM when `hardware` is the default)
    and needs torch and DeepSpeed. Options as `simulate`, plus swap_dir.

        problems = tierlab.preflight("llama-2-70b", "workstation-rtx3070")
        problems[0].line()    # 'error: [memory] gpu needs 13.74 GiB of 8.00 GiB ...; fix: ...'
    """
    from tierlab.errors import require
    from tierlab.runner.preflight import run_preflight

    if probe:
        require("torch", "deepspeed", what="preflight(probe=True)")
    sc = scenario(model, hardware, ds_config, judge="deepspeed" if probe else "table", **options)
    return run_preflight(sc.hardware, sc.model, sc.strategy, software=sc.software,
                         gpu_mem_cap_bytes=sc.gpu_mem_cap_bytes, check_memory_plan=check_memory,
                         probe=probe, local_ram=probe and hardware == DEFAULT_HARDWARE)


def validate_runs(cases=(), *, example: bool = False, hardware: str | None = None,
             software: Any = None, train=(), out: str | None = None) -> "ValidationRun":
    """Simulate each measured run under `cases` (run folders, or folders holding them; or
    `example=True`: the two runs shipped with tierlab) and compare with what was measured.
    Returns a ValidationRun: `.report` (rows, per-metric `summary` with `mape_pct`, train /
    held-out `split`), `.coverage` (runs inside their predicted 80% range). `software`: the
    software profile (default: the shipped one); `out`: a folder to write the report's files
    into (validate.csv, summary.json, ..., as `tierlab validate`), nothing written without it.

        v = tierlab.validate_runs(example=True)
        v.report.summary["step_time_s"]["mape_pct"]     # mean absolute error of the step, %
    """
    from tierlab.profiles.load import DEFAULT_SOFTWARE
    from tierlab.validate.workflow import run_validation, validation_cases

    return run_validation(validation_cases(cases, example), software or DEFAULT_SOFTWARE,
                          hardware=hardware, train=train, out=out)
