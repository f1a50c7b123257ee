"""`--json` verbs that run DeepSpeed or torch (run, compare, calibrate): stdout carries the one
JSON object and nothing else. DeepSpeed's logger writes to stdout (deepspeed/utils/logging.py:
`StreamHandler(stream=sys.stdout)`, e.g. "[WARNING] [real_accelerator.py:...] Setting
accelerator to CPU"), so while the verb runs, stdout is stderr; the object kept with
`keep_json` is printed on the real stdout after, also on the way out through ctx.exit."""
from __future__ import annotations

import contextlib
import logging
import os
import sys

import click

_JSON_KEY = "tierlab.json"
"""ctx.meta key of the object a --json verb prints once stdout is its own again."""


def keep_json(ctx, text: str) -> None:
    """The verb's JSON object, printed by json_only_stdout when the verb ends."""
    ctx.meta[_JSON_KEY] = text


@contextlib.contextmanager
def json_only_stdout(ctx, as_json: bool):
    """With `as_json`, while the block runs stdout goes to stderr: the Python stream, every
    logging handler that already holds it, and file descriptor 1 where it is this process's own
    (the deepspeed launcher's children, C extensions). Without, nothing changes."""
    if not as_json:
        yield
        return
    real = sys.stdout
    held = [h for lg in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
            for h in getattr(lg, "handlers", ()) if isinstance(h, logging.StreamHandler)
            and h.stream is real]
    err_fd = _fileno(sys.stderr)
    fd = 1 if _fileno(real) == 1 and err_fd is not None else None   # not CliRunner's buffer
    saved = os.dup(fd) if fd is not None else None
    try:
        real.flush()
        if saved is not None:
            os.dup2(err_fd, fd)
        for h in held:
            h.setStream(sys.stderr)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        for h in held:
            h.setStream(real)
        if saved is not None:
            os.dup2(saved, fd)
            os.close(saved)
        if _JSON_KEY in ctx.meta:
            click.echo(ctx.meta.pop(_JSON_KEY), file=real)


def _fileno(stream) -> int | None:
    """The file descriptor under a text stream; None for one without (click's CliRunner
    buffers, pytest's capture)."""
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
