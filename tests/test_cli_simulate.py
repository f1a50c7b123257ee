"""`tierlab simulate` through click's CliRunner."""
import json

import pytest
from click.testing import CliRunner

from tierlab.cli import main


@pytest.fixture
def run():
    runner = CliRunner()
    return lambda *args: runner.invoke(main, list(args), catch_exceptions=False)


def test_builtin_table(run):
    r = run("simulate")
    assert r.exit_code == 0, r.output
    for preset in ("no-offload", "zero2-cpu", "zero3-cpu", "zero3-nvme"):
        assert preset in r.output
    assert "TinyLlama-1.1B" in r.output and "bottleneck" in r.output


def test_builtin_json_is_a_list(run):
    r = run("simulate", "--json")
    data = json.loads(r.output)
    assert [d["config"] for d in data] == ["no-offload", "zero2-cpu", "zero3-cpu", "zero3-nvme"]
    assert data[0]["scenario"]["micro_batch"] == 4 and data[0]["scenario"]["seq_len"] == 1024


def test_single_json_object_and_trace(run, tmp_path):
    trace = tmp_path / "t" / "trace.json"
    r = run("simulate", "-m", "tinyllama-1.1b", "-c", "zero3-nvme", "--micro-batch", "2",
            "--seq", "512", "--json", "--trace", str(trace))
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert {"step_time_s", "first_step_time_s", "phases", "exposed_s", "bottleneck", "memory_GiB",
            "fits", "tokens_per_s", "tflops_per_gpu", "lower_bound_s"} <= set(d)
    assert set(d["phases"]) == {"forward_s", "backward_s", "optimizer_s"}
    assert set(d["memory_GiB"]) == {"gpu", "host", "nvme"}
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("cat") == "nvme_read" for e in events)


def test_text_report(run):
    r = run("simulate", "-c", "zero2-cpu", "--seq", "512")
    assert r.exit_code == 0, r.output
    assert "bottleneck:" in r.output and "exposed" in r.output


def test_gpu_mem_cap_and_strict(run):
    ok = run("simulate", "-c", "zero3-cpu", "--micro-batch", "1", "--seq", "256", "--json")
    assert json.loads(ok.output)["fits"] is True
    capped = run("simulate", "-c", "zero3-cpu", "--micro-batch", "1", "--seq", "256",
                 "--gpu-mem-cap", "0.5GiB", "--json")
    d = json.loads(capped.output)
    assert d["fits"] is False and d["binding_tier"] == "gpu"
    strict = run("simulate", "-c", "zero3-cpu", "--gpu-mem-cap", "0.5GiB", "--strict")
    assert strict.exit_code == 2 and "gpu" in strict.output


@pytest.mark.parametrize("args, needle", [
    (("-m", "tinyllama-1b"), "closest"),
    (("--set", "zero_optimization.stage"), "expected dotted.key=value"),
    (("-c", "zero3-cpu", "--set", "zero_optimization.offload_optimizer.device=nvme",
      "--set", "zero_optimization.offload_optimizer.nvme_path=null"), "nvme_path"),
    (("-c", "zero3-cpu", "--set", "zero_optimization.offload_optimizer.ratio=0.5"), "ratio"),
    (("-c", "zero3-cpu", "--gpu-mem-cap", "lots"), "gpu-mem-cap"),
])
def test_bad_input_is_one_line_exit_2(run, args, needle):
    r = run("simulate", *args)
    assert r.exit_code == 2, r.output
    assert needle in r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize("flag,value", [("--micro-batch", "0"), ("--seq", "0"),
                                        ("--micro-batch", "-3")])
def test_the_preset_comparison_refuses_a_zero_batch_or_seq(flag, value):
    """Without -m/-H/-c simulate compares the presets at micro-batch 4, seq 1024 unless told
    otherwise; a 0 given on the command line was read as 'not given' and silently replaced by
    the default (issue 34's silent wrong acceptances); it is refused by name now."""
    from tests._cli import assert_user_error, run as run_cli
    assert_user_error(run_cli("simulate", flag, value), flag, value)
