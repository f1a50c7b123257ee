"""Figures of a validation: predicted vs measured scatter with y = x and ±10% bands, and
per-phase bars. Functions return matplotlib Figures; cli.py saves them."""
from __future__ import annotations

import math

from typing import Mapping, Sequence

from tierlab.validate.compare import Row
from tierlab.validate.plot_style import add_footer, footer_lines, scenario_line

PHASES = ("forward_s", "backward_s", "optimizer_s")
METRIC_NAMES = {"step_time_s": "steady step time", "first_step_time_s": "step 1 time",
                "forward_s": "forward time", "backward_s": "backward time",
                "optimizer_s": "optimizer time", "gpu_peak_allocated_bytes": "GPU peak allocated",
                "host_rss_bytes": "host RSS peak", "swap_bytes": "swap-folder bytes"}
"""What the figures call each metric of validate/compare.py."""


def _footer(fig, scenarios: Mapping[str, dict] | None) -> float:
    """The runs' scenarios in one line (fields that differ joined) under the axes; returns the
    figure fraction it takes (for tight_layout's rect)."""
    text = scenario_line(list((scenarios or {}).values()), varying="join")
    lines = footer_lines(text, fig)
    add_footer(fig, text)
    return (0.15 * lines + 0.06) / fig.get_figheight() if lines else 0.0


def _figure(*args, **kwargs):
    """(Figure, axes) as plt.subplots makes them, without pyplot's global registry (a figure
    made there stays open until closed: a session of many verbs piled them up)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=kwargs.pop("figsize", None))
    return fig, fig.subplots(*args, **kwargs)


def label_heights(ys: Sequence[float], lo: float, hi: float, gap_frac: float = 0.032
                  ) -> list[float]:
    """Label heights on a log axis from lo to hi for points at heights `ys` (ascending): each as
    close to its point as it can be while labels stay `gap_frac` of the axis apart (about one
    7-pt text line on a 6-inch plot), pushed up from the bottom, then down from the top; with
    more labels than fit, closer together, never off the axis."""
    span = math.log(hi / lo)
    gap = min(gap_frac * span, span / (len(ys) + 1))
    out = [math.log(y) for y in ys]
    for i in range(1, len(out)):
        out[i] = max(out[i], out[i - 1] + gap)
    top = math.log(hi) - gap / 2
    for i in reversed(range(len(out))):
        limit = top if i == len(out) - 1 else out[i + 1] - gap
        out[i] = max(min(out[i], limit), math.log(lo) + gap / 2)
    return [math.exp(v) for v in out]


def scatter_figure(rows: Sequence[Row], metric: str = "step_time_s", band_pct: float = 10.0,
                   scenarios: Mapping[str, dict] | None = None):
    """Predicted vs measured, one point a case, log-log, y = x and ±band lines; points within
    the band blue, outside red (both in the legend); `scenarios` (Validation.scenarios): the
    runs' scenarios, named in a footer."""
    pts = [(r.measured, r.predicted, r.case) for r in rows
           if r.metric == metric and r.measured and r.predicted]
    fig, ax = _figure(figsize=(7, 6))
    if not pts:
        ax.text(0.5, 0.5, f"no {metric} to compare", ha="center", transform=ax.transAxes)
        return fig
    lo = min(min(m, p) for m, p, _ in pts) * 0.7
    hi = max(max(m, p) for m, p, _ in pts) * 1.4
    ax.plot([lo, hi], [lo, hi], color="black", lw=1, label="y = x")
    f = band_pct / 100.0
    ax.fill_between([lo, hi], [lo * (1 - f), hi * (1 - f)], [lo * (1 + f), hi * (1 + f)],
                    color="tab:green", alpha=0.15, label=f"±{band_pct:.0f}%")
    inside = [abs(p - m) <= f * m for m, p, _ in pts]
    for ok, colour, name in ((True, "tab:blue", f"run within ±{band_pct:.0f}%"),
                             (False, "tab:red", f"run outside ±{band_pct:.0f}%")):
        xs = [m for (m, _, _), i in zip(pts, inside) if i == ok]
        if xs:
            ax.scatter(xs, [p for (_, p, _), i in zip(pts, inside) if i == ok], color=colour,
                       zorder=3, label=name)
    order = sorted(pts, key=lambda t: t[1])
    for (m, p, case), y in zip(order, label_heights([p for _, p, _ in order], lo, hi)):
        moved = abs(math.log(y / p)) > 1e-9
        ax.annotate(case, (m, p), xytext=(m * 1.05, y), textcoords="data", fontsize=7,
                    va="center", arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.5"}
                    if moved else None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    for axis in (ax.xaxis, ax.yaxis):          # 1-2-5 labels, plain numbers: none overprint
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FormatStrFormatter("%g"))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    unit = "s" if metric.endswith("_s") else "bytes"
    name = METRIC_NAMES.get(metric, metric)
    ax.set_xlabel(f"measured {name} ({unit})")
    ax.set_ylabel(f"predicted {name} ({unit})")
    ax.set_title(f"tierlab validation: {name}, predicted vs measured ({len(pts)} runs)")
    ax.legend(loc="upper left", fontsize=8.5)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout(rect=(0, _footer(fig, scenarios), 1, 1))
    return fig


