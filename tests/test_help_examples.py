"""Every verb's --help ends with examples (commands/examples.py, issue 33), and they are true:
each example of a verb that needs no GPU is run as written (in order, in one scratch folder, so
`plot sweep --results drives.csv` reads the sweep example's file); a training verb's examples
are parsed (their options exist) but not run. An example whose comment says 'your own' needs
the user's files and is parsed only."""
import shlex

import pytest

from _cli import run
from tierlab.cli import main
from tierlab.commands.examples import EXAMPLES

RUNNABLE = ("sweep", "simulate", "memory", "plan", "plot", "validate")
"""In this order: plot's sweep example reads the sweep example's CSV."""


def test_every_verb_has_examples_in_its_help():
    for verb in main.commands:
        if verb in ("profiles", "preflight"):     # examples in their docstrings
            assert "Examples:" in run(verb, "--help").output, verb
            continue
        assert verb in EXAMPLES, verb
        out = run(verb, "--help").output
        assert "Examples:" in out and EXAMPLES[verb][0].split("#")[0].strip() in out, verb


def _args(line: str) -> list[str]:
    args = shlex.split(line, comments=True)
    assert args[0] == "tierlab", line
    return args[1:]


def test_the_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TIERLAB_PROFILES", raising=False)
    for verb in RUNNABLE:
        for line in EXAMPLES[verb]:
            if "your own" in line:
                continue
            r = run(*_args(line))
            assert r.exit_code in (0, 1), f"{line}\n{r.output}"    # 1: plan found nothing
            assert "Traceback" not in r.output and "error:" not in r.output, f"{line}\n{r.output}"


@pytest.mark.parametrize("verb", sorted(set(EXAMPLES) - set(RUNNABLE)) + ["validate"])
def test_the_other_examples_parse(verb):
    for line in EXAMPLES[verb]:
        r = run(*_args(line), "--help")
        assert r.exit_code == 0, f"{line}\n{r.output}"
