"""`tierlab sweep`: a what-if grid, one row per point, as CSV on stdout or in --out."""
from __future__ import annotations

import signal

import click

from tierlab.commands.examples import epilog
from tierlab.commands.common import (echo_warnings, interrupted, progress_bar, save_figure,
                                     signals_raise, writable)
from tierlab.commands.options import headroom_options, json_option, no_progress_option, \
    quiet_option, scenario_options
from tierlab.errors import ConfigError, Interrupted
from tierlab.sweeps.keys import DEFAULT_MAX_POINTS, check_points


@click.command(epilog=epilog("sweep"))
@scenario_options
@headroom_options
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
@click.option("--no-ranges", is_flag=True,
              help="Simulate each point without its 80% range: no step_time_low_s / "
                   "step_time_high_s columns, about 1.7x faster (the range re-times every "
                   "uncertain input at both ends).")
@click.option("--strict", is_flag=True,
              help="A point that does not fit memory is an error row instead of a simulated one.")
@click.option("--plot", "plot_path", default=None, metavar="FILE",
              help="Also plot step time and tokens/s along --x (PNG/SVG).")
@click.option("--x", "x_key", default=None, metavar="KEY",
              help="Key on the plot's x axis (default: the first --vary key).")
@click.option("--by", multiple=True, metavar="KEY",
              help="One plot line per value of this column (default: the other --vary keys).")
@click.option("--max-points", type=click.IntRange(min=1), default=DEFAULT_MAX_POINTS,
              show_default=True, help="Refuse a grid of more points than this.")
@click.option("--list-keys", is_flag=True, help="List every key --vary accepts and exit.")
@no_progress_option
@quiet_option
@json_option
@click.pass_context
def sweep(ctx, varies, out, jobs, memory_only, no_ranges, strict, plot_path, x_key, by,
          max_points, list_keys, no_progress, quiet, as_json, **kw):
    """What-if grid over hardware, strategy, batch and model keys; one row per point.

    Invalid combinations are rows with the reason in `error`. Example:
    tierlab sweep -c zero3-nvme --micro-batch 4 --seq 1024 --vary nvme.drives=1,2,4,8
    --vary zero_optimization.sub_group_size=1e8,1e9 --out drives.csv --plot drives.png"""
    from tierlab.sweeps.keys import all_keys
    from tierlab.sweeps.run import (Base, all_failed, check_base, parse_vary, run_grid, summary,
                                    sweep_json)

    if list_keys:
        for key, what in all_keys().items():
            click.echo(f"{key:52s} {what}")
        return
    axes = [parse_vary(v) for v in varies]
    if not axes:
        raise ConfigError("empty grid: give at least one --vary KEY=V1,V2,...")
    check_points(axes, max_points)
    if no_ranges and memory_only:
        raise ConfigError("--no-ranges with --memory-only: a memory-only sweep simulates "
                          "nothing, so it has no ranges to skip; give one of them")
    if x_key is not None and not x_key.strip():     # '' is not "the first --vary key"
        raise ConfigError(f"--x {x_key!r}: an empty key; give a --vary key, or leave --x out "
                          "for the first one")
    writable(out, "--out")
    if plot_path is not None:        # '' too: check_writable refuses an empty path
        from tierlab.validate.plot_style import image_targets

        for target in image_targets(writable(plot_path, "--plot")):
            writable(target, "--plot")
    base = Base(**{**kw, "overrides": tuple(kw["overrides"])})
    base_sc = check_base(base)          # the base itself is broken: say so once
    echo_warnings(base_sc.warnings, base_sc.notes, quiet)
    try:
        with signals_raise(), progress_bar("sweep", "config", no_progress) as bar:
            outcome = run_grid(base, axes, memory_only=memory_only, strict=strict, jobs=jobs,
                               out=out, ranges=not no_ranges,
                               on_start=lambda todo, skipped: bar.reset(total=todo),
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
        interrupted(signum, kept)
        ctx.exit(128 + signum)
    if outcome.torn:
        click.echo(f"warning: {out}: {outcome.torn} torn row(s) ignored and recomputed", err=True)
    if as_json:    # {rows (without --out), out, summary}: sweeps/run.sweep_json
        click.echo(sweep_json(outcome, out))
    elif out is None:
        click.echo(outcome.frame.to_csv(index=False), nl=False)
    click.echo(summary(outcome, out), err=out is None or as_json)
    if failure := all_failed(outcome):
        raise ConfigError(failure)
    if plot_path and not memory_only:
        from tierlab.validate.plot_sweep import sweep_figure

        save_figure(sweep_figure(outcome.frame, x_key or axes[0].key, by, None), plot_path)
    elif plot_path:
        raise ConfigError("--plot needs simulated rows (drop --memory-only)")
