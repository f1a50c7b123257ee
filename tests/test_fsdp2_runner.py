"""The FSDP2 runner (runner/fsdp2.py, `tierlab run --engine fsdp2[-offload]`): a real FSDP2 run
on the CPU (gloo, world size 1; CPUOffloadPolicy without pinning: torch pins only with an
accelerator), its record, and the one-line refusals."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests._runnerhelp import TINY, run_cli
from tierlab.cli import main
from tierlab.errors import ConfigError
from tierlab.runner.fsdp2 import ENGINES, RUN_KEYS, fsdp2_config, fsdp2_spec
from tierlab.runner.train import RunSpec


def test_fsdp2_config_and_spec_drop_zero_keys():
    assert ENGINES == ("deepspeed", "fsdp2", "fsdp2-offload")
    cfg = fsdp2_config("fsdp2-offload", "bf16")
    assert cfg["offload"] and cfg["pin_memory"] and cfg["reduce_dtype"] == "fp32"
    assert not fsdp2_config("fsdp2", "bf16")["pin_memory"]
    spec = RunSpec(model={}, ds_config={"zero_optimization": {"stage": 3}, "gradient_clipping": 1.0,
                                        "train_micro_batch_size_per_gpu": 2},
                   precision="bf16", micro_batch=2, seq=8, steps=2, out_dir="x")
    assert fsdp2_spec(spec, "deepspeed") is spec
    f = fsdp2_spec(spec, "fsdp2-offload")
    assert f.engine == "fsdp2-offload" and set(f.ds_config) <= set(RUN_KEYS)
    assert "zero_optimization" not in f.ds_config
    assert RunSpec.from_json(f.to_json()) == f          # it travels to launcher ranks


@pytest.mark.parametrize("engine,precision", [("fsdp2", "fp16"), ("deepspeed", "bf16")])
def test_fsdp2_config_refuses(engine, precision):
    with pytest.raises(ConfigError, match="--engine"):
        fsdp2_config(engine, precision)


def test_bad_engine_is_one_line_exit_2():
    r = CliRunner().invoke(main, ["run", "--engine", "fsdp3"])
    assert r.exit_code == 2 and "fsdp3" in r.output
    assert "fsdp2-offload" in CliRunner().invoke(main, ["run", "--help"]).output


@pytest.mark.parametrize("engine", ["fsdp2-offload", "fsdp2"])
def test_cpu_fsdp2_run_is_a_measurement(tmp_path, engine):
    out = tmp_path / "m"
    r = run_cli("run", "--engine", engine, "--model", TINY, "--ds-config", "no-offload",
                "--micro-batch", "1", "--seq", "32", "--grad-accum", "2", "--steps", "3",
                "--warmup-steps", "1", "--breakdown", "--out", str(out), "--no-progress")
    assert r.returncode == 0, r.stderr[-2000:]
    m = json.loads((out / "measurement.json").read_text())
    assert m["status"] == "ok" and m["run"]["engine"] == engine
    assert m["run"]["fsdp"]["offload"] == (engine == "fsdp2-offload")
    assert m["run"]["adam_impl"] == "single_tensor" and m["run"]["backend"] == "gloo"
    assert m["run"]["param_device"] == "cpu" and m["run"]["pin_memory_applied"] is False
    assert "zero_optimization" not in m["ds_config"] and m["versions"]["torch"]
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert len(steps) == 3 and all(s["loss"] > 0 and s["optimizer_s"] > 0 for s in steps)
    assert steps[-1]["loss"] < steps[0]["loss"] + 0.5 and steps[0]["host_rss_bytes"] > 0
