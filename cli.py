"""tierlab's command line: the only module that prints, writes files or exits.

User errors (`ConfigError`) print one line `error: ...` and exit 2; never a traceback.
"""
from __future__ import annotations

import contextlib
import json
import logging
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from tierlab.errors import ConfigError, Interrupted

log = logging.getLogger("tierlab")

DEFAULT_MODEL = "tinyllama-1.1b"
DEFAULT_HARDWARE = "workstation-rtx3070"
DEFAULT_CONFIG = "zero3-cpu"


# ----------------------------------------------------------------------------------------------
# shared plumbing

class TierlabGroup(click.Group):
    """Turns ConfigError (and click's own usage errors) into one line and exit code 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except ConfigError as e:
            click.echo(f"error: {' '.join(str(e).split())}", err=True)
            ctx.exit(2)
        except click.UsageError as e:      # a bad option value: one line too, still exit 2
            where = f"{e.ctx.command_path}: " if e.ctx is not None else ""
            click.echo(f"error: {where}{e.format_message()}", err=True)
            ctx.exit(2)


def parse_bytes(text: str, what: str) -> float:
    """'8GiB' / '8 GB' / '8e9' -> bytes (> 0)."""
    from tierlab.profiles.load import parse_quantity

    import math
    import re

    given = text = str(text).strip()
    try:
        value = float(text)
    except ValueError:
        m = re.fullmatch(r"(.*?\d)\s*([kKmMgGtTpP])(i?)[bB]?", text)
        if m:     # 8g, 8G, 8gb, 8Gi -> 8GB / 8GiB (the prefix's case does not matter)
            text = f"{m.group(1)}{m.group(2).upper()}{m.group(3)}B"
        value = parse_quantity(text, "bytes", f"{what} {given!r}")
    if not math.isfinite(value) or not value > 0:
        raise ConfigError(f"{what} must be > 0 (a finite number of bytes), got {given!r}")
    return value


@dataclass(frozen=True)
class Scenario:
    """What every simulate/memory/run command needs, resolved from the shared options."""

    hardware: object
    model: object
    strategy: object
    warnings: tuple[str, ...]
    config_where: str


def scenario_options(fn):
    """The options shared by memory/simulate/run/preflight (model, hardware, config, batch)."""
    opts = [
        click.option("--model", "-m", default=DEFAULT_MODEL, show_default=True,
                     help="Model profile name (see `tierlab profiles models`), a profile YAML, "
                          "or a Hugging Face config.json path."),
        click.option("--hardware", "-H", default=DEFAULT_HARDWARE, show_default=True,
                     help="System profile name (see `tierlab profiles hardware`) or YAML path."),
        click.option("--ds-config", "-c", default=DEFAULT_CONFIG, show_default=True,
                     help="DeepSpeed config: preset name (see `tierlab profiles configs`) or a "
                          "ds_config.json path."),
        click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                     help="Override a ds_config key, e.g. --set zero_optimization.stage=3 "
                          "(repeatable; values parsed as JSON, 1e8 allowed)."),
        click.option("--gpus", type=int, default=None,
                     help="GPUs per node (default: the hardware profile's)."),
        click.option("--nodes", type=int, default=None,
                     help="Number of nodes (default: the hardware profile's)."),
        click.option("--micro-batch", type=int, default=None,
                     help="train_micro_batch_size_per_gpu; overrides the config and fills \"auto\"."),
        click.option("--grad-accum", type=int, default=None,
                     help="gradient_accumulation_steps; overrides the config and fills \"auto\"."),
        click.option("--seq", type=int, default=None,
                     help="Sequence length in tokens (default: the model's context length)."),
        click.option("--checkpointing/--no-checkpointing", default=True, show_default=True,
                     help="Activation (gradient) checkpointing: recompute each block in backward."),
        click.option("--precision", type=click.Choice(["fp16", "bf16", "fp32"]), default=None,
                     help="Fills fp16/bf16 \"auto\"; must agree with the config if it sets one."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def build_scenario(model, hardware, ds_config, overrides, gpus, nodes, micro_batch, grad_accum,
                   seq, checkpointing, precision) -> Scenario:
    from tierlab.profiles.load import load_ds_config, load_hardware, load_model
    from tierlab.sim.strategy import Flags, apply_overrides, parse_ds_config

    for flag, value in (("--micro-batch", micro_batch), ("--grad-accum", grad_accum)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be >= 1, got {value}")
    hw = load_hardware(hardware, gpus_per_node=gpus, nodes=nodes)
    mdl = load_model(model, seq_len=seq)
    cfg, where = load_ds_config(ds_config)
    cfg = apply_overrides(cfg, list(overrides))
    if precision is None:   # fills fp16/bf16 "auto": bf16 where the GPU has it, else fp16
        precision = "bf16" if "bf16" in hw.gpu.peak_flops else "fp16"
        if _explicit_precision(cfg):
            precision = None
    flags = Flags(micro_batch=micro_batch, grad_accum=grad_accum, world_size=hw.world_size,
                  precision=precision, activation_checkpointing=checkpointing, hidden=mdl.hidden)
    strategy, warnings = parse_ds_config(cfg, flags, where=where)
    return Scenario(hw, mdl, strategy, tuple(warnings), where)


def _explicit_precision(cfg) -> bool:
    return any(isinstance(cfg.get(b), dict) and cfg[b].get("enabled") is True
               for b in ("fp16", "bf16"))


def echo_warnings(warnings, quiet: bool = False) -> None:
    if not quiet:
        for w in warnings:
            click.echo(f"warning: {w}", err=True)


def _write_text_atomic(path: Path, text: str) -> None:
    """Write text via a temp file + rename: a reader never sees a half-written profile."""
    from tierlab.safeio import write_text

    write_text(path, text)


def write_json(path: str | Path, obj) -> None:
    """Write JSON atomically (temp file + rename): never a half-written file."""
    from tierlab.safeio import write_json as write

    write(path, obj)


def writable(path, what: str, folder: bool = False):
    """Refuse an output that cannot be written now, before the long work (tierlab.safeio)."""
    from tierlab.safeio import check_writable

    return check_writable(path, what, folder=folder) if path is not None else None


def _finite(minimum: float | None = None, open_min: bool = False):
    """A click callback: a float option must be finite (nan/inf refused) and above a bound."""
    import math

    def check(ctx, param, value):
        if value is None:
            return value
        if not math.isfinite(value):
            raise click.BadParameter(f"must be a finite number, got {value}")
        if minimum is not None and (value < minimum or (open_min and value == minimum)):
            raise click.BadParameter(f"must be {'>' if open_min else '>='} {minimum:g}, "
                                     f"got {value:g}")
        return value
    return check


@contextlib.contextmanager
def signals_raise():
    """SIGTERM raises Interrupted (as Ctrl-C raises KeyboardInterrupt) for the block, so the
    `finally` blocks below flush what is done and stop worker processes."""
    def raise_(signum, frame):
        raise Interrupted(signum)

    old = signal.signal(signal.SIGTERM, raise_)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@click.group(cls=TierlabGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def main(verbose: int) -> None:
    """tierlab: will a DeepSpeed ZeRO offload run fit, how fast is a step, which tier binds?"""
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)],
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


# ----------------------------------------------------------------------------------------------
# profiles

@main.command()
@click.argument("kind", required=False,
                type=click.Choice(["hardware", "models", "configs", "gpus", "cpus", "nvme"]))
@click.option("--test-machines", is_flag=True,
              help="Also list the calibrations of this project's test machines (validation data).")
def profiles(kind, test_machines):
    """List shipped profiles with a one-line summary each.

    KIND is one of hardware (systems), models, configs (DeepSpeed presets), gpus, cpus, nvme;
    all of hardware, models and configs when omitted. Hardware is the catalogue (docs/catalogue.md)
    unless --test-machines is given."""
    from tierlab.profiles.catalogue import list_catalogue

    for k in [kind] if kind else ["hardware", "models", "configs"]:
        click.echo(f"{k}:")
        for name, summary in list_catalogue(k, test_machines=test_machines):
            click.echo(f"  {name:28s} {summary}")


# ----------------------------------------------------------------------------------------------
# memory

def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:,.2f} GB"


def format_memory_plan(plan, title: str) -> str:
    """The plan as a table: per tier used / capacity / fits, then the breakdown."""
    lines = [title, f"{'tier':8s} {'used':>14s} {'capacity':>14s}  fits",
             "-" * 46]
    for name, tier in plan.tiers.items():
        scope = "per GPU" if name == "gpu" else "per node"
        lines.append(f"{name:8s} {_gb(tier.used_bytes):>14s} {_gb(tier.capacity_bytes):>14s}  "
                     f"{'yes' if tier.fits else 'NO'}   ({scope})")
        for item, nbytes in sorted(tier.breakdown.items(), key=lambda kv: -kv[1]):
            lines.append(f"    {item:34s} {_gb(nbytes):>14s}")
    states = plan.model_states
    total = sum(states.values())
    parts = " + ".join(f"{k} {_gb(v)}" for k, v in states.items())
    lines.append(f"model states (whole model, {plan.n_params / 1e9:.2f} B params): {parts} = "
                 f"{_gb(total)} ({total / plan.n_params:.0f} B/param)")
    verdict = "fits" if plan.fits else f"does NOT fit: {plan.binding_tier} tier is over capacity"
    lines.append(f"verdict: {verdict}; binding tier: {plan.binding_tier}")
    return "\n".join(lines)


@main.command()
@scenario_options
@click.option("--gpu-mem-cap", default=None, metavar="BYTES",
              help="Pretend the GPU has this much memory, e.g. 8GiB (emulates a smaller card).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@click.option("--quiet", "-q", is_flag=True, help="Do not print DeepSpeed-quirk warnings.")
def memory(gpu_mem_cap, as_json, quiet, **scenario):
    """Per-tier memory plan: GPU (per rank), host RAM and NVMe (per node), fits, binding tier."""
    from dataclasses import replace

    from tierlab.sim.memory import plan_memory

    sc = build_scenario(**scenario)
    hw = sc.hardware
    if gpu_mem_cap is not None:
        hw = replace(hw, gpu=replace(hw.gpu, hbm_bytes=parse_bytes(gpu_mem_cap, "--gpu-mem-cap")))
    echo_warnings(sc.warnings, quiet or as_json)
    plan = plan_memory(hw, sc.model, sc.strategy)
    if as_json:
        click.echo(json.dumps({"model": sc.model.name, "hardware": hw.name,
                               "ds_config": sc.config_where, "seq_len": sc.model.seq_len,
                               "micro_batch": sc.strategy.train_micro_batch_size_per_gpu,
                               **plan.to_dict()}, indent=2))
    else:
        s = sc.strategy
        title = (f"{sc.model.name} on {hw.name} ({hw.world_size} GPU), {Path(sc.config_where).stem}: "
                 f"ZeRO-{s.zero.stage}, params on {s.param_device}, optimizer on "
                 f"{s.optimizer_device}, micro-batch {s.train_micro_batch_size_per_gpu}, seq "
                 f"{sc.model.seq_len}, {s.precision}")
        click.echo(format_memory_plan(plan, title))

# ----------------------------------------------------------------------------------------------
# simulate

BUILTIN_PRESETS = ("no-offload", "zero2-cpu", "zero3-cpu", "zero3-nvme")
"""The built-in scenario of `tierlab simulate` with no arguments: TinyLlama-1.1B on the RTX 3070
workstation, micro-batch 4, seq 1024, one row per preset."""


def _gib(nbytes) -> str:
    return "-" if nbytes is None else f"{nbytes / 2**30:.2f} GiB"


def _simulate_one(kw: dict, gpu_mem_cap, strict: bool):
    from dataclasses import replace

    from tierlab.sim import simulate

    sc = build_scenario(**kw)
    hw = sc.hardware
    if gpu_mem_cap is not None:
        hw = replace(hw, gpu=replace(hw.gpu, hbm_bytes=parse_bytes(gpu_mem_cap, "--gpu-mem-cap")))
    return sc, simulate(hw, sc.model, sc.strategy, strict=strict)


def _table_row(name: str, r) -> dict:
    tiers = r.memory.tiers if r.memory is not None else {}
    used = {k: (tiers[k].used_bytes if k in tiers else None) for k in ("gpu", "host", "nvme")}
    return {"config": name, "gpu_mem": _gib(used["gpu"]), "host_mem": _gib(used["host"]),
            "nvme": _gib(used["nvme"]), "step_s": f"{r.step_time_s:.3f}",
            "tokens/s": f"{r.tokens_per_s:,.0f}", "bottleneck": r.bottleneck,
            "fits": "yes" if r.fits else f"NO ({r.binding_tier})"}


def _echo_table(rows: list[dict]) -> None:
    cols = list(rows[0])
    width = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    click.echo("  ".join(c.ljust(width[c]) for c in cols))
    for r in rows:
        click.echo("  ".join(str(r[c]).ljust(width[c]) for c in cols))


@main.command()
@scenario_options
@click.option("--gpu-mem-cap", default=None, metavar="BYTES",
              help="Cap the GPU's memory, e.g. 8GiB (what-if for a smaller card).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one object; a list in the "
              "built-in comparison).")
@click.option("--trace", "trace_path", default=None, metavar="FILE",
              help="Write a Chrome/Perfetto trace of the steady-state step (one track per "
                   "resource; open in ui.perfetto.dev).")
@click.option("--strict", is_flag=True, help="Fail (exit 2) when the config does not fit memory.")
@click.pass_context
def simulate(ctx, gpu_mem_cap, as_json, trace_path, strict, **kw):
    """Simulate one training step: time, phases, exposed time per resource, memory, bottleneck.

    With no --model/--hardware/--ds-config it compares the presets no-offload, zero2-cpu,
    zero3-cpu and zero3-nvme for TinyLlama-1.1B on the RTX 3070 workstation (micro-batch 4,
    seq 1024)."""
    from click.core import ParameterSource

    writable(trace_path, "--trace")
    given = [p for p in ("model", "hardware", "ds_config")
             if ctx.get_parameter_source(p) != ParameterSource.DEFAULT]
    if not given:
        kw["micro_batch"] = kw["micro_batch"] or 4
        kw["seq"] = kw["seq"] or 1024
        rows, results = [], []
        for preset in BUILTIN_PRESETS:
            sc, r = _simulate_one({**kw, "ds_config": preset}, gpu_mem_cap, strict)
            results.append({"config": preset, **r.to_dict()})
            rows.append(_table_row(preset, r))
        if trace_path:
            write_json(trace_path, r.trace_events())
        if as_json:
            click.echo(json.dumps(results, indent=2, default=str))
        else:
            click.echo(f"{sc.model.name} on {sc.hardware.name}, micro-batch {kw['micro_batch']}, "
                       f"seq {kw['seq']}:")
            _echo_table(rows)
        return
    sc, r = _simulate_one(kw, gpu_mem_cap, strict)
    echo_warnings(sc.warnings, quiet=as_json)
    if trace_path:
        write_json(trace_path, r.trace_events())
    if as_json:
        click.echo(json.dumps(r.to_dict(), indent=2, default=str))
        return
    _echo_result(sc, r)


def _echo_result(sc, r) -> None:
    click.echo(f"{sc.model.name} on {sc.hardware.name} x{sc.hardware.world_size} "
               f"({sc.config_where}), micro-batch {sc.strategy.train_micro_batch_size_per_gpu}, "
               f"seq {sc.model.seq_len}")
    p = r.phases
    click.echo(f"step {r.step_time_s:.3f} s (step 1: {r.first_step_time_s:.3f} s): forward "
               f"{p['forward_s']:.3f} s, backward {p['backward_s']:.3f} s, optimizer "
               f"{p['optimizer_s']:.3f} s")
    click.echo(f"{r.tokens_per_s:,.0f} tokens/s, {r.tflops_per_gpu:.1f} TFLOP/s per GPU, "
               f"roofline {r.lower_bound_s:.3f} s (efficiency {r.efficiency:.0%})")
    click.echo("resource       busy s   exposed s")
    for name, busy in r.busy_s.items():
        if busy or r.exposed_s[name]:
            click.echo(f"{name:13s} {busy:8.3f}  {r.exposed_s[name]:9.3f}")
    click.echo(f"bottleneck: {r.bottleneck}")
    if r.memory is not None:
        for name, t in r.memory.tiers.items():
            click.echo(f"memory {name:5s} {_gib(t.used_bytes)} of {_gib(t.capacity_bytes)}"
                       f"{'' if t.fits else '  DOES NOT FIT'}")
    click.echo(f"fits: {'yes' if r.fits else 'no (' + str(r.binding_tier) + ')'}")

# ----------------------------------------------------------------------------------------------
# run / compare / preflight

def _runner_scenario(model, model_path, hardware, ds_config, overrides, gpus, nodes, micro_batch,
                     grad_accum, seq, checkpointing, precision, swap_dir=None):
    """build_scenario for a real run: --model-path's config.json wins over --model; a run on one
    machine defaults to one GPU (not the profile's count); --swap-dir sets every nvme_path."""
    if swap_dir:
        overrides = [*overrides, *(f"zero_optimization.{b}.nvme_path={swap_dir}"
                                   for b in ("offload_param", "offload_optimizer"))]
    if model_path:
        cfg_json = Path(model_path).expanduser() / "config.json"
        if not cfg_json.is_file():
            raise ConfigError(f"--model-path {model_path}: no config.json there")
        model = str(cfg_json)
    return build_scenario(model, hardware, ds_config, overrides, gpus or 1, nodes or 1,
                          micro_batch, grad_accum, seq, checkpointing, precision)


def _cap_bytes(gpu_mem_cap):
    return parse_bytes(gpu_mem_cap, "--gpu-mem-cap") if gpu_mem_cap else None


def _echo_problems(problems) -> bool:
    """Print each pre-flight problem on one line; True if any is an error."""
    for p in problems:
        click.echo(p.line(), err=True)
    return any(p.severity == "error" for p in problems)


def _runner_options(fn):
    opts = [
        click.option("--model-path", default=None, metavar="DIR",
                     help="Local Hugging Face model directory (config.json + weights) to train "
                          "instead of a random init; local files only."),
        click.option("--steps", type=click.IntRange(min=1), default=10, show_default=True,
                     help="Optimizer steps to train."),
        click.option("--warmup-steps", type=click.IntRange(min=0), default=2, show_default=True,
                     help="Leading steps dropped from the steady-state statistics (ZeRO-3's "
                          "first step has no prefetch trace)."),
        click.option("--dataset", default=None, metavar="FILE",
                     help="Alpaca-format JSON/JSONL (instruction/input/output); default: "
                          "synthetic tokens."),
        click.option("--tokenizer", default=None, metavar="DIR",
                     help="Local tokenizer directory for --dataset (default: built-in "
                          "byte-level tokenizer)."),
        click.option("--gpu-mem-cap", default=None, metavar="BYTES",
                     help="Emulate a smaller GPU, e.g. 8GiB "
                          "(torch.cuda.set_per_process_memory_fraction)."),
        click.option("--swap-dir", default=None, metavar="DIR",
                     help="Point every NVMe offload (nvme_path) at this directory."),
        click.option("--seed", type=int, default=0, show_default=True,
                     help="Seed of the random init and the synthetic data."),
        click.option("--skip-preflight", is_flag=True,
                     help="Launch even if the pre-flight check finds errors."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _preflight_or_exit(sc, cap, ctx, memory: bool = True) -> None:
    from tierlab.runner.preflight import run_preflight

    problems = run_preflight(sc.hardware, sc.model, sc.strategy, gpu_mem_cap_bytes=cap,
                             check_memory_plan=memory)
    if _echo_problems(problems):
        click.echo("error: pre-flight failed (use --skip-preflight to launch anyway)", err=True)
        ctx.exit(2)


@main.command()
@scenario_options
@_runner_options
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
@click.option("--quiet", "-q", is_flag=True, help="No warnings about the ds_config.")
@click.pass_context
def run(ctx, model, hardware, ds_config, overrides, gpus, nodes, micro_batch, grad_accum, seq,
        checkpointing, precision, model_path, steps, warmup_steps, dataset, tokenizer, gpu_mem_cap,
        swap_dir, seed, skip_preflight, breakdown, out_dir, hostfile, keep_swap, overwrite, quiet):
    """Train a Llama model with DeepSpeed for real and write a Measurement.

    One GPU (or the CPU) runs in this process; --gpus N > 1 or --hostfile goes through
    DeepSpeed's launcher. Writes DIR/measurement.json, steps.jsonl (flushed every step),
    samples.jsonl and summary.json. Exit 0 ok, 1 failed, 130 interrupted, 2 bad input."""
    import time as _time

    from tierlab.errors import require
    from tierlab.safeio import free_folder

    require("torch", "deepspeed", "transformers", "psutil", what="tierlab run")
    from tierlab.runner.launch import launch_deepspeed
    from tierlab.runner.measurement import MEASUREMENT_FILE, load_measurement
    from tierlab.runner.train import EXIT_CODES, run as run_training, spec_from_strategy

    if out_dir and (Path(out_dir) / MEASUREMENT_FILE).exists() and not overwrite:
        raise ConfigError(f"--out {out_dir}: holds a measurement already; choose another folder "
                          "or pass --overwrite to replace it")
    writable(out_dir, "--out", folder=True)
    sc = _runner_scenario(model, model_path, hardware, ds_config, overrides, gpus, nodes,
                          micro_batch, grad_accum, seq, checkpointing, precision, swap_dir)
    echo_warnings(sc.warnings, quiet)
    cap = _cap_bytes(gpu_mem_cap)
    out_dir = out_dir or str(free_folder(f"runs/{_time.strftime('%Y%m%d-%H%M%S')}-"
                                         f"{sc.model.name}"))
    writable(out_dir, "--out", folder=True)
    spec = spec_from_strategy(sc.model, sc.strategy, out_dir=out_dir, steps=steps,
                              warmup_steps=warmup_steps, swap_dir=swap_dir,
                              model_path=model_path, dataset=dataset, tokenizer=tokenizer,
                              gpu_mem_cap_bytes=cap, breakdown=breakdown, seed=seed,
                              keep_swap=keep_swap, label=sc.config_where)
    if dataset:   # a bad dataset is a one-line error now, not a failed run later
        from tierlab.runner.data import make_batches

        make_batches(vocab=sc.model.vocab, micro_batch=1, seq=sc.model.seq_len, dataset=dataset,
                     tokenizer=tokenizer)
    if not skip_preflight:
        _preflight_or_exit(sc, cap, ctx)
    if sc.strategy.data_parallel_size > 1 or hostfile:
        _write_text_atomic(Path(out_dir) / "spec.json", spec.to_json())
        launch_deepspeed(Path(out_dir) / "spec.json", sc.hardware.gpus_per_node, hostfile)
        m = load_measurement(out_dir)
    else:
        m = run_training(spec)
    s = m.summary or {}
    st = (s.get("step_time_s") or {})
    click.echo(f"{m.status}{': ' + m.reason if m.reason else ''}")
    if st.get("n"):
        click.echo(f"steady step time {st['median']:.4f} s (IQR {st['iqr']:.4f} s, "
                   f"{st['n']} steps), {s.get('tokens_per_s', 0):.1f} tokens/s, "
                   f"loss {s.get('loss_last'):.4f}")
    click.echo(f"measurement: {out_dir}")
    ctx.exit(EXIT_CODES.get(m.status, 1))


@main.command()
@scenario_options
@_runner_options
@click.option("--variants", multiple=True, default=None,
              type=click.Choice(["no-offload", "zero2-cpu", "zero3-cpu", "zero3-nvme"]),
              help="Variants to run (repeatable; default: all four).")
@click.option("--uncapped-baseline/--no-uncapped-baseline", default=False, show_default=True,
              help="Also run no-offload without --gpu-mem-cap (the full card).")
@click.option("--timeout", "timeout_s", type=float, default=None, metavar="SECONDS",
              callback=_finite(0, open_min=True),
              help="Per-variant time limit; an over-time variant is a 'timeout' row.")
@click.option("--budget", "budget_s", type=float, default=None, metavar="SECONDS",
              callback=_finite(0, open_min=True),
              help="Total time for all variants: each gets at most what is left (a variant cut "
                   "short keeps its finished steps; one with no time left is skipped).")
@click.option("--out", "out_dir", default="runs/compare", show_default=True, metavar="DIR",
              help="Directory of the per-variant Measurements, compare.csv and compare.png.")
@click.pass_context
def compare(ctx, model, hardware, ds_config, overrides, gpus, nodes, micro_batch, grad_accum, seq,
            checkpointing, precision, model_path, steps, warmup_steps, dataset, tokenizer,
            gpu_mem_cap, swap_dir, seed, skip_preflight, variants, uncapped_baseline, timeout_s,
            budget_s, out_dir):
    """Offload vs baseline: the same model and data with no offload, ZeRO-2 CPU, ZeRO-3 CPU and
    ZeRO-3 NVMe, each in its own subprocess (an OOM is a row). Prints one table and writes
    compare.csv, compare.png and compare.json under --out. --ds-config is not used: each
    variant uses its preset, with the --set overrides applied to all."""
    from tierlab.errors import require

    writable(out_dir, "--out", folder=True)
    require("torch", "deepspeed", "transformers", "psutil", what="tierlab compare")
    from tierlab.runner.compare import (VARIANTS, figure, format_table, row, rows_to_csv,
                                        run_variant)
    from tierlab.runner.preflight import run_preflight
    from tierlab.runner.train import spec_from_strategy

    import time as _time

    t_start = _time.monotonic()
    cap = _cap_bytes(gpu_mem_cap)
    plan = [(v, cap) for v in (variants or VARIANTS)]
    if uncapped_baseline:
        plan.insert(0, ("no-offload", None))
    rows = []
    for variant, vcap in plan:
        label = f"{variant}-uncapped" if cap is not None and vcap is None else variant
        sc = _runner_scenario(model, model_path, hardware, VARIANTS[variant][0], overrides, gpus,
                              nodes, micro_batch, grad_accum, seq, checkpointing, precision,
                              swap_dir)
        spec = spec_from_strategy(sc.model, sc.strategy, out_dir=str(Path(out_dir) / label),
                                  steps=steps, warmup_steps=warmup_steps, swap_dir=swap_dir,
                                  model_path=model_path, dataset=dataset, tokenizer=tokenizer,
                                  gpu_mem_cap_bytes=vcap, seed=seed, label=label)
        problems = [] if skip_preflight else run_preflight(
            sc.hardware, sc.model, sc.strategy, gpu_mem_cap_bytes=vcap, check_memory_plan=False)
        if _echo_problems(problems):
            rows.append({"variant": label, "status": "preflight", "reason":
                         "; ".join(p.message for p in problems if p.severity == "error")})
            continue
        limit = timeout_s
        if budget_s is not None:
            left = budget_s - (_time.monotonic() - t_start) - 15
            if left < 30:
                rows.append({"variant": label, "status": "skipped", "reason": "budget spent"})
                continue
            limit = min(limit or left, left)
        click.echo(f"running {label} ...", err=True)
        m = run_variant(spec, limit)
        rows.append(row(label, m))
        click.echo(f"  {label}: {rows[-1]['status']} step {rows[-1]['step_time_s']} s "
                   f"{m.reason}".rstrip(), err=True)
    click.echo(format_table(rows))
    out = Path(out_dir)
    _write_text_atomic(out / "compare.csv", rows_to_csv(rows))
    write_json(out / "compare.json", rows)
    fig = figure(rows, title=f"{sc.model.name}, micro-batch {sc.strategy.train_micro_batch_size_per_gpu}"
                 f", seq {sc.model.seq_len}" + (f", GPU cap {cap / 2**30:.0f} GiB" if cap else ""))
    from tierlab.safeio import atomic_target

    with atomic_target(out / "compare.png", "--out") as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    click.echo(f"wrote {out / 'compare.csv'}, {out / 'compare.png'}")


@main.command()
@scenario_options
@click.option("--gpu-mem-cap", default=None, metavar="BYTES",
              help="Judge GPU memory against this cap (e.g. 8GiB) instead of the profile's card.")
@click.option("--no-probe", is_flag=True,
              help="Skip the machine probes (libaio/async_io, swap path O_DIRECT and space).")
@click.option("--no-memory", is_flag=True, help="Skip the memory planner's per-tier verdict.")
@click.option("--swap-dir", default=None, metavar="DIR",
              help="Point every NVMe offload (nvme_path) at this directory, as `run` does.")
@click.pass_context
def preflight(ctx, model, hardware, ds_config, overrides, gpus, nodes, micro_batch, grad_accum,
              seq, checkpointing, precision, gpu_mem_cap, no_probe, no_memory, swap_dir):
    """Check a launch before it is made: memory per tier, libaio/async_io, the swap path
    (exists, writable, O_DIRECT, free space), pinned memory, swap buffer counts and sizes,
    ignored keys, TORCH_CUDA_ARCH_LIST. One line per problem with its fix; exit 2 on errors."""
    from tierlab.runner.preflight import run_preflight

    if swap_dir:
        overrides = [*overrides, *(f"zero_optimization.{b}.nvme_path={swap_dir}"
                                   for b in ("offload_param", "offload_optimizer"))]
    sc = build_scenario(model, hardware, ds_config, overrides, gpus, nodes, micro_batch,
                        grad_accum, seq, checkpointing, precision)
    problems = run_preflight(sc.hardware, sc.model, sc.strategy,
                             gpu_mem_cap_bytes=_cap_bytes(gpu_mem_cap),
                             check_memory_plan=not no_memory, probe=not no_probe)
    echo_warnings(sc.warnings)      # ignored or misspelled keys: DeepSpeed would run without them
    if _echo_problems(problems):
        ctx.exit(2)
    if not problems and not sc.warnings:
        click.echo("ok: no problems found")
    elif not problems:
        click.echo(f"ok: no errors; {len(sc.warnings)} warning(s) above")

# ----------------------------------------------------------------------------------------------
# calibrate / validate

@main.command()
@click.option("--nvme-path", default=None, metavar="DIR",
              help="Directory on the drive to measure with DeepSpeed aio (O_DIRECT); must exist, "
                   "be writable and not be tmpfs. Without it the NVMe part comes from --hardware.")
@click.option("--out", default=None, metavar="FILE",
              help="System profile YAML to write (default: profiles/hardware/systems/NAME.yaml); "
                   "the measured GPU/CPU/NVMe parts go to gpus/, cpus/, nvme/ beside its systems/ "
                   "folder, or beside FILE when it is not in one.")
@click.option("--name", default=None,
              help="Profile name, also the file stem of the part profiles (default: the --out "
                   "file stem, else calibrated-HOSTNAME).")
@click.option("--hardware", "-H", default=DEFAULT_HARDWARE, show_default=True, metavar="BASE",
              help="Base system profile: what cannot be measured here (network, a GPU on a "
                   "CPU-only host, ...) is copied from it with its original sources.")
@click.option("--quick", is_flag=True,
              help="Few sizes and points, small files: under a minute (CI, smoke checks).")
@click.option("--raw", default=None, metavar="FILE",
              help="Also write every measured point, with its settings, host facts and library "
                   "versions, as JSON.")
@click.option("--skip", default="", metavar="LIST",
              help="Comma-separated benchmarks not to run: gpu, pcie, gemm, nccl, aio, adam, "
                   "memcpy, dispatch (the hooked module-call time), deepspeed (DeepSpeed's host "
                   "costs on narrow Llama models, 5-8 min; docs/host-costs.md).")
@click.option("--sweep", multiple=True, metavar="KEY=V1,V2",
              help="Override sweep points, e.g. --sweep aio_block_sizes=1M,8M --sweep "
                   "aio_queue_depths=32,128 --sweep repeats=2 (sizes: K/M/G = KiB/MiB/GiB; "
                   "repeatable; keys are the fields of runner.calibrate.SweepPlan).")
@click.option("--from-raw", "from_raw", default=None, metavar="FILE",
              help="Measure nothing: rebuild the profile from a raw record that an earlier "
                   "`calibrate --raw` wrote (on this or another host), with this version's rules.")
def calibrate(nvme_path, out, name, hardware, quick, raw, skip, sweep, from_raw):
    """Measure this host (PCIe, GEMM, NCCL, aio, CPU Adam, memcpy, module call) into a profile.

    Writes a system profile in the loader's format whose measured numbers say 'measured <date> by
    tierlab calibrate: <settings>', plus the measured part profiles; what it cannot measure is
    taken from --hardware and keeps its source. Benchmarks that need missing hardware are
    skipped and listed."""
    import socket

    from tqdm import tqdm

    from tierlab.profiles.load import HARDWARE_DIR
    from tierlab.runner import calibrate as cal
    from tierlab.runner.calibrate_profile import layout

    for flag, value in (("--out", out), ("--raw", raw), ("--from-raw", from_raw)):
        if value is not None and not value.strip():     # "" must not mean the default folder
            raise ConfigError(f"{flag}: empty path")

    if from_raw:
        from tierlab.profiles.load import read_data

        record = read_data(Path(from_raw))
        name = name or (Path(out).stem if out else None)
        try:
            result = cal.from_raw(record, name=name, where=from_raw)
        except (TypeError, ValueError, KeyError, AttributeError, IndexError,
                ZeroDivisionError) as e:
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(f"{from_raw}: not a usable calibrate raw record "
                              f"({type(e).__name__}: {e})") from None
        name = result.hardware.name
        out_path = Path(out) if out else HARDWARE_DIR / "systems" / f"{name}.yaml"
        _write_calibration(result, _calibration_paths(layout(out_path, name), raw), raw)
        return
    if name is None:
        name = Path(out).stem if out else f"calibrated-{socket.gethostname().split('.')[0]}"
    out_path = Path(out) if out else HARDWARE_DIR / "systems" / f"{name}.yaml"
    paths = _calibration_paths(layout(out_path, name), raw)    # refused now, not after measuring
    from tierlab.errors import require

    require("torch", "psutil", what="calibrate (measuring)")
    plan = cal.apply_sweep_overrides(cal.quick_plan() if quick else cal.SweepPlan(), list(sweep))
    skips = {s.strip() for s in skip.split(",") if s.strip()}

    def bar(tasks):
        progress = tqdm(tasks, desc="calibrate", unit="pt", file=sys.stderr, mininterval=0.5)
        for task in progress:
            progress.set_postfix_str(task.label, refresh=False)
            yield task

    result = cal.calibrate(name=name, base=hardware, nvme_path=nvme_path, plan=plan, skip=skips,
                           progress=bar)
    _write_calibration(result, paths, raw)


def _calibration_paths(paths: dict, raw: str | None) -> dict:
    """The profile paths, each checked writable (with --raw) before anything is measured."""
    for path in paths.values():
        writable(path, "--out")
    writable(raw, "--raw")
    return paths


def _write_calibration(result, paths: dict, raw: str | None) -> None:
    if raw:    # first: the measured points are the expensive part
        write_json(raw, result.raw)
        click.echo(f"wrote {raw}")
    for kind, text in result.texts.items():
        _write_text_atomic(paths[kind], text)
        click.echo(f"wrote {paths[kind]}")
    hw = result.hardware
    click.echo(f"{hw.name}: PCIe H2D/D2H pinned {hw.pcie.h2d_pinned_Bps / 1e9:.1f}/"
               f"{hw.pcie.d2h_pinned_Bps / 1e9:.1f} GB/s, DRAM {hw.cpu.dram_bandwidth_Bps / 1e9:.1f}"
               f" GB/s, CPU Adam {hw.cpu.adam_params_per_s / 1e9:.2f} G params/s"
               + (f", module call {hw.cpu.module_call_s * 1e6:.2f} us" if hw.cpu.module_call_s
                  else "")
               + (f", NVMe read/write {hw.nvme.read_bandwidth_Bps / 1e9:.2f}/"
                  f"{hw.nvme.write_bandwidth_Bps / 1e9:.2f} GB/s" if hw.nvme else ""))
    for group, why in result.skipped.items():
        click.echo(f"skipped {group}: {why}")


def _pct(value) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def _fmt_metric(metric: str, value) -> str:
    if value is None:
        return "-"
    if metric.endswith("_bytes"):
        return f"{value / 2**30:.2f} GiB"
    if metric == "oom":
        return "OOM" if value else "ok"
    return f"{value:.3f} s"


@main.command()
@click.argument("cases", nargs=-1, type=click.Path())
@click.option("--hardware", "-H", default=None,
              help="Calibrated system profile of the host the runs were measured on, for every "
                   "run. Default: per folder, the profile its validate.yaml names (`hardware: "
                   "PROFILE`, written beside runs calibrated with them), else h200-host.")
@click.option("--out", default="out/validate", show_default=True, metavar="DIR",
              help="Where to write validate.csv, summary.json, scatter.png and phases.png.")
@click.option("--max-error", type=float, default=None, metavar="PCT", callback=_finite(0),
              help="Exit 1 if the mean absolute error of the steady step time exceeds PCT %.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--train", "train", multiple=True, metavar="CASE",
              help="Case names the software profile's fitted terms were fitted on (repeatable; "
                   "default: its train_cases); the summary shows train and held-out separately.")
@click.option("--software", default="deepspeed-0.19.8", show_default=True,
              help="Software profile (profiles/software/) with the fitted host-side terms.")
@click.option("--loco", is_flag=True,
              help="Leave-one-class-out instead: per class of runs (stage, mechanism, model, "
                   "machine), refit the software profile without the class and predict the "
                   "class's runs; prints per class n, steady step MAPE and max, and phase MAPE. "
                   "Writes loco.json to --out; --max-error applies to the pooled held-out MAPE.")
@click.option("--class", "classes", multiple=True, metavar="CLASS",
              help="With --loco: hold out only this class (repeatable), e.g. stage3-cpu, "
                   "multi-rank, nvme-no-pipeline, model:llama-3b, machine:h200x2-e. Default: "
                   "every class with a finished run.")
@click.option("--pool", type=click.Choice(["train", "all"]), default="train", show_default=True,
              help="With --loco: the runs the refits draw from: the software profile's "
                   "train_cases (or --train), or every finished run under CASES.")
@click.option("--strict", is_flag=True,
              help="With --loco: also predict each run by a fit on the pool runs that share none "
                   "of its classes.")
def validate(cases, hardware, out, max_error, as_json, train, software, loco, classes, pool,
             strict):
    """Simulate each measured run's exact config and compare with what was measured.

    CASES are measurement directories (or folders holding them; default validate/cases). Prints
    predicted vs measured per run and metric (steady step time, step 1, forward/backward/optimizer,
    GPU peak allocated, host RSS, swap bytes, OOM), the mean absolute percentage error and the
    max per metric; writes CSV, JSON and PNG figures to --out."""
    import pandas as pd

    from tierlab.profiles.load import load_software
    from tierlab.runner.measurement import load_measurement
    from tierlab.validate.compare import (case_key, compare_measurement, find_measurements,
                                          summarize, summarize_split, with_profiles)
    from tierlab.validate.report import phase_bars_figure, scatter_figure

    writable(out, "--out", folder=True)
    sw = load_software(software)
    default = Path(__file__).resolve().parent / "validate" / "cases"
    if loco or classes or strict or pool != "train":
        return _validate_loco(cases or [default], sw, hardware, out, max_error, as_json,
                              pool if pool == "all" or not train else list(train),
                              classes, strict, loco)
    rows, unfinished = [], []
    for d, hw in with_profiles(find_measurements(cases or [default]), hardware, "h200-host"):
        case_rows = compare_measurement(hw, load_measurement(d), name=case_key(d), software=sw)
        rows += case_rows
        if not case_rows:
            unfinished.append(case_key(d))
    if unfinished:
        click.echo(f"warning: {len(unfinished)} run(s) neither finished nor ran out of memory "
                   f"(killed, interrupted or failed otherwise); left out: {', '.join(unfinished)}",
                   err=True)
    summary = summarize(rows)
    split = summarize_split(rows, train or sw.train_cases)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame([r.to_dict() for r in rows])
    _write_text_atomic(out_dir / "validate.csv", df.to_csv(index=False))
    write_json(out_dir / "summary.json", summary)
    write_json(out_dir / "split.json", split)
    for name, fig in (("scatter.png", scatter_figure(rows)), ("phases.png", phase_bars_figure(rows))):
        from tierlab.safeio import atomic_target

        with atomic_target(out_dir / name, "--out") as tmp:
            fig.savefig(tmp, dpi=120, format="png")
    if as_json:
        click.echo(json.dumps({**summary, "split": split}, indent=2))
    else:
        click.echo(f"{'case':44s} {'metric':26s} {'predicted':>12s} {'measured':>12s} {'error':>8s}")
        for r in rows:
            click.echo(f"{r.case:44s} {r.metric:26s} {_fmt_metric(r.metric, r.predicted):>12s} "
                       f"{_fmt_metric(r.metric, r.measured):>12s} {_pct(r.error_pct):>8s}")
        click.echo("")
        for metric, s in summary.items():
            if metric == "oom":
                click.echo(f"{'oom':26s} {s['n']} runs, mismatches: {', '.join(s['mismatches']) or 'none'}")
            else:
                click.echo(f"{metric:26s} n={s['n']:<3d} MAPE {s['mape_pct']:5.1f}%  max "
                           f"{s['max_pct']:5.1f}% ({s['worst_case']})")
        click.echo(f"\ntrain ({len(set(train or sw.train_cases))} cases, where {sw.name}'s fitted "
                   f"terms were fitted) vs held-out:")
        for metric in summary:
            if metric == "oom":
                continue
            t, h = split["train"].get(metric), split["held_out"].get(metric)
            fmt = lambda x: f"n={x['n']:<3d} MAPE {x['mape_pct']:5.1f}% max {x['max_pct']:5.1f}%" \
                if x else "-"
            click.echo(f"{metric:26s} train {fmt(t):34s} held-out {fmt(h)}")
        click.echo(f"wrote {out_dir}/validate.csv, summary.json, split.json, scatter.png, "
                   "phases.png")
    step = summary.get("step_time_s")
    if max_error is not None and step and step["mape_pct"] > max_error:
        click.echo(f"error: steady step time MAPE {step['mape_pct']:.1f}% > --max-error "
                   f"{max_error}%", err=True)
        sys.exit(1)


def _validate_loco(cases, sw, hardware, out, max_error, as_json, pool, classes, strict, loco):
    """`validate --loco`: the leave-one-class-out table (validate/loco.py)."""
    from tierlab.validate.loco import format_table, loco as run_loco

    if not loco:
        raise ConfigError("--class, --pool and --strict need --loco")
    report = run_loco(cases, sw, pool=pool, classes=list(classes) or None, hardware=hardware,
                      strict=strict)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "loco.json", report.to_dict())
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else format_table(report))
    step = report.overall.get("step_time_s")
    if max_error is not None and step and step["mape_pct"] > max_error:
        click.echo(f"error: held-out classes' steady step time MAPE {step['mape_pct']:.1f}% > "
                   f"--max-error {max_error}%", err=True)
        sys.exit(1)

# ----------------------------------------------------------------------------------------------
# plot / sweep / plan

PLOT_KINDS = ("bottleneck", "timeline", "memory", "sweep")


def _builtin(ctx, kw: dict, compare: tuple[str, ...]) -> list[str]:
    """The configs to plot: --ds-config + --compare; with neither --model/--hardware/--ds-config
    nor --compare, the built-in scenario (the four presets, micro-batch 4, seq 1024)."""
    from click.core import ParameterSource

    given = [p for p in ("model", "hardware", "ds_config")
             if ctx.get_parameter_source(p) != ParameterSource.DEFAULT]
    if given or compare:
        return [kw["ds_config"], *compare]
    kw["micro_batch"] = kw["micro_batch"] or 4
    kw["seq"] = kw["seq"] or 1024
    return list(BUILTIN_PRESETS)


def _read_measurement(path: str):
    """A measured run for the timeline: Measurement JSON, JSONL (records or samples), a CSV of
    samples, or a run folder holding one of those."""
    import pandas as pd

    from tierlab.profiles.load import read_data

    p = Path(path)
    run_dir = p if p.is_dir() else p.parent if p.name == "measurement.json" else None
    if run_dir is not None and (run_dir / "measurement.json").is_file():
        from tierlab.runner.measurement import load_measurement     # the runner's own reader

        try:
            return load_measurement(run_dir)
        except ConfigError:
            raise
        except (OSError, ValueError, TypeError) as e:
            raise ConfigError(f"{run_dir}: cannot read the measurement: {e}") from None
    if p.is_dir():
        found = sorted([*p.glob("*sample*.*"), *p.glob("measurement*.json"), *p.glob("*.json")])
        if not found:
            raise ConfigError(f"{p}: no measurement or samples file in this folder")
        p = found[0]
    if not p.is_file():
        raise ConfigError(f"{p}: no such file")
    if p.suffix == ".csv":
        import io

        from tierlab.safeio import read_text

        try:
            return pd.read_csv(io.StringIO(read_text(p)))
        except (ValueError, pd.errors.ParserError) as e:
            raise ConfigError(f"{p}: malformed CSV: {' '.join(str(e).split())}") from None
    if p.suffix == ".jsonl":
        from tierlab.safeio import read_jsonl

        records, _ = read_jsonl(p)      # a line cut by a kill is skipped
        merged = [r for r in records if isinstance(r, dict) and "samples" in r]
        return merged[-1] if merged else [r for r in records if isinstance(r, dict)]
    return read_data(p)


def _save_figure(fig, out: str) -> None:
    from tierlab.validate.plots import save

    for path in save(fig, out):
        click.echo(f"wrote {path}")


@main.command()
@click.argument("kind", type=click.Choice(PLOT_KINDS))
@scenario_options
@click.option("--compare", multiple=True, metavar="CONFIG",
              help="bottleneck/memory: another ds_config preset or path drawn side by side "
                   "(repeatable). With no --model/--hardware/--ds-config/--compare: the four "
                   "built-in presets at micro-batch 4, seq 1024.")
@click.option("--gpu-mem-cap", default=None, metavar="BYTES",
              help="Cap the GPU's memory, e.g. 8GiB (what-if for a smaller card).")
@click.option("--measurement", default=None, metavar="PATH",
              help="timeline: a measured run (Measurement JSON, JSONL, a samples CSV, or its "
                   "folder); its sampled GPU utilisation and PCIe/disk throughput are drawn "
                   "under the simulated lanes.")
@click.option("--results", default=None, metavar="FILE",
              help="sweep: a results file (.csv/.parquet) written by `tierlab sweep --out`.")
@click.option("--x", "x_key", default=None, metavar="KEY",
              help="sweep: the swept key on the x axis (default: the first swept key).")
@click.option("--by", multiple=True, metavar="KEY",
              help="sweep: one line per value of this column (repeatable; default: the other "
                   "swept keys).")
@click.option("--title", default=None, help="Figure title (default: a descriptive one).")
@click.option("--out", "-o", default=None, metavar="FILE",
              help="Image file: .png, .svg or .pdf; without a suffix both .png and .svg "
                   "[default: tierlab-KIND.png].")
@click.pass_context
def plot(ctx, kind, compare, gpu_mem_cap, measurement, results, x_key, by, title, out, **kw):
    """Plot where the time and bytes go: bottleneck, timeline, memory or sweep.

    \b
    bottleneck  stacked exposed time per resource per config, step time and roofline marked
    timeline    Gantt lanes per resource for one simulated step (+ measured samples)
    memory      bytes per tier (GPU, pinned/pageable host, NVMe) against capacity
    sweep       step time and tokens/s along a swept key (needs --results)"""
    from tierlab.validate import plots
    from tierlab.validate.plot_style import image_targets

    out = writable(f"tierlab-{kind}.png" if out is None else out, "--out")
    for target in image_targets(out):
        writable(target, "--out")
    if kind == "sweep":
        if not results:
            raise ConfigError("plot sweep needs --results FILE (written by `tierlab sweep --out`)")
        from tierlab.sim.sweep import read_results

        df = read_results(results)
        if df.empty:
            raise ConfigError(f"{results}: no such file or no rows")
        _save_figure(_sweep_figure(df, x_key, by, title), out)
        return
    configs = _builtin(ctx, kw, compare) if kind != "timeline" else [kw["ds_config"]]
    sims = []
    for cfg in configs:
        sc, r = _simulate_one({**kw, "ds_config": cfg}, gpu_mem_cap, strict=False)
        echo_warnings(sc.warnings)
        sims.append((Path(cfg).stem, r))
    if kind == "bottleneck":
        fig = plots.bottleneck(sims, title=title)
    elif kind == "memory":
        fig = plots.memory(sims, title=title)
    else:
        meas = _read_measurement(measurement) if measurement else None
        fig = plots.timeline(sims[0][1], meas, title=title)
    _save_figure(fig, out)


def _sweep_figure(df, x_key, by, title):
    from tierlab.validate import plots

    keys = plots.vary_columns(df)
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
        return plots.sweep(df, x, by=list(by) or None, title=title)
    except ValueError as e:
        raise ConfigError(str(e)) from None


@main.command()
@scenario_options
@click.option("--vary", "varies", multiple=True, metavar="KEY=V1,V2,...",
              help="A swept key and its values (repeatable; the grid is their product). Keys: "
                   "ds_config dotted keys (zero_optimization.sub_group_size), micro_batch, "
                   "grad_accum, seq, gpus, nodes, config, model, hardware, precision, "
                   "checkpointing, hardware keys (nvme.drives, nvme.read_bandwidth=3GB/s,...) "
                   "and model.* keys; see --list-keys. Ranges: 1..8, 1..64:x2.")
@click.option("--out", "-o", default=None, metavar="FILE",
              help="Results file, .csv or .parquet (Parquet needs pyarrow), written atomically; "
                   "rows already in it are skipped (resume). Without it the rows are printed "
                   "as CSV.")
@click.option("--jobs", "-j", type=int, default=None,
              help="Worker processes (default: every core this process may use).")
@click.option("--memory-only", is_flag=True,
              help="Only plan memory per point (fits, bytes per tier); no simulation.")
@click.option("--strict", is_flag=True,
              help="A point that does not fit memory is an error row instead of a simulated one.")
@click.option("--plot", "plot_path", default=None, metavar="FILE",
              help="Also plot step time and tokens/s along --x (PNG/SVG).")
@click.option("--x", "x_key", default=None, metavar="KEY",
              help="Key on the plot's x axis (default: the first --vary key).")
@click.option("--by", multiple=True, metavar="KEY",
              help="One plot line per value of this column (default: the other --vary keys).")
@click.option("--list-keys", is_flag=True, help="List every key --vary accepts and exit.")
@click.option("--no-progress", is_flag=True, help="No progress bar on stderr.")
@click.option("--quiet", "-q", is_flag=True, help="Do not print DeepSpeed-quirk warnings.")
@click.pass_context
def sweep(ctx, varies, out, jobs, memory_only, strict, plot_path, x_key, by, list_keys,
          no_progress, quiet, **kw):
    """What-if grid over hardware, strategy, batch and model keys; one row per point.

    Invalid combinations are rows with the reason in `error`. Example:
    tierlab sweep -c zero3-nvme --micro-batch 4 --seq 1024 --vary nvme.drives=1,2,4,8
    --vary zero_optimization.sub_group_size=1e8,1e9 --out drives.csv --plot drives.png"""
    from tqdm import tqdm

    from tierlab.sim.sweep import Base, default_simulator, parse_vary, resolve, run_sweep
    from tierlab.sim.sweep_keys import all_keys

    if list_keys:
        for key, what in all_keys().items():
            click.echo(f"{key:52s} {what}")
        return
    axes = [parse_vary(v) for v in varies]
    if not axes:
        raise ConfigError("empty grid: give at least one --vary KEY=V1,V2,...")
    writable(out, "--out")
    if plot_path:
        from tierlab.validate.plot_style import image_targets

        for target in image_targets(writable(plot_path, "--plot")):
            writable(target, "--plot")
    base = Base(model=kw["model"], hardware=kw["hardware"], ds_config=kw["ds_config"],
                overrides=tuple(kw["overrides"]), micro_batch=kw["micro_batch"],
                grad_accum=kw["grad_accum"], seq=kw["seq"], gpus=kw["gpus"], nodes=kw["nodes"],
                precision=kw["precision"], checkpointing=kw["checkpointing"])
    try:
        echo_warnings(resolve(base).warnings, quiet)
    except ValueError as e:          # the base itself is broken: say so once
        raise ConfigError(str(e)) from None
    simulator = None if memory_only else default_simulator()
    bars = []

    def start(todo, skipped):
        bars.append(tqdm(total=todo, unit="config", file=sys.stderr, disable=no_progress,
                         dynamic_ncols=True, desc="sweep"))

    try:
        with signals_raise():
            outcome = run_sweep(base, axes, simulator=simulator, strict=strict, jobs=jobs,
                                out=out, on_start=start,
                                on_rows=lambda rows: bars[0].update(len(rows)))
    except (KeyboardInterrupt, Interrupted) as e:
        for bar in bars:
            bar.close()
        signum = getattr(e, "signum", signal.SIGINT)
        kept = f"the rows done are in {out}; run the same command to resume" if out else \
            "no --out, so no rows were kept"
        click.echo(f"interrupted ({signal.Signals(signum).name}): {kept}", err=True)
        ctx.exit(128 + signum)
    finally:
        for bar in bars:
            bar.close()
    if outcome.torn:
        click.echo(f"warning: {out}: {outcome.torn} torn row(s) ignored and recomputed", err=True)
    df = outcome.frame
    if out is None:
        click.echo(df.to_csv(index=False), nl=False)
    click.echo(_sweep_summary(outcome, out), err=out is None)
    if plot_path and not memory_only:
        _save_figure(_sweep_figure(df, x_key or axes[0].key, by, None), plot_path)
    elif plot_path:
        raise ConfigError("--plot needs simulated rows (drop --memory-only)")


def _num(value) -> str:
    """1000000000 -> 1e9; other values as they are."""
    import numbers

    if isinstance(value, numbers.Real) and not isinstance(value, bool) and abs(value) >= 1e5:
        return f"{value:.4g}".replace("e+0", "e").replace("e+", "e")
    return str(value)


def _sweep_summary(outcome, out) -> str:
    df = outcome.frame
    where = f" -> {out}" if out else ""
    text = (f"{len(df)} rows{where}: {outcome.computed} computed, {outcome.skipped} already "
            f"there, {outcome.errors} with an error")
    if "step_time_s" in df.columns and "fits" in df.columns:
        ok = df[(df["error"] == "") & (df["fits"].astype(str).str.lower() == "true")]
        if not ok.empty:
            best = ok.loc[ok["step_time_s"].idxmin()]
            keys = [c for c in df.columns[1:df.columns.get_loc("config_name")]]
            point = ", ".join(f"{k}={_num(best[k])}" for k in keys)
            text += (f"\nfastest that fits: {point}: {best['step_time_s']:.3f} s/step, "
                     f"{best['tokens_per_s']:,.0f} tokens/s, {best['bottleneck']} binds")
    return text


@main.command()
@click.option("--model", "-m", default=DEFAULT_MODEL, show_default=True,
              help="Model profile name, a profile YAML, or a Hugging Face config.json path.")
@click.option("--hardware", "-H", default=DEFAULT_HARDWARE, show_default=True,
              help="System profile name or YAML path.")
@click.option("--gpus", type=int, default=None, help="GPUs per node (default: the profile's).")
@click.option("--nodes", type=int, default=None, help="Nodes (default: the profile's).")
@click.option("--seq", type=int, default=None,
              help="Sequence length in tokens (default: the model's context length).")
@click.option("--global-batch", type=int, default=None,
              help="Sequences per optimizer step over all GPUs; the planner trades micro-batch "
                   "against gradient accumulation at this size.")
@click.option("--grad-accum", type=int, default=None,
              help="Gradient accumulation steps when --global-batch is not given (default 1).")
@click.option("--micro-batch", type=int, default=None,
              help="Fix the micro-batch (default: searched over 1, 2, 4, ... --max-micro-batch).")
@click.option("--max-micro-batch", type=int, default=64, show_default=True,
              help="Largest micro-batch the search tries.")
@click.option("--checkpointing/--no-checkpointing", default=None,
              help="Fix activation checkpointing (default: try both).")
@click.option("--precision", type=click.Choice(["fp16", "bf16", "fp32"]), default=None,
              help="Compute dtype (default: bf16 where the GPU has it, else fp16).")
@click.option("--min-tokens-per-s", type=float, default=None,
              help="Reject configurations slower than this (tokens/s of the whole job).")
@click.option("--max-gpu-mem", default=None, metavar="BYTES",
              help="Use at most this much memory per GPU, e.g. 70GB (leave headroom).")
@click.option("--nvme-path", default="/local_nvme", show_default=True,
              help="nvme_path written into the ds_config for NVMe offload.")
@click.option("--out", "-o", default=None, metavar="FILE",
              help="Write the winner's ds_config.json here (atomically), ready for deepspeed.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the whole plan (ranked alternatives, notes, ds_config) as JSON.")
@click.option("--jobs", "-j", type=int, default=1, show_default=True,
              help="Worker processes for the simulations.")
@click.pass_context
def plan(ctx, model, hardware, gpus, nodes, seq, global_batch, grad_accum, micro_batch,
         max_micro_batch, checkpointing, precision, min_tokens_per_s, max_gpu_mem, nvme_path,
         out, as_json, jobs):
    """The fastest DeepSpeed configuration that fits every tier, and why the others lost.

    Searches ZeRO stage, CPU/NVMe offload of parameters and optimizer, micro-batch, gradient
    accumulation, checkpointing, sub_group_size, swap buffers and aio settings. Exits 1 when
    nothing fits (or nothing reaches --min-tokens-per-s)."""
    from tierlab.profiles.load import load_hardware, load_model
    from tierlab.sim.plan import format_plan, plan as run_plan

    for flag, value in (("--micro-batch", micro_batch), ("--grad-accum", grad_accum),
                        ("--global-batch", global_batch), ("--max-micro-batch", max_micro_batch),
                        ("--jobs", jobs)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be >= 1, got {value}")
    if global_batch is not None and grad_accum is not None:
        raise ConfigError("give --global-batch or --grad-accum, not both")
    writable(out, "--out")
    hw = load_hardware(hardware, gpus_per_node=gpus, nodes=nodes)
    mdl = load_model(model, seq_len=seq)
    result = run_plan(hw, mdl, global_batch=global_batch, grad_accum=grad_accum,
                      micro_batch=micro_batch, checkpointing=checkpointing, precision=precision,
                      min_tokens_per_s=min_tokens_per_s,
                      max_gpu_mem_bytes=parse_bytes(max_gpu_mem, "--max-gpu-mem")
                      if max_gpu_mem else None, nvme_path=nvme_path,
                      max_micro_batch=max_micro_batch, jobs=jobs)
    if out and result.ds_config is not None:
        write_json(out, result.ds_config)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, default=str))
    else:
        click.echo(format_plan(result))
        if out and result.ds_config is not None:
            click.echo(f"wrote {out} (deepspeed --num_gpus {hw.gpus_per_node} train.py "
                       f"--deepspeed {out})")
    if result.best is None:
        ctx.exit(1)


if __name__ == "__main__":
    main()
