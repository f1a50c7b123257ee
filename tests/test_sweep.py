"""sweeps/run.py + sweeps/keys.py: the key namespace, values, grid, invalid rows, resume, CLI."""
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tierlab.cli import main
from tierlab.errors import ConfigError
from tierlab.sweeps.run import (Base, Evaluator, point_id, read_results, resolve, run_sweep,
                               write_results)
from tierlab.sweeps.keys import all_keys, key_kind, make_axis, make_grid, parse_vary

sys.path.insert(0, str(Path(__file__).parent))
import fakesim  # noqa: E402

BASE = Base(micro_batch=4, seq=1024)


from _cli import assert_user_error, run  # noqa: E402


# ----------------------------------------------------------------------------------------------
# keys and values

@pytest.mark.parametrize("key,kind", [
    ("micro_batch", "batch"), ("config", "scenario"), ("checkpointing", "flag"),
    ("nvme.drives", "hardware"), ("pcie.h2d_pinned", "hardware"), ("dram", "hardware"),
    ("model.n_layers", "model"), ("zero_optimization.sub_group_size", "ds"),
    ("zero_optimization.offload_optimizer.pipeline_read", "ds"), ("aio.queue_depth", "ds"),
    ("optimizer.params.lr", "ds")])
def test_key_namespace(key, kind):
    assert key_kind(key) == kind
    assert key in all_keys() or kind == "ds"


@pytest.mark.parametrize("spec,values", [
    ("nvme.drives=1,2,4,8", (1, 2, 4, 8)),
    ("micro_batch=1..16:x2", (1, 2, 4, 8, 16)),
    ("grad_accum=1..3", (1, 2, 3)),
    ("seq=0..12:4", None),                      # 0 is not a valid sequence length
    ("nvme.read_bandwidth=3GB/s,6.5 GB/s,1e10", (3e9, 6.5e9, 1e10)),
    ("gpu.hbm=8GiB,24GB", (8 * 2**30, 24e9)),
    ("pcie.latency=10us", (1e-5,)),
    ("zero_optimization.sub_group_size=1e8,1e9", (100_000_000, 1_000_000_000)),
    ("checkpointing=true,off", (True, False)),
    ("zero_optimization.offload_optimizer.device=cpu,nvme", ("cpu", "nvme")),
    ("micro_batch=2,2,4", (2, 4)),
])
def test_values(spec, values):
    if values is None:
        with pytest.raises(ConfigError, match="must be >= 1"):
            parse_vary(spec)
        return
    got = parse_vary(spec).values
    if all(isinstance(v, float) for v in values):
        assert got == pytest.approx(values, rel=1e-12)
    else:
        assert got == values


@pytest.mark.parametrize("spec,fragment", [
    ("nvme.drivez=1,2", "unknown vary key 'nvme.drivez'; closest: nvme.drives"),
    ("zero_optimization.sub_group_sise=1e8", "closest: zero_optimization.sub_group_size"),
    ("bogus=1", "unknown vary key 'bogus'"),
    ("micro_batch=abc", "expected an integer"),
    ("micro_batch=1.5", "expected an integer"),
    ("nvme.read_bandwidth=3 parsecs", "does not measure bytes/s"),
    ("nvme.read_bandwidth=3GB", "does not measure bytes/s"),
    ("zero_optimization.sub_group_size=lots", "expected an integer"),
    ("zero_optimization.offload_optimizer.device=gpu", "none, cpu or nvme"),
    ("precision=fp8", "fp16, bf16 or fp32"),
    ("checkpointing=maybe", "true/false"),
    ("config=no-such-preset", "unknown ds_config 'no-such-preset'"),
    ("micro_batch=", "no values"),
    ("micro_batch", "expected KEY=V1,V2"),
    ("micro_batch=8..1", "bad range"),
])
def test_bad_values(spec, fragment):
    with pytest.raises(ConfigError) as e:
        parse_vary(spec)
    assert fragment in str(e.value)


