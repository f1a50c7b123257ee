"""`tierlab plot`: where the time and bytes go (bottleneck, timeline, memory, sweep, loss)."""
from __future__ import annotations

from pathlib import Path

import click

from tierlab.commands.examples import epilog
from tierlab.commands.common import (SCENARIO_KEYS, echo_warnings, given, save_figure,
                                     scenario_of, writable)
from tierlab.commands.options import (builtin_configs, gpu_mem_cap_option, quiet_option,
                                      scenario_options)
from tierlab.errors import ConfigError

PLOT_KINDS = ("bottleneck", "timeline", "memory", "sweep", "loss")


@click.command(epilog=epilog("plot"))
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
                   "profile its folder's validate.yaml names). loss: a run folder or a folder "
                   "of runs (a `compare --out`).")
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
    """Plot where the time and bytes go: bottleneck, timeline, memory, sweep or loss.

    \b
    bottleneck  stacked exposed time per resource per config, step time and roofline marked
    timeline    Gantt lanes per resource for one simulated step (+ measured samples)
    memory      bytes per tier (GPU, pinned/pageable host, NVMe) against capacity
    sweep       step time and tokens/s along a swept key (needs --results)
    loss        measured training loss per step, one line per run (needs --measurement)"""
    from tierlab.validate import plots
    from tierlab.validate.plot_style import image_targets
    from tierlab.validate.plot_sweep import sweep_figure

    out = writable(f"tierlab-{kind}.png" if out is None else out, "--out",
                   inputs=(measurement, results, kw.get("model"), kw.get("ds_config")))
    for target in image_targets(out):
        writable(target, "--out")
    if kind == "sweep":
        if not results:
            raise ConfigError("plot sweep needs --results FILE (written by `tierlab sweep --out`)")
        from tierlab.sweeps.run import read_results

        df = read_results(results, fix="--results takes the CSV or Parquet a sweep wrote")
        if df.empty:
            raise ConfigError(f"{results}: no such file or no rows")
        try:
            figure = sweep_figure(df, x_key, by, title)
        except ConfigError as e:        # the results file named: it is what the message is about
            raise ConfigError(f"{results}: {e}") from None
        save_figure(figure, out)
        return
    if kind == "loss":
        from tierlab.validate.plot_loss import loss_figure, read_runs

        if not measurement:
            raise ConfigError("plot loss needs --measurement DIR (a run folder, or the --out "
                              "folder of `tierlab compare`)")
        save_figure(loss_figure(read_runs(measurement), title=title), out)
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
    from tierlab.validate.compare import run_engine, run_scenario
    from tierlab.validate.plot_samples import read_measurement

    meas = read_measurement(measurement)
    if isinstance(meas, Measurement) and run_engine(meas) != "deepspeed":
        raise ConfigError(f"--measurement {measurement}: trained by run.engine "
                          f"{run_engine(meas)!r}; the timeline draws DeepSpeed's simulated "
                          "schedule under a run, so it takes DeepSpeed runs only")
    if isinstance(meas, Measurement) and meas.model:
        named = [p for p in SCENARIO_KEYS if p != "hardware" and given(ctx, p)]
        if named or gpu_mem_cap:
            names = ", ".join("--" + p.replace("_", "-") for p in named) or "--gpu-mem-cap"
            raise ConfigError(f"--measurement {measurement}: the run brings its own scenario "
                              f"(model, ds_config, batch, seq, GPUs, memory cap); drop {names}")
        sc = run_scenario(meas, Path(measurement), kw["hardware"] if given(ctx, "hardware")
                          else None)
    else:
        sc = scenario_of(kw, gpu_mem_cap=gpu_mem_cap)
        if not quiet:
            click.echo(f"warning: {measurement}: samples without a recorded scenario: drawn "
                       f"under the options' scenario ({sc.describe()})", err=True)
    echo_warnings(sc.warnings, sc.notes, quiet)
    save_figure(plots.timeline(sc.simulate(ranges=True), meas, title=title), out)
