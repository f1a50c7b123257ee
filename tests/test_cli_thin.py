"""The thin CLI's promises: --version, -q on the verbs that warn, and a measured timeline drawn
under the scenario the run ran (or refused when the options ask for another)."""
from pathlib import Path

import pytest

from _cli import assert_user_error, run
from tierlab import __version__
from tierlab.records.measurement import load_measurement
from tierlab.validate.compare import run_scenario, scenario_of
from tierlab.profiles.load import load_hardware

RUN = Path(__file__).resolve().parents[1] / "lab" / "cases" / "h200x2" / "c-tinyllama-z3cpu-8g"


def test_version():
    r = run("--version")
    assert r.exit_code == 0 and r.output.strip() == f"tierlab {__version__}"


@pytest.mark.parametrize("verb", ["memory", "simulate", "preflight", "plot"])
def test_quiet_silences_notes_and_warnings(verb, tmp_path):
    args = [verb, *(["bottleneck", "-o", str(tmp_path / "b.png")] if verb == "plot" else []),
            "-m", "llama-3-8b", "-H", "dgx-a100", "-c", "zero3-cpu", "--micro-batch", "1",
            *(["--no-probe"] if verb == "preflight" else [])]
    loud, quiet = run(*args), run(*args, "-q")
    assert "note: --seq not given" in loud.stderr, loud.output
    assert "note:" not in quiet.stderr and "warning:" not in quiet.stderr, quiet.output


def test_measured_timeline_uses_the_runs_scenario(tmp_path):
    assert RUN.is_dir(), "the committed run is missing"
    m = load_measurement(RUN)
    sc = run_scenario(m, RUN)
    assert sc.hardware.name == load_hardware("h200x2-host").name    # its folder's validate.yaml
    assert sc == scenario_of(m, load_hardware("h200x2-host"))
    assert sc.model.seq_len == 1024 and sc.gpu_mem_cap_bytes == 8 * 2**30
    r = run("plot", "timeline", "--measurement", str(RUN), "-o", str(tmp_path / "t.png"))
    assert r.exit_code == 0 and (tmp_path / "t.png").is_file(), r.output


def test_measured_timeline_refuses_another_scenario(tmp_path):
    assert_user_error(run("plot", "timeline", "--measurement", str(RUN), "-c", "zero3-nvme",
                          "-o", str(tmp_path / "t.png")), "brings its own scenario",
                      "--ds-config")
    assert not (tmp_path / "t.png").exists()
