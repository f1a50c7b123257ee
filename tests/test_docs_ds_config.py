"""docs/ds-config.md runs: every `$ tierlab ...` example is run from the repository root and the
lines quoted under it appear in its output, in that order ("..." stands for lines left out)."""
import re
import shlex
from pathlib import Path

import pytest

from _cli import run

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ds-config.md"


def examples() -> list[tuple[str, list[str]]]:
    out = []
    for block in re.findall(r"```console\n(.*?)```", DOC.read_text(), re.S):
        for chunk in block.split("$ tierlab ")[1:]:
            command, *lines = chunk.rstrip("\n").split("\n")
            out.append((command, [l for l in lines if l.strip() != "..."]))
    return out


def test_the_doc_has_examples():
    assert len(examples()) >= 7


@pytest.mark.parametrize("command,quoted", examples(), ids=lambda x: x[:60] if isinstance(x, str)
                         else "")
def test_example_runs_as_quoted(command, quoted, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    args = [str(tmp_path / a) if a == "proposed.json" else a for a in shlex.split(command)]
    r = run(*args)
    got = [l.replace(str(tmp_path) + "/", "") for l in r.output.splitlines()]
    assert "Traceback" not in r.output
    assert r.exit_code == (2 if any(l.startswith("error:") for l in quoted) else 0), r.output
    i = 0
    for line in quoted:
        while i < len(got) and got[i] != line:
            i += 1
        assert i < len(got), f"not in the output (in order): {line}\n---\n{r.output}"
        i += 1
    if "--write-config" in args:
        assert (tmp_path / "proposed.json").exists()
