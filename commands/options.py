"""The options several verbs share, declared once (ARCHITECTURE.md rule 12): the scenario
options, the runner's, and the built-in comparison of `simulate`/`plot`."""
from __future__ import annotations

import click

from tierlab.commands.common import given, options
from tierlab.scenario import DEFAULT_CONFIG, DEFAULT_HARDWARE, DEFAULT_MODEL
from tierlab.profiles.load import PRESET_LADDER
from tierlab.sim.headroom import headroom_of  # noqa: F401 (the verbs' --*-headroom -> Headroom)
from tierlab.sim.strategy import PRECISIONS

model_option = click.option(
    "--model", "-m", default=DEFAULT_MODEL, show_default=True,
    help="Model profile name (see `tierlab profiles models`), a Hugging Face id with a shipped "
         "profile (meta-llama/Llama-3.1-8B; profiles/hf_ids.yaml), a profile YAML, or a Hugging "
         "Face config.json path.")
hardware_option = click.option(
    "--hardware", "-H", default=DEFAULT_HARDWARE, show_default=True,
    help="System profile name (see `tierlab profiles hardware`) or YAML path.")
gpus_option = click.option("--gpus", type=int, default=None,
                           help="GPUs per node (default: the hardware profile's).")
nodes_option = click.option("--nodes", type=int, default=None,
                            help="Number of nodes (default: the hardware profile's).")
seq_option = click.option(
    "--seq", type=int, default=None,
    help="Sequence length in tokens (default: the model profile's, at most 4096; a note says "
         "when it was capped).")
scenario_options = options(
    model_option, hardware_option,
    click.option("--ds-config", "-c", default=DEFAULT_CONFIG, show_default=True,
                 help="DeepSpeed config: preset name (see `tierlab profiles configs`) or a "
                      "ds_config.json path."),
    click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                 help="Override a ds_config key, e.g. --set zero_optimization.stage=3 "
                      "(repeatable; values parsed as JSON, 1e8 allowed)."),
    gpus_option, nodes_option,
    click.option("--micro-batch", type=int, default=None,
                 help="train_micro_batch_size_per_gpu; overrides the config and fills \"auto\"."),
    click.option("--grad-accum", type=int, default=None,
                 help="gradient_accumulation_steps; overrides the config and fills \"auto\"."),
    seq_option,
    click.option("--checkpointing/--no-checkpointing", default=True, show_default=True,
                 help="Activation (gradient) checkpointing: recompute each block in backward."),
    click.option("--precision", type=click.Choice(PRECISIONS), default=None,
                 help="Fills fp16/bf16 \"auto\" (default: bf16 where the GPU has it, else fp16); "
                      "must agree with the config if it sets one."),
)
gpu_mem_cap_option = click.option(
    "--gpu-mem-cap", default=None, metavar="BYTES",
    help="Cap the GPU's memory, e.g. 8GiB: the what-if of a smaller card (`run` enforces it "
         "with torch.cuda.set_per_process_memory_fraction).")
headroom_options = options(
    click.option("--gpu-headroom", default=None, metavar="SHARE|BYTES",
                 help="GPU memory a 'fits' verdict keeps free, as a share (2%) or a size "
                      "(512MiB); default 0: the CUDA context and allocator slack are in the plan "
                      "already (docs/usage.md)."),
    click.option("--host-headroom", default=None, metavar="SHARE|BYTES",
                 help="Host RAM a 'fits' verdict keeps free for the OS, other processes and "
                      "page cache, as a share (10%) or a size (8GiB); default 5%."),
)
HEADROOM_KEYS = ("gpu_headroom", "host_headroom")
"""The headroom options' parameter names, as tierlab.scenario.resolve takes them."""


def headroom_given(kw: dict) -> dict:
    """The headroom options of a verb's keyword arguments, for tierlab.scenario.resolve."""
    return {k: kw.pop(k) for k in HEADROOM_KEYS if k in kw}
hw_option = click.option(
    "--hw", "hw", multiple=True, metavar="KEY=VALUE",
    help="Hardware what-if for this answer: set one number of the hardware profile, in the "
         "sweep's keys and units (`tierlab sweep --list-keys`, the hardware ones), e.g. "
         "--hw cpu.dram_bandwidth=80GB/s or --hw pcie.h2d_pinned=25GB/s; repeatable. The "
         "scenario line names what changed.")
json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print JSON instead of a table (sizes in GiB, keys ending _GiB).")
quiet_option = click.option("--quiet", "-q", is_flag=True,
                            help="Do not print warnings and notes about the config.")
swap_dir_option = click.option("--swap-dir", default=None, metavar="DIR",
                               help="Point every NVMe offload (nvme_path) at this directory.")
no_progress_option = click.option("--no-progress", is_flag=True,
                                  help="No progress bar on stderr (none either when stderr is "
                                       "not a terminal).")

runner_options = options(
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
    gpu_mem_cap_option,
    swap_dir_option,
    click.option("--seed", type=int, default=0, show_default=True,
                 help="Seed of the random init and the synthetic data."),
    click.option("--skip-preflight", is_flag=True,
                 help="Launch even if the pre-flight check finds errors."),
)
RUNNER_KEYS = ("model_path", "steps", "warmup_steps", "dataset", "tokenizer", "swap_dir", "seed")
"""The runner options' parameter names that tierlab.runner.variants.RunnerOptions takes (the
others: gpu_mem_cap, skip_preflight)."""

BUILTIN_PRESETS = PRESET_LADDER
"""The built-in comparison of `simulate`/`plot` with no --model/--hardware/--ds-config:
TinyLlama-1.1B on the RTX 3070 workstation, micro-batch 4, seq 1024, one row per preset."""


def builtin_configs(ctx, kw: dict, compare: tuple[str, ...] = ()) -> list[str]:
    """The configs to run: --ds-config + --compare; with neither --model/--hardware/--ds-config
    nor --compare, the built-in presets at micro-batch 4, seq 1024 (kw is filled in)."""
    if given(ctx, "model", "hardware", "ds_config") or compare:
        return [kw["ds_config"], *compare]
    kw["micro_batch"] = 4 if kw["micro_batch"] is None else kw["micro_batch"]   # 0 is refused
    kw["seq"] = 1024 if kw["seq"] is None else kw["seq"]                       # by the resolver
    return list(BUILTIN_PRESETS)
