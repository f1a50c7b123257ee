"""Plots of where the time and the bytes go: matplotlib Figures (no pyplot, no global state).

- `bottleneck`: stacked exposed (critical-path) time per resource, one bar per config, with the
  step time and the roofline lower bound (busiest resource) marked;
- `timeline`: Gantt lanes per resource for one simulated step, and for a measured run its
  sampled GPU utilisation / PCIe / disk throughput on the same time axis;
- `memory`: bytes per tier (GPU per rank; pinned and pageable host RAM and NVMe per node) against
  each tier's capacity;
- `sweep`: step time and tokens/s along a swept parameter, one line per config.
Every function returns a `matplotlib.figure.Figure`; cli.py saves it (`save`: PNG/SVG, atomic).
The shared look is in plot_style.py, the sweep plot in plot_sweep.py, measured samples are read
by plot_samples.py.
"""
from __future__ import annotations

from typing import Any, Mapping

from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from tierlab.units import GiB
from tierlab.validate.plot_style import (FIG_DPI, PHASE_COLOURS, RESOURCE_STYLE, add_footer,
                                         footer_lines, resource_style, save, scenario_line,
                                         where_text, wrap_title, zero_text)
from tierlab.validate.plot_sweep import sweep, vary_columns

__all__ = ["bottleneck", "timeline", "memory", "sweep", "save", "vary_columns"]

def _labelled(items, default_prefix: str = "config") -> list[tuple[str, Any]]:
    """One object, a list, (label, obj) pairs or a mapping -> [(label, obj)]."""
    if isinstance(items, Mapping):
        return [(str(k), v) for k, v in items.items()]
    if not isinstance(items, (list, tuple)):
        items = [items]
    out = []
    for i, item in enumerate(items):
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            out.append(item)
        else:
            scen = getattr(item, "scenario", None) or {}
            out.append((str(scen.get("config") or f"{default_prefix} {i + 1}"), item))
    if not out:
        raise ValueError("nothing to plot")
    return out


def _time_unit(seconds: float) -> tuple[str, float]:
    return ("ms", 1e3) if seconds < 1.0 else ("s", 1.0)


def _scenarios(items) -> list[dict]:
    return [dict(getattr(r, "scenario", None) or {}) for _, r in items]


def _finish(fig: Figure, footer: str, legend: tuple | None = None, legend_rows: int = 0,
            x: float = 0.5) -> None:
    """Lay the figure out with the scenario footer (add_footer) at the bottom and, above it, a
    figure legend `(handles, labels, kwargs)` of `legend_rows` rows centred on `x` (or its right
    edge at x > 0.5), so neither overlaps the axes or the other."""
    height = fig.get_figheight()
    lines = footer_lines(footer, fig)
    foot = (0.15 * lines + 0.06) / height if lines else 0.0
    add_footer(fig, footer)
    room = 0.0
    if legend is not None:
        handles, labels, kw = legend
        loc = "lower center" if x == 0.5 else "lower right"
        fig.legend(handles, labels, loc=loc, bbox_to_anchor=(x, foot), frameon=False,
                   borderaxespad=0.2, **kw)
        room = (0.18 * legend_rows + 0.1) / height
    fig.tight_layout(rect=(0, foot + room, 1, 1))


# ----------------------------------------------------------------------------------------------
# bottleneck

