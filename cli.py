"""tierlab's command line: parse, call one library function, print. The only module that prints,
writes files or exits.

Every verb resolves its scenario through `tierlab.scenario.resolve` (one resolver, defaults
written once); memory is printed in GiB. User errors (`ConfigError`) print one line
`error: ...` and exit 2; never a traceback.
"""
from __future__ import annotations

import contextlib
import json
import logging
import signal
import sys
from pathlib import Path

import click

from tierlab import __version__
from tierlab.errors import ConfigError, Interrupted, require
from tierlab.safeio import check_writable, write_json, write_text
from tierlab.scenario import DEFAULT_CONFIG, DEFAULT_HARDWARE, DEFAULT_MODEL, resolve
from tierlab.units import fmt_gib


# ----------------------------------------------------------------------------------------------
# shared plumbing

class TierlabGroup(click.Group):
    """Turns ConfigError (and click's own usage errors) into one line and exit code 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except ConfigError as e:
            click.echo(f"error: {' '.join(str(e).split())}", err=True)
            ctx.exit(2)
        except click.UsageError as e:      # a bad option value: one line too, still exit 2
            where = f"{e.ctx.command_path}: " if e.ctx is not None else ""
            click.echo(f"error: {where}{e.format_message()}", err=True)
            ctx.exit(2)


def options(*opts):
    """Apply a group of click options (declared once, below) in the order given."""
    def apply(fn):
        for opt in reversed(opts):
            fn = opt(fn)
        return fn
    return apply


SCENARIO_KEYS = ("model", "hardware", "ds_config", "overrides", "gpus", "nodes", "micro_batch",
                 "grad_accum", "seq", "checkpointing", "precision")
"""The scenario options' parameter names, as tierlab.scenario.resolve takes them."""

model_option = click.option(
    "--model", "-m", default=DEFAULT_MODEL, show_default=True,
    help="Model profile name (see `tierlab profiles models`), a profile YAML, or a Hugging Face "
         "config.json path.")
hardware_option = click.option(
    "--hardware", "-H", default=DEFAULT_HARDWARE, show_default=True,
    help="System profile name (see `tierlab profiles hardware`) or YAML path.")
gpus_option = click.option("--gpus", type=int, default=None,
                           help="GPUs per node (default: the hardware profile's).")
nodes_option = click.option("--nodes", type=int, default=None,
                            help="Number of nodes (default: the hardware profile's).")
seq_option = click.option(
    "--seq", type=int, default=None,
    help="Sequence length in tokens (default: the model profile's, at most 4096; a note says "
         "when it was capped).")
scenario_options = options(
    model_option, hardware_option,
    click.option("--ds-config", "-c", default=DEFAULT_CONFIG, show_default=True,
                 help="DeepSpeed config: preset name (see `tierlab profiles configs`) or a "
                      "ds_config.json path."),
    click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                 help="Override a ds_config key, e.g. --set zero_optimization.stage=3 "
                      "(repeatable; values parsed as JSON, 1e8 allowed)."),
    gpus_option, nodes_option,
    click.option("--micro-batch", type=int, default=None,
                 help="train_micro_batch_size_per_gpu; overrides the config and fills \"auto\"."),
    click.option("--grad-accum", type=int, default=None,
                 help="gradient_accumulation_steps; overrides the config and fills \"auto\"."),
    seq_option,
    click.option("--checkpointing/--no-checkpointing", default=True, show_default=True,
                 help="Activation (gradient) checkpointing: recompute each block in backward."),
    click.option("--precision", type=click.Choice(["fp16", "bf16", "fp32"]), default=None,
                 help="Fills fp16/bf16 \"auto\" (default: bf16 where the GPU has it, else fp16); "
                      "must agree with the config if it sets one."),
)
gpu_mem_cap_option = click.option(
    "--gpu-mem-cap", default=None, metavar="BYTES",
    help="Cap the GPU's memory, e.g. 8GiB: the what-if of a smaller card (`run` enforces it "
         "with torch.cuda.set_per_process_memory_fraction).")
json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print JSON instead of a table (sizes in GiB, keys ending _GiB).")
quiet_option = click.option("--quiet", "-q", is_flag=True,
                            help="Do not print warnings and notes about the config.")
swap_dir_option = click.option("--swap-dir", default=None, metavar="DIR",
                               help="Point every NVMe offload (nvme_path) at this directory.")


def scenario_of(kw: dict, **extra):
    """The Scenario of a verb's scenario options (+ gpu_mem_cap, swap_dir, ...)."""
    return resolve(**{k: kw[k] for k in SCENARIO_KEYS}, **extra)


def echo_warnings(warnings=(), notes=(), quiet: bool = False) -> None:
    """A scenario's warnings (DeepSpeed quirks) and notes (defaults chosen) on stderr."""
    if not quiet:
        for w in warnings:
            click.echo(f"warning: {w}", err=True)
        for n in notes:
            click.echo(f"note: {n}", err=True)


def writable(path, what: str, folder: bool = False):
    """Refuse an output that cannot be written now, before the long work (tierlab.safeio)."""
    return check_writable(path, what, folder=folder) if path is not None else None


def save_figure(fig, out, quiet: bool = False) -> None:
    """Save a figure atomically (PNG/SVG/PDF by suffix) and say where (unless quiet)."""
    from tierlab.validate.plot_style import save

    for path in save(fig, out):
        if not quiet:
            click.echo(f"wrote {path}")


def _finite(minimum: float | None = None, open_min: bool = False):
    """A click callback: a float option must be finite (nan/inf refused) and above a bound."""
    import math

    def check(ctx, param, value):
        if value is None:
            return value
        if not math.isfinite(value):
            raise click.BadParameter(f"must be a finite number, got {value}")
        if minimum is not None and (value < minimum or (open_min and value == minimum)):
            raise click.BadParameter(f"must be {'>' if open_min else '>='} {minimum:g}, "
                                     f"got {value:g}")
        return value
    return check


def _given(ctx, *params) -> bool:
    """True if any of these options was given on the command line (not its default)."""
    from click.core import ParameterSource

    return any(ctx.get_parameter_source(p) != ParameterSource.DEFAULT for p in params)


no_progress_option = click.option("--no-progress", is_flag=True,
                                  help="No progress bar on stderr (none either when stderr is "
                                       "not a terminal).")


@contextlib.contextmanager
def progress_bar(desc: str, unit: str, disable: bool, total: int | None = None):
    """A tqdm bar on stderr when it is a terminal (closed on the way out, also on errors)."""
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=disable or None,
               dynamic_ncols=True, mininterval=0.5)
    try:
        yield bar
    finally:
        bar.close()


@contextlib.contextmanager
def signals_raise():
    """SIGTERM raises Interrupted (as Ctrl-C raises KeyboardInterrupt) for the block, so the
    `finally` blocks below flush what is done and stop worker processes."""
    def raise_(signum, frame):
        raise Interrupted(signum)

    old = signal.signal(signal.SIGTERM, raise_)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@click.group(cls=TierlabGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="tierlab",
                      message="%(prog)s %(version)s")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def main(verbose: int) -> None:
    """tierlab: will a DeepSpeed ZeRO offload run fit, how fast is a step, which tier binds?"""
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)],
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


