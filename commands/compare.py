"""`tierlab compare`: the exercise, the same model trained for real under each offload."""
from __future__ import annotations

import json
from pathlib import Path

import click

from tierlab.commands.examples import epilog
from tierlab.commands.common import (SCENARIO_KEYS, finite, interrupted, save_figure,
                                     signals_raise, writable)
from tierlab.commands.json_stdout import json_only_stdout, keep_json
from tierlab.commands.seams import seam
from tierlab.commands.options import RUNNER_KEYS, json_option, runner_options, scenario_options
from tierlab.errors import Interrupted, require
from tierlab.profiles.load import PRESET_LADDER
from tierlab.safeio import write_json, write_text


@click.command(epilog=epilog("compare"))
@scenario_options
@runner_options
@click.option("--variants", multiple=True, default=None,
              type=click.Choice(PRESET_LADDER),
              help="Variants to run (repeatable; default: all four).")
@click.option("--uncapped-baseline/--no-uncapped-baseline", default=False, show_default=True,
              help="Also run no-offload without --gpu-mem-cap (the full card).")
@click.option("--timeout", "timeout_s", type=float, default=None, metavar="SECONDS",
              callback=finite(0, open_min=True),
              help="Per-variant time limit; an over-time variant is a 'timeout' row.")
@click.option("--budget", "budget_s", type=float, default=None, metavar="SECONDS",
              callback=finite(0, open_min=True),
              help="Total time for all variants: each gets at most what is left (a variant cut "
                   "short keeps its finished steps; one with no time left is skipped).")
@click.option("--out", "out_dir", default=None, metavar="DIR",
              help="Directory of the per-variant Measurements, compare.csv, compare.json and "
                   "compare.png (default: runs/compare-<time>).")
@click.option("--overwrite", is_flag=True,
              help="Replace the comparison already in --out: its table files and the "
                   "Measurements of the variants run now (refused without it).")
@json_option
@click.pass_context
def compare(ctx, variants, uncapped_baseline, timeout_s, budget_s, out_dir, overwrite, as_json,
            **kw):
    """The exercise: train the same model and data for real with no offload, ZeRO-2 CPU, ZeRO-3
    CPU and ZeRO-3 NVMe, each in its own subprocess (an OOM or a DeepSpeed failure is a row with
    its reason), e.g. TinyLlama-1.1B on an 8 GiB card: `tierlab compare --gpu-mem-cap 8GiB
    --uncapped-baseline` (the README). Prints one table (a run whose own loss looks wrong
    is marked "!") and writes compare.csv, compare.png and compare.json under --out. Ctrl-C or
    SIGTERM stops the running variant, which keeps its finished steps, and still writes the
    table of the rows so far (exit 130/143). --ds-config is not used: each variant uses its
    preset, with the --set overrides applied to all. --json prints {rows, files, interrupted}
    (the table's rows as compare.json holds them) instead of the table."""
    import time as _time

    from tierlab.safeio import free_folder

    out_dir = out_dir or str(free_folder(f"runs/compare-{_time.strftime('%Y%m%d-%H%M%S')}"))
    writable(out_dir, "--out", folder=True)
    if kw["swap_dir"] is not None:   # a file, a FIFO, /proc: no variant could swap there
        writable(kw["swap_dir"], "--swap-dir", folder=True)
    require("torch", "deepspeed", "transformers", "psutil", what="tierlab compare")
    with json_only_stdout(ctx, as_json):      # DeepSpeed logs on stdout from its import on
        _compare(ctx, variants, uncapped_baseline, timeout_s, budget_s, out_dir, overwrite,
                 as_json, kw)


def _compare(ctx, variants, uncapped_baseline, timeout_s, budget_s, out_dir, overwrite, as_json,
             kw) -> None:
    from tierlab.runner.compare import format_table, rows_to_csv, run_comparison, variant_records
    from tierlab.runner.variants import RunnerOptions, comparison_title, plan_variants
    from tierlab.validate.plot_compare import compare_figure

    cap = kw["gpu_mem_cap"]
    planned = plan_variants({k: kw[k] for k in SCENARIO_KEYS},
                            RunnerOptions(**{k: kw[k] for k in RUNNER_KEYS}), out_dir,
                            variants=variants, gpu_mem_cap=cap,
                            uncapped_baseline=uncapped_baseline, overwrite=overwrite)
    signum = None
    try:
        with signals_raise():
            rows = run_comparison(planned, preflight=not kw["skip_preflight"],
                                  timeout_s=timeout_s, budget_s=budget_s,
                                  say=lambda text: click.echo(text, err=True),
                                  train=seam(ctx, "train"), check=seam(ctx, "preflight"))
    except Interrupted as e:                # the finished rows are kept (runner.compare)
        rows, signum = e.partial, e.signum
    out = Path(out_dir)
    files = [str(out / f) for f in ("compare.csv", "compare.json", "compare.png")]
    if not as_json:
        click.echo(format_table(rows))
    write_text(out / "compare.csv", rows_to_csv(rows))      # runner.compare.TABLE_FILES
    write_json(out / "compare.json", rows)
    save_figure(compare_figure(rows, title=comparison_title(planned, bool(cap)),
                               runs=variant_records(planned)), out / "compare.png", quiet=as_json)
    if as_json:
        keep_json(ctx, json.dumps({"rows": rows, "files": files,
                                   "interrupted": signum is not None}, indent=2, default=str))
    else:
        click.echo(f"wrote {out / 'compare.csv'}, {out / 'compare.json'}")
    if signum is not None:
        interrupted(signum, "the rows above are kept")
        ctx.exit(128 + signum)
