"""The CLI's foundation verbs and its bad-input contract: one line, exit 2, no traceback."""
import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from tierlab.cli import main


from _cli import assert_user_error, run  # noqa: E402


def test_profiles_lists_each_kind():
    out = run("profiles")
    assert out.exit_code == 0, out.output
    for name in ("workstation-rtx3070", "tinyllama-1.1b", "offload-example", "zero3-nvme"):
        assert name in out.output


def test_memory_table_and_json():
    out = run("memory", "--model", "tinyllama-1.1b", "--ds-config", "no-offload",
              "--micro-batch", "4", "--seq", "1024")
    assert out.exit_code == 0, out.output
    assert "does NOT fit: gpu tier" in out.output
    out = run("memory", "-c", "zero3-nvme", "--micro-batch", "4", "--seq", "1024", "--json")
    d = json.loads(out.output)
    assert d["fits"] and d["tiers"]["nvme"]["used_GiB"] > 0 and d["micro_batch"] == 4


def test_gpu_mem_cap():
    out = run("memory", "-c", "zero3-cpu", "--gpu-mem-cap", "1GiB", "--json")
    d = json.loads(out.output)
    assert d["tiers"]["gpu"]["capacity_GiB"] == 1.0 and not d["fits"]


def test_missing_config_file(tmp_path):
    assert_user_error(run("memory", "-c", str(tmp_path / "nope.json")), "nope.json", "no such file")


def test_malformed_json(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{ not json")
    assert_user_error(run("memory", "-c", str(p)), "bad.json", "malformed JSON")


def test_malformed_yaml(tmp_path):
    p = tmp_path / "box.yaml"
    p.write_text("kind: system\nname: [x\n")
    assert_user_error(run("memory", "-H", str(p)), "box.yaml", "malformed YAML")


def test_unknown_profile_suggests():
    assert_user_error(run("memory", "-m", "tinyllama"), "unknown model 'tinyllama'", "closest")
    assert_user_error(run("memory", "-c", "zero3-cpus"), "unknown ds_config", "zero3-cpu")


@pytest.mark.parametrize("args,fragment", [
    (["--micro-batch", "0"], "--micro-batch must be >= 1"),
    (["--seq", "-5"], "--seq must be >= 1"),
    (["--gpus", "0"], "--gpus must be >= 1"),
    (["--set", "zero_optimization.offload_optimizer.device=nvme", "--set",
      "zero_optimization.offload_optimizer.nvme_path=null"], "needs zero_optimization.offload_optimizer.nvme_path"),
    (["-c", "offload-example", "--set", "train_micro_batch_size_per_gpu=3"],
     "train_batch_size 8 != train_micro_batch_size_per_gpu 3"),
    (["--set", "zero_optimization.stage"], "expected dotted.key=value"),
    (["--gpu-mem-cap", "lots"], "--gpu-mem-cap"),
    (["--gpu-mem-cap", "-3GiB"], "--gpu-mem-cap must be > 0"),
    (["--gpu-mem-cap", "0GiB"], "--gpu-mem-cap must be > 0"),
    (["--gpu-mem-cap", "8"], "--gpu-mem-cap '8' needs a unit"),       # never 8 bytes
    (["-c", "offload-example", "--precision", "bf16"], "contradicts"),
])
def test_bad_values(args, fragment):
    assert_user_error(run("memory", *args), fragment)


def test_import_sim_does_not_import_torch():
    code = "import sys, tierlab.sim, tierlab.sim.memory, tierlab.sim.strategy; " \
           "print('torch' in sys.modules, 'deepspeed' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_console_script_help():
    out = run("--help")
    assert out.exit_code == 0 and "memory" in out.output and "profiles" in out.output
    out = run("memory", "--help")
    for opt in ("--model", "--hardware", "--ds-config", "--set", "--micro-batch", "--seq", "--json"):
        assert opt in out.output


def test_profiles_json_lists_what_the_table_lists(tmp_path):
    import json

    from click.testing import CliRunner

    from tierlab.cli import main

    table = CliRunner().invoke(main, ["profiles", "models"])
    data = json.loads(CliRunner().invoke(main, ["profiles", "models", "--json"]).output)
    assert list(data) == ["models"] and data["models"]
    names = [row["name"] for row in data["models"]]
    assert names == [ln.split()[0] for ln in table.output.splitlines()[1:] if ln.startswith("  ")]
    assert "tinyllama-1.1b" in names and not any(row["own"] for row in data["models"])
    every = json.loads(CliRunner().invoke(main, ["profiles", "--json"]).output)
    assert list(every) == ["hardware", "models", "configs"]
