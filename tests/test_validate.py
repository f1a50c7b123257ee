"""validate/compare.py and `tierlab validate`: rows, errors, MAPE, OOM agreement, CLI contract.

The measurement directories here are written by the runner's own MeasurementWriter with
made-up step times: they test the comparison arithmetic, not the simulator's accuracy (that is
tests/test_validation_cases.py, on the committed real runs)."""
import json
from dataclasses import asdict

import pytest

from tierlab.errors import ConfigError
from click.testing import CliRunner

from tierlab.cli import main
from tierlab.profiles.load import load_hardware, load_model
from tierlab.dsconfig.read import load_ds_config
from tierlab.records.measurement import Measurement, MeasurementWriter, StepRecord, load_measurement
from tierlab.sim.strategy import Flags, parse_ds_config, to_ds_config
from tierlab.validate.compare import Row, compare_measurement, scenario_of, summarize


def write_case(root, name, *, config="zero3-cpu", step_s=1.0, status="ok", kind="", cap=None,
               mb=4, seq=1024):
    model = load_model("tinyllama-1.1b", seq_len=seq)
    cfg, _ = load_ds_config(config)
    strategy, _ = parse_ds_config(cfg, Flags(micro_batch=mb, precision="bf16",
                                             hidden=model.hidden, activation_checkpointing=True))
    m = Measurement(run_id=name, model=asdict(model), ds_config=to_ds_config(strategy),
                    run={"micro_batch": mb, "seq": seq, "world_size": 1, "checkpointing": True,
                         "gpu_mem_cap_bytes": cap})
    w = MeasurementWriter(root / name, m)
    for i in range(4 if status == "ok" else 0):
        w.append(StepRecord(step=i, wall_s=step_s * (1.5 if i == 0 else 1.0), timing="synchronised",
                            loss=10.0 - i, tokens=mb * seq, forward_s=0.1 * step_s,
                            backward_s=0.3 * step_s, optimizer_s=0.6 * step_s,
                            gpu_max_allocated_bytes=int(3e9), host_rss_bytes=int(20e9)))
    w.close(status, reason="CUDA out of memory" if kind == "oom" else "", failure_kind=kind,
            warmup_steps=1)
    return root / name


@pytest.mark.lab
def test_scenario_of_reproduces_the_run(tmp_path):
    d = write_case(tmp_path, "a", cap=8 * 2**30, seq=512)
    sc = scenario_of(load_measurement(d), load_hardware("h200-host"))
    hw, model, strategy = sc.hardware, sc.model, sc.strategy
    assert hw.gpu.hbm_bytes == 8 * 2**30 and model.seq_len == 512
    assert strategy.zero.stage == 3 and strategy.param_device == "cpu"
    assert strategy.train_micro_batch_size_per_gpu == 4 and strategy.activation_checkpointing


@pytest.mark.lab
def test_rows_and_error(tmp_path):

    d = write_case(tmp_path, "a", step_s=2.0)
    hw = load_hardware("h200-host")
    rows = {r.metric: r for r in compare_measurement(hw, load_measurement(d))}
    predicted = scenario_of(load_measurement(d), hw).simulate().step_time_s
    assert rows["step_time_s"].measured == 2.0
    assert rows["step_time_s"].predicted == pytest.approx(predicted)
    assert rows["step_time_s"].error_pct == pytest.approx(100 * (predicted - 2.0) / 2.0)
    assert rows["first_step_time_s"].measured == 3.0
    assert rows["optimizer_s"].measured == pytest.approx(1.2)
    assert rows["oom"].measured == 0.0


def test_summary_mape_and_max():
    rows = [Row(case="a", metric="step_time_s", predicted=1.1, measured=1.0),
            Row(case="b", metric="step_time_s", predicted=1.7, measured=2.0),
            Row(case="a", metric="oom", predicted=1.0, measured=0.0)]
    s = summarize(rows)
    assert s["step_time_s"]["mape_pct"] == pytest.approx(12.5)
    assert s["step_time_s"]["max_pct"] == pytest.approx(15.0)
    assert s["step_time_s"]["worst_case"] == "b"
    assert s["oom"]["mismatches"] == ["a"]