def test_grid_is_the_product_and_rejects_empty_and_duplicates():
    grid = make_grid([parse_vary("micro_batch=1,2"), parse_vary("nvme.drives=1,2,4")])
    assert len(grid) == 6 and grid[0] == {"micro_batch": 1, "nvme.drives": 1}
    with pytest.raises(ConfigError, match="empty grid"):
        make_grid([])
    with pytest.raises(ConfigError, match="given twice"):
        make_grid([parse_vary("micro_batch=1"), parse_vary("micro_batch=2")])
    with pytest.raises(ConfigError, match="no values"):
        make_axis("micro_batch", [])


def test_resolve_applies_every_kind_of_key():
    sc = resolve(BASE, {"nvme.drives": 4, "nvme.read_bandwidth": 7e9, "dram": 128e9,
                        "pcie.h2d_pinned": 50e9, "cpu.adam_throughput": 2e9, "gpu.hbm": 24e9,
                        "model.n_layers": 4, "seq": 512, "micro_batch": 2, "grad_accum": 3,
                        "config": "zero3-nvme", "zero_optimization.sub_group_size": 5e7,
                        "aio.queue_depth": 64, "gpus": 2, "checkpointing": False})
    hw, m, s = sc.hardware, sc.model, sc.strategy
    assert (hw.nvme_drives, hw.nvme.read_bandwidth_Bps, hw.dram_bytes) == (4, 7e9, 128e9)
    assert (hw.pcie.h2d_pinned_Bps, hw.cpu.adam_params_per_s, hw.gpu.hbm_bytes) == (50e9, 2e9,
                                                                                     24e9)
    assert (m.n_layers, m.seq_len, hw.gpus_per_node) == (4, 512, 2)
    assert (s.train_micro_batch_size_per_gpu, s.gradient_accumulation_steps) == (2, 3)
    assert s.train_batch_size == 2 * 3 * 2 and s.data_parallel_size == 2
    assert (s.zero.sub_group_size, s.aio.queue_depth, s.optimizer_device) == (50_000_000, 64,
                                                                              "nvme")
    assert not s.activation_checkpointing
    # the base's profile objects are untouched (dataclasses.replace)
    assert resolve(BASE).hardware.nvme_drives == 1


def test_point_id_is_stable_and_depends_on_base():
    p = {"micro_batch": 2, "nvme.drives": 4}
    assert point_id(BASE, p) == point_id(BASE, {"nvme.drives": 4.0, "micro_batch": 2})
    assert point_id(BASE, p) != point_id(Base(micro_batch=8, seq=1024), p)


# ----------------------------------------------------------------------------------------------
# running

def test_invalid_combinations_are_rows_with_the_reason():
    axes = [parse_vary("config=zero2-cpu,zero3-cpu"),
            parse_vary("zero_optimization.offload_optimizer.device=cpu,nvme")]
    df = run_sweep(BASE, axes, simulator=fakesim.simulate, jobs=1).frame
    assert len(df) == 4
    bad = df[df["error"] != ""]
    # ZeRO-2 cannot put the optimizer on NVMe; zero3-cpu + nvme lacks nvme_path
    assert len(bad) == 2 and all("nvme" in e for e in bad["error"])
    assert df.loc[df["error"] == "", "step_time_s"].notna().all()
    assert list(df.columns[:3]) == ["point_id", "config",
                                    "zero_optimization.offload_optimizer.device"]


def test_memory_only_and_real_simulator_agree_on_fits():
    axes = [parse_vary("config=no-offload,zero3-cpu")]
    mem = run_sweep(BASE, axes, jobs=1).frame
    sim = run_sweep(BASE, axes, simulator=fakesim.simulate, jobs=1).frame
    assert list(mem["fits"]) == list(sim["fits"]) == [False, True]
    assert "step_time_s" not in mem.columns


def test_parallel_equals_serial():
    axes = [parse_vary("micro_batch=1,2,4"), parse_vary("nvme.drives=1,2,4")]
    a = run_sweep(BASE, axes, simulator=fakesim.simulate, jobs=1).frame
    b = run_sweep(BASE, axes, simulator=fakesim.simulate, jobs=2).frame
    assert a.equals(b)


