"""validate/plots.py (+ plot_samples.py) and `tierlab plot`: every kind renders, reads its inputs
defensively, saves atomically as PNG/SVG; bad input is one line and exit 2."""
import math
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from matplotlib.figure import Figure

from tierlab.cli import main
from tierlab.sweeps.run import Base, parse_vary, resolve, run_sweep
from tierlab.validate import plots
from tierlab.validate.plot_samples import sample_series

sys.path.insert(0, str(Path(__file__).parent))
import fakesim  # noqa: E402

PRESETS = ("no-offload", "zero2-cpu", "zero3-cpu", "zero3-nvme")


@pytest.fixture(scope="module")
def results():
    out = {}
    for cfg in PRESETS:
        sc = resolve(Base(ds_config=cfg, micro_batch=4, seq=1024))
        out[cfg] = fakesim.simulate(sc.hardware, sc.model, sc.strategy)
    return out


def texts(fig: Figure) -> str:
    parts = [t.get_text() for t in fig.texts]
    for leg in fig.legends:
        parts += [t.get_text() for t in leg.get_texts()]
    for ax in fig.axes:
        parts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        parts += [t.get_text() for t in ax.texts]
        parts += [t.get_text() for t in ax.get_xticklabels()]
        leg = ax.get_legend()
        if leg:
            parts += [t.get_text() for t in leg.get_texts()]
    return "\n".join(parts)


def test_bottleneck_marks_step_and_bound(results):
    fig = plots.bottleneck(results)
    t = texts(fig)
    for needed in ("step time", "roofline bound", "GPU compute", "CPU Adam", "NVMe write",
                   "zero3-nvme", "binds:", "doesn't fit (gpu)", "time per optimizer step (s)"):
        assert needed in t, needed
    assert plots.bottleneck(results["zero3-cpu"]).axes        # a single result works too


def test_memory_against_capacity(results):
    t = texts(plots.memory(results))
    for needed in ("GPU memory (per GPU)", "host RAM (per node)", "NVMe (per node)",
                   "host: pinned", "host: pageable", "over by", "unused", "GPU: model states",
                   "GiB (2³⁰ bytes)", "NVMe: swap files"):
        assert needed in t, needed


def test_timeline_lanes_and_phases(results):
    fig = plots.timeline(results["zero3-nvme"])
    assert len(fig.axes) == 1
    lanes = [t.get_text() for t in fig.axes[0].get_yticklabels()][::-1]     # top to bottom
    assert lanes[0] == "GPU compute" and "NVMe read" in lanes
    assert "time since step start" in texts(fig)


def _measurement():
    samples = [{"t_s": 50 + i * 0.1, "gpu_util": 0.5 + 0.4 * math.sin(i), "pcie_h2d_Bps": 4e9,
                "disk_read_bytes": 1e8 * i, "note": "x", "weird": None} for i in range(80)]
    return {"samples": samples, "warmup_steps": 1,
            "steps": [{"start_s": 50, "end_s": 53}, {"start_s": 53, "end_s": 56},
                      {"start_s": 56, "end_s": 59.5}]}


def test_samples_read_defensively():
    s = sample_series(_measurement())
    assert set(s["util"]) == {"gpu util"} and max(s["util"]["gpu util"][1]) <= 100
    assert min(s["util"]["gpu util"][0]) == 0.0 and s["t_max"] <= 3.0 + 1e-9   # step 2: 53..56
    assert set(s["rates"]) == {"pcie h2d", "disk read"}
    assert s["rates"]["disk read"][1][0] == pytest.approx(1e9)                  # counter -> B/s
    assert sample_series({"samples": [{"foo": 1}]}) is None                       # no time column
    assert sample_series({"summary": {}}) is None
    assert sample_series([]) is None


def test_timeline_with_measured_samples(results):
    fig = plots.timeline(results["zero3-cpu"], _measurement())
    assert len(fig.axes) == 3
    t = texts(fig)
    assert "GPU util. (%)" in t and "measured (GB/s)" in t and "pcie h2d" in t