@pytest.mark.lab
def test_failed_run_gives_only_the_oom_verdict(tmp_path):
    d = write_case(tmp_path, "oom", config="no-offload", status="failed", kind="oom",
                   cap=8 * 2**30)
    rows = compare_measurement(load_hardware("h200-host"), load_measurement(d))
    assert [(r.metric, r.predicted, r.measured) for r in rows] == [("oom", 1.0, 1.0)]


@pytest.mark.lab
def test_cli_writes_reports_and_gates(tmp_path):
    write_case(tmp_path / "cases", "a", step_s=0.01)
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["validate", str(tmp_path / "cases"), "--out", str(out),
                                    "-H", "h200-host"])
    assert res.exit_code == 0, res.output
    assert "step_time_s" in res.output and "MAPE" in res.output
    for f in ("validate.csv", "summary.json", "scatter.png", "phases.png"):
        assert (out / f).stat().st_size > 0
    res = CliRunner().invoke(main, ["validate", str(tmp_path / "cases"), "--out", str(out),
                                    "-H", "h200-host", "--max-error", "10"])
    assert res.exit_code == 1 and "MAPE" in res.output


def test_cli_bad_input(tmp_path):
    res = CliRunner().invoke(main, ["validate", str(tmp_path / "none")])
    assert res.exit_code == 2 and "no such file" in res.output
    (tmp_path / "empty").mkdir()
    res = CliRunner().invoke(main, ["validate", str(tmp_path / "empty")])
    assert res.exit_code == 2 and "no measurement.json" in res.output


@pytest.mark.lab
def test_folder_validate_yaml_picks_the_profile_and_bad_files_are_exit_2(tmp_path):
    from tierlab.validate.compare import folder_hardware

    runs = tmp_path / "runs"
    assert folder_hardware(runs) is None
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "validate.yaml").write_text("hardware: h200x2-b\nnote: calibrated with them\n")
    assert folder_hardware(runs) == "h200x2-b"
    (tmp_path / "runs" / "validate.yaml").write_text("hardwar: h200x2-b\n")
    with pytest.raises(ConfigError, match="validate.yaml"):
        folder_hardware(runs)
    (tmp_path / "runs" / "validate.yaml").write_text("hardware: [unclosed\n")
    with pytest.raises(ConfigError, match="validate.yaml"):
        folder_hardware(runs)
    write_case(tmp_path / "cases", "a", step_s=0.01)
    (tmp_path / "cases" / "validate.yaml").write_text("hardware: 3\n")
    res = CliRunner().invoke(main, ["validate", str(tmp_path / "cases"), "--out",
                                    str(tmp_path / "out")])
    assert res.exit_code == 2 and "validate.yaml" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "out").exists()


@pytest.mark.lab
def test_a_runs_own_module_call_time_does_not_change_the_scenario(tmp_path):
    """A run records its host's module-call time as a fact; the simulation does not use it."""
    from dataclasses import replace as dc_replace

    write_case(tmp_path / "cases", "a", step_s=0.01)
    m = load_measurement(tmp_path / "cases" / "a")
    hw = load_hardware("h200x2-b")
    probed = dc_replace(m, host={**m.host, "module_call_s": 6e-5})
    assert scenario_of(probed, hw).hardware == scenario_of(m, hw).hardware
    assert scenario_of(probed, hw).hardware.cpu == hw.cpu


def test_scatter_labels_keep_apart_and_stay_on_the_axis():
    import math

    from tierlab.validate.report import label_heights

    ys = [0.60, 0.61, 0.62, 0.63, 1.00, 1.01]
    got = label_heights(ys, 0.1, 1.4)
    gap = 0.032 * math.log(14)
    steps = [math.log(b / a) for a, b in zip(got, got[1:])]
    assert all(s >= gap - 1e-9 for s in steps)                 # one text line apart at least
    assert got[-1] <= 1.4 and got[0] == pytest.approx(0.60)   # on the axis; the lowest stays put
    assert label_heights([0.2, 1.0], 0.1, 1.4) == pytest.approx([0.2, 1.0])   # far apart: as is
    many = label_heights([0.5 + 0.001 * i for i in range(45)], 0.15, 1.4)  # a whole folder's
    assert all(0.15 < y < 1.4 for y in many)
    assert all(b > a for a, b in zip(many, many[1:]))


