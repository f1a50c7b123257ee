"""The Python API (`tierlab.simulate / sweep / plan / plot / scenario`): names or objects, the
same numbers as the CLI, bad input as ConfigError, and `import tierlab` stays cheap."""
import json
import subprocess
import sys

import pandas as pd
import pytest
from click.testing import CliRunner

import tierlab
from tierlab.cli import main
from tierlab.errors import ConfigError
from tierlab.profiles.load import load_hardware, load_model
from tierlab.dsconfig.read import load_ds_config


def test_import_is_cheap():
    code = ("import sys, tierlab; heavy = [m for m in ('torch', 'deepspeed', 'simpy', 'pandas', "
            "'matplotlib', 'numpy', 'yaml', 'click') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_simulate_by_name_equals_cli():
    r = tierlab.simulate("tinyllama-1.1b", "workstation-rtx3070", "zero3-nvme", micro_batch=4,
                         seq=1024)
    cli = CliRunner().invoke(main, ["simulate", "-c", "zero3-nvme", "-m", "tinyllama-1.1b",
                                    "--micro-batch", "4", "--seq", "1024", "--json"])
    assert cli.exit_code == 0, cli.output
    d = json.loads(cli.output)
    assert r.step_time_s == d["step_time_s"] and r.bottleneck == d["bottleneck"]


def test_simulate_with_objects_dicts_and_overrides():
    hw, m = load_hardware("workstation-rtx3070"), load_model("tinyllama-1.1b", seq_len=1024)
    cfg, _ = load_ds_config("zero3-nvme")
    by_obj = tierlab.simulate(m, hw, cfg, micro_batch=4)
    by_name = tierlab.simulate("tinyllama-1.1b", "workstation-rtx3070", "zero3-nvme",
                               micro_batch=4, seq=1024)
    assert by_obj.step_time_s == by_name.step_time_s
    a = tierlab.simulate(m, hw, "zero3-nvme", micro_batch=4,
                         overrides={"zero_optimization.sub_group_size": 5e7})
    b = tierlab.simulate(m, hw, "zero3-nvme", micro_batch=4,
                         overrides=["zero_optimization.sub_group_size=5e7"])
    assert a.step_time_s == b.step_time_s


def test_scenario_strategy_round_trip():
    sc = tierlab.scenario(ds_config="zero2-cpu", micro_batch=2, seq=512, checkpointing=False)
    hw, m, s = sc.hardware, sc.model, sc.strategy
    assert s.train_micro_batch_size_per_gpu == 2 and not s.activation_checkpointing
    again = tierlab.simulate(m, hw, s)
    direct = tierlab.simulate("tinyllama-1.1b", "workstation-rtx3070", "zero2-cpu",
                              micro_batch=2, seq=512, checkpointing=False)
    assert again.step_time_s == direct.step_time_s


def test_wrong_order_and_bad_names_are_config_errors():
    hw, m = load_hardware("workstation-rtx3070"), load_model("tinyllama-1.1b")
    with pytest.raises(ConfigError, match="order is model, hardware"):
        tierlab.simulate(hw, m)
    with pytest.raises(ConfigError, match="unknown model"):
        tierlab.simulate("no-such-model")
    with pytest.raises(ConfigError, match="micro-batch|micro_batch"):
        tierlab.simulate(micro_batch=0)


def test_sweep_returns_a_dataframe_and_resumes(tmp_path):
    out = tmp_path / "s.csv"
    df = tierlab.sweep({"nvme.drives": [1, 2], "micro_batch": "1..2"}, ds_config="zero3-nvme",
                       seq=512, jobs=1, out=str(out))
    assert isinstance(df, pd.DataFrame) and len(df) == 4 and (df["error"] == "").all()
    assert list(df.columns[1:3]) == ["nvme.drives", "micro_batch"]
    again = tierlab.sweep({"nvme.drives": [1, 2, 4], "micro_batch": "1..2"},
                          ds_config="zero3-nvme", seq=512, jobs=1, out=str(out))
    assert len(again) == 6
    assert again.set_index("point_id").loc[df["point_id"], "step_time_s"].tolist() == \
        df["step_time_s"].tolist()


@pytest.mark.parametrize("vary,fragment", [
    ({}, "empty grid"), ({"bogus": [1]}, "unknown vary key"),
    ({"micro_batch": "one"}, "expected an integer"), ({"micro_batch": []}, "no values")])
def test_sweep_bad_input(vary, fragment):
    with pytest.raises(ConfigError, match=fragment):
        tierlab.sweep(vary, jobs=1)


def test_plan_and_plot():
    p = tierlab.plan("tinyllama-1.1b", "workstation-rtx3070", seq=1024, micro_batch=2,
                     max_gpu_mem="8GiB")
    assert p.best is not None and p.ds_config["train_micro_batch_size_per_gpu"] == 2
    assert p.to_dict()["best"]["placement"] == p.best.label
    r = tierlab.simulate(micro_batch=2, seq=512)
    assert tierlab.plot("bottleneck", {"zero3-cpu": r}).axes
    assert tierlab.plot("timeline", r).axes
    with pytest.raises(ConfigError, match="unknown plot kind"):
        tierlab.plot("pie", r)


def test_preflight_equals_the_cli_and_says_why(tmp_path):
    problems = tierlab.preflight("llama-2-70b", "workstation-rtx3070")
    cli = CliRunner().invoke(main, ["preflight", "-m", "llama-2-70b", "-H",
                                    "workstation-rtx3070", "--no-probe", "-q"])
    assert cli.exit_code == 2
    assert [p.line() for p in problems] == \
        [l for l in cli.stderr.splitlines() if l.startswith(("error:", "warning:"))]
    assert problems[0].severity == "error" and "[memory] gpu needs" in problems[0].line()
    assert tierlab.preflight("tinyllama-1.1b", "dgx-a100", "zero3-cpu", micro_batch=1,
                             seq=512) == []
    with pytest.raises(ConfigError, match="unknown model"):
        tierlab.preflight("no-such-model")


def test_validate_equals_the_cli(tmp_path):
    v = tierlab.validate_runs(example=True)
    assert v.files == () and v.report.rows and v.coverage["n"] == 2
    out = tmp_path / "v"
    cli = CliRunner().invoke(main, ["validate", "--example", "--json", "--out", str(out)])
    assert cli.exit_code == 0, cli.output
    assert json.loads(cli.stdout) == json.loads(json.dumps(v.to_dict()))
    written = tierlab.validate_runs(example=True, out=str(tmp_path / "api"))
    assert sorted(p.name for p in written.files) == sorted(p.name for p in out.iterdir())
    with pytest.raises(ConfigError, match="one of the two"):
        tierlab.validate_runs()
    code = ("import tierlab.validate.plot_sweep as P, tierlab; "
            "print(P.__name__, tierlab.validate_runs.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["tierlab.validate.plot_sweep", "tierlab"]  # the package keeps its name
