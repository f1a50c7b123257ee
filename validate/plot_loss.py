"""The `loss` plot: training loss per step of measured runs, one line per run (a comparison's
variants side by side: the same data and seed under each offload should give the same curve).

Reads the runner's Measurement (records/measurement.py): `steps[i].loss`, `warmup_steps`, and
for the footer its model, ds_config and runner settings. Returns a Figure; cli.py saves it.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from matplotlib.figure import Figure

from tierlab.validate.plot_style import (FIG_DPI, add_footer, footer_lines, scenario_line,
                                         where_text)

LOSS_LABEL = "training loss (nats per token)"
"""The y axis: the causal-LM cross-entropy the runner records (records/measurement.py)."""


LOSS_MAX = 1e15
"""A recorded loss beyond this magnitude is not a loss (a hand-edited record, 1e308): left out
like a non-finite one (matplotlib cannot scale an axis to +-1e308 either)."""


def _number(value, limit: float = LOSS_MAX) -> float | None:
    """`value` as a float when it is a finite number within +-limit (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        v = float(value)
    except OverflowError:           # a 400-digit integer
        return None
    return v if math.isfinite(v) and abs(v) <= limit else None


def _count(value, default: int = 0) -> int:
    v = _number(value, 1e12)
    return int(v) if v is not None else default


def _map(value) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def loss_points(measurement) -> list[tuple[int, float]]:
    """(step, loss) of a Measurement's finite losses, in step order."""
    out = []
    for s in measurement.steps:
        loss, step = _number(s.loss), _number(s.step, 1e12)
        if loss is not None and step is not None:
            out.append((int(step), loss))
    return out


def _warmup(measurement) -> int:
    run = _map(measurement.run)
    return _count(_map(measurement.summary).get("warmup_steps") or run.get("warmup_steps"))


def run_scenario_dict(measurement) -> dict[str, Any]:
    """What a measured run ran, in SimResult.scenario's keys (for plot_style.scenario_line): the
    model, the host's GPU, GPU count, ZeRO stage and offload devices, batch, seq, precision."""
    run, ds = _map(measurement.run), _map(measurement.ds_config)
    zero = _map(ds.get("zero_optimization"))
    gpus = [g for g in _map(measurement.host).get("gpus") or [] if isinstance(g, Mapping)] \
        if isinstance(_map(measurement.host).get("gpus"), list) else []
    world = max(1, _count(run.get("world_size"), 1))
    per_node = max(1, _count(run.get("gpus") or run.get("gpus_per_node"), world))

    def device(key):
        part = zero.get(key)
        return part.get("device", "none") if isinstance(part, Mapping) else "none"

    return {"model": _map(measurement.model).get("name"),
            "hardware": f"{gpus[0]['name']} host" if gpus and gpus[0].get("name") else None,
            "nodes": max(1, world // max(1, per_node)), "gpus_per_node": per_node,
            "world_size": world, "zero_stage": zero.get("stage"),
            "offload_param": device("offload_param"),
            "offload_optimizer": device("offload_optimizer"),
            "micro_batch": run.get("micro_batch"), "grad_accum": run.get("grad_accum"),
            "seq_len": run.get("seq"), "precision": run.get("precision")}


def draw_loss(ax, runs: Sequence[tuple[str, Any]]) -> bool:
    """Loss per step of each (label, Measurement) on `ax`, warm-up steps dotted; False (and a
    note on the axes) when no run has a loss."""
    drawn = False
    for i, (label, m) in enumerate(runs):
        pts = loss_points(m)
        colour = f"C{i % 10}"
        if not pts:       # an OOM or a failed run: named, with why it has no curve
            why = m.failure_kind or m.status if m.status != "ok" else "no finite loss"
            ax.plot([], [], color=colour, lw=0, label=f"{label}: no loss ({why})")
            continue
        warm = _warmup(m)
        steady = [(s, v) for s, v in pts if s >= warm]
        head = [(s, v) for s, v in pts if s < warm]        # dotted, joined to the first steady
        if len(head) > 1 or (head and steady):
            ax.plot(*zip(*head, *steady[:1]), color=colour, lw=1.0, ls=":", zorder=2)
        if steady:
            ax.plot(*zip(*steady), color=colour, lw=1.5, marker="o", markersize=3, label=label,
                    zorder=3)
        else:
            ax.plot([], [], color=colour, lw=1.5, label=label)
        drawn = True
    if not drawn:
        ax.text(0.5, 0.5, "no loss recorded", ha="center", va="center", transform=ax.transAxes,
                color="#555555")
    ax.set_xlabel("optimizer step (count)")
    ax.set_ylabel(LOSS_LABEL)
    ax.grid(alpha=0.3)
    return drawn


def loss_figure(runs, *, title: str | None = None) -> Figure:
    """Loss per step of measured runs: `runs` a Measurement, [(label, Measurement)] or
    {label: Measurement}; the legend beside the axes, the runs' scenarios as a footer."""
    if isinstance(runs, Mapping):
        runs = list(runs.items())
    elif not isinstance(runs, (list, tuple)):
        runs = [(runs.run_id, runs)]
    if not runs:
        raise ValueError("no measured runs to plot")
    fig = Figure(figsize=(9.0, 4.8), dpi=FIG_DPI)
    ax = fig.add_subplot(111)
    draw_loss(ax, runs)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        if any(_warmup(m) for _, m in runs):
            from matplotlib.lines import Line2D

            handles.append(Line2D([], [], color="#444444", lw=1.0, ls=":"))
            labels.append("warm-up steps")
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
                  frameon=False, title="run", title_fontsize=8)
    scs = [run_scenario_dict(m) for _, m in runs]
    where = where_text(scs)
    ax.set_title(title or "Training loss per step" + (f"\n{where}" if where else ""),
                 fontsize=11)
    footer = scenario_line(scs, varying="join")
    add_footer(fig, footer)
    lines = footer_lines(footer, fig)
    fig.tight_layout(rect=(0, (0.15 * lines + 0.06) / fig.get_figheight() if lines else 0, 1, 1))
    return fig


def read_runs(path) -> list[tuple[str, Any]]:
    """(label, Measurement) of every measured run under `path`: one run folder, or a folder
    holding several (a `tierlab compare --out`), each labelled by its folder's name."""
    from pathlib import Path

    from tierlab.records.measurement import load_measurement
    from tierlab.validate.compare import find_measurements

    root = Path(path)
    return [(d.name if d != root else root.name, load_measurement(d))
            for d in find_measurements([root])]
