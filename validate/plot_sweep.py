"""The `sweep` plot: step time and tokens/s along a swept key, one line per config."""
from __future__ import annotations

from typing import Sequence

from matplotlib.figure import Figure

from tierlab.validate.plot_style import (BOTTLENECK_MARKERS, FIG_DPI, add_footer, footer_lines,
                                         resource_style, scenario_line, where_text, zero_text)


def vary_columns(df) -> list[str]:
    """The swept keys of a sweep frame: columns between point_id and config_name."""
    cols = list(df.columns)
    if "point_id" in cols and "config_name" in cols:
        return cols[cols.index("point_id") + 1:cols.index("config_name")]
    return []


KEY_LABELS = {"micro_batch": "micro-batch (sequences per GPU)", "grad_accum":
              "gradient accumulation steps", "seq": "sequence length (tokens)",
              "gpus": "GPUs per node", "nodes": "nodes", "nvme.drives": "NVMe drives per node",
              "cpu.adam_throughput": "CPU Adam throughput", "dram": "host RAM per node",
              "config": "DeepSpeed config", "config_name": "DeepSpeed config",
              "model": "model", "model_name": "model", "hardware": "hardware",
              "hardware_name": "hardware", "precision": "precision",
              "checkpointing": "activation checkpointing", "zero_optimization.stage": "ZeRO stage"}

# sweep row column -> SimResult.scenario key (what plot_style.scenario_line reads)
_ROW_SCENARIO = {"model_name": "model", "hardware_name": "hardware", "world_size": "world_size",
                 "nodes": "nodes", "gpus": "gpus_per_node", "gpus_per_node": "gpus_per_node",
                 "stage": "zero_stage",
                 "offload_param": "offload_param", "offload_optimizer": "offload_optimizer",
                 "micro_batch_size": "micro_batch", "grad_accum_steps": "grad_accum",
                 "seq_len": "seq_len", "precision": "precision"}
ERRORBAR_LABEL = "error bars: 80% range\nof the prediction"


HARDWARE_PARTS = {"gpu": "GPU", "cpu": "CPU", "nvme": "NVMe", "pcie": "PCIe", "hbm": "HBM",
                  "h2d": "H2D", "d2h": "D2H", "nvlink": "NVLink", "nic": "NIC", "dram": "DRAM",
                  "cuda": "CUDA", "fp32": "FP32", "tf32": "TF32", "fp16": "FP16", "bf16": "BF16",
                  "gpus": "GPUs"}
"""How a hardware key's parts read ('pcie.h2d_pinned' -> 'PCIe H2D pinned')."""


def key_name(key: str) -> str:
    """A swept key as a reader reads it: 'micro_batch' -> 'micro-batch (sequences per GPU)', a
    hardware key by its parts ('pcie.h2d_pinned' -> 'PCIe H2D pinned'); others as given."""
    from tierlab.sweeps.keys import HARDWARE_KEYS

    if key in KEY_LABELS:
        return KEY_LABELS[key]
    if key not in HARDWARE_KEYS:
        return key
    words = key.replace("peak_flops", "peak").replace(".", "_").split("_")
    return " ".join(HARDWARE_PARTS.get(w, w) for w in words)


def row_scenarios(df) -> list[dict]:
    """The rows' scenarios in SimResult.scenario's keys (for plot_style.scenario_line)."""
    cols = [c for c in _ROW_SCENARIO if c in df.columns]
    out = []
    for values in df[cols].drop_duplicates().itertuples(index=False):
        sc = {_ROW_SCENARIO[c]: v for c, v in zip(cols, values)}
        if "nodes" in sc and "gpus_per_node" not in sc and sc.get("world_size"):
            sc["gpus_per_node"] = int(sc["world_size"]) // max(1, int(sc["nodes"]))
        out.append(sc)
    return out


