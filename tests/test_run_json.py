"""`tierlab run --json`: the refusal path as one JSON object (the result path shares `_json`)."""
import json

from click.testing import CliRunner

from tierlab.cli import main


def test_run_json_refusal_is_one_object_and_exit_2(tmp_path):
    # Llama-2-7B without offload on the 8 GiB workstation: 161.61 GiB per GPU, refused
    r = CliRunner().invoke(main, ["run", "-m", "llama-2-7b", "-c", "no-offload", "--steps", "3",
                                  "--out", str(tmp_path / "r"), "--json"])
    assert r.exit_code == 2, r.output
    data = json.loads(r.stdout)     # the object alone (commands/json_stdout.py)
    assert data["status"] == "refused" and data["nodes"] == 1
    assert [p["check"] for p in data["problems"] if p["severity"] == "error"] == ["memory"]
    assert not (tmp_path / "r").exists()                 # nothing written before the launch


def test_compare_json_prints_the_rows_and_files(tmp_path):
    # one variant, its training replaced by a recorded Measurement (commands/seams.py)
    from tierlab.records.measurement import Measurement, MeasurementWriter
    from _runnerhelp import TINY

    def recorded(spec, limit):
        return MeasurementWriter(spec.out_dir, Measurement(run_id=spec.label)).close(
            "ok", samples=[])

    out = tmp_path / "cmp"
    r = CliRunner().invoke(main, ["compare", "-m", TINY, "--micro-batch", "1", "--seq", "64",
                                  "--steps", "3", "--warmup-steps", "1", "--variants",
                                  "no-offload", "--skip-preflight", "--out", str(out), "--json"],
                           obj={"train": recorded})
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [row["variant"] for row in data["rows"]] == ["no-offload"]
    assert data["files"][0] == str(out / "compare.csv") and data["interrupted"] is False
    assert (out / "compare.json").is_file()


def test_calibrate_from_raw_json_lists_the_files_written(tmp_path, monkeypatch):
    # h200-t's raw record rebuilt (its base profile h200x2-b is one of the lab's)
    from pathlib import Path

    from tierlab.profiles import load

    repo = Path(__file__).resolve().parents[1]
    monkeypatch.setenv(load.PROFILES_ENV, str(repo / "lab" / "profiles"))
    out = tmp_path / "systems" / "x.yaml"
    r = CliRunner().invoke(main, ["calibrate", "--from-raw",
                                  str(repo / "lab/cases/h200-t/h200-t-raw.json"), "--out",
                                  str(out), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["profile"] == "x" and str(out) in data["wrote"]
    assert data["summary"][0].startswith("x: PCIe H2D/D2H pinned")


def test_sweep_json_rows_or_the_file(tmp_path):
    args = ["sweep", "-c", "zero3-cpu", "--vary", "micro_batch=1,2", "--memory-only", "-q",
            "--json", "--jobs", "1"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    data = json.loads(r.output[r.output.index("{"):r.output.rindex("}") + 1])
    assert [row["micro_batch"] for row in data["rows"]] == [1, 2]
    assert data["rows_total"] == 2 and data["errors"] == 0 and data["out"] is None
    out = tmp_path / "s.csv"
    r = CliRunner().invoke(main, [*args, "--out", str(out)])
    data = json.loads(r.output[r.output.index("{"):r.output.rindex("}") + 1])
    assert data["rows"] is None and data["out"] == str(out) and out.is_file()
