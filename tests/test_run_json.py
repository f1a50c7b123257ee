"""`tierlab run --json`: the refusal path as one JSON object (the result path shares `_json`)."""
import json

from click.testing import CliRunner

from tierlab.cli import main


def test_run_json_refusal_is_one_object_and_exit_2(tmp_path):
    # Llama-2-7B without offload on the 8 GiB workstation: 161.61 GiB per GPU, refused
    r = CliRunner().invoke(main, ["run", "-m", "llama-2-7b", "-c", "no-offload", "--steps", "3",
                                  "--out", str(tmp_path / "r"), "--json"])
    assert r.exit_code == 2, r.output
    data = json.loads(r.output[r.output.index("{"):])   # DeepSpeed may log a line before it
    assert data["status"] == "refused" and data["nodes"] == 1
    assert [p["check"] for p in data["problems"] if p["severity"] == "error"] == ["memory"]
    assert not (tmp_path / "r").exists()                 # nothing written before the launch