def sweep(df, x: str, *, by: str | Sequence[str] | None = None, title: str | None = None,
          x_label: str | None = None, mark: tuple[float, str] | None = None) -> Figure:
    """Step time and tokens/s along `x`, one line per value of `by` (default: every other swept
    column). Filled markers fit every tier, open ones don't; the marker shape is the bottleneck;
    error bars, the 80% range where the results carry step_time_low_s / step_time_high_s.
    `mark=(x, text)` draws a dotted vertical line, e.g. at the hardware's own value."""
    from tierlab.sweeps.keys import key_unit

    if x not in df.columns:
        raise ValueError(f"no column {x!r} in the sweep results (have: {', '.join(df.columns)})")
    ok = df[(df.get("error", "").astype(str) == "") & df["step_time_s"].notna()] \
        if "step_time_s" in df.columns else df.iloc[0:0]
    if ok.empty:
        raise ValueError("no successfully simulated rows to plot")
    if by is None:
        by = [c for c in vary_columns(df) if c != x and df[c].nunique() > 1]
    by = [by] if isinstance(by, str) else list(by)
    unit, scale = key_unit(x)
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in ok[x])
    cats = list(dict.fromkeys(ok[x])) if not numeric else []
    fig = Figure(figsize=(11.5, 4.6), dpi=FIG_DPI)
    axes = fig.subplots(1, 2)
    groups = list(ok.groupby(by, sort=False)) if by else [((), ok)]
    colours = [f"C{i % 10}" for i in range(len(groups))]
    zeros = [{zero_text(sc, short=True) for sc in row_scenarios(g)} for _, g in groups]
    # lines that differ in ZeRO stage or offload say which: 'zero3-nvme (ZeRO-3, params CPU, ...)'
    tell = len({frozenset(z) for z in zeros}) > 1 and all(len(z) == 1 for z in zeros)
    for (key, g), colour, zero in zip(groups, colours, zeros):
        g = g.sort_values(x) if numeric else g
        xv = [v / scale for v in g[x]] if numeric else [cats.index(v) for v in g[x]]
        key = key if isinstance(key, tuple) else (key,)
        label = (_with_unit(by[0], key[0]) if len(by) == 1 else
                 ", ".join(f"{_short_name(b)} {_with_unit(b, v)}" for b, v in zip(by, key))
                 ) or _one_line_label(g)
        if tell:
            label += f" ({next(iter(zero))})"
        bars = _range_bars(g)
        for ax, col in zip(axes, ("step_time_s", "tokens_per_s")):
            ax.plot(xv, list(g[col]), color=colour, lw=1.4, label=label, zorder=2)
            if bars is not None:      # the 80% range (sweep's step_time_low_s / _high_s)
                ax.errorbar(xv, list(g[col]), yerr=bars[col], fmt="none", ecolor=colour,
                            elinewidth=0.9, capsize=2.5, alpha=0.7, zorder=1)
            for xi, yi, fits, bn in zip(xv, g[col], g.get("fits", [True] * len(g)),
                                        g.get("bottleneck", [""] * len(g))):
                ax.scatter([xi], [yi], marker=BOTTLENECK_MARKERS.get(str(bn), "o"), s=36,
                           zorder=3, edgecolors=colour, linewidths=1.3,
                           facecolors=colour if _truthy(fits) else "white")
    for ax, (col, name) in zip(axes, (("step_time_s", "step time (s)"),
                                      ("tokens_per_s", "throughput (tokens/s, whole job)"))):
        ax.set_ylabel(name)
        name_x = key_name(x)
        ax.set_xlabel(x_label or (f"{name_x} ({unit})" if unit else name_x))
        if mark is not None:
            ax.axvline(mark[0] / scale if numeric else mark[0], color="#555555", ls=":", lw=1.2)
            ax.annotate(mark[1], (mark[0] / scale if numeric else mark[0], 1.0),
                        xycoords=("data", "axes fraction"), xytext=(3, -3),
                        textcoords="offset points", ha="left", va="top", fontsize=7.5,
                        color="#555555")
        ax.grid(alpha=0.3)
        if numeric:
            vals = [v / scale for v in ok[x]]
            if min(vals) > 0 and max(vals) / min(vals) >= 8:
                ax.set_xscale("log", base=2)
            ticks = sorted(set(vals))
            if len(ticks) <= 12 and (ax.get_xscale() == "log" or
                                     all(float(t).is_integer() for t in ticks)):
                ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        else:
            ax.set_xticks(range(len(cats)), [_short(c) for c in cats], rotation=20, ha="right")
        ax.set_ylim(bottom=0)
    axes[1].legend(*_sweep_legend(axes[0], ok, errorbars=any(
        _range_bars(g) is not None for _, g in groups)), fontsize=8, loc="upper left",
        bbox_to_anchor=(1.02, 1.0), frameon=False,
        title=key_name(by[0]) if len(by) == 1 else None, title_fontsize=8, alignment="left")
    scs = row_scenarios(ok)
    where = where_text(scs)
    fig.suptitle(title or f"{where + ': ' if where else ''}step time and throughput vs "
                 f"{_short_name(x)}",
                 fontsize=11)
    footer = scenario_line(scs)
    lines = footer_lines(footer, fig)
    add_footer(fig, footer)
    fig.tight_layout(rect=(0, (0.15 * lines + 0.06) / fig.get_figheight() if lines else 0, 1, 1))
    return fig


