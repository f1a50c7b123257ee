"""`tierlab memory`: the per-tier memory plan of one scenario."""
from __future__ import annotations

import json

import click

from tierlab.commands.examples import epilog
from tierlab.commands.common import echo_warnings, options, scenario_of
from tierlab.commands.options import hw_option, gpu_mem_cap_option, headroom_given, \
    headroom_options, json_option, quiet_option, scenario_options
from tierlab.sim.result import trust_line


@click.command(epilog=epilog("memory"))
@scenario_options
@options(gpu_mem_cap_option, headroom_options, hw_option, json_option, quiet_option)
def memory(gpu_mem_cap, as_json, quiet, **kw):
    """Per-tier memory plan: GPU (per rank), host RAM and NVMe (per node), fits (below
    capacity less the headroom), binding tier, a margin line where the overheads' ranges
    straddle a tier's limit, and host RAM at checkpoint save, 16-bit model save, model load and
    resume (rank 0's node), each with its verdict."""
    from tierlab.profiles.ranges import trust_of
    from tierlab.sim.memory import format_memory
    from tierlab.sim.ranges import memory_margin

    sc = scenario_of(kw, gpu_mem_cap=gpu_mem_cap, **headroom_given(kw))
    echo_warnings(sc.warnings, sc.notes, quiet or as_json)
    plan = sc.memory()
    margin = memory_margin(plan, sc.hardware, sc.software)    # overheads' ranges (docs/ranges.md)
    trust = trust_of(sc.hardware, sc.software, (), memory=True)
    if as_json:
        click.echo(json.dumps({**sc.header(), **plan.to_dict(), "memory_margin": margin,
                               "trust": trust}, indent=2))
    else:
        click.echo(format_memory(plan, sc.describe()))
        for m in margin.values():
            click.echo(f"  margin: {m['statement']}")
        click.echo(trust_line(trust))
