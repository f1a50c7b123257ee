"""`tierlab preflight`: check a launch before it is made, one line per problem."""
from __future__ import annotations

import json
from dataclasses import asdict

import click

from tierlab.commands.common import echo_problems, echo_warnings, given, options, scenario_of
from tierlab.commands.options import (headroom_given, headroom_options, hw_option,
                                      gpu_mem_cap_option, json_option, quiet_option,
                                      scenario_options, swap_dir_option)
from tierlab.errors import require


@click.command()
@scenario_options
@options(gpu_mem_cap_option, headroom_options, swap_dir_option, hw_option, json_option)
@click.option("--no-probe", is_flag=True,
              help="Probe nothing on this machine (libaio/async_io, swap path O_DIRECT and "
                   "space, RAM): judge the named hardware profile only.")
@click.option("--no-memory", is_flag=True, help="Skip the memory planner's per-tier verdict.")
@quiet_option
@click.pass_context
def preflight(ctx, gpu_mem_cap, swap_dir, no_probe, no_memory, as_json, quiet, **kw):
    """Check a launch before it is made: memory per tier, libaio/async_io, the swap path
    (exists, writable, O_DIRECT, free space), pinned memory, swap buffer counts and sizes,
    ignored keys, TORCH_CUDA_ARCH_LIST. One line per problem with its fix; exit 2 on errors.

    Host RAM is this machine's unless -H names a profile or --no-probe is given: then the
    profile's RAM is judged. --json prints one object (scenario, ok, problems with check,
    severity, message and fix; warnings, notes), with the same exit code.

    \b
    Examples:
      tierlab preflight -m llama-2-7b -c zero3-cpu -H workstation-rtx3070 --no-probe
      tierlab preflight -m tinyllama-1.1b -c zero3-nvme --swap-dir /var/tmp/tierlab-swap
      tierlab preflight -m llama-2-7b -c no-offload -H workstation-rtx3070 --no-probe --json"""
    from tierlab.runner.preflight import run_preflight

    if not no_probe:        # libaio/async_io is probed through DeepSpeed's op builder
        require("torch", "deepspeed", what="preflight (probing this machine; --no-probe judges "
                                           "the named profile only)")
    sc = scenario_of(kw, gpu_mem_cap=gpu_mem_cap, swap_dir=swap_dir, **headroom_given(kw),
                     judge="table" if no_probe else "deepspeed")
    local = not no_probe and not given(ctx, "hardware")
    problems = run_preflight(sc.hardware, sc.model, sc.strategy, software=sc.software,
                             gpu_mem_cap_bytes=sc.gpu_mem_cap_bytes, headroom=sc.headroom,
                             check_memory_plan=not no_memory, probe=not no_probe,
                             local_ram=local)
    if as_json:       # one object: the verdict, each problem's check/severity/message/fix
        errors = any(p.severity == "error" for p in problems)
        click.echo(json.dumps({"scenario": sc.describe(), "ok": not errors,
                               "problems": [asdict(p) for p in problems],
                               "warnings": list(sc.warnings), "notes": list(sc.notes)}, indent=2))
        ctx.exit(2 if errors else 0)
    echo_warnings(sc.warnings, sc.notes, quiet)   # ignored keys: DeepSpeed runs without them
    if echo_problems(problems):
        ctx.exit(2)
    if not problems and not sc.warnings:
        click.echo("ok: no problems found")
    elif not problems:
        click.echo(f"ok: no errors; {len(sc.warnings)} warning(s)"
                   + (" (--quiet)" if quiet else " above"))