def test_sweep_lines_per_config_skip_errors():
    base = Base(micro_batch=4, seq=1024)
    axes = [parse_vary("config=zero2-cpu,zero3-nvme"), parse_vary("nvme.drives=1,2,4,8"),
            parse_vary("zero_optimization.stage=2,3")]
    df = run_sweep(base, axes, simulator=fakesim.simulate, jobs=1).frame
    assert (df["error"] != "").any()                       # ZeRO-2 + NVMe rows
    fig = plots.sweep(df, "nvme.drives", by="config")
    t = texts(fig)
    leg = fig.axes[1].get_legend()
    assert leg.get_title().get_text() == "DeepSpeed config"
    assert "zero2-cpu" in t and "zero3-nvme" in t and "binds:" in t and "NVMe drives per node" in t
    assert "step time (s)" in t and "throughput (tokens/s, whole job)" in t
    fig = plots.sweep(df, "config")                        # categorical x
    assert "zero3-nvme" in texts(fig)
    df2 = run_sweep(base, [parse_vary("nvme.read_bandwidth=2GB/s,4GB/s")],
                    simulator=fakesim.simulate, jobs=1).frame
    assert "NVMe read bandwidth (GB/s)" in texts(plots.sweep(df2, "nvme.read_bandwidth"))
    with pytest.raises(ValueError, match="no column"):
        plots.sweep(df, "bogus")


