"""Refresh the command outputs quoted in README.md and docs/*.md after the simulator's figures
moved (tests/test_docs.py and tests/test_docs_ds_config.py check them): each quoted line whose
numbers changed is replaced by the one output line of the same shape (the same text with every
number masked). Lines without a unique same-shape line are listed for a hand edit; nothing else
in the docs is touched. Figures quoted in prose are not found: grep for them.

    .venv/bin/python bench/refresh_doc_outputs.py [--check] [FILE.md ...]

Script blocks (`<!-- script -->`) are rerun the same way (their last script's stdout).
--check: only list what would change (exit 1 if anything would)."""
from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT.parent))
sys.path.insert(0, str(ROOT / "tests"))

NUMBER = re.compile(r"(?<![A-Za-z_\d.])[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")
"""A figure: digits not glued to a name (zero3-cpu, h200-g and llama-3b keep theirs)."""


def shape(line: str) -> str:
    """The line with every figure masked and runs of blanks as one (right-aligned columns)."""
    return re.sub(r"\s+", " ", NUMBER.sub("#", line.rstrip()))


def refreshed(expected: list[str], output: str) -> tuple[list[str], list[str]]:
    """(expected lines with moved figures replaced, lines that could not be matched). Lines are
    matched in order, as tests/test_docs.py checks them: a moved line takes the first output line
    of its shape after the line matched before it."""
    got = [line.rstrip() for line in output.splitlines()]
    out, unmatched, pos = [], [], 0
    for want in expected:
        if want.strip() == "...":
            out.append(want)
            continue
        same = next((k for k in range(pos, len(got)) if got[k] == want.rstrip()), None)
        if same is None:
            same = next((k for k in range(pos, len(got)) if shape(got[k]) == shape(want)), None)
        if same is None:
            out.append(want)
            unmatched.append(want)
            continue
        out.append(got[same])
        pos = same + 1
    return out, unmatched


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    from test_docs import DOCS, examples, scratch

    from tierlab.cli import main as cli

    changed = False
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(scratch(Path(tmp)))
        try:
            for path in [p.resolve() for p in args.files] or DOCS:
                text = path.read_text(encoding="utf-8")
                lines = text.splitlines()
                for ex in examples(path):
                    if ex.gpu or not ex.expected or not (ex.commands or ex.scripts):
                        continue
                    output, what = run_example(ex, cli)
                    new, bad = refreshed(ex.expected, output)
                    for line in bad:
                        print(f"{ex.where}: no unique line of this shape in the output of "
                              f"`{what}`:\n  {line}")
                    if new != ex.expected:
                        start = int(ex.where.rsplit(":", 1)[1])     # the ```bash line
                        i = next(k for k in range(start, len(lines)) if lines[k] == "```text")
                        old = lines[i + 1:i + 1 + len(ex.expected)]
                        assert old == ex.expected, ex.where
                        lines[i + 1:i + 1 + len(ex.expected)] = new
                        for a, b in zip(ex.expected, new):
                            if a != b:
                                print(f"{ex.where}:\n  - {a}\n  + {b}")
                        changed = True
                if not args.check and "\n".join(lines) != "\n".join(text.splitlines()):
                    path.write_text("\n".join(lines) + ("\n" if text.endswith("\n") else ""),
                                    encoding="utf-8")
        finally:
            os.chdir(here)
    changed |= refresh_console(ROOT / "docs" / "ds-config.md", args.check)
    return 1 if (changed and args.check) else 0


def run_example(ex, cli) -> tuple[str, str]:
    """(output, the command as text) of a doc example, run as tests/test_docs.py runs it: a
    script block's scripts from the repository root (the last one's stdout), else its tierlab
    commands in the scratch folder (the last one's output)."""
    import subprocess

    from click.testing import CliRunner

    if ex.scripts:
        done = None
        for args in ex.scripts:
            done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True,
                                  text=True, timeout=600)
        return done.stdout, shlex.join(ex.scripts[-1])
    r = None
    for env, cmd in ex.commands:       # (environment, arguments), as test_docs
        r = CliRunner().invoke(cli, cmd, env=env)
    return r.output, f"tierlab {shlex.join(ex.commands[-1][1])}"


def refresh_console(path: Path, check: bool) -> bool:
    """The same for docs/ds-config.md's ```console blocks (`$ tierlab ...` then quoted lines),
    run from the repository root as tests/test_docs_ds_config.py runs them."""
    from click.testing import CliRunner

    from tierlab.cli import main as cli

    text = path.read_text(encoding="utf-8")
    out, pos, changed = [], 0, False
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        for m in re.finditer(r"```console\n(.*?)```", text, re.S):
            block = m.group(1)
            new_block = block
            for chunk in block.split("$ tierlab ")[1:]:
                command, *lines = chunk.rstrip("\n").split("\n")
                with tempfile.TemporaryDirectory() as tmp:
                    cmd = [str(Path(tmp) / a) if a == "proposed.json" else a
                           for a in shlex.split(command)]
                    r = CliRunner().invoke(cli, cmd)
                    output = r.output.replace(tmp + "/", "")
                new, bad = refreshed(lines, output)
                for line in bad:
                    print(f"{path.name}: `tierlab {command}`: no unique line of this shape:\n  {line}")
                for a, b in zip(lines, new):
                    if a != b:
                        print(f"{path.name}:\n  - {a}\n  + {b}")
                        new_block = new_block.replace(a + "\n", b + "\n", 1)
                        changed = True
            out.append(text[pos:m.start(1)] + new_block)
            pos = m.end(1)
    finally:
        os.chdir(here)
    out.append(text[pos:])
    if changed and not check:
        path.write_text("".join(out), encoding="utf-8")
    return changed


if __name__ == "__main__":
    raise SystemExit(main())
