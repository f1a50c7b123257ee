"""Thin verbs (ARCHITECTURE.md rule 14): one module per verb in tierlab/commands/, each short;
cli.py only builds the `main` group and registers them."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import click

from tierlab.cli import main

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ROOT / "commands"
SHARED = {"__init__", "common", "examples", "json_stdout", "options", "seams"}
MAX_VERB_LINES = 150
MAX_CLI_LINES = 80


def _verb_modules() -> list[str]:
    return sorted(p.stem for p in COMMANDS.glob("*.py") if p.stem not in SHARED)


def test_every_commands_module_is_short():
    long = {p.name: n for p in COMMANDS.glob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) >= MAX_VERB_LINES}
    assert not long, f"over {MAX_VERB_LINES} lines: {long}"


def test_one_module_per_verb_and_every_verb_registered():
    verbs = _verb_modules()
    assert sorted(main.commands) == verbs
    for name in verbs:
        module = importlib.import_module(f"tierlab.commands.{name}")
        commands = [v for v in vars(module).values() if isinstance(v, click.Command)
                    and v.callback.__module__ == module.__name__]
        assert [c.name for c in commands] == [name], name
        assert main.commands[name] is getattr(module, name)


def test_cli_only_registers():
    text = (ROOT / "cli.py").read_text(encoding="utf-8")
    assert len(text.splitlines()) < MAX_CLI_LINES
    tree = ast.parse(text)
    functions = [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    assert functions == ["main"], functions        # no verb bodies, no helpers
    decorators = [ast.unparse(d) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
                  for d in n.decorator_list]
    assert not any(".command" in d for d in decorators), decorators
    from_commands = {a.name for n in tree.body if isinstance(n, ast.ImportFrom)
                     and (n.module or "").startswith("tierlab.commands.") for a in n.names}
    assert from_commands == {*_verb_modules(), "TierlabGroup"}
