"""The figure of `tierlab compare`: the table's rows (runner/compare.py `row`) as bars per variant,
and the variants' loss per step (plot_loss.py). A Figure (not pyplot: nothing global stays open);
cli.py saves it as compare.png."""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from matplotlib.figure import Figure

from tierlab.validate.plot_loss import draw_loss, run_scenario_dict
from tierlab.validate.plot_style import add_footer, footer_lines, scenario_line, zero_text


def compare_figure(rows: Sequence[Mapping[str, Any]], title: str = "",
                   runs: Iterable[tuple[str, Any]] = ()) -> Figure:
    """Bars of GPU peak reserved, step time and tokens/s per variant (a failed variant an empty
    hatched bar labelled with its status) and, from the variants' step records `runs`
    ((label, Measurement): runner.compare.variant_records), their loss per step; the runs'
    scenario below."""
    runs = list(runs)
    metrics = [("gpu_peak_reserved_GiB", "GPU peak reserved", "GiB"),
               ("step_time_s", "step time, median", "s"),
               ("tokens_per_s", "throughput", "tokens/s")]
    fig = Figure(figsize=(12.5, 7.6))
    axes = list(fig.subplots(2, 2).flat)
    labels = [r["variant"] for r in rows]
    for ax, (key, name, unit) in zip(axes, metrics):
        vals = [r.get(key) or 0 for r in rows]
        ok = [r["status"] == "ok" for r in rows]
        bars = ax.bar(labels, vals, color=["tab:blue" if o else "white" for o in ok],
                      edgecolor="black", hatch=None)
        for b, o, r in zip(bars, ok, rows):
            if not o:
                b.set_hatch("//")
                ax.text(b.get_x() + b.get_width() / 2, 0, r["status"], rotation=90,
                        ha="center", va="bottom", fontsize=8)
        caps = [r["gpu_mem_cap_GiB"] for r in rows if r.get("gpu_mem_cap_GiB")]
        if key == "gpu_peak_reserved_GiB" and caps:
            ax.axhline(caps[0], color="tab:red", ls="--", lw=1,
                       label=f"--gpu-mem-cap ({caps[0]:g} GiB)")
            ax.set_ylim(0, max([*vals, caps[0]]) * 1.3)
            ax.legend(loc="upper right", fontsize=8, frameon=False)
        ax.set_title(name, fontsize=10)
        ax.set_ylabel(f"{name} ({unit})", fontsize=9)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    # the legend says what each variant is: 'zero3-nvme: ZeRO-3, params CPU, optim. NVMe'
    draw_loss(axes[3], [(f"{label}: {zero_text(run_scenario_dict(m), short=True)}", m)
                        for label, m in runs])
    axes[3].set_title("training loss per step (dotted: warm-up)", fontsize=10)
    if axes[3].get_legend_handles_labels()[0]:
        axes[3].legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
                       title="variant", title_fontsize=7.5)
    if title:
        fig.suptitle(title, fontsize=11)
    footer = scenario_line([run_scenario_dict(m) for _, m in runs])
    add_footer(fig, footer)
    lines = footer_lines(footer, fig)
    fig.tight_layout(rect=(0, (0.15 * lines + 0.06) / 7.6 if lines else 0, 1, 1))
    return fig
