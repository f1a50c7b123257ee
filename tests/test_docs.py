"""The docs run: every `tierlab` command of every ```bash block in README.md, docs/*.md and the
lab's notes (lab/notes/*.md, where the experiments' figures live, issue 28) is run
(in a scratch folder that sees the repository's data), and a ```text block right after a bash
block must be in the last command's output: its lines in order, `...` standing for any lines.

A `<!-- gpu -->` line right before a block skips it (it trains or measures for real); a
`<!-- exit: N -->` line says the commands exit with N. Lines of a bash block that are not
`tierlab` commands (make, pip) are install steps and are not run, except in a block marked
`<!-- script -->`: there each `.venv/bin/python PATH.py ARGS` line (a bench or lab script that
prints figures the doc quotes) is run from the repository root with this interpreter, so the
figures a doc quotes are the script's output today, not hand copies (issue 28).
"""
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from tierlab.cli import main

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
        *sorted((REPO / "lab" / "notes").glob("*.md"))]
OWN_DOCS = [REPO / "README.md"] + [REPO / "docs" / f"{n}.md" for n in
                                   ("usage", "simulator", "profiles", "calibration", "accuracy",
                                    "extending")]
MARKER = re.compile(r"<!--\s*(gpu|script|exit:\s*(\d+))\s*-->")


@dataclass
class Example:
    where: str
    commands: list[tuple[dict, list[str]]]
    """(VAR=value assignments before `tierlab`, its arguments) per command line."""
    exit_code: int = 0
    gpu: bool = False
    expected: list[str] = field(default_factory=list)
    scripts: list[list[str]] = field(default_factory=list)
    """`<!-- script -->` blocks: each python script line's PATH and ARGS."""


def _scripts(lines: list[str]) -> list[list[str]]:
    out = []
    for line in "\n".join(lines).replace("\\\n", " ").splitlines():
        args = shlex.split(line, comments=True)
        if len(args) >= 2 and args[0].endswith("python") and args[1].endswith(".py"):
            out.append(args[1:])
    return out


def _commands(lines: list[str]) -> list[tuple[dict, list[str]]]:
    text = "\n".join(lines).replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        args = shlex.split(line, comments=True)
        env = {}
        while args and re.fullmatch(r"[A-Z_]+=\S*", args[0]):
            key, _, value = args.pop(0).partition("=")
            env[key] = value
        if args and args[0] == "tierlab":
            out.append((env, args[1:]))
    return out


def examples(path: Path) -> list[Example]:
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Example] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```bash":
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            ex = Example(f"{path.name}:{i + 1}", _commands(lines[i + 1:end]))
            marker = MARKER.search(lines[i - 1]) if i else None
            if marker:
                ex.gpu = marker.group(1) == "gpu"
                ex.exit_code = int(marker.group(2) or 0)
                if marker.group(1) == "script":
                    ex.scripts = _scripts(lines[i + 1:end])
            j = end + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j < len(lines) and lines[j].strip() == "```text":
                stop = next(k for k in range(j + 1, len(lines)) if lines[k].startswith("```"))
                ex.expected = lines[j + 1:stop]
            if ex.commands or ex.scripts:
                out.append(ex)
            i = end
        i += 1
    return out


def line_matches(want: str, got: str) -> bool:
    """Equal, or, where `want` holds ' ... ', equal around it (the ' ... ' stands for any text:
    a version of a package the user's install resolves, e.g. transformers')."""
    if " ... " not in want:
        return got == want
    return re.fullmatch(".*".join(map(re.escape, want.split(" ... "))), got) is not None


def check_output(expected: list[str], output: str, where: str) -> None:
    """Every expected line in order; '...' skips any number of lines, ' ... ' in a line any
    text."""
    got = [line.rstrip() for line in output.splitlines()]
    pos, gap = 0, False
    for want in expected:
        if want.strip() == "...":
            gap = True
            continue
        want = want.rstrip()
        if gap:
            found = next((k for k in range(pos, len(got)) if line_matches(want, got[k])), None)
        else:
            found = pos if pos < len(got) and line_matches(want, got[pos]) else None
        assert found is not None, (f"{where}: expected line not in the output (in order):\n"
                                   f"  {want}\n--- output ---\n{output}")
        pos, gap = found + 1, False


def scratch(tmp_path: Path) -> Path:
    """A folder where relative paths of the repository (lab/cases, runner/data, profiles)
    resolve and what the examples write (out/, drives.csv) lands."""
    for entry in REPO.iterdir():
        if entry.name not in {"out", ".git", ".venv"} and not entry.name.startswith("."):
            (tmp_path / entry.name).symlink_to(entry)
    return tmp_path


