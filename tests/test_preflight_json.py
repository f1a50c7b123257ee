"""`tierlab preflight --json` (issue 33): one object a launcher script can read: the verdict, each
problem with its check, severity, message and fix, and the config's warnings; the exit code is
the same as without --json (2 on an error)."""
import json

from _cli import assert_user_error, run


def test_preflight_json_gives_the_verdict_and_each_problem():
    bad = run("preflight", "-m", "llama-2-7b", "-c", "no-offload", "-H", "workstation-rtx3070",
              "--no-probe", "--json")
    assert bad.exit_code == 2, bad.output
    doc = json.loads(bad.output)
    assert doc["ok"] is False and "Llama-2-7B on workstation-rtx3070" in doc["scenario"]
    [problem] = [p for p in doc["problems"] if p["severity"] == "error"]
    assert problem["check"] == "memory" and "binding tier: gpu" in problem["message"]
    assert "offload more" in problem["fix"]
    good = run("preflight", "-m", "tinyllama-1.1b", "-c", "zero3-cpu", "-H", "h200-gen5",
               "--micro-batch", "1", "--seq", "512", "--no-probe", "--json")
    assert good.exit_code == 0, good.output
    ok = json.loads(good.output)
    assert ok["ok"] is True and not [p for p in ok["problems"] if p["severity"] == "error"]


def test_preflight_json_bad_input_is_still_one_line():
    assert_user_error(run("preflight", "-m", "no-such-model", "--no-probe", "--json"),
                      "no-such-model")