# ----------------------------------------------------------------------------------------------
# profiles

@main.command()
@click.argument("kind", required=False,
                type=click.Choice(["hardware", "models", "configs", "gpus", "cpus", "nvme"]))
def profiles(kind):
    """List the shipped profiles with a one-line summary each, then your own.

    KIND is one of hardware (systems), models, configs (DeepSpeed presets), gpus, cpus, nvme;
    all of hardware, models and configs when omitted. Hardware is the catalogue
    (docs/catalogue.md); profiles of your own (`tierlab calibrate` writes them) are found by name
    in the folders $TIERLAB_PROFILES names (each holding hardware/systems, gpus, cpus, nvme; ':'
    between several), and listed after the catalogue."""
    from tierlab.profiles.catalogue import list_catalogue, list_user_profiles

    for k in [kind] if kind else ["hardware", "models", "configs"]:
        click.echo(f"{k}:")
        for name, summary in list_catalogue(k):
            click.echo(f"  {name:28s} {summary}")
        if own := list_user_profiles(k):
            click.echo(f"{k} ($TIERLAB_PROFILES):")
            for name, summary in own:
                click.echo(f"  {name:28s} {summary}")


# ----------------------------------------------------------------------------------------------
# memory / simulate

@main.command()
@scenario_options
@options(gpu_mem_cap_option, json_option, quiet_option)
def memory(gpu_mem_cap, as_json, quiet, **kw):
    """Per-tier memory plan: GPU (per rank), host RAM and NVMe (per node), fits, binding tier,
    and a margin line where the overheads' ranges straddle a tier's capacity."""
    from tierlab.sim.memory import format_memory
    from tierlab.sim.ranges import memory_margin

    sc = scenario_of(kw, gpu_mem_cap=gpu_mem_cap)
    echo_warnings(sc.warnings, sc.notes, quiet or as_json)
    plan = sc.memory()
    margin = memory_margin(plan, sc.hardware, sc.software)    # overheads' ranges (docs/ranges.md)
    if as_json:
        click.echo(json.dumps({**sc.header(), **plan.to_dict(), "memory_margin": margin},
                              indent=2))
    else:
        click.echo(format_memory(plan, sc.describe()))
        for m in margin.values():
            click.echo(f"  margin: {m['statement']}")


BUILTIN_PRESETS = ("no-offload", "zero2-cpu", "zero3-cpu", "zero3-nvme")
"""The built-in comparison of `simulate`/`plot` with no --model/--hardware/--ds-config:
TinyLlama-1.1B on the RTX 3070 workstation, micro-batch 4, seq 1024, one row per preset."""


def builtin_configs(ctx, kw: dict, compare: tuple[str, ...] = ()) -> list[str]:
    """The configs to run: --ds-config + --compare; with neither --model/--hardware/--ds-config
    nor --compare, the built-in presets at micro-batch 4, seq 1024 (kw is filled in)."""
    if _given(ctx, "model", "hardware", "ds_config") or compare:
        return [kw["ds_config"], *compare]
    kw["micro_batch"] = kw["micro_batch"] or 4
    kw["seq"] = kw["seq"] or 1024
    return list(BUILTIN_PRESETS)


@main.command()
@scenario_options
@options(gpu_mem_cap_option, json_option, quiet_option)
@click.option("--trace", "trace_path", default=None, metavar="FILE",
              help="Write a Chrome/Perfetto trace of the steady-state step (one track per "
                   "resource; open in ui.perfetto.dev).")
@click.option("--strict", is_flag=True, help="Fail (exit 2) when the config does not fit memory.")
@click.pass_context
def simulate(ctx, gpu_mem_cap, as_json, quiet, trace_path, strict, **kw):
    """Simulate one training step: time, phases, exposed time per resource, memory, bottleneck.

    Every step time carries its central 80% range from the profiles' stated uncertainty, with
    the inputs that widen it most (`step_time_range_s`, `range_drivers` in --json; docs/ranges.md).

    With no --model/--hardware/--ds-config it compares the presets no-offload, zero2-cpu,
    zero3-cpu and zero3-nvme for TinyLlama-1.1B on the RTX 3070 workstation (micro-batch 4,
    seq 1024)."""
    from tierlab.sim.result import format_result, format_table

    writable(trace_path, "--trace")
    configs = builtin_configs(ctx, kw)
    runs = []
    for cfg in configs:
        sc = scenario_of({**kw, "ds_config": cfg}, gpu_mem_cap=gpu_mem_cap)
        echo_warnings(sc.warnings, sc.notes, quiet or as_json)
        runs.append((sc, sc.simulate(strict=strict, ranges=True)))
    if trace_path:
        write_json(trace_path, runs[-1][1].trace_events())
    if len(runs) == 1:
        sc, r = runs[0]
        click.echo(json.dumps(r.to_dict(), indent=2, default=str) if as_json
                   else format_result(r, sc.describe()))
    elif as_json:
        click.echo(json.dumps([{"config": sc.config_name, **r.to_dict()} for sc, r in runs],
                              indent=2, default=str))
    else:
        sc = runs[0][0]
        click.echo(format_table([(sc.config_name, r) for sc, r in runs],
                                f"{sc.model.name} on {sc.hardware.name}, micro-batch "
                                f"{sc.strategy.train_micro_batch_size_per_gpu}, seq "
                                f"{sc.model.seq_len}:"))


# ----------------------------------------------------------------------------------------------
# run / compare / preflight

runner_options = options(
    click.option("--model-path", default=None, metavar="DIR",
                 help="Local Hugging Face model directory (config.json + weights) to train "
                      "instead of a random init; local files only."),
    click.option("--steps", type=click.IntRange(min=1), default=10, show_default=True,
                 help="Optimizer steps to train."),
    click.option("--warmup-steps", type=click.IntRange(min=0), default=2, show_default=True,
                 help="Leading steps dropped from the steady-state statistics (ZeRO-3's "
                      "first step has no prefetch trace)."),
    click.option("--dataset", default=None, metavar="FILE",
                 help="Alpaca-format JSON/JSONL (instruction/input/output); default: "
                      "synthetic tokens."),
    click.option("--tokenizer", default=None, metavar="DIR",
                 help="Local tokenizer directory for --dataset (default: built-in "
                      "byte-level tokenizer)."),
    gpu_mem_cap_option,
    swap_dir_option,
    click.option("--seed", type=int, default=0, show_default=True,
                 help="Seed of the random init and the synthetic data."),
    click.option("--skip-preflight", is_flag=True,
                 help="Launch even if the pre-flight check finds errors."),
)


def runner_scenario(kw: dict, ds_config=None, gpu_mem_cap=None):
    """The scenario of a real run: --model-path's config.json wins over --model; a run on one
    machine defaults to one GPU and one node (not the profile's counts)."""
    model = kw["model"]
    if kw["model_path"]:
        cfg_json = Path(kw["model_path"]).expanduser() / "config.json"
        if not cfg_json.is_file():
            raise ConfigError(f"--model-path {kw['model_path']}: no config.json there")
        model = str(cfg_json)
    return scenario_of({**kw, "model": model, "ds_config": ds_config or kw["ds_config"],
                        "gpus": kw["gpus"] or 1, "nodes": kw["nodes"] or 1},
                       gpu_mem_cap=gpu_mem_cap, swap_dir=kw["swap_dir"], judge="deepspeed")


