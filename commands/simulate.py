"""`tierlab simulate`: one training step simulated, or the built-in comparison of presets."""
from __future__ import annotations

import json

import click

from tierlab.commands.examples import epilog
from tierlab.commands.common import echo_warnings, options, scenario_of, writable
from tierlab.commands.options import hw_option, builtin_configs, gpu_mem_cap_option, \
    headroom_given, headroom_options, json_option, quiet_option, scenario_options
from tierlab.safeio import write_json


@click.command(epilog=epilog("simulate"))
@scenario_options
@options(gpu_mem_cap_option, headroom_options, hw_option, json_option, quiet_option)
@click.option("--trace", "trace_path", default=None, metavar="FILE",
              help="Write a Chrome/Perfetto trace of the steady-state step (one track per "
                   "resource; open in ui.perfetto.dev).")
@click.option("--strict", is_flag=True, help="Fail (exit 2) when the config does not fit memory.")
@click.pass_context
def simulate(ctx, gpu_mem_cap, as_json, quiet, trace_path, strict, **kw):
    """Simulate one training step: time, phases, exposed time per resource, memory, bottleneck.

    Every step time carries its central 80% range from the profiles' stated uncertainty, with
    the inputs that widen it most (`step_time_range_s`, `range_drivers` in --json; docs/ranges.md).

    With no --model/--hardware/--ds-config it compares the presets no-offload, zero2-cpu,
    zero3-cpu and zero3-nvme for TinyLlama-1.1B on the RTX 3070 workstation (micro-batch 4,
    seq 1024)."""
    from tierlab.profiles.ranges import trust_of
    from tierlab.sim.result import format_result, format_table, trust_line

    writable(trace_path, "--trace", inputs=(kw["model"], kw["hardware"], kw["ds_config"]))
    configs, room = builtin_configs(ctx, kw), headroom_given(kw)
    runs = []
    for cfg in configs:
        sc = scenario_of({**kw, "ds_config": cfg}, gpu_mem_cap=gpu_mem_cap, **room)
        echo_warnings(sc.warnings, sc.notes, quiet or as_json)
        runs.append((sc, sc.simulate(strict=strict, ranges=True)))
    if trace_path:
        write_json(trace_path, runs[-1][1].trace_events())
    trust = [trust_of(sc.hardware, sc.software, [k for k, v in r.busy_s.items() if v > 0])
             for sc, r in runs]
    if len(runs) == 1:
        sc, r = runs[0]
        click.echo(json.dumps({**r.to_dict(), "trust": trust[0]}, indent=2, default=str)
                   if as_json else f"{format_result(r, sc.describe())}\n{trust_line(trust[0])}")
    elif as_json:
        click.echo(json.dumps([{"config": sc.config_name, **r.to_dict(), "trust": t}
                               for (sc, r), t in zip(runs, trust)], indent=2, default=str))
    else:
        sc = runs[0][0]
        click.echo(format_table([(sc.config_name, r) for sc, r in runs],
                                f"{sc.model.name} on {sc.hardware.name}, micro-batch "
                                f"{sc.strategy.train_micro_batch_size_per_gpu}, seq "
                                f"{sc.model.seq_len}:"))
        click.echo(trust_line({k: v for t in trust for k, v in t.items()}))
