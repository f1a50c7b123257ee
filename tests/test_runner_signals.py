"""Issue 16: `tierlab run` stopped by SIGINT, SIGTERM or SIGKILL mid-run keeps every step it
measured, writes nothing half, and its folder reads back (validate, plot) without a traceback.

The CLI, pre-flight, runner.train.run, its signal handling and the MeasurementWriter are real;
only DeepSpeed's engine is stood in for (tests/_fastengine.py: the real tierlab-built Llama,
trained by plain torch, 0.3 s a step), so the three cases take seconds, not the minutes that
DeepSpeed's JIT op loads take on a loaded CPU box. A real DeepSpeed run stopped by SIGINT is
tests/test_runner_train.py::test_sigint_closes_the_record_and_keeps_steps.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _runnerhelp import REPO, mini_llama
from tierlab.records.measurement import load_measurement

pytestmark = pytest.mark.slow

MINI = mini_llama("mini-llama-test")


def _env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    return {**env, "DS_ACCELERATOR": "cpu", "TIERLAB_TEST_STEP_S": "0.3"}


def _run(tmp_path: Path, out: Path, *extra: str) -> list[str]:
    model = tmp_path / "mini.yaml"
    model.write_text(MINI)
    return [sys.executable, str(REPO / "tests" / "_fastengine.py"), "run", "-m", str(model),
            "-c", "no-offload", "--micro-batch", "1", "--steps", "1000", "--warmup-steps", "1",
            "--no-progress", "-q", "--out", str(out), *extra]


def _stopped(tmp_path: Path, sig: int, steps: int = 3) -> tuple[subprocess.CompletedProcess, Path]:
    """Start a run, wait for `steps` steps in steps.jsonl, send `sig`; (finished process, folder)."""
    out = tmp_path / "m"
    p = subprocess.Popen(_run(tmp_path, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=_env(), cwd=tmp_path)
    journal, deadline = out / "steps.jsonl", time.monotonic() + 120
    while not (journal.exists() and journal.read_text().count("\n") >= steps):
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            raise AssertionError("no steps: " + p.communicate()[1][-3000:])
        time.sleep(0.05)
    p.send_signal(sig)
    stdout, stderr = p.communicate(timeout=60)
    return subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr), out


def _nothing_half_written(out: Path) -> None:
    assert not [f.name for f in out.iterdir() if f.suffix == ".tmp" or ".tmp" in f.name]
    for name in ("measurement.json", "summary.json"):
        if (out / name).exists():
            json.loads((out / name).read_text())          # whole JSON, not a torn one
    for name in ("steps.jsonl", "samples.jsonl"):
        if (out / name).exists():
            text = (out / name).read_text()
            assert text.endswith("\n") or not text
            [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_closes_the_record_as_interrupted(tmp_path, sig):
    r, out = _stopped(tmp_path, sig)
    name = signal.Signals(sig).name
    assert r.returncode == 128 + sig, r.stderr[-3000:]              # 130 / 143
    assert "Traceback" not in r.stderr + r.stdout, r.stderr[-3000:]
    assert f"interrupted: received {name} after" in r.stdout and f"measurement: {out}" in r.stdout
    _nothing_half_written(out)
    m = load_measurement(out)
    assert m.status == "interrupted" and m.failure_kind == "signal" and name in m.reason
    lines = (out / "steps.jsonl").read_text().splitlines()
    assert len(m.steps) == len(lines) >= 3                   # every step measured is kept
    assert [s.step for s in m.steps] == list(range(len(m.steps)))
    assert m.summary["steps_total"] == len(m.steps) and m.summary["status"] == "interrupted"
    assert f"after {len(m.steps)} steps" in m.reason
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reason"] == m.reason and summary["step_time_s"]["n"] == len(m.steps) - 1


@pytest.mark.lab
def test_sigkill_leaves_a_readable_record(tmp_path):
    r, out = _stopped(tmp_path, signal.SIGKILL)
    assert r.returncode == -signal.SIGKILL
    _nothing_half_written(out)
    m = load_measurement(out)
    assert m.status == "running" and len(m.steps) >= 3       # no close: still "running"
    # a kill in the middle of a step's line: the torn line is skipped, never fatal
    with open(out / "steps.jsonl", "a") as f:
        f.write('{"step": 99, "wall_s": 0.31, "tim')
    assert len(load_measurement(out).steps) == len(m.steps)
    env = _env()
    for args, said in ((["validate", str(out), "--out", str(tmp_path / "v"), "-H", "h200-host"],
                        "neither finished nor ran out of memory"),
                       (["plot", "timeline", "--measurement", str(out), "-H", "h200-host", "-o",
                         str(tmp_path / "t.png")], "")):
        p = subprocess.run([sys.executable, "-m", "tierlab.cli", *args], capture_output=True,
                           text=True, env=env, cwd=REPO, timeout=300)
        assert p.returncode == 0 and "Traceback" not in p.stderr, (args, p.stderr[-3000:])
        assert said in p.stderr, p.stderr[-3000:]     # the killed run is named, not counted
    # and a new run there is refused, not a silent replacement of what was measured
    p = subprocess.run(_run(tmp_path, out), capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=300)
    assert p.returncode == 2 and p.stderr.strip().splitlines()[-1].startswith(
        f"error: --out {out}: holds a measurement already"), p.stderr[-3000:]