def runner_spec(sc, kw: dict, out_dir, label: str, **extra):
    """The RunSpec of a scenario with the runner options."""
    from tierlab.runner.train import spec_from_strategy

    return spec_from_strategy(sc.model, sc.strategy, out_dir=str(out_dir), steps=kw["steps"],
                              warmup_steps=kw["warmup_steps"], model_path=kw["model_path"],
                              dataset=kw["dataset"], tokenizer=kw["tokenizer"],
                              gpu_mem_cap_bytes=sc.gpu_mem_cap_bytes, seed=kw["seed"],
                              label=label, **extra)


def _echo_problems(problems) -> bool:
    """Print each pre-flight problem on one line; True if any is an error."""
    for p in problems:
        click.echo(p.line(), err=True)
    return any(p.severity == "error" for p in problems)


@main.command()
@scenario_options
@runner_options
@click.option("--breakdown", is_flag=True,
              help="Synchronised forward/backward/optimizer timing (adds device syncs; the "
                   "record says so). Default: wall time only, no extra synchronisation.")
@click.option("--out", "out_dir", default=None, metavar="DIR",
              help="Measurement directory (default: runs/<time>-<model>).")
@click.option("--hostfile", default=None, metavar="FILE",
              help="DeepSpeed hostfile for several nodes (passed to the deepspeed launcher).")
@click.option("--keep-swap", is_flag=True, help="Leave the swap files after the run.")
@click.option("--overwrite", is_flag=True,
              help="Replace the measurement already in --out (refused without it).")
@quiet_option
@no_progress_option
@click.pass_context
def run(ctx, breakdown, out_dir, hostfile, keep_swap, overwrite, quiet, no_progress, **kw):
    """Train a Llama model with DeepSpeed for real and write a Measurement.

    One GPU (or the CPU) runs in this process; --gpus N > 1 or --hostfile goes through
    DeepSpeed's launcher. Writes DIR/measurement.json, steps.jsonl (flushed every step),
    samples.jsonl and summary.json. Ctrl-C or SIGTERM closes the record as "interrupted" with
    the steps measured. Exit 0 ok, 1 failed, 2 bad input, 130 Ctrl-C (SIGINT), 143 SIGTERM."""
    from tierlab.records.measurement import MEASUREMENT_FILE

    try:
        with signals_raise():
            _run(ctx, breakdown, out_dir, hostfile, keep_swap, overwrite, quiet, no_progress, kw)
    except (KeyboardInterrupt, Interrupted) as e:      # before or after the measured part
        signum = getattr(e, "signum", signal.SIGINT)
        out_dir = ctx.meta.get("tierlab.run.out")
        kept = (f"measurement: {out_dir}" if out_dir and (Path(out_dir) / MEASUREMENT_FILE)
                .exists() else "nothing was measured")
        click.echo(f"interrupted ({signal.Signals(signum).name}): {kept}", err=True)
        ctx.exit(128 + signum)


def _run(ctx, breakdown, out_dir, hostfile, keep_swap, overwrite, quiet, no_progress, kw):
    import time as _time

    from tierlab.safeio import free_folder

    require("torch", "deepspeed", "transformers", "psutil", what="tierlab run")
    from tierlab.runner.launch import launch_deepspeed
    from tierlab.records.measurement import MEASUREMENT_FILE, load_measurement
    from tierlab.runner.preflight import run_preflight
    from tierlab.runner.train import exit_code, run as run_training

    if out_dir and (Path(out_dir) / MEASUREMENT_FILE).exists() and not overwrite:
        raise ConfigError(f"--out {out_dir}: holds a measurement already; choose another folder "
                          "or pass --overwrite to replace it")
    writable(out_dir, "--out", folder=True)
    sc = runner_scenario(kw, gpu_mem_cap=kw["gpu_mem_cap"])
    echo_warnings(sc.warnings, sc.notes, quiet)
    out_dir = out_dir or str(free_folder(f"runs/{_time.strftime('%Y%m%d-%H%M%S')}-"
                                         f"{sc.model.name}"))
    writable(out_dir, "--out", folder=True)
    spec = runner_spec(sc, kw, out_dir, sc.config_where, breakdown=breakdown,
                       keep_swap=keep_swap)
    if kw["dataset"]:   # a bad dataset is a one-line error now, not a failed run later
        from tierlab.runner.data import make_batches

        make_batches(vocab=sc.model.vocab, micro_batch=1, seq=sc.model.seq_len,
                     dataset=kw["dataset"], tokenizer=kw["tokenizer"])
    if not kw["skip_preflight"] and _echo_problems(run_preflight(
            sc.hardware, sc.model, sc.strategy, gpu_mem_cap_bytes=sc.gpu_mem_cap_bytes)):
        click.echo("error: pre-flight failed (use --skip-preflight to launch anyway)", err=True)
        ctx.exit(2)
    ctx.meta["tierlab.run.out"] = out_dir        # from here on a record is being written
    if sc.strategy.data_parallel_size > 1 or hostfile:
        write_text(Path(out_dir) / "spec.json", spec.to_json())
        launch_deepspeed(Path(out_dir) / "spec.json", sc.hardware.gpus_per_node, hostfile)
        m = load_measurement(out_dir)
    else:
        with progress_bar("run", "step", no_progress, total=spec.steps) as bar:
            m = run_training(spec, on_step=lambda rec: bar.update(1))
    s = m.summary or {}
    st = (s.get("step_time_s") or {})
    click.echo(f"{m.status}{': ' + m.reason if m.reason else ''}")
    if st.get("n"):
        click.echo(f"steady step time {st['median']:.4f} s (IQR {st['iqr']:.4f} s, "
                   f"{st['n']} steps), {s.get('tokens_per_s', 0):.1f} tokens/s, "
                   f"loss {s.get('loss_last'):.4f}")
    click.echo(f"measurement: {out_dir}")
    ctx.exit(exit_code(m))


@main.command()
@scenario_options
@runner_options
@click.option("--variants", multiple=True, default=None,
              type=click.Choice(["no-offload", "zero2-cpu", "zero3-cpu", "zero3-nvme"]),
              help="Variants to run (repeatable; default: all four).")
@click.option("--uncapped-baseline/--no-uncapped-baseline", default=False, show_default=True,
              help="Also run no-offload without --gpu-mem-cap (the full card).")
@click.option("--timeout", "timeout_s", type=float, default=None, metavar="SECONDS",
              callback=_finite(0, open_min=True),
              help="Per-variant time limit; an over-time variant is a 'timeout' row.")
@click.option("--budget", "budget_s", type=float, default=None, metavar="SECONDS",
              callback=_finite(0, open_min=True),
              help="Total time for all variants: each gets at most what is left (a variant cut "
                   "short keeps its finished steps; one with no time left is skipped).")
