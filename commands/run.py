"""`tierlab run`: train for real with DeepSpeed and write a Measurement."""
from __future__ import annotations

import signal
from pathlib import Path

import click

from tierlab.commands.examples import epilog
from tierlab.commands.common import (SCENARIO_KEYS, echo_problems, echo_warnings, interrupted,
                                     progress_bar, signals_raise, writable)
from tierlab.commands.json_stdout import json_only_stdout, keep_json
from tierlab.commands.seams import seam
from tierlab.commands.options import (RUNNER_KEYS, json_option, no_progress_option,
                                      quiet_option, runner_options, scenario_options)
from tierlab.errors import ConfigError, Interrupted, require
from tierlab.runner.fsdp2 import ENGINES
from tierlab.safeio import read_text, write_text


@click.command(epilog=epilog("run"))
@scenario_options
@runner_options
@click.option("--engine", type=click.Choice(ENGINES), default="deepspeed", show_default=True,
              help="Who trains: DeepSpeed with the ds_config, or PyTorch FSDP2 (fully_shard per "
                   "decoder layer + root, bf16 params / fp32 reduce, torch AdamW): fsdp2 keeps "
                   "everything on the GPU, fsdp2-offload adds CPUOffloadPolicy(pin_memory=True) "
                   "(fp32 shards, grads and AdamW on the CPU). FSDP2 keeps the config's batch, "
                   "precision, AdamW hyper-parameters and clipping and ignores its "
                   "zero_optimization; it skips DeepSpeed's pre-flight (docs/fsdp2.md).")
@click.option("--breakdown", is_flag=True,
              help="Synchronised forward/backward/optimizer timing (adds device syncs; the "
                   "record says so). Default: wall time only, no extra synchronisation.")
@click.option("--out", "out_dir", default=None, metavar="DIR",
              help="Measurement directory (default: runs/<time>-<model>).")
@click.option("--hostfile", default=None, metavar="FILE",
              help="DeepSpeed hostfile for several nodes (passed to the deepspeed launcher).")
@click.option("--keep-swap", is_flag=True, help="Leave the swap files after the run.")
@click.option("--overwrite", is_flag=True,
              help="Replace the measurement already in --out (refused without it).")
@quiet_option
@json_option
@no_progress_option
@click.pass_context
def run(ctx, engine, breakdown, out_dir, hostfile, keep_swap, overwrite, quiet, no_progress, **kw):
    """Train a Llama model with DeepSpeed for real and write a Measurement.

    A model a Llama of its sizes is not (MoE, a mixer, MLA, q/k norms, sliding windows, ...) is
    refused in one line naming what it holds. One GPU (or the CPU) runs in this process; --gpus N > 1 or --hostfile goes through
    DeepSpeed's launcher. Writes DIR/measurement.json, steps.jsonl (flushed every step),
    samples.jsonl and summary.json. Ctrl-C or SIGTERM closes the record as "interrupted" with
    the steps measured. Exit 0 ok, 1 failed, 2 bad input, 130 Ctrl-C (SIGINT), 143 SIGTERM.
    --json: one object on stdout, the refusal (status "refused", the pre-flight problems) or
    the result (status, reason, the measurement folder and its summary)."""
    from tierlab.records.measurement import MEASUREMENT_FILE

    try:
        with signals_raise(), json_only_stdout(ctx, kw["as_json"]):
            _run(ctx, engine, breakdown, out_dir, hostfile, keep_swap, overwrite, quiet,
                 no_progress, kw)
    except (KeyboardInterrupt, Interrupted) as e:      # before or after the measured part
        signum = getattr(e, "signum", signal.SIGINT)
        out_dir = ctx.meta.get("tierlab.run.out")
        kept = (f"measurement: {out_dir}" if out_dir and (Path(out_dir) / MEASUREMENT_FILE)
                .exists() else "nothing was measured")
        interrupted(signum, kept)
        ctx.exit(128 + signum)


