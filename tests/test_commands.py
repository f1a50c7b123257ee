"""Thin verbs (ARCHITECTURE.md rule 14): one module per verb in tierlab/commands/, each short;
cli.py only builds the `main` group and registers them."""
from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import click

from tierlab.cli import main

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ROOT / "commands"
SHARED = {"__init__", "common", "examples", "json_stdout", "options", "seams", "verbs"}
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
    assert from_commands == {"TierlabGroup", "Verbs"}      # the verbs by name, imported lazily
    from tierlab.cli import VERBS

    assert sorted(VERBS) == _verb_modules()


def test_a_verb_imports_only_its_own_module():
    """`tierlab simulate` does not import the other verbs' modules (nor the sweep machinery, nor
    the runner): a whole-process answer is mostly imports (issue 32)."""
    code = ("import sys; sys.argv = ['tierlab', 'simulate', '-q', '--json']\n"
            "from tierlab.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith(('tierlab.commands.', "
            "'tierlab.sweeps', 'tierlab.runner'))), file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    loaded = ast.literal_eval(p.stderr.strip().splitlines()[-1])
    verbs = [m for m in loaded if m.split(".")[-1] in _verb_modules() and m.startswith(
        "tierlab.commands.")]
    assert verbs == ["tierlab.commands.simulate"], loaded
    assert not [m for m in loaded if m.startswith(("tierlab.sweeps.run", "tierlab.runner."))], loaded
