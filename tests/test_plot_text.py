"""Plots a person reads without the code (issue 33): every plot kind tierlab draws is rendered
from real inputs (the simulator, a real sweep, the measured runs shipped in validate/example)
and its text is read back through matplotlib's objects: a title, the scenario named (model,
hardware with its node and GPU count, ZeRO stage and offload, micro-batch, seq), every numeric
axis labelled with a unit in brackets, legends in words (no raw column names, no 'all'), error
bars and scatter colours explained in a legend, no legend over a bar, a line, a point or a
text, and no text over another. Rendered with the Agg canvas, as `tierlab plot` saves them."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection
from matplotlib.colors import to_rgba
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.text import Text

from tierlab.commands.plot import PLOT_KINDS
from tierlab.records.measurement import load_measurement
from tierlab.runner.compare import row
from tierlab.sweeps.run import Base, parse_vary, resolve, run_grid
from tierlab.validate import plots
from tierlab.validate.compare import EXAMPLE_CASES, run_scenario
from tierlab.validate.plot_compare import compare_figure
from tierlab.validate.plot_loss import loss_figure, read_runs
from tierlab.validate.plot_style import save
from tierlab.validate.report import phase_bars_figure, scatter_figure
from tierlab.validate.workflow import run_validation

PRESETS = ("no-offload", "zero2-cpu", "zero3-cpu", "zero3-nvme")
MODEL, HARDWARE = "TinyLlama-1.1B", "workstation-rtx3070"
EXAMPLE = EXAMPLE_CASES / "c-tinyllama-z3cpu-bd"
UNIT = re.compile(r"[(\[][^)\]]+[)\]]")
NUMBER = re.compile(r"^[−\-+]?[\d,.]+(e[−\-+]?\d+)?$")


@pytest.fixture(scope="module")
def sims():
    return {cfg: resolve(Base(ds_config=cfg, micro_batch=4, seq=1024)).simulate(ranges=True)
            for cfg in PRESETS}


@pytest.fixture(scope="module")
def big():
    """Llama-2-70B on two DGX A100 nodes: the node count must reach the figure."""
    return {cfg: resolve(Base(model="llama-2-70b", hardware="dgx-a100", ds_config=cfg,
                              micro_batch=1, seq=1024, nodes=2)).simulate(ranges=True)
            for cfg in ("zero3-cpu", "zero3-nvme")}


@pytest.fixture(scope="module")
def sweep_frame():
    axes = [parse_vary("config=zero2-cpu,zero3-cpu"), parse_vary("micro_batch=1,2,4")]
    return run_grid(Base(seq=1024), axes, jobs=1).frame


@pytest.fixture(scope="module")
def validation():
    return run_validation([EXAMPLE_CASES]).report


def _figures(sims, big, sweep_frame, validation) -> dict[str, tuple[Figure, dict]]:
    """Every kind, with what its scenario text must name."""
    tiny = {"model": MODEL, "hardware": HARDWARE, "gpus": "1 node x 1 GPU"}
    dgx = {"model": "Llama-2-70B", "hardware": "dgx-a100", "gpus": "2 nodes x 8 GPUs"}
    measured = load_measurement(EXAMPLE)
    h200 = {"model": MODEL, "hardware": "h200x2-e", "gpus": "1 node x 1 GPU"}
    runs = read_runs(EXAMPLE_CASES)
    host = {"model": MODEL, "hardware": "NVIDIA H200 host", "gpus": "1 node x 1 GPU"}
    return {
        "bottleneck": (plots.bottleneck(sims), tiny),
        "memory": (plots.memory(sims), tiny),
        "bottleneck, 2 nodes": (plots.bottleneck(big), dgx),
        "memory, 2 nodes": (plots.memory(big), dgx),
        "timeline, 2 nodes": (plots.timeline(big["zero3-nvme"]), dgx),
        "timeline": (plots.timeline(sims["zero3-nvme"]), tiny),
        "timeline+measurement": (plots.timeline(
            run_scenario(measured, EXAMPLE).simulate(ranges=True), measured), h200),
        "sweep": (plots.sweep(sweep_frame, "micro_batch", by="config"), tiny),
        "sweep, one line": (plots.sweep(sweep_frame[sweep_frame["config_name"] == "zero3-cpu"],
                                        "micro_batch"), tiny),
        "validate scatter": (scatter_figure(validation.rows, scenarios=validation.scenarios),
                             h200),
        "validate phases": (phase_bars_figure(validation.rows, scenarios=validation.scenarios),
                            h200),
        "loss": (loss_figure(runs), host),
        "compare": (compare_figure([row(label, m) for label, m in runs], "compare", runs), host),
    }


@pytest.fixture(scope="module")
def figures(sims, big, sweep_frame, validation):
    out = _figures(sims, big, sweep_frame, validation)
    for fig, _ in out.values():
        FigureCanvasAgg(fig).draw()         # lays out the text: extents and tick labels are real
    return out


KINDS = ("bottleneck", "memory", "bottleneck, 2 nodes", "memory, 2 nodes", "timeline, 2 nodes",
         "timeline", "timeline+measurement", "sweep", "sweep, one line", "validate scatter",
         "validate phases", "loss", "compare")
CLI_KIND = {"bottleneck": "bottleneck", "memory": "memory", "timeline": "timeline",
            "sweep": "sweep", "loss": "loss"}


def test_every_cli_kind_is_checked_here():
    assert set(PLOT_KINDS) == set(CLI_KIND.values())


# ----------------------------------------------------------------------------------------------
# what a figure says

def _legends(fig: Figure) -> list:
    return [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]


def _legend_texts(fig: Figure) -> list[str]:
    out = []
    for leg in _legends(fig):
        out += [t.get_text() for t in leg.get_texts()]
        if leg.get_title().get_text():
            out.append(leg.get_title().get_text())
    return out


def _all_text(fig: Figure) -> str:
    parts = [t.get_text() for t in fig.texts] + _legend_texts(fig)
    if fig._suptitle is not None:
        parts.append(fig._suptitle.get_text())
    for ax in fig.axes:
        parts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        parts += [t.get_text() for t in ax.texts]
        parts += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
    return "\n".join(parts)


def _titles(fig: Figure) -> list[str]:
    out = [fig._suptitle.get_text()] if fig._suptitle is not None else []
    return out + [ax.get_title() for ax in fig.axes if ax.get_title()]


@pytest.mark.parametrize("kind", KINDS)
def test_title_and_scenario(figures, kind):
    fig, want = figures[kind]
    assert isinstance(fig, Figure)
    assert any(t.strip() for t in _titles(fig)), f"{kind}: no title"
    text = " ".join(_all_text(fig).split())
    for what in ("model", "hardware", "gpus"):
        assert want[what] in text, f"{kind}: the figure does not name {want[what]!r}"
    assert "ZeRO-" in text, f"{kind}: no ZeRO stage named"
    assert "seq 1024" in text, f"{kind}: no sequence length"       # every case runs 1024
    assert "micro-batch" in text, f"{kind}: no micro-batch"
    footers = [t.get_text() for t in fig.texts]
    assert any(want["model"] in " ".join(t.split()) and want["hardware"] in " ".join(t.split())
               for t in footers), f"{kind}: no scenario footer"


def _numeric(labels) -> bool:
    texts = [t.get_text().strip() for t in labels if t.get_visible() and t.get_text().strip()]
    return bool(texts) and all(NUMBER.match(t.replace("\u2212", "-")) for t in texts)


@pytest.mark.parametrize("kind", KINDS)
def test_numeric_axes_have_units(figures, kind):
    fig, _ = figures[kind]
    for ax in fig.axes:
        for label, ticks, name in ((ax.get_xlabel(), ax.get_xticklabels(), "x"),
                                   (ax.get_ylabel(), ax.get_yticklabels(), "y")):
            if _numeric(ticks):
                assert UNIT.search(label), (f"{kind}: the {name} axis of {ax.get_title()!r} "
                                            f"reads {label!r}: no unit in brackets")


@pytest.mark.parametrize("kind", KINDS)
def test_text_in_words(figures, kind):
    """No raw identifier (config_name, step_time_s) and no 'all' in a title, an axis label or
    a legend."""
    fig, _ = figures[kind]
    texts = _titles(fig) + _legend_texts(fig) + [t for ax in fig.axes
                                                 for t in (ax.get_xlabel(), ax.get_ylabel())]
    for t in texts:
        assert "_" not in t, f"{kind}: raw name in {t!r}"
        assert t.strip().lower() != "all", f"{kind}: a legend entry 'all'"


@pytest.mark.parametrize("kind", KINDS)
def test_error_bars_and_colours_explained(figures, kind):
    fig, _ = figures[kind]
    legend_text = " ".join(" ".join(_legend_texts(fig)).split())
    if any(isinstance(c, ErrorbarContainer) for ax in fig.axes for c in ax.containers):
        assert "80% range" in legend_text, f"{kind}: error bars with no legend entry"
    handles = [h for leg in _legends(fig) for h in leg.legend_handles]
    known = set()
    for h in handles:
        for get in ("get_color", "get_markerfacecolor", "get_markeredgecolor", "get_facecolor"):
            value = getattr(h, get, None)
            if value is not None:
                colours = value()
                colours = colours if hasattr(colours, "ndim") and colours.ndim == 2 else [colours]
                known |= {tuple(round(x, 2) for x in to_rgba(c)[:3]) for c in colours}
    for ax in fig.axes:
        for coll in ax.collections:
            if not isinstance(coll, PathCollection):      # scatter points
                continue
            for colours in (coll.get_facecolors(), coll.get_edgecolors()):
                for c in colours:
                    rgb = tuple(round(float(x), 2) for x in c[:3])
                    if rgb != (1.0, 1.0, 1.0):           # an open marker's white fill
                        assert rgb in known, f"{kind}: scatter colour {rgb} not in a legend"


# ----------------------------------------------------------------------------------------------
# what a legend may not cover

def _data_boxes(fig: Figure):
    """Display-space extents of what a reader reads off the figure: bars, points along every
    line (segments sampled), texts."""
    renderer = fig.canvas.get_renderer()
    boxes, points = [], []
    for ax in fig.axes:
        for p in ax.patches:
            if isinstance(p, Rectangle) and p.get_zorder() > 0 and p.get_visible() and \
                    p.get_width() and p.get_height():
                boxes.append(("bar", p.get_window_extent(renderer)))
        for line in ax.lines:
            xy = line.get_xydata()
            if len(xy) == 0 or not line.get_visible():
                continue
            disp = line.get_transform().transform(xy)
            for a, b in zip(disp, disp[1:]):
                points += [("line", a + (b - a) * f) for f in [i / 16 for i in range(17)]]
            points += [("point", p) for p in disp]
        for coll in ax.collections:
            if isinstance(coll, PathCollection):
                points += [("point", p) for p in coll.get_offset_transform().transform(
                    coll.get_offsets())]
        for t in ax.texts:
            if t.get_text().strip() and t.get_visible():
                boxes.append((f"text {t.get_text()!r}", t.get_window_extent(renderer)))
    for t in fig.texts:
        if isinstance(t, Text) and t.get_text().strip():
            boxes.append((f"footer {t.get_text()[:30]!r}", t.get_window_extent(renderer)))
    return boxes, points


@pytest.mark.parametrize("kind", KINDS)
def test_no_legend_over_the_data(figures, kind):
    fig, _ = figures[kind]
    renderer = fig.canvas.get_renderer()
    boxes, points = _data_boxes(fig)
    legends = [leg.get_window_extent(renderer) for leg in _legends(fig)]
    for i, box in enumerate(legends):
        inner = box.expanded(0.98, 0.96)        # the frame's padding may touch a neighbour
        for what, other in boxes:
            assert not inner.overlaps(other), f"{kind}: a legend covers a {what}"
        for what, (x, y) in points:
            assert not inner.contains(x, y), f"{kind}: a legend covers a {what} at ({x:.0f}, {y:.0f})"
        for other in legends[i + 1:]:
            assert not inner.overlaps(other), f"{kind}: two legends overlap"


@pytest.mark.parametrize("kind", KINDS)
def test_no_text_over_text(figures, kind):
    """Tick labels of one axis clear of each other (a bar's ZeRO line under its name), and the
    footer, annotations and notes clear of each other."""
    fig, _ = figures[kind]
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
            shown = [t for t in labels if t.get_visible() and t.get_text().strip()]
            boxes = [t.get_window_extent(renderer) for t in shown]
            for i, box in enumerate(boxes):
                for t, other in zip(shown[i + 1:], boxes[i + 1:]):
                    assert not box.overlaps(other), \
                        f"{kind}: tick labels {shown[i].get_text()!r} and {t.get_text()!r} overlap"
    texts = [t for t in [*fig.texts, *(x for ax in fig.axes for x in ax.texts)]
             if t.get_text().strip() and t.get_visible()]
    boxes = [t.get_window_extent(renderer) for t in texts]
    for i, box in enumerate(boxes):
        for t, other in zip(texts[i + 1:], boxes[i + 1:]):
            assert not box.overlaps(other), \
                f"{kind}: {texts[i].get_text()[:30]!r} and {t.get_text()[:30]!r} overlap"


@pytest.mark.parametrize("kind", KINDS)
def test_renders_to_a_file(figures, kind, tmp_path):
    fig, _ = figures[kind]
    [path] = save(fig, tmp_path / "plot.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_cli_plot_loss(tmp_path):
    from click.testing import CliRunner

    from tierlab.cli import main

    out = tmp_path / "loss.png"
    r = CliRunner().invoke(main, ["plot", "loss", "--measurement", str(EXAMPLE_CASES), "-o",
                                  str(out)])
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 10_000
    r = CliRunner().invoke(main, ["plot", "loss", "-o", str(out)])
    assert r.exit_code == 2 and "needs --measurement" in r.output


def test_api_plot_loss():
    import tierlab

    fig = tierlab.plot("loss", read_runs(EXAMPLE_CASES))
    assert isinstance(fig, Figure) and fig.axes[0].get_ylabel() == "training loss (nats per token)"


def test_a_hardware_key_on_the_x_axis_reads_as_words_with_its_unit():
    """`sweep --plot` along a hardware key: 'PCIe H2D pinned (GB/s)', not 'pcie.h2d_pinned'."""
    from tierlab.validate.plot_sweep import key_name

    df = run_grid(Base(seq=1024, ds_config="zero3-cpu"),
                  [parse_vary("pcie.h2d_pinned=8GB/s,16GB/s")], jobs=1).frame
    fig = plots.sweep(df, "pcie.h2d_pinned")
    assert {ax.get_xlabel() for ax in fig.axes if ax.get_xlabel()} == {"PCIe H2D pinned (GB/s)"}
    assert key_name("gpu.peak_flops.bf16") == "GPU peak BF16"
    assert key_name("network.nic_bandwidth") == "network NIC bandwidth"
    assert key_name("zero_optimization.sub_group_size") == "zero_optimization.sub_group_size"
