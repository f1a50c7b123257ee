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
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from tierlab.sim.plan_config import PlanResult
    from tierlab.sim.result import SimResult

__version__ = "0.1.0"
__all__ = ["simulate", "sweep", "plan", "plot", "scenario", "__version__"]

DEFAULT_MODEL = "tinyllama-1.1b"
DEFAULT_HARDWARE = "workstation-rtx3070"
DEFAULT_CONFIG = "zero3-cpu"


def _base(model, hardware, ds_config, *, overrides=(), micro_batch=None, grad_accum=None,
          seq=None, gpus=None, nodes=None, precision=None, checkpointing=True):
    """A sweep Base from names or objects (a Strategy is turned back into its ds_config)."""
    from tierlab.sim.strategy import Strategy, to_ds_config
    from tierlab.sim.sweep import Base

    if isinstance(ds_config, Strategy):
        strategy = ds_config
        ds_config = to_ds_config(strategy)
        checkpointing = strategy.activation_checkpointing
    if isinstance(overrides, Mapping):
        overrides = [f"{k}={_json(v)}" for k, v in overrides.items()]
    _check_kinds(model, hardware)
    return Base(model=model, hardware=hardware, ds_config=ds_config, overrides=tuple(overrides),
                micro_batch=micro_batch, grad_accum=grad_accum, seq=seq, gpus=gpus, nodes=nodes,
                precision=precision, checkpointing=checkpointing)


def _json(value) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value)


def _check_kinds(model, hardware) -> None:
    from tierlab.errors import ConfigError
    from tierlab.profiles.schema import Hardware, Model

    if not isinstance(model, (str, Model)):
        raise ConfigError(f"model: expected a profile name/path or a Model, got "
                          f"{type(model).__name__} (the order is model, hardware, ds_config)")
    if not isinstance(hardware, (str, Hardware)):
        raise ConfigError(f"hardware: expected a profile name/path or a Hardware, got "
                          f"{type(hardware).__name__} (the order is model, hardware, ds_config)")


def scenario(model: Any = DEFAULT_MODEL, hardware: Any = DEFAULT_HARDWARE,
             ds_config: Any = DEFAULT_CONFIG, **options):
    """(hardware, model, strategy) objects, resolved as the CLI does. Options as `simulate`."""
    from tierlab.sim.sweep import resolve

    sc = resolve(_base(model, hardware, ds_config, **options))
    return sc.hardware, sc.model, sc.strategy


def simulate(model: Any = DEFAULT_MODEL, hardware: Any = DEFAULT_HARDWARE,
             ds_config: Any = DEFAULT_CONFIG, *, micro_batch: int | None = None,
             grad_accum: int | None = None, seq: int | None = None, gpus: int | None = None,
             nodes: int | None = None, precision: str | None = None, checkpointing: bool = True,
             overrides: Mapping[str, Any] | Iterable[str] = (), strict: bool = False
             ) -> "SimResult":
    """Simulate one step. `model`/`hardware`: profile names, paths or profile objects;
    `ds_config`: a preset name, a path, a dict or a Strategy; `overrides`: {"dotted.key": value}
    or ["dotted.key=value"] applied to the ds_config. Raises ConfigError on bad input."""
    from tierlab.sim.engine import simulate as run
    from tierlab.sim.sweep import resolve

    base = _base(model, hardware, ds_config, overrides=overrides, micro_batch=micro_batch,
                 grad_accum=grad_accum, seq=seq, gpus=gpus, nodes=nodes, precision=precision,
                 checkpointing=checkpointing)
    sc = resolve(base)
    return run(sc.hardware, sc.model, sc.strategy, strict=strict)


def sweep(vary: Mapping[str, Any], model: Any = DEFAULT_MODEL, hardware: Any = DEFAULT_HARDWARE,
          ds_config: Any = DEFAULT_CONFIG, *, out: str | None = None, jobs: int | None = None,
          memory_only: bool = False, strict: bool = False, progress: bool = False, **options):
    """A what-if grid -> pandas DataFrame, one row per point (`error` says why a point failed).

    `vary`: {key: values}, values a list or text ("1,2,4", "1..64:x2", "8GB/s,16GB/s"); keys as
    `tierlab sweep --list-keys`. `out`: a .csv/.parquet file to resume from and write
    (atomically). Other options (micro_batch, seq, gpus, ...) as `simulate`."""
    from tierlab.errors import ConfigError
    from tierlab.sim.sweep import default_simulator, make_axis, run_sweep

    if not isinstance(vary, Mapping) or not vary:
        raise ConfigError("empty grid: sweep(vary={key: [values], ...}) needs at least one key")
    axes = [make_axis(k, v) for k, v in vary.items()]
    base = _base(model, hardware, ds_config, **options)
    bar = {}

    def start(todo, skipped):
        if progress:
            from tqdm.auto import tqdm
            bar["bar"] = tqdm(total=todo, unit="config", desc="sweep")

    def rows(batch):
        if "bar" in bar:
            bar["bar"].update(len(batch))

    try:
        outcome = run_sweep(base, axes, simulator=None if memory_only else default_simulator(),
                            strict=strict, jobs=jobs, out=out, on_start=start, on_rows=rows)
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
    max_micro_batch, jobs (see tierlab.sim.plan.plan)."""
    from dataclasses import replace

    from tierlab.profiles.load import load_hardware, load_model, parse_quantity
    from tierlab.sim.plan import plan as run

    _check_kinds(model, hardware)
    hw = load_hardware(hardware, gpus_per_node=gpus, nodes=nodes) if isinstance(hardware, str) \
        else replace(hardware, gpus_per_node=gpus or hardware.gpus_per_node,
                     nodes=nodes or hardware.nodes)
    mdl = load_model(model, seq_len=seq) if isinstance(model, str) else (
        replace(model, seq_len=seq) if seq else model)
    if isinstance(max_gpu_mem, str):
        max_gpu_mem = parse_quantity(max_gpu_mem, "bytes", "max_gpu_mem")
    return run(hw, mdl, max_gpu_mem_bytes=max_gpu_mem, **options)


def plot(kind: str, data, **options):
    """A matplotlib Figure: kind 'bottleneck' / 'memory' (SimResults: one, a list, or
    {label: result}), 'timeline' (one SimResult, optional measurement=...), 'sweep' (a sweep
    DataFrame, x=KEY, by=...). Save with fig.savefig(...) or tierlab.validate.plots.save."""
    from tierlab.errors import ConfigError
    from tierlab.validate import plots

    fns = {"bottleneck": plots.bottleneck, "memory": plots.memory, "timeline": plots.timeline,
           "sweep": plots.sweep}
    if kind not in fns:
        raise ConfigError(f"unknown plot kind {kind!r}; choose {', '.join(fns)}")
    if kind == "timeline" and isinstance(data, (list, tuple)):
        data = data[0]
    return fns[kind](data, **options)