@click.option("--out", "out_dir", default=None, metavar="DIR",
              help="Directory of the per-variant Measurements, compare.csv, compare.json and "
                   "compare.png (default: runs/compare-<time>).")
@click.option("--overwrite", is_flag=True,
              help="Replace the comparison already in --out: its table files and the "
                   "Measurements of the variants run now (refused without it).")
@click.pass_context
def compare(ctx, variants, uncapped_baseline, timeout_s, budget_s, out_dir, overwrite, **kw):
    """The exercise: train the same model and data for real with no offload, ZeRO-2 CPU, ZeRO-3
    CPU and ZeRO-3 NVMe, each in its own subprocess (an OOM or a DeepSpeed failure is a row with
    its reason), e.g. TinyLlama-1.1B on an 8 GiB card: `tierlab compare --gpu-mem-cap 8GiB
    --uncapped-baseline` (docs/exercise.md). Prints one table (a run whose own loss looks wrong
    is marked "!") and writes compare.csv, compare.png and compare.json under --out. Ctrl-C or
    SIGTERM stops the running variant, which keeps its finished steps, and still writes the
    table of the rows so far (exit 130/143). --ds-config is not used: each variant uses its
    preset, with the --set overrides applied to all."""
    import time as _time

    from tierlab.safeio import free_folder

    out_dir = out_dir or str(free_folder(f"runs/compare-{_time.strftime('%Y%m%d-%H%M%S')}"))
    writable(out_dir, "--out", folder=True)
    require("torch", "deepspeed", "transformers", "psutil", what="tierlab compare")
    from tierlab.runner.compare import (VARIANTS, Planned, earlier_outputs, figure, format_table,
                                        rows_to_csv, run_comparison)

    cap = kw["gpu_mem_cap"]
    todo = [(v, cap) for v in (variants or VARIANTS)]
    if uncapped_baseline:
        todo.insert(0, ("no-offload", None))
    labels = [f"{v}-uncapped" if cap is not None and vcap is None else v for v, vcap in todo]
    there = earlier_outputs(out_dir, labels)
    if there and not overwrite:
        raise ConfigError(f"--out {out_dir}: holds a comparison already ({', '.join(there)}); "
                          "choose another folder or pass --overwrite to replace it")
    planned = []
    for (variant, vcap), label in zip(todo, labels):
        sc = runner_scenario(kw, VARIANTS[variant][0], gpu_mem_cap=vcap)
        planned.append(Planned(label, sc, runner_spec(sc, kw, Path(out_dir) / label, label)))
    signum = None
    try:
        with signals_raise():
            rows = run_comparison(planned, preflight=not kw["skip_preflight"],
                                  timeout_s=timeout_s, budget_s=budget_s,
                                  say=lambda text: click.echo(text, err=True))
    except Interrupted as e:                # the finished rows are kept (runner.compare)
        rows, signum = e.partial, e.signum
    click.echo(format_table(rows))
    out = Path(out_dir)
    write_text(out / "compare.csv", rows_to_csv(rows))      # runner.compare.TABLE_FILES
    write_json(out / "compare.json", rows)
    sc = planned[-1].scenario
    title = (f"{sc.model.name}, micro-batch {sc.strategy.train_micro_batch_size_per_gpu}, "
             f"seq {sc.model.seq_len}" + (f", GPU cap {fmt_gib(sc.gpu_mem_cap_bytes, 0)}"
                                          if cap else ""))
    save_figure(figure(rows, title=title), out / "compare.png")
    click.echo(f"wrote {out / 'compare.csv'}, {out / 'compare.json'}")
    if signum is not None:
        click.echo(f"interrupted ({signal.Signals(signum).name}): the rows above are kept",
                   err=True)
        ctx.exit(128 + signum)


@main.command()
@scenario_options
@options(gpu_mem_cap_option, swap_dir_option)
@click.option("--no-probe", is_flag=True,
              help="Probe nothing on this machine (libaio/async_io, swap path O_DIRECT and "
                   "space, RAM): judge the named hardware profile only.")
@click.option("--no-memory", is_flag=True, help="Skip the memory planner's per-tier verdict.")
@quiet_option
@click.pass_context
def preflight(ctx, gpu_mem_cap, swap_dir, no_probe, no_memory, quiet, **kw):
    """Check a launch before it is made: memory per tier, libaio/async_io, the swap path
    (exists, writable, O_DIRECT, free space), pinned memory, swap buffer counts and sizes,
    ignored keys, TORCH_CUDA_ARCH_LIST. One line per problem with its fix; exit 2 on errors.

    Host RAM is this machine's unless -H names a profile or --no-probe is given: then the
    profile's RAM is judged."""
    from tierlab.runner.preflight import run_preflight

    if not no_probe:        # libaio/async_io is probed through DeepSpeed's op builder
        require("torch", "deepspeed", what="preflight (probing this machine; --no-probe judges "
                                           "the named profile only)")
    sc = scenario_of(kw, gpu_mem_cap=gpu_mem_cap, swap_dir=swap_dir,
                     judge="table" if no_probe else "deepspeed")
    local = not no_probe and not _given(ctx, "hardware")
    problems = run_preflight(sc.hardware, sc.model, sc.strategy, software=sc.software,
                             gpu_mem_cap_bytes=sc.gpu_mem_cap_bytes,
                             check_memory_plan=not no_memory, probe=not no_probe,
                             local_ram=local)
    echo_warnings(sc.warnings, sc.notes, quiet)   # ignored keys: DeepSpeed runs without them
    if _echo_problems(problems):
        ctx.exit(2)
    if not problems and not sc.warnings:
        click.echo("ok: no problems found")
    elif not problems:
        click.echo(f"ok: no errors; {len(sc.warnings)} warning(s)"
                   + (" (--quiet)" if quiet else " above"))

# ----------------------------------------------------------------------------------------------
# calibrate / validate

@main.command()
@click.option("--nvme-path", default=None, metavar="DIR",
              help="Directory on the drive to measure with DeepSpeed aio (O_DIRECT); must exist, "
                   "be writable and not be tmpfs. Without it the NVMe part comes from --hardware.")
@click.option("--out", default=None, metavar="FILE",
              help="System profile YAML to write (default: DIR/hardware/systems/NAME.yaml, DIR "
                   "the first folder $TIERLAB_PROFILES names, else ./tierlab-profiles: with "
                   "TIERLAB_PROFILES=DIR every verb finds it by name); the measured GPU/CPU/NVMe "
                   "parts go to gpus/, cpus/, nvme/ beside its systems/ folder, or beside FILE "
                   "when it is not in one.")
@click.option("--name", default=None,
              help="Profile name, also the file stem of the part profiles (default: the --out "
                   "file stem, else calibrated-HOSTNAME).")
@click.option("--hardware", "-H", default=DEFAULT_HARDWARE, show_default=True, metavar="BASE",
              help="Base system profile: what cannot be measured here (network, a GPU on a "
                   "CPU-only host, ...) is copied from it with its original sources.")
@click.option("--quick", is_flag=True,
              help="Few sizes and points, small files, no DeepSpeed host costs (CI, smoke "
                   "checks; 5 min 23 s on a 2-core box without a GPU).")
