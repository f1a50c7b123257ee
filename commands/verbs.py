"""The verbs of `tierlab`'s group, by name, imported when asked for."""
from __future__ import annotations

import importlib

import click


class Verbs(dict):
    """The group's verbs by name, each imported from tierlab/commands/<name>.py the first time it
    is asked for: `tierlab simulate` imports its own module and what that needs, not every
    verb's (a whole-process answer is mostly imports, issue 32: `import tierlab.cli` took 0.19 s
    of CPU with every verb, its simulate module 0.14 s). `--help` asks for each, so lists all."""

    def __init__(self, names):
        super().__init__((name, None) for name in names)

    def __getitem__(self, name: str) -> click.Command:
        verb = super().__getitem__(name)
        if verb is None:
            verb = getattr(importlib.import_module(f"tierlab.commands.{name}"), name)
            super().__setitem__(name, verb)
        return verb

    def get(self, name: str, default=None):
        return self[name] if name in self else default

    def values(self):
        return [self[name] for name in self]

    def items(self):
        return [(name, self[name]) for name in self]