def bottleneck(results, *, title: str | None = None) -> Figure:
    """Stacked exposed time per resource for one or several SimResults side by side.

    `results`: a SimResult, a list, [(label, SimResult)] or {label: SimResult}. The bar height is
    the step time (exposed times sum to it); the dashed red tick is the roofline lower bound; an
    error bar beside it, the step time's 80% range when the results carry one."""
    items = _labelled(results)
    step_max = max(max(r.step_time_s, (getattr(r, "step_time_range_s", None) or (0, 0))[1])
                   for _, r in items)
    unit, k = _time_unit(step_max)
    used = [res for res in RESOURCE_STYLE if any(r.exposed_s.get(res, 0) > 0 for _, r in items)]
    fig = Figure(figsize=(max(6.4, 1.7 * len(items) + 3.2), 5.2), dpi=FIG_DPI)
    ax = fig.add_subplot(111)
    xs = range(len(items))
    bottom = [0.0] * len(items)
    for res in used:
        label, colour = resource_style(res)
        vals = [r.exposed_s.get(res, 0.0) * k for _, r in items]
        ax.bar(xs, vals, 0.6, bottom=bottom, color=colour, label=label, edgecolor="white",
               linewidth=0.5)
        bottom = [b + v for b, v in zip(bottom, vals)]
    for x, (_, r) in zip(xs, items):
        step, lower = r.step_time_s * k, r.lower_bound_s * k
        ax.hlines(step, x - 0.36, x + 0.36, colors="black", linewidth=2.0)
        ax.hlines(lower, x - 0.36, x + 0.36, colors="#d62728", linewidth=1.6, linestyles="--")
        span = getattr(r, "step_time_range_s", None)
        if span is not None:      # the step time's central 80% interval (sim/ranges.py)
            ax.errorbar([x + 0.22], [step], yerr=[[step - span[0] * k], [span[1] * k - step]],
                        fmt="none", ecolor="black", elinewidth=1.1, capsize=4, zorder=4)
        fits = getattr(r, "fits", True)
        note = f"{step:.3g} {unit}" + ("" if fits else f"\ndoesn't fit ({_binding(r)})")
        top = span[1] * k if span is not None else step
        ax.annotate(note, (x, top), xytext=(0, 4), textcoords="offset points", ha="center",
                    va="bottom", fontsize=8.5, color="black" if fits else "#d62728")
    scs = _scenarios(items)
    differ = len({zero_text(sc) for sc in scs}) > 1
    names = [f"{wrap_title(lab, 22)}\n" + (f"{wrap_title(zero_text(sc, short=True), 20)}\n"
                                            if differ and
                                            zero_text(sc) else "") +
             f"binds: {resource_style(r.bottleneck)[0]}" for (lab, r), sc in zip(items, scs)]
    ax.set_xticks(list(xs), names, fontsize=8.5)
    ax.set_ylabel(f"time per optimizer step ({unit})")
    ax.set_ylim(0, step_max * k * 1.22)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    handles, labels = ax.get_legend_handles_labels()
    from matplotlib.lines import Line2D
    handles = handles[::-1] + [Line2D([], [], color="black", lw=2),
                               Line2D([], [], color="#d62728", lw=1.6, ls="--")]
    labels = labels[::-1] + ["step time", "roofline bound\n(busiest resource)"]
    if any(getattr(r, "step_time_range_s", None) for _, r in items):
        handles.append(Line2D([], [], color="black", lw=1.1, marker="_", markersize=8))
        labels.append("error bar: 80% range\nof the step time")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8.5,
              title="exposed time on", title_fontsize=8.5, frameon=False)
    where = where_text(scs)
    ax.set_title(title or "Where the step time goes (critical path per resource)" +
                 (f"\n{where}" if where else ""), fontsize=11)
    _finish(fig, scenario_line(scs))
    return fig


def _binding(result) -> str:
    tier = getattr(result, "binding_tier", None)
    memory = getattr(result, "memory", None)
    if not tier and memory is not None:
        tier = memory.binding_tier
    return tier or "?"


# ----------------------------------------------------------------------------------------------
# timeline

def _phase_spans(result) -> list[tuple[str, float, float]]:
    """Contiguous forward/backward/optimizer spans (only for one micro-step per step)."""
    sc = getattr(result, "scenario", None) or {}
    ph = getattr(result, "phases", None) or {}
    if sc.get("grad_accum", 1) != 1 or not ph:
        return []
    t, out = 0.0, []
    for name in ("forward", "backward", "optimizer"):
        d = ph.get(f"{name}_s", 0.0)
        if d > 0:
            out.append((name, t, t + d))
        t += d
    return out if abs(t - result.step_time_s) <= 0.01 * result.step_time_s else []