@click.option("--raw", default=None, metavar="FILE",
              help="Also write every measured point, with its settings, host facts and library "
                   "versions, as JSON. Rewritten after every benchmark (\"complete\": false "
                   "until the end), so a killed calibration keeps what it measured: rebuild "
                   "with --from-raw.")
@click.option("--skip", default="", metavar="LIST",
              help="Comma-separated benchmarks not to run: gpu, pcie, gemm, layer (real Hugging "
                   "Face decoder layers at each model's width, plain and checkpointed, ~1-2 min), "
                   "nccl, aio, adam, memcpy, dispatch (the hooked module-call time), deepspeed "
                   "(DeepSpeed's host costs on narrow Llama models, 5-8 min; lab/notes/host-costs.md), "
                   "overflow (ZeRO-3's fp16 overflow check over a 512 MiB fp16 host buffer, seconds).")
@click.option("--sweep", multiple=True, metavar="KEY=V1,V2",
              help="Override sweep points, e.g. --sweep aio_block_sizes=1M,8M --sweep "
                   "aio_queue_depths=32,128 --sweep repeats=2 (sizes: K/M/G = KiB/MiB/GiB; "
                   "repeatable; keys are the fields of runner.microbench.SweepPlan).")
@click.option("--from-raw", "from_raw", default=None, metavar="FILE",
              help="Measure nothing: rebuild the profile from a raw record that an earlier "
                   "`calibrate --raw` wrote (on this or another host), with this version's rules.")
def calibrate(nvme_path, out, name, hardware, quick, raw, skip, sweep, from_raw):
    """Measure this host (PCIe, GEMM, NCCL, aio, CPU Adam, memcpy, module call) into a profile.

    Writes a system profile in the loader's format whose measured numbers say 'measured <date> by
    tierlab calibrate: <settings>', plus the measured part profiles; what it cannot measure is
    taken from --hardware and keeps its source. Benchmarks that need missing hardware are
    skipped and listed, and so is each DeepSpeed host-cost term that measured nothing (not two
    depths, or a difference at or below zero): the software profile's value stays for it."""
    import socket

    from tqdm import tqdm

    from tierlab.profiles.load import own_hardware_dir
    from tierlab.runner import calibrate as cal
    from tierlab.runner.calibrate_profile import layout

    for flag, value in (("--out", out), ("--raw", raw), ("--from-raw", from_raw)):
        if value is not None and not value.strip():     # "" must not mean the default folder
            raise ConfigError(f"{flag}: empty path")

    if from_raw:
        from tierlab.profiles.load import read_data

        record = read_data(Path(from_raw))
        name = name or (Path(out).stem if out else None)
        try:
            result = cal.from_raw(record, name=name, where=from_raw)
        except (TypeError, ValueError, KeyError, AttributeError, IndexError,
                ZeroDivisionError) as e:
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(f"{from_raw}: not a usable calibrate raw record "
                              f"({type(e).__name__}: {e})") from None
        name = result.hardware.name
        out_path = Path(out) if out else own_hardware_dir() / "systems" / f"{name}.yaml"
        _write_calibration(result, _calibration_paths(layout(out_path, name), raw), raw)
        return
    if name is None:
        name = Path(out).stem if out else f"calibrated-{socket.gethostname().split('.')[0]}"
    out_path = Path(out) if out else own_hardware_dir() / "systems" / f"{name}.yaml"
    paths = _calibration_paths(layout(out_path, name), raw)    # refused now, not after measuring

    require("torch", "psutil", what="calibrate (measuring)")
    plan = cal.apply_sweep_overrides(cal.quick_plan() if quick else cal.SweepPlan(), list(sweep))
    skips = {s.strip() for s in skip.split(",") if s.strip()}

    def bar(tasks):
        progress = tqdm(tasks, desc="calibrate", unit="pt", file=sys.stderr, mininterval=0.5)
        for task in progress:
            progress.set_postfix_str(task.label, refresh=False)
            yield task

    result = cal.calibrate(name=name, base=hardware, nvme_path=nvme_path, plan=plan, skip=skips,
                           progress=bar, save_raw=(lambda rec: write_json(raw, rec)) if raw else None)
    _write_calibration(result, paths, raw)


def _calibration_paths(paths: dict, raw: str | None) -> dict:
    """The profile paths, each checked writable (with --raw) before anything is measured."""
    for path in paths.values():
        writable(path, "--out")
    writable(raw, "--raw")
    return paths


def _write_calibration(result, paths: dict, raw: str | None) -> None:
    if raw:    # first: the measured points are the expensive part
        write_json(raw, result.raw)
        click.echo(f"wrote {raw}")
    for kind, text in result.texts.items():
        write_text(paths[kind], text)
        click.echo(f"wrote {paths[kind]}")
    hw = result.hardware
    click.echo(f"{hw.name}: PCIe H2D/D2H pinned {hw.pcie.h2d_pinned_Bps / 1e9:.1f}/"
               f"{hw.pcie.d2h_pinned_Bps / 1e9:.1f} GB/s, DRAM {hw.cpu.dram_bandwidth_Bps / 1e9:.1f}"
               f" GB/s, CPU Adam {hw.cpu.adam_params_per_s / 1e9:.2f} G params/s"
               + (f", module call {hw.cpu.module_call_s * 1e6:.2f} us" if hw.cpu.module_call_s
                  else "")
               + (f", NVMe read/write {hw.nvme.read_bandwidth_Bps / 1e9:.2f}/"
                  f"{hw.nvme.write_bandwidth_Bps / 1e9:.2f} GB/s" if hw.nvme else ""))
    for group, why in result.skipped.items():
        click.echo(f"skipped {group}: {why}")


@main.command()
@click.argument("cases", nargs=-1, type=click.Path())
@click.option("--hardware", "-H", default=None,
              help="Calibrated system profile of the host the runs were measured on, for every "
                   "run. Default: per folder, the profile its validate.yaml names (`hardware: "
                   "PROFILE` or a path relative to the folder, written beside runs calibrated with them).")
@click.option("--out", default="out/validate", show_default=True, metavar="DIR",
              help="Where to write validate.csv, summary.json, split.json, coverage.json, "
                   "scatter.png and phases.png.")
@click.option("--max-error", type=float, default=None, metavar="PCT", callback=_finite(0),
              help="Exit 1 if the mean absolute error of the steady step time exceeds PCT %.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--train", "train", multiple=True, metavar="CASE",
              help="Case names the software profile's fitted terms were fitted on (repeatable; "
                   "default: its train_cases); the summary shows train and held-out separately.")
@click.option("--software", default="deepspeed-0.19.8", show_default=True,
              help="Software profile (profiles/software/) with the fitted host-side terms.")
@click.option("--loco", is_flag=True,
              help="Leave-one-class-out instead: per class of runs (stage, mechanism, model, "
                   "machine), refit the software profile without the class and predict the "
                   "class's runs; prints per class n, steady step MAPE and max, and phase MAPE. "
                   "Writes loco.json to --out; --max-error applies to the pooled held-out MAPE.")