def _run(ctx, engine, breakdown, out_dir, hostfile, keep_swap, overwrite, quiet, no_progress, kw):
    import time as _time

    from tierlab.safeio import free_folder, safe_name

    require("torch", "deepspeed", "transformers", "psutil", what="tierlab run")
    from tierlab.runner.launch import launch_deepspeed
    from tierlab.records.measurement import MEASUREMENT_FILE, load_measurement
    from tierlab.runner.preflight import run_preflight
    from tierlab.runner.fsdp2 import fsdp2_spec
    from tierlab.runner.train import exit_code, run as run_training
    from tierlab.runner.variants import RunnerOptions, runner_scenario, runner_spec

    if out_dir and (Path(out_dir) / MEASUREMENT_FILE).exists() and not overwrite:
        raise ConfigError(f"--out {out_dir}: holds a measurement already; choose another folder "
                          "or pass --overwrite to replace it")
    writable(out_dir, "--out", folder=True)
    if hostfile:     # read now: a bad one is one line before any of the record is written
        read_text(hostfile, max_bytes=1 << 20, what="--hostfile")
    if kw["skip_preflight"]:     # else preflight's [swap-path] check says it, with a fix
        writable(kw["swap_dir"], "--swap-dir", folder=True)  # a file is refused, not used
    opts = RunnerOptions(**{k: kw[k] for k in RUNNER_KEYS})
    sc = runner_scenario({k: kw[k] for k in SCENARIO_KEYS}, opts, gpu_mem_cap=kw["gpu_mem_cap"])
    echo_warnings(sc.warnings, sc.notes, quiet)
    out_dir = out_dir or str(free_folder(f"runs/{_time.strftime('%Y%m%d-%H%M%S')}-"
                                         f"{safe_name(sc.model.name)}"))
    writable(out_dir, "--out", folder=True)
    spec = runner_spec(sc, opts, out_dir, sc.config_where, breakdown=breakdown,
                       keep_swap=keep_swap)
    spec = fsdp2_spec(spec, engine)      # DeepSpeed's spec as it is; FSDP2's without ZeRO keys
    if kw["dataset"]:   # a bad dataset is a one-line error now, not a failed run later
        from tierlab.runner.data import make_batches

        make_batches(vocab=sc.model.vocab, micro_batch=1, seq=sc.model.seq_len,
                     dataset=kw["dataset"], tokenizer=kw["tokenizer"])
    problems = [] if kw["skip_preflight"] or engine != "deepspeed" else run_preflight(
        sc.hardware, sc.model, sc.strategy, gpu_mem_cap_bytes=sc.gpu_mem_cap_bytes)
    if kw["as_json"] and any(p.severity == "error" for p in problems):
        _json(ctx, sc, "refused", problems=[vars(p) for p in problems])
        ctx.exit(2)
    if echo_problems(problems):
        click.echo("error: pre-flight failed (use --skip-preflight to launch anyway)", err=True)
        ctx.exit(2)
    ctx.meta["tierlab.run.out"] = out_dir        # from here on a record is being written
    if sc.strategy.data_parallel_size > 1 or hostfile:
        write_text(Path(out_dir) / "spec.json", spec.to_json())
        launch_deepspeed(Path(out_dir) / "spec.json", sc.hardware.gpus_per_node, hostfile)
        m = load_measurement(out_dir)
    else:
        with progress_bar("run", "step", no_progress, total=spec.steps) as bar:
            m = run_training(spec, on_step=lambda rec: bar.update(1),
                             setup=seam(ctx, "setup_engine"))
    s = m.summary or {}
    if kw["as_json"]:
        _json(ctx, sc, m.status, reason=m.reason, measurement=out_dir, summary=s)
        ctx.exit(exit_code(m))
    st = (s.get("step_time_s") or {})
    click.echo(f"{m.status}{': ' + m.reason if m.reason else ''}")
    if st.get("n"):
        click.echo(f"steady step time {st['median']:.4f} s (IQR {st['iqr']:.4f} s, "
                   f"{st['n']} steps), {s.get('tokens_per_s', 0):.1f} tokens/s, "
                   f"loss {s.get('loss_last'):.4f}")
    click.echo(f"measurement: {out_dir}")
    ctx.exit(exit_code(m))


def _json(ctx, sc, status: str, **fields) -> None:
    """`run --json`'s one object: the scenario's header, the status and what goes with it."""
    import json

    keep_json(ctx, json.dumps({**sc.header(), "scenario": sc.describe(), "status": status,
                               **fields}, indent=2, default=str))
