"""`tierlab run --json` (issue 33): stdout is the one JSON object and nothing else. DeepSpeed's
logger writes to stdout (deepspeed/utils/logging.py, "[WARNING] [real_accelerator.py:...]
Setting accelerator to CPU ..."), so the verb sends it to stderr while it runs.

A fresh process each (DeepSpeed logs that line once per process, at its first accelerator
query): the real CLI, with only DeepSpeed's engine stood in for on the result path
(tests/_fastengine.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from _runnerhelp import REPO, mini_llama


def _env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT", "DS_ACCELERATOR")}
    return {**env, "TIERLAB_TEST_STEP_S": "0"}


def _cli(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "tests" / "_fastengine.py"), *args],
                          capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=600)


def test_run_json_result_is_the_whole_stdout(tmp_path):
    model = tmp_path / "mini.yaml"
    model.write_text(mini_llama("mini-llama-json"))
    out = tmp_path / "m"
    p = _cli(tmp_path, "run", "-m", str(model), "-c", "no-offload", "--micro-batch", "1",
             "--steps", "3", "--warmup-steps", "1", "--no-progress", "--out", str(out), "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    data = json.loads(p.stdout)                       # the whole of stdout, nothing before it
    assert data["status"] == "ok" and data["measurement"] == str(out)
    assert data["model"] == "mini-llama-json" and data["summary"]["step_time_s"]["n"] >= 1
    assert "accelerator" in p.stderr.lower()          # DeepSpeed's line went to stderr


def test_run_json_refusal_is_the_whole_stdout(tmp_path):
    # Llama-2-7B without offload on the 8 GiB workstation: refused by pre-flight (exit 2)
    p = _cli(tmp_path, "run", "-m", "llama-2-7b", "-c", "no-offload", "--steps", "3",
             "--out", str(tmp_path / "r"), "--json")
    assert p.returncode == 2, p.stderr[-3000:]
    data = json.loads(p.stdout)
    assert data["status"] == "refused" and data["problems"]
    assert not (tmp_path / "r").exists()


def test_in_one_process_json_then_plain(tmp_path):
    """CliRunner (one process, no file descriptor of its own): --json's stdout is the object
    alone; stdout and the logging handlers are given back, so a plain run after it prints its
    pre-flight problems on stderr and nothing on stdout, as it did before."""
    import logging

    from click.testing import CliRunner

    from tierlab.cli import main

    def streams():
        return [(h, h.stream) for lg in [logging.getLogger(),
                                         *logging.Logger.manager.loggerDict.values()]
                for h in getattr(lg, "handlers", ()) if isinstance(h, logging.StreamHandler)]

    args = ["run", "-m", "llama-2-7b", "-c", "no-offload", "--steps", "3", "--out",
            str(tmp_path / "r")]
    before, stdout = streams(), sys.stdout
    r = CliRunner().invoke(main, [*args, "--json"])
    assert r.exit_code == 2 and json.loads(r.stdout)["status"] == "refused"
    assert all(h.stream is s for h, s in before) and sys.stdout is stdout
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and r.stdout == "" and "[memory]" in r.stderr, (r.stdout, r.stderr)