def test_resume_skips_rows_already_in_the_file(tmp_path):
    out = tmp_path / "s.csv"
    first = run_sweep(BASE, [parse_vary("nvme.drives=1,2")], simulator=fakesim.simulate, jobs=1,
                      out=out)
    assert (first.computed, first.skipped) == (2, 0)
    again = run_sweep(BASE, [parse_vary("nvme.drives=1,2,4")], simulator=fakesim.simulate,
                      jobs=1, out=out)
    assert (again.computed, again.skipped) == (1, 2)
    df = read_results(out)
    assert list(df["nvme.drives"]) == [1, 2, 4]
    assert [p.name for p in tmp_path.iterdir()] == ["s.csv"]        # no temp file left


def _broken(hardware, model, strategy, *, strict=False):
    raise RuntimeError("boom")


def test_internal_errors_are_rows_and_retried_on_resume(tmp_path):
    out = tmp_path / "s.csv"
    o = run_sweep(BASE, [parse_vary("micro_batch=1,2")], simulator=_broken, jobs=1, out=out)
    assert o.errors == 2 and read_results(out)["error"].str.startswith("internal:").all()
    o = run_sweep(BASE, [parse_vary("micro_batch=1,2")], simulator=fakesim.simulate, jobs=1,
                  out=out)
    assert (o.computed, o.errors) == (2, 0)


def test_output_formats(tmp_path):
    with pytest.raises(ConfigError, match=r"\.csv or \.parquet"):
        read_results(tmp_path / "s.txt")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match="needs pyarrow"):
            write_results(None, tmp_path / "s.parquet")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="not a tierlab sweep file"):
        read_results(tmp_path / "other.csv")


def test_evaluator_is_picklable():
    import pickle

    ev = pickle.loads(pickle.dumps(Evaluator(BASE, fakesim.simulate)))
    assert ev({"micro_batch": 2})["error"] == ""


# ----------------------------------------------------------------------------------------------
# CLI

def test_cli_sweep_writes_resumes_and_plots(tmp_path):
    out, png = tmp_path / "r.csv", tmp_path / "r.png"
    args = ["sweep", "-c", "zero3-nvme", "--micro-batch", "4", "--seq", "1024", "--vary",
            "nvme.drives=1,2", "--vary", "zero_optimization.sub_group_size=1e8,1e9", "--out",
            str(out), "--no-progress", "-j", "1"]
    r = run(*args, "--plot", str(png))
    assert r.exit_code == 0, r.output
    assert "4 rows" in r.output and "fastest that fits" in r.output and png.stat().st_size > 0
    r = run(*args)
    assert "0 computed, 4 already there" in r.output


def test_cli_sweep_to_stdout_and_list_keys():
    r = run("sweep", "--vary", "micro_batch=1,2", "--memory-only", "--no-progress", "-q")
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0].startswith("point_id,micro_batch")
    r = run("sweep", "--list-keys")
    assert "nvme.drives" in r.output and "zero_optimization.sub_group_size" in r.output


