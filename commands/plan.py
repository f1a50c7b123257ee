"""`tierlab plan`: the fastest DeepSpeed configuration that fits every tier."""
from __future__ import annotations

import json

import click

from tierlab.bounds import check_counts, check_path_text
from tierlab.commands.common import echo_warnings, finite, options, progress_bar, what_if, writable
from tierlab.commands.examples import epilog
from tierlab.commands.options import (gpus_option, hardware_option, headroom_options, hw_option,
                                      json_option, model_option, no_progress_option, nodes_option,
                                      quiet_option, seq_option, headroom_of)
from tierlab.errors import ConfigError
from tierlab.planner.trainer import written_lines
from tierlab.safeio import write_json
from tierlab.sim.result import trust_line
from tierlab.sim.strategy import PRECISIONS


@click.command(epilog=epilog("plan"))
@options(model_option, hardware_option, hw_option, gpus_option, nodes_option, seq_option)
@click.option("--global-batch", type=int, default=None,
              help="Sequences per optimizer step over all GPUs; the planner trades micro-batch "
                   "against gradient accumulation at this size.")
@click.option("--grad-accum", type=int, default=None,
              help="Gradient accumulation steps when --global-batch is not given (default 1); "
                   "with --ds-config: your config's, where it says \"auto\".")
@click.option("--micro-batch", type=int, default=None,
              help="Fix the micro-batch (default: searched over 1, 2, 4, ... --max-micro-batch); "
                   "with --ds-config: your config's micro-batch, where it says \"auto\" (the "
                   "search still tries others at the same global batch).")
@click.option("--max-micro-batch", type=int, default=64, show_default=True,
              help="Largest micro-batch the search tries.")
@click.option("--checkpointing/--no-checkpointing", default=None,
              help="Fix activation checkpointing (default: try both).")
@click.option("--precision", type=click.Choice(PRECISIONS), default=None,
              help="Compute dtype (default: bf16 where the GPU has it, else fp16).")
@click.option("--min-tokens-per-s", type=float, default=None, callback=finite(0),
              help="Reject configurations slower than this (tokens/s of the whole job).")
@click.option("--max-gpu-mem", default=None, metavar="BYTES",
              help="Use at most this much memory per GPU, e.g. 70GB (leave headroom).")
@click.option("--nvme-path", default="/local_nvme", show_default=True,
              help="nvme_path written into the ds_config for NVMe offload.")
@click.option("--out", "-o", default=None, metavar="FILE",
              help="Write the winner's ds_config.json here (atomically), \"auto\" where the HF "
                   "Trainer fills a value (lr, betas, batch, clipping, fp16/bf16): it drops into "
                   "the HF Trainer, axolotl or LLaMA-Factory; the arguments to pass are printed.")
@click.option("--config-for", type=click.Choice(["trainer", "deepspeed"]), default="trainer",
              show_default=True, help="What -o writes for: the HF Trainer (\"auto\" kept), or a "
                                      "plain deepspeed.initialize script (every value explicit).")
@click.option("--ds-config", "-c", default=None, metavar="FILE",
              help="Start from your DeepSpeed config (a ds_config.json path or preset): "
                   "simulated as it is ('yours'), changed by the search at its global batch; "
                   "the output lists what to change as dotted DeepSpeed keys (yours -> proposed) "
                   "with the step time and tokens/s each leads to. --micro-batch/--grad-accum "
                   "fill its batch \"auto\" (docs/ds-config.md).")
@click.option("--write-config", default=None, metavar="FILE",
              help="With --ds-config: write your config with the proposed keys changed "
                   "(atomically). \"auto\" stays where you had it for the keys the Hugging Face "
                   "integration fills and the trainer arguments to pass are printed, so the file "
                   "drops into the HF Trainer, axolotl or LLaMA-Factory unchanged.")
@click.option("--jobs", "-j", type=int, default=1, show_default=True,
              help="Worker processes for the simulations.")
@click.option("--fsdp2", is_flag=True,
              help="Also evaluate PyTorch FSDP2 CPU offload at the winner's micro-batch, with its "
                   "schedule and launch line (one GPU, no grad accumulation; docs/fsdp2.md).")
