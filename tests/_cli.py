"""Shared CLI test helpers: invoke the click app, and the bad-input contract."""
from click.testing import CliRunner

from tierlab.cli import main


def run(*args, env=None, obj=None):
    """`tierlab ARGS` in-process; `env`: environment variables set for the call; `obj`: the
    seams a verb takes from click's context object (commands/common.seam)."""
    return CliRunner().invoke(main, list(args), env=env, obj=obj)


def assert_user_error(result, *fragments):
    """Exit 2, no traceback, exactly one `error:` line containing every fragment."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [l for l in result.output.strip().splitlines() if l.startswith("error:")]
    assert len(lines) == 1, result.output
    for f in fragments:
        assert f in lines[0], lines[0]


def assert_cli_judges(path, entry: dict, *refused: str):
    """`tierlab memory -c PATH` on a collected ds_config with its recorded `entry` (verdict,
    tierlab, gpus): DeepSpeed's refusal is exit 2 naming the file and its key; a feature tierlab
    does not model is exit 2 naming the file and every fragment of `refused`; else it runs.
    `entry["cli"]`, where present, is the command line's verdict where it differs from the
    Python API's `entry["tierlab"]` (a key only the memory plan and the simulator refuse)."""
    r = run("memory", "-m", "tinyllama-1.1b", "-H", "dgx-a100", "-c", str(path),
            "--gpus", str(entry.get("gpus", 1)))
    if entry["verdict"].startswith("rejected") and entry.get("host") != "cuda":
        assert_user_error(r, path.name, entry["verdict"].split(" ")[1])
    elif entry.get("cli", entry["tierlab"]).startswith("refused"):
        assert_user_error(r, path.name, *refused)
    else:
        assert r.exit_code == 0 and "fits" in r.output, r.output


def simulated_step_s(path, hardware: str, seq: int, preset: str = "zero3-cpu") -> float:
    """`tierlab simulate -m PATH` as a user runs it: exit 0 and a finite, positive step (s)."""
    import json
    import math
    res = run("simulate", "-m", str(path), "-H", hardware, "-c", preset, "--seq", str(seq),
              "--json")
    assert res.exit_code == 0, res.output
    step = json.loads(res.output)["step_time_s"]
    assert math.isfinite(step) and step > 0, step
    return step