def phase_bars_figure(rows: Sequence[Row], scenarios: Mapping[str, dict] | None = None):
    """Per case, forward/backward/optimizer seconds: measured (solid) next to predicted
    (hatched); the legend beside the axes (never over a bar), the runs' scenarios below."""
    cases = sorted({r.case for r in rows if r.metric in PHASES and r.measured})
    fig, ax = _figure(figsize=(max(7, 1.1 * len(cases) + 2) + 2.2, 5.3))
    if not cases:
        ax.text(0.5, 0.5, "no phase times measured (run with --breakdown)", ha="center",
                transform=ax.transAxes)
        return fig
    value = {(r.case, r.metric): r for r in rows}
    colors = {"forward_s": "tab:blue", "backward_s": "tab:orange", "optimizer_s": "tab:green"}
    width = 0.38
    for i, case in enumerate(cases):
        for j, side in enumerate(("measured", "predicted")):
            bottom = 0.0
            for phase in PHASES:
                r = value.get((case, phase))
                v = getattr(r, side) if r else None
                if not v:
                    continue
                ax.bar(i + (j - 0.5) * width, v, width, bottom=bottom, color=colors[phase],
                       hatch="//" if side == "predicted" else None, edgecolor="white",
                       label=f"{phase[:-2]} ({side})" if i == 0 else None)
                bottom += v
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels(cases, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("time per step (s)")
    ax.set_title("Phase times per run: measured (solid) vs predicted (hatched)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
              title="phase (side)", title_fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout(rect=(0, _footer(fig, scenarios), 1, 1))
    return fig


# ----------------------------------------------------------------------------------------------
# the text table of `tierlab validate`

def _pct(value) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def format_metric(metric: str, value) -> str:
    """A predicted or measured figure as the table shows it (sizes in GiB)."""
    from tierlab.units import fmt_gib

    if value is None:
        return "-"
    if metric.endswith("_bytes"):
        return fmt_gib(value)
    if metric == "oom":
        return "OOM" if value else "ok"
    return f"{value:.3f} s"


def _summary_line(x: dict | None) -> str:
    return f"n={x['n']:<3d} MAPE {x['mape_pct']:5.1f}% max {x['max_pct']:5.1f}%" if x else "-"


def format_validation(rows: Sequence[Row], summary: dict, split: dict, software: str,
                      n_train: int) -> str:
    """Predicted vs measured per run and metric, the per-metric MAPE and max, and the split into
    the runs the software profile was fitted on and the held-out rest."""
    lines = [f"{'case':44s} {'metric':26s} {'predicted':>12s} {'measured':>12s} {'error':>8s}"]
    for r in rows:
        lines.append(f"{r.case:44s} {r.metric:26s} {format_metric(r.metric, r.predicted):>12s} "
                     f"{format_metric(r.metric, r.measured):>12s} {_pct(r.error_pct):>8s}")
    lines.append("")
    for metric, s in summary.items():
        if metric == "oom":
            lines.append(f"{'oom':26s} {s['n']} runs, mismatches: "
                         f"{', '.join(s['mismatches']) or 'none'}")
        else:
            lines.append(f"{metric:26s} n={s['n']:<3d} MAPE {s['mape_pct']:5.1f}%  max "
                         f"{s['max_pct']:5.1f}% ({s['worst_case']})")
    lines.append(f"\ntrain ({n_train} cases, where {software}'s fitted terms were fitted) vs "
                 "held-out:")
    for metric in summary:
        if metric != "oom":
            lines.append(f"{metric:26s} train {_summary_line(split['train'].get(metric)):34s} "
                         f"held-out {_summary_line(split['held_out'].get(metric))}")
    return "\n".join(lines)