@pytest.mark.lab
def test_a_measurement_it_cannot_simulate_is_named_by_its_file(tmp_path):
    """A recorded ds_config tierlab refuses: the error names the measurement's file (where the
    user can look), not only its run id."""
    d = write_case(tmp_path, "a")
    head = json.loads((d / "measurement.json").read_text())
    head["ds_config"]["zero_optimization"]["stage"] = 7
    (d / "measurement.json").write_text(json.dumps(head))
    r = CliRunner().invoke(main, ["validate", str(d), "-H", "h200-host", "--out",
                                  str(tmp_path / "v")])
    assert r.exit_code == 2, r.output
    (line,) = [x for x in r.output.splitlines() if x.startswith("error:")]
    assert str(d / "measurement.json") in line and "stage" in line


def _with_engine(case, engine):
    """The case's measurement.json as if `tierlab run --engine ENGINE` had trained it."""
    path = case / "measurement.json"
    record = json.loads(path.read_text())
    record["run"]["engine"] = engine
    path.write_text(json.dumps(record))
    return case


def test_an_fsdp2_offload_run_is_simulated_with_fsdp2s_schedule_not_deepspeeds(tmp_path):
    """A run `tierlab run --engine fsdp2-offload` trained is compared with sim/fsdp2.py's
    schedule (before: with DeepSpeed's, -94% on the H200 runs of lab/fsdp2); no step-1 row (the
    FSDP2 schedule has none) and no range in the coverage."""
    hw = load_hardware("h200-host")
    case = _with_engine(write_case(tmp_path / "cases", "f2off", config="no-offload"),
                        "fsdp2-offload")
    m = load_measurement(case)
    rows = {r.metric: r for r in compare_measurement(hw, m)}
    fsdp2 = scenario_of(m, hw).simulate(engine="fsdp2-offload")
    deepspeed = scenario_of(m, hw).simulate()
    assert rows["step_time_s"].predicted == pytest.approx(fsdp2.step_time_s)
    assert fsdp2.step_time_s > 3 * deepspeed.step_time_s      # CPU AdamW binds, not the GPU
    assert rows["optimizer_s"].predicted == pytest.approx(fsdp2.phases["optimizer_s"])
    assert "first_step_time_s" not in rows and "oom" in rows
    res = CliRunner().invoke(main, ["validate", str(tmp_path / "cases"), "-H", "h200-host",
                                    "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "no finished DeepSpeed run with a steady step time" in res.output


def test_an_engine_without_a_schedule_is_left_out_with_a_warning(tmp_path):
    write_case(tmp_path / "cases", "z3")
    _with_engine(write_case(tmp_path / "cases", "f2"), "fsdp2")
    res = CliRunner().invoke(main, ["validate", str(tmp_path / "cases"), "-H", "h200-host",
                                    "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "left out: " in res.output and "f2 (fsdp2)" in res.output
    cases = {line.split()[0] for line in res.output.splitlines() if line.startswith("cases/")}
    assert cases == {"cases/z3"}
    with pytest.raises(ConfigError, match="run.engine 'fsdp2' has no schedule"):
        compare_measurement(load_hardware("h200-host"), load_measurement(tmp_path / "cases/f2"))


def test_an_unknown_engine_is_one_line_naming_the_file(tmp_path):
    case = _with_engine(write_case(tmp_path / "cases", "x"), "megatron")
    res = CliRunner().invoke(main, ["validate", str(tmp_path / "cases"), "-H", "h200-host",
                                    "--out", str(tmp_path / "out")])
    assert res.exit_code == 2
    assert res.output.strip().startswith("error: ") and len(res.output.strip().splitlines()) == 1
    assert str(case / "measurement.json") in res.output and "'megatron'" in res.output
    assert not (tmp_path / "out").exists()