@click.option("--class", "classes", multiple=True, metavar="CLASS",
              help="With --loco: hold out only this class (repeatable), e.g. stage3-cpu, "
                   "multi-rank, nvme-no-pipeline, model:llama-3b, machine:h200x2-e. Default: "
                   "every class with a finished run.")
@click.option("--pool", type=click.Choice(["train", "all"]), default="train", show_default=True,
              help="With --loco: the runs the refits draw from: the software profile's "
                   "train_cases (or --train), or every finished run under CASES.")
@click.option("--strict", is_flag=True,
              help="With --loco: also predict each run by a fit on the pool runs that share none "
                   "of its classes.")
@click.option("--example", is_flag=True,
              help="Validate the two runs shipped with tierlab (TinyLlama-1.1B, ZeRO-2 and ZeRO-3 "
                   "CPU offload, measured on an H200 with its calibration) instead of CASES.")
def validate(cases, hardware, out, max_error, as_json, train, software, loco, classes, pool,
             strict, example):
    """Simulate each measured run's exact config and compare with what was measured.

    CASES are measurement directories (or folders holding them), or --example. Prints
    predicted vs measured per run and metric (steady step time, step 1, forward/backward/optimizer,
    GPU peak allocated, host RSS, swap bytes, OOM), the mean absolute percentage error and the
    max per metric, and how many runs' steady step falls inside its predicted 80% range
    (docs/ranges.md); writes CSV, JSON and PNG figures to --out."""
    from tierlab.profiles.load import load_software
    from tierlab.validate.compare import EXAMPLE_CASES, validate_cases
    from tierlab.validate.report import format_validation, phase_bars_figure, scatter_figure

    if example == bool(cases):
        raise ConfigError("give measured run folders (CASES) or --example (the runs shipped "
                          "with tierlab), one of the two")
    cases = list(cases) or [EXAMPLE_CASES]
    writable(out, "--out", folder=True)
    sw = load_software(software)
    if loco or classes or strict or pool != "train":
        return _validate_loco(cases, sw, hardware, out, max_error, as_json,
                              pool if pool == "all" or not train else list(train),
                              classes, strict, loco)
    report = validate_cases(cases, sw, hardware=hardware,
                            train=train or sw.train_cases)
    if report.unfinished:
        click.echo(f"warning: {len(report.unfinished)} run(s) neither finished nor ran out of "
                   f"memory (killed, interrupted or failed otherwise); left out: "
                   f"{', '.join(report.unfinished)}", err=True)
    out_dir = Path(out)
    write_text(out_dir / "validate.csv", report.csv())
    write_json(out_dir / "summary.json", report.summary)
    write_json(out_dir / "split.json", report.split)
    save_figure(scatter_figure(report.rows), out_dir / "scatter.png", quiet=True)
    save_figure(phase_bars_figure(report.rows), out_dir / "phases.png", quiet=True)
    from tierlab.validate.coverage import coverage, format_coverage, summarize_coverage

    covered = coverage(cases, sw, hardware=hardware)
    ranges = summarize_coverage(covered)
    write_json(out_dir / "coverage.json", {**ranges, "runs": [c.to_dict() for c in covered]})
    if as_json:
        click.echo(json.dumps({**report.summary, "split": report.split, "coverage": ranges},
                              indent=2))
    else:
        click.echo(format_validation(report.rows, report.summary, report.split, sw.name,
                                     len(set(train or sw.train_cases))))
        click.echo(format_coverage("steady step in its predicted range", covered))
        click.echo(f"wrote {out_dir}/validate.csv, summary.json, split.json, coverage.json, "
                   "scatter.png, phases.png")
    step = report.summary.get("step_time_s")
    if max_error is not None and step and step["mape_pct"] > max_error:
        click.echo(f"error: steady step time MAPE {step['mape_pct']:.1f}% > --max-error "
                   f"{max_error}%", err=True)
        sys.exit(1)


def _validate_loco(cases, sw, hardware, out, max_error, as_json, pool, classes, strict, loco):
    """`validate --loco`: the leave-one-class-out table (validate/loco.py)."""
    from tierlab.validate.loco import format_table, loco as run_loco

    if not loco:
        raise ConfigError("--class, --pool and --strict need --loco")
    report = run_loco(cases, sw, pool=pool, classes=list(classes) or None, hardware=hardware,
                      strict=strict)
    write_json(Path(out) / "loco.json", report.to_dict())
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else format_table(report))
    step = report.overall.get("step_time_s")
    if max_error is not None and step and step["mape_pct"] > max_error:
        click.echo(f"error: held-out classes' steady step time MAPE {step['mape_pct']:.1f}% > "
                   f"--max-error {max_error}%", err=True)
        sys.exit(1)

# ----------------------------------------------------------------------------------------------
# plot / sweep / plan

PLOT_KINDS = ("bottleneck", "timeline", "memory", "sweep")


@main.command()
@click.argument("kind", type=click.Choice(PLOT_KINDS))
@scenario_options
@click.option("--compare", multiple=True, metavar="CONFIG",
              help="bottleneck/memory: another ds_config preset or path drawn side by side "
                   "(repeatable). With no --model/--hardware/--ds-config/--compare: the four "
                   "built-in presets at micro-batch 4, seq 1024.")
@gpu_mem_cap_option
@click.option("--measurement", default=None, metavar="PATH",
              help="timeline: a measured run (Measurement JSON, JSONL, a samples CSV, or its "
                   "folder); its sampled GPU utilisation and PCIe/disk throughput are drawn "
                   "under the simulation of the scenario it ran (-H: its hardware, default the "
                   "profile its folder's validate.yaml names).")
@click.option("--results", default=None, metavar="FILE",
              help="sweep: a results file (.csv/.parquet) written by `tierlab sweep --out`.")
@click.option("--x", "x_key", default=None, metavar="KEY",
              help="sweep: the swept key on the x axis (default: the first swept key).")
@click.option("--by", multiple=True, metavar="KEY",
              help="sweep: one line per value of this column (repeatable; default: the other "
                   "swept keys).")
@click.option("--title", default=None, help="Figure title (default: a descriptive one).")
@click.option("--out", "-o", default=None, metavar="FILE",
              help="Image file: .png, .svg or .pdf; without a suffix both .png and .svg "
                   "[default: tierlab-KIND.png].")