@pytest.mark.lab
@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_examples_run_and_match(path, tmp_path, monkeypatch):
    """As a user runs them: in a checkout, with only the environment the example itself sets
    (no $TIERLAB_PROFILES unless the example names it)."""
    monkeypatch.chdir(scratch(tmp_path))
    monkeypatch.delenv("TIERLAB_PROFILES")
    for ex in examples(path):
        if ex.gpu:
            continue
        if ex.scripts:
            for args in ex.scripts:
                done = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True,
                                      text=True, timeout=600)
                assert done.returncode == ex.exit_code, (f"{ex.where}: {shlex.join(args)} exited "
                                                         f"{done.returncode}:\n{done.stderr}")
            if ex.expected:
                check_output(ex.expected, done.stdout, f"{ex.where}: {shlex.join(args)}")
            continue
        for env, args in ex.commands:
            r = CliRunner().invoke(main, args, env=env)
            assert r.exit_code == ex.exit_code, (f"{ex.where}: tierlab {shlex.join(args)} "
                                                 f"exited {r.exit_code}:\n{r.output}")
        if ex.expected:
            check_output(ex.expected, r.output, f"{ex.where}: tierlab {shlex.join(args)}")


def test_the_parser_sees_markers_and_outputs(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("<!-- gpu -->\n```bash\ntierlab run --steps 2 \\\n  --seq 8  # real\n```\n\n"
                   "<!-- exit: 2 -->\n```bash\nmake setup\ntierlab memory -m nope\n```\n\n"
                   "```text\nerror: ...\n```\n", encoding="utf-8")
    gpu, bad = examples(doc)
    assert gpu.gpu and gpu.commands == [({}, ["run", "--steps", "2", "--seq", "8"])]
    assert bad.exit_code == 2 and bad.commands == [({}, ["memory", "-m", "nope"])]
    assert bad.expected == ["error: ..."]
    with pytest.raises(AssertionError):
        check_output(["a", "...", "c"], "a\nb\nd\n", "x")
    check_output(["a", "...", "c"], "a\nb\nc\n", "x")


def test_every_doc_has_examples_and_the_gpu_ones_are_marked():
    """The README shows every verb; `run`, `compare` and a measuring `calibrate` are marked."""
    readme = examples(REPO / "README.md")
    verbs = {args[0] for ex in readme for _, args in ex.commands}
    assert verbs >= {"simulate", "memory", "plan", "sweep", "plot", "preflight", "profiles",
                     "run", "compare", "calibrate", "validate"}
    for path in DOCS:
        for ex in examples(path):
            for _, args in ex.commands:
                measuring = args[0] == "calibrate" and "--from-raw" not in args
                if args[0] in ("run", "compare") or measuring:
                    assert ex.gpu, f"{ex.where}: tierlab {args[0]} is not marked <!-- gpu -->"


def test_generated_resource_table_is_current():
    from tierlab.sim.resources import markdown_table

    assert markdown_table() in (REPO / "docs" / "simulator.md").read_text(encoding="utf-8")


def test_readme_is_short_and_self_contained():
    assert len((REPO / "README.md").read_bytes()) <= 12_288
    for path in OWN_DOCS:
        text = path.read_text(encoding="utf-8")
        for bad in (r"\bissue[ -]?\d", r"DEEPSPEED_RUNTIME", r"/work/", r"\bsession"):
            assert not re.search(bad, text, re.I), f"{path.name}: {bad}"
        for link in re.findall(r"\]\(([^)#]+)", text):
            if not link.startswith("http"):
                assert (path.parent / link).exists(), f"{path.name}: broken link {link}"


def test_the_readme_picture_is_todays_output():
    """docs/img's figures were rendered from what the simulator says today (`make docs` writes
    figures.json with them): a change that moves a step time or a memory figure fails here."""
    import json

    import render_docs as render        # bench/ (tests/conftest.py puts it on sys.path)

    stored = json.loads((REPO / "docs" / "img" / "figures.json").read_text())
    assert stored == render.figures(), "docs/img is stale: run `make docs`"
    assert "docs/img/builtin-bottleneck.png" in (REPO / "README.md").read_text()
    for name in ("builtin-bottleneck", "builtin-timeline", "builtin-memory"):
        assert (REPO / "docs" / "img" / f"{name}.png").stat().st_size > 10_000


def test_an_ellipsis_in_a_line_stands_for_any_text_and_nothing_else():
    assert line_matches("known to transformers ... (its auto_map", "known to transformers 5.25.0 (its auto_map")
    assert not line_matches("known to transformers ... (its auto_map", "known to torch 2.13 (its auto_map")
    assert not line_matches("exact line", "exact line, longer")