def test_save_png_svg_atomically(tmp_path, results):
    fig = plots.bottleneck(results)
    paths = plots.save(fig, tmp_path / "b")
    assert [p.name for p in paths] == ["b.png", "b.svg"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert paths[1].read_text().lstrip().startswith("<?xml")
    plots.save(fig, tmp_path / "c.svg")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.png", "b.svg", "c.svg"]


# ----------------------------------------------------------------------------------------------
# CLI

def run(*args):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("kind", ["bottleneck", "memory", "timeline"])
def test_cli_plot_builtin(kind, tmp_path):
    out = tmp_path / f"{kind}.png"
    r = run("plot", kind, "-o", str(out))
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 10_000


def test_cli_plot_compare_and_measurement(tmp_path):
    import json

    m = tmp_path / "m.json"
    m.write_text(json.dumps(_measurement()))
    r = run("plot", "timeline", "-c", "zero3-cpu", "--micro-batch", "4", "--seq", "1024",
            "--measurement", str(m), "-o", str(tmp_path / "t.svg"))
    assert r.exit_code == 0, r.output
    r = run("plot", "bottleneck", "-c", "zero2-cpu", "--compare", "zero3-nvme",
            "-o", str(tmp_path / "b.png"))
    assert r.exit_code == 0, r.output


def test_cli_plot_sweep(tmp_path):
    csv = tmp_path / "s.csv"
    r = run("sweep", "-c", "zero3-nvme", "--vary", "nvme.drives=1,2", "--vary",
            "micro_batch=1,2", "--seq", "512", "--out", str(csv), "--no-progress", "-j", "1")
    assert r.exit_code == 0, r.output
    r = run("plot", "sweep", "--results", str(csv), "--x", "micro_batch", "-o",
            str(tmp_path / "s.png"))
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("args,fragment", [
    (["sweep"], "needs --results"),
    (["sweep", "--results", "nope.csv"], "no such file"),
    (["timeline", "--measurement", "nope.json"], "no such file"),
    (["bottleneck", "-c", "nope"], "unknown ds_config 'nope'"),
])
def test_cli_plot_bad_input(args, fragment, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run("plot", *args, "-o", "x.png")
    assert r.exit_code == 2, r.output
    lines = [l for l in r.output.splitlines() if l.startswith("error:")]
    assert len(lines) == 1 and fragment in lines[0], r.output


def test_cli_plot_sweep_bad_x(tmp_path):
    csv = tmp_path / "s.csv"
    run("sweep", "--vary", "micro_batch=1,2", "--seq", "512", "--out", str(csv), "--no-progress",
        "-j", "1")
    r = run("plot", "sweep", "--results", str(csv), "--x", "bogus", "-o", str(tmp_path / "x.png"))
    assert r.exit_code == 2 and "--x 'bogus' is not a column" in r.output


def test_lane_bars_never_overstate_occupancy():
    from tierlab.validate.plots import _lane_bars

    # back-to-back ops merge into one solid bar; a lone sub-pixel op becomes a faint pixel
    wide, thin = _lane_bars([(0.0, 1.0), (1.0, 2.0), (5.0, 5.001)], px=0.01)
    assert wide == [(0.0, 2.0)]
    assert len(thin) == 1 and thin[0][0] == pytest.approx(5.0, abs=0.011)
    assert thin[0][1] == pytest.approx(0.1)


def _runner_measurement(tmp_path):
    """A run directory as the runner writes it (records/measurement.py, runner/probes.py)."""
    from tierlab.records.measurement import Measurement, MeasurementWriter, StepRecord

    t0 = 1_700_000_000.0
    m = Measurement(run_id="r1", started_unix=t0, run={"warmup_steps": 1})
    w = MeasurementWriter(tmp_path / "run", m)
    for i, end in enumerate((20.0, 23.5, 27.0, 30.4)):      # steps end 20, 23.5, ... s in
        w.append(StepRecord(step=i, wall_s=3.5 if i else 20.0, timing="wall", loss=1.0,
                            tokens=4096, time_unix=t0 + end))
    samples = [{"t": round(0.1 * i, 3), "host_rss_bytes": 1e9, "host_cpu_percent": 50.0,
                "gpu_util_percent": 60 + (i % 7), "gpu_mem_util_percent": 30,
                "pcie_tx_Bps": 2e9, "pcie_rx_Bps": 5e9, "disk_read_bytes": 1e7 * i,
                "disk_written_bytes": 5e6 * i} for i in range(320)]
    return w.close("ok", samples=samples, warmup_steps=1)


def test_timeline_reads_the_runners_measurement(tmp_path, results):
    m = _runner_measurement(tmp_path)
    s = sample_series(m)
    assert {"gpu util", "gpu mem util"} <= set(s["util"])
    assert {"pcie tx", "pcie rx", "disk read", "disk written"} <= set(s["rates"])
    assert s["t_max"] == pytest.approx(3.5, abs=0.11)         # one steady step (3.5 s)
    assert s["rates"]["disk read"][1][0] == pytest.approx(1e8)
    assert len(plots.timeline(results["zero3-cpu"], m).axes) == 3
    out = tmp_path / "t.png"
    r = run("plot", "timeline", "--measurement", str(tmp_path / "run"), "-o", str(out))
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 10_000



def test_figures_are_made_without_pyplot_so_none_stays_open():
    """pyplot holds every figure it made open until closed: the compare and validate figures
    are plain matplotlib Figures, as validate/plots.py's, so a long session (or this test
    suite) does not pile them up."""
    import matplotlib.pyplot as plt

    from tierlab.validate.plot_compare import compare_figure as figure
    from tierlab.validate.report import _figure

    before = set(plt.get_fignums())
    rows = [{"variant": "a", "status": "ok", "gpu_peak_reserved_GiB": 4.0, "step_time_s": 1.0,
             "tokens_per_s": 10.0}, {"variant": "b", "status": "oom"}]
    made = [figure(rows, title="t"), _figure(figsize=(3, 3))[0]]
    assert all(isinstance(f, Figure) for f in made)
    assert set(plt.get_fignums()) == before


def test_timeline_refuses_a_run_another_engine_trained(tmp_path):
    """The timeline draws DeepSpeed's simulated schedule under the run's samples: under an FSDP2
    run it would show a schedule that never ran. One line, exit 2, nothing written."""
    import json

    _runner_measurement(tmp_path)
    record = json.loads((tmp_path / "run" / "measurement.json").read_text())
    record["run"]["engine"] = "fsdp2-offload"
    (tmp_path / "run" / "measurement.json").write_text(json.dumps(record))
    out = tmp_path / "t.png"
    r = run("plot", "timeline", "--measurement", str(tmp_path / "run"), "-o", str(out))
    assert r.exit_code == 2 and "run.engine 'fsdp2-offload'" in r.output
    assert len(r.output.strip().splitlines()) == 1 and not out.exists()