@quiet_option
@click.pass_context
def plot(ctx, kind, compare, gpu_mem_cap, measurement, results, x_key, by, title, out, quiet,
         **kw):
    """Plot where the time and bytes go: bottleneck, timeline, memory or sweep.

    \b
    bottleneck  stacked exposed time per resource per config, step time and roofline marked
    timeline    Gantt lanes per resource for one simulated step (+ measured samples)
    memory      bytes per tier (GPU, pinned/pageable host, NVMe) against capacity
    sweep       step time and tokens/s along a swept key (needs --results)"""
    from tierlab.validate import plots
    from tierlab.validate.plot_style import image_targets
    from tierlab.validate.plot_sweep import sweep_figure

    out = writable(f"tierlab-{kind}.png" if out is None else out, "--out")
    for target in image_targets(out):
        writable(target, "--out")
    if kind == "sweep":
        if not results:
            raise ConfigError("plot sweep needs --results FILE (written by `tierlab sweep --out`)")
        from tierlab.sweeps.run import read_results

        df = read_results(results)
        if df.empty:
            raise ConfigError(f"{results}: no such file or no rows")
        save_figure(sweep_figure(df, x_key, by, title), out)
        return
    if kind == "timeline" and measurement:
        return _measured_timeline(ctx, measurement, gpu_mem_cap, title, quiet, out, kw)
    configs = builtin_configs(ctx, kw, compare) if kind != "timeline" else [kw["ds_config"]]
    sims = []
    for cfg in configs:
        sc = scenario_of({**kw, "ds_config": cfg}, gpu_mem_cap=gpu_mem_cap)
        echo_warnings(sc.warnings, sc.notes, quiet)
        sims.append((sc.config_name, sc.simulate(ranges=True)))
    if kind == "bottleneck":
        fig = plots.bottleneck(sims, title=title)
    elif kind == "memory":
        fig = plots.memory(sims, title=title)
    else:
        fig = plots.timeline(sims[0][1], None, title=title)
    save_figure(fig, out)


def _measured_timeline(ctx, measurement, gpu_mem_cap, title, quiet, out, kw) -> None:
    """`plot timeline --measurement`: a measured run is drawn under the simulation of the
    scenario it ran (on -H, else the profile its folder's validate.yaml names); scenario options
    that would simulate something else are refused. Bare samples carry no scenario: the
    options' scenario is simulated, with a warning."""
    from tierlab.records.measurement import Measurement
    from tierlab.validate import plots
    from tierlab.validate.compare import run_scenario
    from tierlab.validate.plot_samples import read_measurement

    meas = read_measurement(measurement)
    if isinstance(meas, Measurement) and meas.model:
        given = [p for p in SCENARIO_KEYS if p != "hardware" and _given(ctx, p)]
        if given or gpu_mem_cap:
            names = ", ".join("--" + p.replace("_", "-") for p in given) or "--gpu-mem-cap"
            raise ConfigError(f"--measurement {measurement}: the run brings its own scenario "
                              f"(model, ds_config, batch, seq, GPUs, memory cap); drop {names}")
        sc = run_scenario(meas, Path(measurement), kw["hardware"] if _given(ctx, "hardware")
                          else None)
    else:
        sc = scenario_of(kw, gpu_mem_cap=gpu_mem_cap)
        if not quiet:
            click.echo(f"warning: {measurement}: samples without a recorded scenario: drawn "
                       f"under the options' scenario ({sc.describe()})", err=True)
    echo_warnings(sc.warnings, sc.notes, quiet)
    save_figure(plots.timeline(sc.simulate(ranges=True), meas, title=title), out)


@main.command()
@scenario_options
@click.option("--vary", "varies", multiple=True, metavar="KEY=V1,V2,...",
              help="A swept key and its values (repeatable; the grid is their product). Keys: "
                   "ds_config dotted keys (zero_optimization.sub_group_size), micro_batch, "
                   "grad_accum, seq, gpus, nodes, config, model, hardware, precision, "
                   "checkpointing, hardware keys (nvme.drives, nvme.read_bandwidth=3GB/s,...) "
                   "and model.* keys; see --list-keys. Ranges: 1..8, 1..64:x2.")
@click.option("--out", "-o", default=None, metavar="FILE",
              help="Results file, .csv or .parquet (Parquet needs pyarrow), written atomically; "
                   "rows already in it are skipped (resume), and Ctrl-C/SIGTERM keeps the rows "
                   "done in it. Without it the rows are printed as CSV on stdout, on Ctrl-C or "
                   "SIGTERM too (the rows done so far).")
@click.option("--jobs", "-j", type=int, default=None,
              help="Worker processes (default: every core this process may use).")
@click.option("--memory-only", is_flag=True,
              help="Only plan memory per point (fits, bytes per tier); no simulation.")
@click.option("--strict", is_flag=True,
              help="A point that does not fit memory is an error row instead of a simulated one.")
@click.option("--plot", "plot_path", default=None, metavar="FILE",
              help="Also plot step time and tokens/s along --x (PNG/SVG).")
@click.option("--x", "x_key", default=None, metavar="KEY",
              help="Key on the plot's x axis (default: the first --vary key).")
@click.option("--by", multiple=True, metavar="KEY",
              help="One plot line per value of this column (default: the other --vary keys).")
@click.option("--list-keys", is_flag=True, help="List every key --vary accepts and exit.")
@no_progress_option
@quiet_option
@click.pass_context
def sweep(ctx, varies, out, jobs, memory_only, strict, plot_path, x_key, by, list_keys,
          no_progress, quiet, **kw):
    """What-if grid over hardware, strategy, batch and model keys; one row per point.

    Invalid combinations are rows with the reason in `error`. Example:
    tierlab sweep -c zero3-nvme --micro-batch 4 --seq 1024 --vary nvme.drives=1,2,4,8
    --vary zero_optimization.sub_group_size=1e8,1e9 --out drives.csv --plot drives.png"""
    from tierlab.sim.ranges import simulate_ranged
    from tierlab.sweeps.run import Base, all_failed, parse_vary, resolve, run_sweep, summary
    from tierlab.sweeps.keys import all_keys

    if list_keys:
        for key, what in all_keys().items():
            click.echo(f"{key:52s} {what}")
        return
    axes = [parse_vary(v) for v in varies]
    if not axes:
        raise ConfigError("empty grid: give at least one --vary KEY=V1,V2,...")
    writable(out, "--out")
    if plot_path:
        from tierlab.validate.plot_style import image_targets

        for target in image_targets(writable(plot_path, "--plot")):
            writable(target, "--plot")
    base = Base(**{**kw, "overrides": tuple(kw["overrides"])})
    try:
        base_sc = resolve(base)
        echo_warnings(base_sc.warnings, base_sc.notes, quiet)
    except ValueError as e:          # the base itself is broken: say so once
        raise ConfigError(str(e)) from None
    # step_time_low_s / step_time_high_s columns: the 80% range (docs/ranges.md)
    simulator = None if memory_only else simulate_ranged
    try:
        with signals_raise(), progress_bar("sweep", "config", no_progress) as bar:
            outcome = run_sweep(base, axes, simulator=simulator, strict=strict, jobs=jobs,
                                out=out, on_start=lambda todo, skipped: bar.reset(total=todo),
                                on_rows=lambda rows: bar.update(len(rows)))
    except (KeyboardInterrupt, Interrupted) as e:
        signum, done = getattr(e, "signum", signal.SIGINT), getattr(e, "partial", None)
        if out:
            kept = f"the rows done are in {out}; run the same command to resume"
        elif done is not None and not done.frame.empty:     # no file: the rows go to stdout
            click.echo(done.frame.to_csv(index=False), nl=False)
            kept = (f"the {len(done.frame)} of {done.total} rows done are printed above as CSV; "
                    "with --out FILE they are kept in FILE and a rerun resumes")
        else:
            kept = "no row was finished"
        click.echo(f"interrupted ({signal.Signals(signum).name}): {kept}", err=True)
        ctx.exit(128 + signum)
    if outcome.torn:
        click.echo(f"warning: {out}: {outcome.torn} torn row(s) ignored and recomputed", err=True)
    df = outcome.frame
    if out is None:
        click.echo(df.to_csv(index=False), nl=False)
    click.echo(summary(outcome, out), err=out is None)
    if failure := all_failed(outcome):
        raise ConfigError(failure)
    if plot_path and not memory_only:
        from tierlab.validate.plot_sweep import sweep_figure

        save_figure(sweep_figure(df, x_key or axes[0].key, by, None), plot_path)
    elif plot_path:
        raise ConfigError("--plot needs simulated rows (drop --memory-only)")


