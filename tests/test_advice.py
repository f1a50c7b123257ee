"""lab/scripts/bench_advice.py: `plan --ds-config`'s proposals for public start configs, measured on an
H200 (lab/cases/h200-l, an 8 GiB cap). The report is recomputed from the committed runs with
today's simulator, so a model change that breaks a fit verdict or the proposals fails here."""
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.lab      # reads the lab's data (setup.cfg)

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "lab" / "cases" / "h200-l"


def _report() -> str:
    done = subprocess.run([sys.executable, "lab/scripts/bench_advice.py", "report", str(RUNS),
                           "--profile", "h200-l"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_case_of_the_advice_plan_was_measured_with_its_config():
    cases = yaml.safe_load((ROOT / "lab" / "advice" / "cases.yaml").read_text())["cases"]
    assert len(cases) == 16
    for c in cases:
        assert (ROOT / c["config"]).is_file(), c["config"]
        assert (RUNS / c["name"] / "measurement.json").is_file(), c["name"]


def test_every_proposal_trains_and_every_fit_verdict_is_right():
    out = _report()
    assert "15 of 15 right" in out
    proposals = [line for line in out.splitlines() if " proposed " in line]
    assert len(proposals) == 8
    assert not any(word in line for line in proposals for word in ("oom", "signal", "failed"))
    assert "pairs with a measured speedup >= 1.2x: 4 of 8" in out


def test_report_refuses_a_missing_folder(tmp_path):
    done = subprocess.run([sys.executable, "lab/scripts/bench_advice.py", "report",
                           str(tmp_path / "nope")], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and "no such folder" in done.stderr
    assert "Traceback" not in done.stderr
