"""`tierlab validate`: each measured run simulated and compared with what was measured."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from tierlab.commands.examples import epilog
from tierlab.commands.common import finite, writable
from tierlab.errors import ConfigError
from tierlab.profiles.load import DEFAULT_SOFTWARE


@click.command(epilog=epilog("validate"))
@click.argument("cases", nargs=-1, type=click.Path())
@click.option("--hardware", "-H", default=None,
              help="Calibrated system profile of the host the runs were measured on, for every "
                   "run. Default: per folder, the profile its validate.yaml names (`hardware: "
                   "PROFILE` or a path relative to the folder, written beside runs calibrated with them).")
@click.option("--out", default="out/validate", show_default=True, metavar="DIR",
              help="Where to write validate.csv, summary.json, split.json, coverage.json, "
                   "scatter.png and phases.png.")
@click.option("--max-error", type=float, default=None, metavar="PCT", callback=finite(0),
              help="Exit 1 if the mean absolute error of the steady step time exceeds PCT %.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--train", "train", multiple=True, metavar="CASE",
              help="Case names the software profile's fitted terms were fitted on (repeatable; "
                   "default: its train_cases); the summary shows train and held-out separately.")
@click.option("--software", default=DEFAULT_SOFTWARE, show_default=True,
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
    from tierlab.validate.workflow import mape_over, run_validation, validation_cases

    if hardware is not None and not hardware.strip():   # '' is not "each folder's own"
        raise ConfigError(f"--hardware {hardware!r}: an empty profile name; leave -H out for "
                          "the profile each folder's validate.yaml names")
    cases = validation_cases(cases, example)
    writable(out, "--out", folder=True, inputs=cases)
    sw = load_software(software)
    if loco or classes or strict or pool != "train":
        return _loco(cases, sw, hardware, out, max_error, as_json,
                     pool if pool == "all" or not train else list(train), classes, strict, loco)
    run = run_validation(cases, sw, hardware=hardware, train=train, out=out)
    if run.report.unfinished:
        click.echo(f"warning: {len(run.report.unfinished)} run(s) neither finished nor ran out "
                   f"of memory (killed, interrupted or failed otherwise); left out: "
                   f"{', '.join(run.report.unfinished)}", err=True)
    if run.report.unsimulated:
        click.echo(f"warning: {len(run.report.unsimulated)} run(s) trained by an engine the "
                   f"simulator has no schedule for; left out: "
                   f"{', '.join(run.report.unsimulated)}", err=True)
    if as_json:
        click.echo(json.dumps(run.to_dict(), indent=2))
    else:
        from tierlab.validate.coverage import format_coverage
        from tierlab.validate.report import format_validation

        click.echo(format_validation(run.report.rows, run.report.summary, run.report.split,
                                     sw.name, len(set(run.train))))
        click.echo(format_coverage("steady step in its predicted range", run.covered))
        click.echo(f"wrote {Path(out)}/validate.csv, summary.json, split.json, coverage.json, "
                   "scatter.png, phases.png")
    if (mape := mape_over(run.report.summary, max_error)) is not None:
        click.echo(f"error: steady step time MAPE {mape:.1f}% > --max-error {max_error}%",
                   err=True)
        sys.exit(1)


def _loco(cases, sw, hardware, out, max_error, as_json, pool, classes, strict, loco):
    """`validate --loco`: the leave-one-class-out table (validate/loco.py)."""
    from tierlab.validate.loco import format_table
    from tierlab.validate.workflow import mape_over, run_loco_validation

    if not loco:
        raise ConfigError("--class, --pool and --strict need --loco")
    report = run_loco_validation(cases, sw, pool=pool, classes=classes, hardware=hardware,
                                 strict=strict, out=out)
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else format_table(report))
    if (mape := mape_over(report.overall, max_error)) is not None:
        click.echo(f"error: held-out classes' steady step time MAPE {mape:.1f}% > "
                   f"--max-error {max_error}%", err=True)
        sys.exit(1)