@main.command()
@options(model_option, hardware_option, gpus_option, nodes_option, seq_option)
@click.option("--global-batch", type=int, default=None,
              help="Sequences per optimizer step over all GPUs; the planner trades micro-batch "
                   "against gradient accumulation at this size.")
@click.option("--grad-accum", type=int, default=None,
              help="Gradient accumulation steps when --global-batch is not given (default 1); "
                   "with --ds-config: your config's, where it says \"auto\".")
@click.option("--micro-batch", type=int, default=None,
              help="Fix the micro-batch (default: searched over 1, 2, 4, ... --max-micro-batch); "
                   "with --ds-config: your config's micro-batch, where it says \"auto\" (the "
                   "search still tries others at the same global batch).")
@click.option("--max-micro-batch", type=int, default=64, show_default=True,
              help="Largest micro-batch the search tries.")
@click.option("--checkpointing/--no-checkpointing", default=None,
              help="Fix activation checkpointing (default: try both).")
@click.option("--precision", type=click.Choice(["fp16", "bf16", "fp32"]), default=None,
              help="Compute dtype (default: bf16 where the GPU has it, else fp16).")
@click.option("--min-tokens-per-s", type=float, default=None,
              help="Reject configurations slower than this (tokens/s of the whole job).")
@click.option("--max-gpu-mem", default=None, metavar="BYTES",
              help="Use at most this much memory per GPU, e.g. 70GB (leave headroom).")
@click.option("--nvme-path", default="/local_nvme", show_default=True,
              help="nvme_path written into the ds_config for NVMe offload.")
@click.option("--out", "-o", default=None, metavar="FILE",
              help="Write the winner's ds_config.json here (atomically), ready for deepspeed.")
@click.option("--ds-config", "-c", default=None, metavar="FILE",
              help="Start from your DeepSpeed config (a ds_config.json path or preset): it is "
                   "simulated as it is ('yours'), the search changes it instead of a template "
                   "and keeps its global batch, and the output lists what to change as dotted "
                   "DeepSpeed keys (yours -> proposed), each group with the step time and "
                   "tokens/s it leads to. --micro-batch/--grad-accum then fill its batch "
                   "\"auto\" (see docs/ds-config.md).")
@click.option("--write-config", default=None, metavar="FILE",
              help="With --ds-config: write your config with the proposed keys changed "
                   "(atomically). \"auto\" stays where you had it for the keys the Hugging Face "
                   "integration fills and the trainer arguments to pass are printed, so the file "
                   "drops into the HF Trainer, axolotl or LLaMA-Factory unchanged.")
@json_option
@quiet_option
@click.option("--jobs", "-j", type=int, default=1, show_default=True,
              help="Worker processes for the simulations.")
@no_progress_option
@click.pass_context
def plan(ctx, model, hardware, gpus, nodes, seq, global_batch, grad_accum, micro_batch,
         max_micro_batch, checkpointing, precision, min_tokens_per_s, max_gpu_mem, nvme_path,
         out, ds_config, write_config, as_json, quiet, jobs, no_progress):
    """The fastest DeepSpeed configuration that fits every tier, and why the others lost.

    Searches ZeRO stage, CPU/NVMe offload of parameters and optimizer, micro-batch, gradient
    accumulation, checkpointing, sub_group_size, swap buffers and aio settings. Exits 1 when
    nothing fits (or nothing reaches --min-tokens-per-s). The ranking is by tokens/s."""
    from tierlab.scenario import machine_and_model, parse_bytes
    from tierlab.planner.search import format_plan, plan as run_plan

    for flag, value in (("--micro-batch", micro_batch), ("--grad-accum", grad_accum),
                        ("--global-batch", global_batch), ("--max-micro-batch", max_micro_batch),
                        ("--jobs", jobs)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be >= 1, got {value}")
    if global_batch is not None and grad_accum is not None and not ds_config:
        raise ConfigError("give --global-batch or --grad-accum, not both")
    if write_config and not ds_config:
        raise ConfigError("--write-config needs --ds-config (the config to change)")
    writable(out, "--out")
    writable(write_config, "--write-config")
    hw, mdl, notes = machine_and_model(model, hardware, seq=seq, gpus=gpus, nodes=nodes)
    echo_warnings((), notes, quiet or as_json)
    search = dict(global_batch=global_batch, micro_batch=micro_batch, grad_accum=grad_accum,
                  checkpointing=checkpointing, precision=precision,
                  min_tokens_per_s=min_tokens_per_s, nvme_path=nvme_path,
                  max_gpu_mem_bytes=parse_bytes(max_gpu_mem, "--max-gpu-mem")
                  if max_gpu_mem else None, max_micro_batch=max_micro_batch, jobs=jobs)
    if ds_config:
        return _plan_from(ctx, hw, mdl, ds_config, write_config, out, as_json, no_progress,
                          **search)
    with progress_bar("plan", "sim", no_progress) as bar:
        result = run_plan(hw, mdl, progress=bar.update, **search)
    if out and result.ds_config is not None:
        write_json(out, result.ds_config)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, default=str))
    else:
        click.echo(format_plan(result))
        if out and result.ds_config is not None:
            click.echo(f"wrote {out} (deepspeed --num_gpus {hw.gpus_per_node} train.py "
                       f"--deepspeed {out})")
    if result.best is None:
        ctx.exit(1)


def _plan_from(ctx, hw, mdl, ds_config, write_config, out, as_json, no_progress, **kw):
    """plan --ds-config: yours, the proposal as key changes, --write-config with "auto" kept."""
    from tierlab.dsconfig.read import load_ds_config
    from tierlab.planner.from_config import format_from_config, plan_from_config, proposed_config

    cfg, where = load_ds_config(ds_config)
    with progress_bar("plan", "sim", no_progress) as bar:
        result = plan_from_config(hw, mdl, cfg, where, progress=bar.update, **kw)
    proposed, told = proposed_config(cfg, result)
    if out and result.plan.ds_config is not None:
        write_json(out, result.plan.ds_config)
    if write_config:
        write_json(write_config, proposed)
    if as_json:
        click.echo(json.dumps({**result.to_dict(), "trainer": told}, indent=2, default=str))
    else:
        click.echo(format_from_config(result))
        for line in told:
            click.echo(f"* {line}")
        if write_config:
            click.echo(f"wrote {write_config} (your config with the changes above)")
    if result.plan.best is None:
        ctx.exit(1)


if __name__ == "__main__":
    main()