def _lane_bars(ops: list[tuple[float, float]], px: float):
    """(start, end) ops of one lane -> solid (start, width) bars for everything at least a pixel
    wide (back-to-back ops merged first), and (pixel start, busy fraction) for pixels that only
    hold sub-pixel ops: drawn faint in proportion, so a lane is never shown busier than it is."""
    merged: list[list[float]] = []
    for t0, t1 in sorted(ops):
        if merged and t0 - merged[-1][1] <= 0.05 * px:
            merged[-1][1] = max(merged[-1][1], t1)
        else:
            merged.append([t0, t1])
    wide = [(t0, t1 - t0) for t0, t1 in merged if t1 - t0 >= px]
    busy: dict[int, float] = {}
    for t0, t1 in merged:
        if t1 - t0 < px:
            b = int(t0 // px)
            busy[b] = busy.get(b, 0.0) + (t1 - t0) / px
    return wide, [(b * px, min(1.0, f)) for b, f in sorted(busy.items())]


def timeline(result, measurement=None, *, title: str | None = None,
             window: tuple[float, float] | None = None) -> Figure:
    """Gantt lanes per resource for one simulated step (SimResult.spans) and, if `measurement`
    is given, its sampled GPU utilisation and PCIe / disk throughput on the same time axis."""
    from tierlab.validate.plot_samples import sample_series

    spans = list(getattr(result, "spans", ()) or ())
    lanes = [r for r in RESOURCE_STYLE if any(s.resource == r for s in spans)]
    lanes += sorted({s.resource for s in spans} - set(lanes))
    series = sample_series(measurement, window) if measurement is not None else None
    extra = (series is not None and bool(series["util"])) + (series is not None and
                                                            bool(series["rates"]))
    unit, k = _time_unit(max(result.step_time_s, series["t_max"] if series else 0.0))
    heights = [max(2.0, 0.42 * len(lanes) + 0.8)] + [1.6] * extra
    fig = Figure(figsize=(10.5, sum(heights) + 1.0), dpi=FIG_DPI)
    axes = fig.subplots(len(heights), 1, sharex=True, squeeze=False,
                        gridspec_kw={"height_ratios": heights})[:, 0]
    ax = axes[0]
    phases = _phase_spans(result)
    for name, t0, t1 in phases:
        ax.axvspan(t0 * k, t1 * k, color=PHASE_COLOURS[name], zorder=0)
        # room for the name inside? (8 pt text ~0.6 em per character on ~8.4 in of axis)
        if (t1 - t0) / (1.07 * result.step_time_s) >= 1.3 * len(name) * 0.6 * 8 / 72 / 8.4:
            ax.text((t0 + t1) / 2 * k, len(lanes) - 0.45, name, ha="center", va="center",
                    fontsize=8, color="#666666", clip_on=True)
    one_px = max(result.step_time_s, series["t_max"] if series else 0.0) * k * 1.07 / 1100
    for i, res in enumerate(reversed(lanes)):
        ops = [(s.start_s * k, s.end_s * k) for s in spans if s.resource == res]
        wide, thin = _lane_bars(ops, one_px)
        colour = resource_style(res)[1]
        ax.broken_barh(wide, (i - 0.35, 0.7), facecolors=colour, edgecolor="none")
        if thin:
            rgba = [to_rgba(colour, 0.25 + 0.75 * busy) for _, busy in thin]
            ax.broken_barh([(t, one_px) for t, _ in thin], (i - 0.35, 0.7), facecolors=rgba,
                           edgecolor="none")
    ax.set_yticks(range(len(lanes)), [resource_style(r)[0] for r in reversed(lanes)], fontsize=8.5)
    ax.set_ylim(-0.6, len(lanes) - 0.15)
    step = result.step_time_s * k
    ax.axvline(step, color="black", linewidth=1.2)
    ax.text(step, (len(lanes) - 0.75) / 2, f" step {step:.3g} {unit}", rotation=90, ha="left",
            va="center", fontsize=8, clip_on=True)
    ax.set_xlim(0, max(step, (series["t_max"] * k) if series else 0.0) * 1.07)
    sc = dict(getattr(result, "scenario", None) or {})
    where = where_text([sc]) if sc else ""
    ax.set_title(title or "One simulated optimizer step: what each resource does when" +
                 (f"\n{where}, {zero_text(sc)}" if where and zero_text(sc) else ""), fontsize=11)
    ax.grid(axis="x", alpha=0.3)
    row = 1
    if extra:
        axes[1].set_title("measured (sampled during a steady step of the real run)", fontsize=9)
    if series and series["util"]:
        a = axes[row]
        for name, (t, v) in series["util"].items():
            a.plot([x * k for x in t], v, lw=1.2, label=_series_label(name),
                   color=_series_colour(name))
        a.set_ylabel("GPU util. (%)", fontsize=9)
        a.set_ylim(0, 140)                                  # room for the legend above 100%
        a.set_yticks([0, 25, 50, 75, 100])
        a.legend(fontsize=7.5, loc="upper right", frameon=False, ncol=2)
        a.grid(alpha=0.3)
        row += 1
    if series and series["rates"]:
        a = axes[row]
        for name, (t, v) in series["rates"].items():
            a.plot([x * k for x in t], [y / 1e9 for y in v], lw=1.2, label=_series_label(name),
                   color=_series_colour(name))
        top = max((max(v) for _, v in series["rates"].values() if v), default=0.0) / 1e9
        a.set_ylim(0, top * 1.45 if top > 0 else 1.0)      # room for the legend
        a.set_ylabel("measured (GB/s)", fontsize=9)
        a.legend(fontsize=7.5, loc="upper right", frameon=False, ncol=2)
        a.grid(alpha=0.3)
    axes[-1].set_xlabel(f"time since step start ({unit})" + (
        "; lower panels: measured samples" if extra else ""))
    legend = ([Patch(color=PHASE_COLOURS[n], ec="#bbbbbb") for n, _, _ in phases],
              [f"{n} phase (shaded)" for n, _, _ in phases], {"ncol": 3, "fontsize": 7.5})
    _finish(fig, scenario_line(sc) if sc else "", legend=legend if phases else None,
            legend_rows=1, x=0.99)
    return fig


_SERIES_NAMES = {"gpu util": "GPU utilisation (SMs busy)",
                 "gpu mem util": "GPU memory-bus utilisation", "disk read": "disk read",
                 "disk written": "disk write", "host cpu": "host CPU"}


def _series_label(name: str) -> str:
    """'pcie rx' -> 'PCIe host→GPU (rx)': measured series named like the simulated lanes."""
    n = name.lower()
    if "pcie" in n and ("rx" in n or "h2d" in n):
        return f"PCIe host→GPU ({name})"
    if "pcie" in n and ("tx" in n or "d2h" in n):
        return f"PCIe GPU→host ({name})"
    return _SERIES_NAMES.get(n, name)


def _series_colour(name: str) -> str | None:
    """Measured series in the colour of the simulated resource they correspond to."""
    n = name.lower()
    if "mem" in n:
        return "#7f7f7f"
    for words, res in ((("h2d", "rx"), "pcie_h2d"), (("d2h", "tx"), "pcie_d2h"),
                       (("read",), "nvme_read"), (("writ",), "nvme_write"),
                       (("gpu", "sm"), "gpu_compute")):
        if any(w in n for w in words):
            return resource_style(res)[1]
    return None


# ----------------------------------------------------------------------------------------------
# memory

_GPU_GROUPS = (
    ("model states", ("params", "grads", "optimizer_states", "param_partition", "grad_partition",
                      "persistent_params")),
    ("activations + logits", ("layer_activations", "checkpointed_inputs", "recompute_block",
                              "logits")),
    ("gathered params, buckets", ("gathered_params", "gathered_grads", "reduce_bucket",
                                  "allgather_bucket")),
    ("gradient temporaries", ("reduce_scatter_flat", "grad_partition_copy", "grad_norm_fp64",
                              "grad_fp32_cast", "grad_fp32_swap_staging", "temp_grad_buffer",
                              "step_fp32_grad_copies")),
    ("CUDA context + allocator slack", ("cuda_context", "allocator_slack")),
)
_GROUP_COLOURS = ("#4c72b0", "#dd8452", "#8172b3", "#55a868", "#937860", "#999999")


def _gpu_groups(breakdown: Mapping[str, float]) -> list[tuple[str, float]]:
    out, seen = [], set()
    for name, keys in _GPU_GROUPS:
        out.append((name, sum(breakdown.get(k, 0.0) for k in keys)))
        seen.update(keys)
    out.append(("other", sum(v for k, v in breakdown.items() if k not in seen)))
    return out


def _plan_of(obj):
    return getattr(obj, "memory", None) if not hasattr(obj, "tiers") else obj


def memory(plans, *, title: str | None = None) -> Figure:
    """Bytes per tier against capacity: GPU (per rank, by kind), host RAM (per node: pinned +
    pageable) and NVMe (per node). `plans`: MemoryPlans or SimResults, as for `bottleneck`."""
    given = _labelled(plans)
    scs = _scenarios(given)
    items = [(lab, _plan_of(p)) for lab, p in given]
    if any(p is None for _, p in items):
        raise ValueError("a result without a memory plan")
    fig = Figure(figsize=(max(8.5, 2.4 * len(items) + 5.0), 5.4), dpi=FIG_DPI)
    axes = fig.subplots(1, 3)
    differ = len({zero_text(sc) for sc in scs}) > 1
    ticks = [wrap_title(lab) + (f"\n{wrap_title(zero_text(sc, short=True), 14)}"
                                if differ and zero_text(sc) else "")
             for (lab, _), sc in zip(items, scs)]
    legend: dict[str, Any] = {}
    xs = list(range(len(items)))
    panels = (("gpu", "GPU memory (per GPU)"), ("host", "host RAM (per node)"),
              ("nvme", "NVMe (per node)"))
    for ax, (tier, name) in zip(axes, panels):
        stacks = []
        for _, plan in items:
            t = plan.tiers[tier]
            if tier == "gpu":
                stacks.append(_gpu_groups(t.breakdown))
            elif tier == "host":
                stacks.append([("pinned", t.part("pinned:")), ("pageable", t.part("pageable:"))])
            else:
                stacks.append([("swap files", t.used_bytes)])
        colours = _GROUP_COLOURS if tier == "gpu" else (
            ("#b5651d", "#f3c19d") if tier == "host" else ("#c44e52",))
        bottom = [0.0] * len(items)
        for j, (label, _) in enumerate(stacks[0]):
            vals = [s[j][1] / GiB for s in stacks]
            if not any(vals):
                continue
            bars = ax.bar(xs, vals, 0.6, bottom=bottom, color=colours[j % len(colours)])
            legend.setdefault(f"{'GPU: ' if tier == 'gpu' else 'host: ' if tier == 'host' else 'NVMe: '}"
                              f"{label}", bars)
            bottom = [b + v for b, v in zip(bottom, vals)]
        _capacity_marks(ax, xs, [p.tiers[tier] for _, p in items])
        ax.set_title(name, fontsize=10)
        ax.set_xticks(xs, ticks, fontsize=7.5 if differ else 8)
        ax.set_ylabel("GiB (2³⁰ bytes)" if tier == "gpu" else f"{name.split(' (')[0]} (GiB)",
                      fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    where = where_text(scs)
    fig.suptitle(title or "Memory per tier against capacity (dashed: capacity)" +
                 (f": {where}" if where else ""), fontsize=11)
    _finish(fig, scenario_line(scs), legend=(list(legend.values()), list(legend.keys()),
                                             {"ncol": 4, "fontsize": 7.5}),
            legend_rows=-(-len(legend) // 4))
    return fig


def _gibs(gib: float) -> str:
    """GiB with the digits that matter: 8.00, 40.6, 1,270."""
    if gib < 10:
        return f"{gib:.2f}"
    return f"{gib:.1f}" if gib < 100 else f"{gib:,.0f}"


def _capacity_marks(ax, xs, tiers) -> None:
    """Dashed capacity line per bar; 'over by' in red; capacities far off scale as text."""
    used_max = max(t.used_bytes for t in tiers) / GiB
    top = max(used_max, 1e-3)
    shown = [t.capacity_bytes / GiB <= 3.0 * top for t in tiers]
    if any(shown):
        top = max(top, max(t.capacity_bytes / GiB for t, s in zip(tiers, shown) if s))
    for x, t, s in zip(xs, tiers, shown):
        used, cap = t.used_bytes / GiB, t.capacity_bytes / GiB
        if s and cap > 0:
            ax.hlines(cap, x - 0.4, x + 0.4, colors="black", linestyles="--", linewidth=1.3)
        if used <= 0:
            ax.text(x, top * 0.03, "unused" if cap > 0 else "none", ha="center", fontsize=7.5,
                    color="#555555")
        elif used > cap:
            ax.annotate(f"over by\n{_gibs(used - cap)} GiB", (x, used), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7.5,
                        color="#d62728")
        elif not s:
            ax.annotate(f"{_gibs(used)} GiB\nof {_gibs(cap)} GiB", (x, used), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7.5,
                        color="#555555")
        else:
            ax.annotate(f"{_gibs(used)} of\n{_gibs(cap)} GiB", (x, max(used, cap)), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7.5,
                        color="#333333")
    ax.set_ylim(0, top * 1.3)
