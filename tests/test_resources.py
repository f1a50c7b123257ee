"""The resource registry (sim/resources.py) is the one list: the engine, SimResult, the plots and
the sweep columns all iterate it, and every resource has its own style."""
import pytest

import tierlab
from tierlab.sim.resources import BY_NAME, BYTE_RESOURCES, REGISTRY, RESOURCES, markdown_table
from tierlab.sweeps.run import result_columns
from tierlab.validate import plots
from tierlab.validate.plot_style import BOTTLENECK_MARKERS, RESOURCE_STYLE


def _cpu_host_bound():
    """TinyLlama ZeRO-3 CPU on an H200 host at micro-batch 1: the Python thread binds."""
    r = tierlab.simulate("tinyllama-1.1b", "h200-host", "zero3-cpu", micro_batch=1, seq=512)
    assert r.bottleneck == "cpu_host"
    return r


@pytest.mark.lab
def test_result_engine_and_sweep_use_the_registry():
    r = _cpu_host_bound()
    assert tuple(r.busy_s) == tuple(r.exposed_s) == RESOURCES
    assert tuple(r.bytes_moved) == BYTE_RESOURCES
    cols = result_columns(r)
    for name in RESOURCES:
        assert f"busy_{name}_s" in cols and f"exposed_{name}_s" in cols
    assert {e["args"]["name"] for e in r.trace_events()["traceEvents"]
            if e.get("ph") == "M" and e.get("name") == "thread_name"} >= set(RESOURCES)


def test_every_resource_has_its_own_style():
    assert list(RESOURCE_STYLE) == list(RESOURCES) == list(BOTTLENECK_MARKERS)
    colours = [c for _, c in RESOURCE_STYLE.values()]
    assert len(set(colours)) == len(colours) and "#999999" not in colours
    assert RESOURCE_STYLE["cpu_host"][0] == BY_NAME["cpu_host"].label != "cpu host"
    assert all(r.unit and r.reads for r in REGISTRY)


@pytest.mark.lab
def test_the_bottleneck_plot_draws_cpu_host_in_its_colour():
    fig = plots.bottleneck([("zero3-cpu", _cpu_host_bound())])
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert BY_NAME["cpu_host"].label in labels
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert any(f"binds: {BY_NAME['cpu_host'].label}" in t for t in ticks)


def test_markdown_table_lists_every_resource():
    table = markdown_table()
    assert all(f"`{name}`" in table for name in RESOURCES)