@pytest.mark.parametrize("args,fragment", [
    (["--vary", "bogus=1,2"], "unknown vary key 'bogus'"),
    (["--vary", "micro_batch=x"], "expected an integer"),
    ([], "empty grid"),
    (["--vary", "micro_batch=1", "--out", "r.txt"], ".csv or .parquet"),
    (["--vary", "micro_batch=1", "--jobs", "0"], "--jobs must be >= 1"),
    (["--vary", "micro_batch=1", "-c", "nope"], "unknown ds_config 'nope'"),
])
def test_cli_sweep_bad_input(args, fragment, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_user_error(run("sweep", "--no-progress", *args), fragment)


def test_a_sweep_whose_every_row_failed_exits_2_and_keeps_its_rows(tmp_path):
    """Rows that could not be evaluated are rows with their error, never verdicts; when nothing
    could be evaluated the sweep fails (exit 2), the rows still written."""
    out = tmp_path / "s.csv"
    result = CliRunner().invoke(main, ["sweep", "-c", "zero3-nvme", "--vary", "nvme.drives=0",
                                       "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "error: sweep: every one of the 1 rows could not be evaluated; the first: " \
           "workstation-rtx3070 has no NVMe drive" in result.output
    assert "no NVMe drive" in read_results(out)["error"].iloc[0]
    result = CliRunner().invoke(main, ["sweep", "-c", "zero3-nvme", "--vary", "nvme.drives=0..1",
                                       "--out", str(tmp_path / "t.csv")])
    assert result.exit_code == 0 and "1 with an error" in result.output


# ----------------------------------------------------------------------------------------------
# long sweeps (issue 32): rows packed as they come, none kept twice, point answers on request

def test_rows_packed_in_blocks_equal_one_frame_of_every_row():
    from tierlab.sweeps.run import ROW_BLOCK, run_points, to_frame

    axes = [parse_vary(f"micro_batch=1..{ROW_BLOCK + 40}"), parse_vary("nvme.drives=1,2")]
    got = run_sweep(BASE, axes, simulator=fakesim.simulate, jobs=1).frame
    rows = run_points(make_grid(axes), Evaluator(BASE, fakesim.simulate), jobs=1)
    assert len(got) == 2 * (ROW_BLOCK + 40) and got.equals(to_frame(rows, [a.key for a in axes]))


def test_run_points_can_hand_rows_on_without_keeping_them():
    from tierlab.sweeps.run import run_points

    seen = []
    points = make_grid([parse_vary("micro_batch=1,2,4,8,16")])
    for jobs in (1, 2):
        seen.clear()
        kept = run_points(points, Evaluator(BASE, fakesim.simulate), jobs=jobs, keep=False,
                          on_rows=seen.extend)
        assert kept == [] and sorted(r["micro_batch"] for r in seen) == [1, 2, 4, 8, 16]


def test_run_grid_point_answers_without_ranges(tmp_path):
    from tierlab.sweeps.run import run_grid

    axes = [parse_vary("nvme.drives=1,2")]
    ranged = run_grid(BASE, axes, jobs=1).frame
    point = run_grid(BASE, axes, jobs=1, ranges=False, out=tmp_path / "p.csv").frame
    assert "step_time_low_s" in ranged.columns and "step_time_low_s" not in point.columns
    assert list(point["step_time_s"]) == list(ranged["step_time_s"])
    assert list(read_results(tmp_path / "p.csv")["step_time_s"]) == list(point["step_time_s"])


def test_results_csv_with_a_huge_header_is_one_line_and_untouched(tmp_path):
    """Issue 34: a header beyond bounds.RESULTS_HEADER_BYTES is refused before pandas parses."""
    import pytest as _pytest

    from tierlab.bounds import RESULTS_HEADER_BYTES
    from tierlab.errors import ConfigError
    from tierlab.sweeps.run import read_results

    path = tmp_path / "huge.csv"
    path.write_text(",".join(f"c{i}" for i in range(RESULTS_HEADER_BYTES // 4)) + "\n1\n")
    before = path.read_bytes()
    with _pytest.raises(ConfigError) as e:
        read_results(path)
    assert str(path) in str(e.value) and str(RESULTS_HEADER_BYTES) in str(e.value)
    assert "\n" not in str(e.value) and path.read_bytes() == before


@pytest.mark.parametrize("tamper, fragment", [
    (lambda b: b.replace(b"micro_batch", b"micro_batsh", 1), "no 'micro_batch' column"),
    (lambda b: b.replace(b",", b",\x00", 3), "has a control character"),
    (lambda b: b"point_id,seq,fits,error\n0123456789abcdef,128,True,\n", "no 'micro_batch' column")])
def test_resume_refuses_a_file_this_grid_did_not_write_and_leaves_it(tmp_path, tamper, fragment):
    """A renamed header column, NUL bytes in the header, another sweep's file with a point_id:
    resume would take its rows as done or replace it (issue 34, fresh/sweep/resume/006, 010,
    016); it is one line, exit 2, and the file stays as it was."""
    out = tmp_path / "rows.csv"
    args = ["sweep", "-m", "tinyllama-1.1b", "-H", "workstation-rtx3070", "-c", "zero3-cpu",
            "--memory-only", "--no-progress", "-j", "1", "--vary", "micro_batch=1,2",
            "--out", str(out)]
    assert CliRunner().invoke(main, args).exit_code == 0
    out.write_bytes(tamper(out.read_bytes()))
    before = out.read_bytes()
    assert_user_error(CliRunner().invoke(main, args), str(out), fragment)
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["rows.csv"]
