"""tierlab's command line: the only module that prints, writes files or exits.

User errors (`ConfigError`) print one line `error: ...` and exit 2; never a traceback.
"""
from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from tierlab.errors import ConfigError

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
            click.echo(f"error: {e}", err=True)
            ctx.exit(2)


def parse_bytes(text: str, what: str) -> float:
    """'8GiB' / '8 GB' / '8e9' -> bytes."""
    from tierlab.profiles.load import parse_quantity

    text = str(text).strip()
    try:
        return float(text)
    except ValueError:
        pass
    if text[-1:].isalpha() and not text.endswith("B"):
        text += "B"
    return parse_quantity(text.replace("iB", "iB"), "bytes", what)


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


def write_json(path: str | Path, obj) -> None:
    """Write JSON atomically (temp file + rename): never a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    tmp.replace(path)


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
def profiles(kind):
    """List shipped profiles with a one-line summary each.

    KIND is one of hardware (systems), models, configs (DeepSpeed presets), gpus, cpus, nvme;
    all of hardware, models and configs when omitted."""
    from tierlab.profiles.load import list_profiles

    for k in [kind] if kind else ["hardware", "models", "configs"]:
        click.echo(f"{k}:")
        for name, summary in list_profiles(k):
            click.echo(f"  {name:28s} {summary}")


# ----------------------------------------------------------------------------------------------
# memory  (owner: foundation)
# @@MEMORY@@

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
# simulate  (owner: simulator)
# @@SIMULATE@@

# ----------------------------------------------------------------------------------------------
# run / compare / preflight  (owner: runner)
# @@RUNNER@@

# ----------------------------------------------------------------------------------------------
# calibrate / validate  (owner: calibration)
# @@CALIBRATE@@

# ----------------------------------------------------------------------------------------------
# plot / sweep / plan  (owner: plots)
# @@PLOTS@@


if __name__ == "__main__":
    main()