@options(headroom_options, json_option, quiet_option, no_progress_option)
@click.pass_context
def plan(ctx, model, hardware, hw, gpus, nodes, seq, global_batch, grad_accum, micro_batch,
         max_micro_batch, checkpointing, precision, min_tokens_per_s, max_gpu_mem, nvme_path,
         out, config_for, ds_config, write_config, gpu_headroom, host_headroom, as_json, quiet,
         jobs, no_progress, fsdp2):
    """The fastest DeepSpeed configuration that fits every tier, and why the others lost.

    Searches ZeRO stage, CPU/NVMe offload of parameters and optimizer, micro-batch, gradient
    accumulation, checkpointing, sub_group_size, swap buffers and aio settings. Exits 1 when
    nothing fits (or nothing reaches --min-tokens-per-s). The ranking is by tokens/s."""
    from tierlab.scenario import machine_and_model
    from tierlab.units import parse_size
    from tierlab.planner.search import format_plan, plan as run_plan

    check_counts({"--micro-batch": micro_batch, "--grad-accum": grad_accum, "--jobs": jobs,
                  "--global-batch": global_batch, "--max-micro-batch": max_micro_batch},
                 unbounded=("--jobs", "--max-micro-batch"))
    check_path_text(nvme_path, "--nvme-path")
    if global_batch is not None and grad_accum is not None and not ds_config:
        raise ConfigError("give --global-batch or --grad-accum, not both")
    if write_config and not ds_config:
        raise ConfigError("--write-config needs --ds-config (the config to change)")
    writable(out, "--out", inputs=(ds_config, model, hardware))
    writable(write_config, "--write-config", inputs=(ds_config, model, hardware))
    hw, mdl, notes = machine_and_model(model, what_if(hardware, hw), seq=seq, gpus=gpus,
                                       nodes=nodes)
    echo_warnings((), notes, quiet or as_json)
    search = dict(global_batch=global_batch, micro_batch=micro_batch, grad_accum=grad_accum,
                  checkpointing=checkpointing, precision=precision, jobs=jobs,
                  min_tokens_per_s=min_tokens_per_s, nvme_path=nvme_path,
                  max_gpu_mem_bytes=None if max_gpu_mem is None
                  else parse_size(max_gpu_mem, "--max-gpu-mem"), max_micro_batch=max_micro_batch,
                  headroom=headroom_of(gpu_headroom, host_headroom))
    if ds_config and fsdp2:
        raise ConfigError("--fsdp2 plans from the search, not from --ds-config")
    if ds_config:
        return _plan_from(ctx, hw, mdl, ds_config, write_config, (out, config_for), as_json,
                          no_progress, **search)
    with progress_bar("plan", "sim", no_progress) as bar:
        result = run_plan(hw, mdl, progress=bar.update, fsdp2=fsdp2, **search)
    if out and result.best is not None:
        write_json(out, result.written_config(config_for))
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, default=str))
    else:
        click.echo(format_plan(result))
        _say_out(result, out, config_for)
    if result.best is None:
        ctx.exit(1)


def _say_out(result, out, config_for) -> None:
    """Where the inputs come from; where -o wrote, and the launch line that fills its "auto"."""
    click.echo(trust_line(result.trust))
    if out and result.best is not None:
        click.echo("\n".join(written_lines(result, out, config_for)))


def _plan_from(ctx, hw, mdl, ds_config, write_config, out_for, as_json, no_progress, **kw):
    """plan --ds-config: yours, the proposal as key changes, --write-config with "auto" kept."""
    from tierlab.dsconfig.read import load_ds_config
    from tierlab.planner.from_config import format_from_config, plan_from_config, proposed_config

    cfg, where = load_ds_config(ds_config)
    with progress_bar("plan", "sim", no_progress) as bar:
        result = plan_from_config(hw, mdl, cfg, where, progress=bar.update, **kw)
    proposed, told = proposed_config(cfg, result)
    if out_for[0] and result.plan.best is not None:
        write_json(out_for[0], result.plan.written_config(out_for[1]))
    if write_config:
        write_json(write_config, proposed)
    if as_json:
        click.echo(json.dumps({**result.to_dict(), "trainer": told}, indent=2, default=str))
    else:
        click.echo(format_from_config(result))
        click.echo("".join(f"* {line}\n" for line in told), nl=False)
        if write_config:
            click.echo(f"wrote {write_config} (your config with the changes above)")
        _say_out(result.plan, *out_for)
    if result.plan.best is None:
        ctx.exit(1)
