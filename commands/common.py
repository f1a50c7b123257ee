"""The verbs' shared plumbing: one-line user errors (TierlabGroup), warnings on stderr, outputs
checked before the long work, figures saved, progress bars and SIGTERM raised as Interrupted."""
from __future__ import annotations

import contextlib
import errno
import math
import signal
import sys

import click
from click.core import ParameterSource

from tierlab.errors import ConfigError, Interrupted
from tierlab.safeio import check_not_input, check_writable
from tierlab.scenario import resolve
from tierlab.sweeps.hardware import what_if

SCENARIO_KEYS = ("model", "hardware", "ds_config", "overrides", "gpus", "nodes", "micro_batch",
                 "grad_accum", "seq", "checkpointing", "precision")
"""The scenario options' parameter names, as tierlab.scenario.resolve takes them."""


PATH_ERRNOS = {errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR, errno.EACCES, errno.EPERM,
               errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EISDIR, errno.ENXIO}
"""OSErrors about a path the user named (pathlib's exists() and is_file() raise these, where they
return False for a missing file): one line naming the path, exit 2, wherever they are raised."""


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
        except OSError as e:      # a path the system refuses (a 300-char name, a symlink loop)
            if e.filename is None or e.errno not in PATH_ERRNOS:
                raise
            click.echo(f"error: {e.filename}: {e.strerror or type(e).__name__}", err=True)
            ctx.exit(2)


def options(*opts):
    """Apply a group of click options (declared once, commands/options.py) in the order given."""
    def apply(fn):
        for opt in reversed(opts):
            fn = opt(fn)
        return fn
    return apply


def scenario_of(kw: dict, **extra):
    """The Scenario of a verb's scenario options (+ gpu_mem_cap, swap_dir, ...), with the
    `--hw` what-ifs applied to the hardware profile where the verb has that option."""
    args = {k: kw[k] for k in SCENARIO_KEYS}
    if kw.get("hw"):
        args["hardware"] = what_if(args["hardware"], kw["hw"])
    return resolve(**args, **extra)


def echo_warnings(warnings=(), notes=(), quiet: bool = False) -> None:
    """A scenario's warnings (DeepSpeed quirks) and notes (defaults chosen) on stderr."""
    if not quiet:
        for w in warnings:
            click.echo(f"warning: {w}", err=True)
        for n in notes:
            click.echo(f"note: {n}", err=True)


def echo_problems(problems) -> bool:
    """Print each pre-flight problem on one line; True if any is an error."""
    for p in problems:
        click.echo(p.line(), err=True)
    return any(p.severity == "error" for p in problems)


def writable(path, what: str, folder: bool = False, inputs=()):
    """Refuse an output that cannot be written now, before the long work, or that is one of
    the verb's `inputs` (tierlab.safeio)."""
    check_not_input(path, inputs, what)
    return check_writable(path, what, folder=folder) if path is not None else None


def save_figure(fig, out, quiet: bool = False) -> None:
    """Save a figure atomically (PNG/SVG/PDF by suffix) and say where (unless quiet)."""
    from tierlab.validate.plot_style import save

    for path in save(fig, out):
        if not quiet:
            click.echo(f"wrote {path}")


def finite(minimum: float | None = None, open_min: bool = False):
    """A click callback: a float option must be finite (nan/inf refused) and above a bound."""
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


def given(ctx, *params) -> bool:
    """True if any of these options was given on the command line (not its default)."""
    return any(ctx.get_parameter_source(p) != ParameterSource.DEFAULT for p in params)


def interrupted(signum: int, kept: str) -> None:
    """The line an interrupted verb ends with (exit 128 + signum follows)."""
    click.echo(f"interrupted ({signal.Signals(signum).name}): {kept}", err=True)


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