def _short_name(key: str) -> str:
    """key_name without its parenthesised unit: 'micro-batch', 'DeepSpeed config'."""
    return key_name(key).split(" (")[0]


def _one_line_label(g) -> str:
    """The label of the only line of a sweep with nothing to group by: its config's name."""
    names = list(dict.fromkeys(str(v) for v in g.get("config_name", [])))
    return names[0] if len(names) == 1 else "simulated"


def _range_bars(g):
    """{column: [[below], [above]]} error bars of step time and tokens/s from the rows' 80%
    range columns; None when the sweep has none (older results, memory-only sweeps)."""
    if not {"step_time_low_s", "step_time_high_s"} <= set(g.columns) or \
            g["step_time_low_s"].isna().any():
        return None
    step, lo, hi = (list(g[c]) for c in ("step_time_s", "step_time_low_s", "step_time_high_s"))
    tps = list(g["tokens_per_s"])
    return {"step_time_s": [[s - a for s, a in zip(step, lo)], [b - s for s, b in zip(step, hi)]],
            "tokens_per_s": [[t - t * s / b for t, s, b in zip(tps, step, hi)],
                             [t * s / a - t for t, s, a in zip(tps, step, lo)]]}


def _sweep_legend(ax, ok, errorbars: bool = False):
    from matplotlib.lines import Line2D

    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    handles, labels = list(seen.values()), list(seen.keys())
    if errorbars:
        handles.append(Line2D([], [], color="#444444", ls="none", marker="|", markersize=11,
                              markeredgewidth=1.0))
        labels.append(ERRORBAR_LABEL)
    for bn in dict.fromkeys(ok.get("bottleneck", [])):
        handles.append(Line2D([], [], marker=BOTTLENECK_MARKERS.get(str(bn), "o"), color="#444444",
                              ls="none", markersize=6))
        labels.append(f"binds: {resource_style(str(bn))[0]}")
    if "fits" in ok and not all(_truthy(f) for f in ok["fits"]):
        handles.append(Line2D([], [], marker="o", color="#444444", ls="none", markersize=6,
                              markerfacecolor="white"))
        labels.append("open marker: doesn't fit")
    return handles, labels


def _truthy(v) -> bool:
    return str(v).lower() in ("true", "1", "1.0") if not isinstance(v, bool) else v


def _with_unit(key: str, v) -> str:
    from tierlab.sweeps.keys import key_unit

    unit, scale = key_unit(key)
    if unit and isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"{v / scale:g} {unit}"
    return _short(v)


def _short(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def sweep_figure(df, x_key: str | None, by: Sequence[str] = (), title: str | None = None):
    """`tierlab plot sweep`: `sweep` along --x (default: the first swept key) after checking
    that --x and --by name columns of the results (ConfigError otherwise)."""
    from tierlab.errors import ConfigError

    if x_key is not None and not x_key.strip():
        raise ConfigError(f"--x {x_key!r}: an empty key; give a column of the results, or leave "
                          "--x out for the first swept key")
    keys = vary_columns(df)
    x = x_key or (keys[0] if keys else None)
    if x is None:
        raise ConfigError("--x KEY is needed: the results do not say which keys were swept")
    if x not in df.columns:
        raise ConfigError(f"--x {x!r} is not a column of the results; swept keys: "
                          f"{', '.join(keys) or 'none'}")
    for b in by:
        if b not in df.columns:
            raise ConfigError(f"--by {b!r} is not a column of the results")
    try:
        return sweep(df, x, by=list(by) or None, title=title)
    except ValueError as e:
        raise ConfigError(str(e)) from None
