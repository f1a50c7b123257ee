"""Physical bounds of every number tierlab reads (issue 34), in one table.

A number from a file or a flag is checked for type (a bool or a string is not a number), for
finiteness (NaN, inf, 1e400) and for a physical bound before anything is built from it, so a
typo (`hidden_size: 1e11`, `--grad-accum 1000000000`) is one line naming the file, key and
value instead of an hour of simulation or a traceback. The bounds are generous: one to two
orders of magnitude beyond the largest published model, machine or config, never a judgement
of what is sensible.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from tierlab.errors import ConfigError


@dataclass(frozen=True)
class Bound:
    low: float
    """Smallest value allowed (inclusive)."""
    high: float
    """Largest value allowed (inclusive)."""
    integer: bool = True
    """A whole number (a float such as 1e8 is fine when it is whole)."""
    why: str = ""
    """What the upper bound is measured against, for the error line."""


_LAYERS = Bound(1, 10_000, why="the largest published models have < 200 layers")
_WIDTH = Bound(1, 1_000_000, why="the widest published models are < 60k")
_TOKENS = Bound(1, 100_000_000, why="100M tokens")
_BYTES_KEY = Bound(0, 1e15, why="1 PB")
_PARAMS_KEY = Bound(0, 1e15, why="1e15 parameters")

MODEL = {
    "n_layers": _LAYERS, "hidden": _WIDTH, "ffn": Bound(1, 10_000_000, why="10M"),
    "n_heads": Bound(1, 100_000, why="100k heads"), "n_kv_heads": Bound(1, 100_000, why="100k"),
    "vocab": Bound(1, 100_000_000, why="100M tokens"), "seq_len": _TOKENS,
    "max_seq_len": Bound(0, 100_000_000, why="100M tokens"),
    "attn_head_dim": Bound(0, 1_000_000, why="1M"),
    "n_experts": Bound(0, 100_000, why="100k experts"),
    "experts_per_token": Bound(0, 100_000, why="100k experts"),
}
"""Model fields (profiles/schema.Model) with a bound; a field not listed is not a count."""
LOOP_PASSES = Bound(1, 1_000, why="looped models run 2-16 passes of their blocks, and the "
                                   "simulator steps every block run")
"""Runs of a looped section of blocks (Model.loops: Loop.passes; a config.json's
n_recurrent_loops, loop_num_passes, H_cycles, L_cycles): at least one."""
BLOCK_RUNS = Bound(1, 100_000, why="10x the layer bound: the simulator steps every block run")
"""Block runs of one forward, every loop's passes multiplied out (Model.block_runs)."""
ATTENTION_WINDOW = Bound(1, 100_000_000, why="100M tokens")
"""A layer's attention window or chunk in tokens (Model.attention_windows; a config.json's
`sliding_window`, `attention_chunk_size`): like a sequence length, at least one token."""
RANDOM_BLOCKS = Bound(0, 100_000, why="BigBird's published configs pick 3 random blocks")
"""Random key blocks a BigBird query block attends (a config.json's num_random_blocks,
profiles/hf_bigbird.py): none or more."""
HASH_ROUNDS = Bound(1, 1_000, why="the Reformer paper runs 1-8 hash rounds")
"""Reformer's LSH hash rounds (a config.json's num_hashes, profiles/hf_reformer.py): at least
one."""
NEIGHBOUR_CHUNKS = Bound(0, 100_000, why="Reformer's published configs attend 0-1 neighbours")
"""Chunks before or after its own that a Reformer chunk attends (local_num_chunks_before ...,
profiles/hf_reformer.py): none or more."""

FLAGS = {
    "micro_batch": Bound(1, 1_000_000, why="1M sequences per GPU"),
    "grad_accum": Bound(1, 10_000, why="the simulator steps every micro-step: 10,000 of them "
                                       "take seconds, 1e9 would take days"),
    "seq": _TOKENS,
    "gpus": Bound(1, 1024, why="1024 GPUs in one node"),
    "nodes": Bound(1, 1_000_000, why="1M nodes"),
    "global_batch": Bound(1, 100_000_000, why="100M sequences per step"),
}
"""Command-line counts (--micro-batch, --grad-accum, ...)."""

DS_CONFIG = {
    "train_micro_batch_size_per_gpu": FLAGS["micro_batch"],
    "gradient_accumulation_steps": FLAGS["grad_accum"],
    "train_batch_size": Bound(1, 1e12, why="1e12 sequences"),
    "gradient_clipping": Bound(0, 1e12, integer=False, why="1e12"),
    "optimizer.params.lr": Bound(0, 1e6, integer=False, why="1e6"),
    "optimizer.params.eps": Bound(0, 1, integer=False, why="1"),
    "optimizer.params.weight_decay": Bound(0, 1e6, integer=False, why="1e6"),
    "zero_optimization.stage": Bound(0, 3, why="ZeRO has stages 0-3"),
    "zero_optimization.sub_group_size": _PARAMS_KEY,
    "zero_optimization.reduce_bucket_size": _PARAMS_KEY,
    "zero_optimization.allgather_bucket_size": _PARAMS_KEY,
    "zero_optimization.stage3_prefetch_bucket_size": _PARAMS_KEY,
    "zero_optimization.prefetch_bucket_size": _PARAMS_KEY,
    "zero_optimization.stage3_param_persistence_threshold": _PARAMS_KEY,
    "zero_optimization.param_persistence_threshold": _PARAMS_KEY,
    "zero_optimization.stage3_max_live_parameters": _PARAMS_KEY,
    "zero_optimization.max_live_parameters": _PARAMS_KEY,
    "zero_optimization.stage3_max_reuse_distance": _PARAMS_KEY,
    "zero_optimization.max_reuse_distance": _PARAMS_KEY,
    "zero_optimization.offload_param.buffer_size": _PARAMS_KEY,
    "zero_optimization.offload_param.buffer_count": Bound(0, 100_000, why="100k buffers"),
    "zero_optimization.offload_param.max_in_cpu": _PARAMS_KEY,
    "zero_optimization.offload_optimizer.buffer_count": Bound(0, 100_000, why="100k buffers"),
    "zero_optimization.offload_optimizer.ratio": Bound(0, 1, integer=False, why="1"),
    "aio.block_size": Bound(1, 1 << 34, why="16 GiB per I/O"),
    "aio.queue_depth": Bound(1, 1 << 20, why="1M requests in flight"),
    "aio.intra_op_parallelism": Bound(1, 4096, why="4096 threads"),
    "aio.thread_count": Bound(1, 4096, why="4096 threads"),
}
"""ds_config keys (dotted) with a bound; "auto" is left to the config reader."""

QUANTITIES = {
    "bytes": Bound(-math.inf, 1e18, integer=False, why="1 EB"),
    "bytes/s": Bound(-math.inf, 1e16, integer=False, why="10 PB/s"),
    "flop/s": Bound(-math.inf, 1e19, integer=False, why="10 EFLOP/s"),
    "params/s": Bound(-math.inf, 1e15, integer=False, why="1e15 params/s"),
    "seconds": Bound(-math.inf, 1e6, integer=False, why="11 days"),
    "count": Bound(-math.inf, 1e9, integer=False, why="1e9"),
}
"""A profile quantity by dimension (profiles/load.py): finite and below a physical ceiling; its
sign is the schema's to judge (`capacity_bytes must be > 0`), and a rate below RATE_FLOOR is a
typo (`1e-300 GB/s`), not a slow machine."""
RATE_FLOOR = {"bytes/s": 1e3, "flop/s": 1e3, "params/s": 1.0}
"""Smallest non-zero rate (1 kB/s, 1 kFLOP/s, 1 param/s): below it a step takes centuries."""


def check(value: Any, bound: Bound, where: str) -> Any:
    """`value` unchanged if it is a finite number within `bound`, else one ConfigError line
    naming `where` (the file and key, or the flag) and the value."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: {value!r} is not a finite number")
    if bound.integer and value != int(value):
        raise ConfigError(f"{where}: expected a whole number, got {value!r}")
    if value < bound.low:
        raise ConfigError(f"{where}: must be >= {bound.low:g}, got {value!r}")
    if value > bound.high:
        why = f" ({bound.why})" if bound.why else ""
        raise ConfigError(f"{where}: {shown(value)} is beyond the bound {bound.high:g}{why}")
    return value


def shown(value: float) -> str:
    """A number for an error line: '1e+19', or its digit count for an int no float holds."""
    try:
        return f"{value:.4g}"
    except OverflowError:
        return f"an integer of about {int(math.log10(abs(value)))} digits"


def check_flag(name: str, value: Any) -> Any:
    """A command-line count (`--grad-accum` ...); None passes."""
    if value is None:
        return value
    return check(value, FLAGS[name], f"--{name.replace('_', '-')}")


def check_quantity(value: float, dimension: str, where: str) -> float:
    """A profile quantity after its unit was read (bytes, bytes/s, ...)."""
    bound = QUANTITIES.get(dimension)
    if bound is None:
        return value
    check(value, bound, where)
    floor = RATE_FLOOR.get(dimension)
    if floor is not None and 0 < value < floor:
        raise ConfigError(f"{where}: {value:.4g} {dimension} is below {floor:g} {dimension} "
                          "(a unit typo?)")
    return value


def check_model(model: Any, where: str) -> Any:
    """Every bounded field of a Model (or of a mapping of its fields)."""
    get = model.get if isinstance(model, Mapping) else (lambda k: getattr(model, k, None))
    for key, bound in MODEL.items():
        value = get(key)
        if value is not None:
            check(value, bound, f"{where}: {key}")
    moe = get("moe")        # the experts live in Model.moe (a mixture of experts), not the Model
    if moe is not None:
        mget = moe.get if isinstance(moe, Mapping) else (lambda k: getattr(moe, k, None))
        for key, bound in (("n_experts", MODEL["n_experts"]),
                           ("experts_per_token", MODEL["experts_per_token"]),
                           ("expert_ffn", MODEL["ffn"])):
            if (value := mget(key)) is not None:
                check(value, bound, f"{where}: moe.{key}")
    return model


def dotted(cfg: Mapping, key: str, where: str = "ds_config") -> Any:
    """cfg['a']['b'] for 'a.b'; None where a block is missing or null; a block that holds
    something other than a mapping (`optimizer.params: "x"`) is a ConfigError."""
    node: Any = cfg
    parts = key.split(".")
    for i, part in enumerate(parts):
        if node is None:
            return None
        if not isinstance(node, Mapping):
            raise ConfigError(f"{where}: {'.'.join(parts[:i])}: expected a mapping (a JSON "
                              f"object), got {node!r}")
        node = node.get(part)
    return node


def check_ds_config(cfg: Mapping, where: str) -> Mapping:
    """Every bounded ds_config key that holds a value other than "auto" (or null); every key
    out of bounds in one ConfigError line (`FILE: key: why; key: why`), not the first only (an
    unfilled template, `"train_batch_size": GB_SIZE, "train_micro_batch_size_per_gpu": MB_SIZE`
    in hjson, has both wrong)."""
    problems = []
    for key, bound in DS_CONFIG.items():
        value = dotted(cfg, key, where)
        if value is not None and value != "auto":
            problems += _problem(check, value, bound, key)
    betas = dotted(cfg, "optimizer.params.betas", where)
    if betas is not None and betas != "auto":      # "auto": the HF Trainer fills it
        if not isinstance(betas, (list, tuple)) or len(betas) != 2:
            problems.append(f"optimizer.params.betas: expected [beta1, beta2], got {betas!r}")
        else:
            for i, beta in enumerate(betas):
                problems += _problem(check, beta, Bound(0, 1, integer=False, why="1"),
                                     f"optimizer.params.betas[{i}]")
    if problems:
        raise ConfigError(f"{where}: " + "; ".join(problems))
    return cfg


def _problem(fn, *args) -> list[str]:
    """[] where fn(*args) passes, else [its ConfigError's line]."""
    try:
        fn(*args)
    except ConfigError as e:
        return [str(e)]
    return []


PATH_MAX_BYTES = 4096
"""Linux's PATH_MAX (limits.h): the longest path a system call takes."""
NAME_MAX_BYTES = 255
"""Linux's NAME_MAX: the longest file name in a path (ext4, xfs)."""


def check_path_text(value: str | None, where: str) -> str | None:
    """A path given as text (a flag such as `--nvme-path`, written into a ds_config): not empty,
    no control character (a newline or NUL in a path is a paste error), within PATH_MAX and
    NAME_MAX; None passes. Whether it exists is the caller's to judge."""
    if value is None:
        return value
    if not value.strip():
        raise ConfigError(f"{where}: empty path")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ConfigError(f"{where}: {value[:40]!r} has a control character")
    if len(value.encode("utf-8", "surrogateescape")) > PATH_MAX_BYTES:
        raise ConfigError(f"{where}: a path of {len(value)} characters is beyond Linux's "
                          f"PATH_MAX ({PATH_MAX_BYTES} bytes)")
    long = next((p for p in value.split("/") if len(p.encode("utf-8", "surrogateescape"))
                 > NAME_MAX_BYTES), None)
    if long is not None:
        raise ConfigError(f"{where}: a name of {len(long)} characters is beyond Linux's "
                          f"NAME_MAX ({NAME_MAX_BYTES} bytes)")
    return value


def check_counts(counts: Mapping[str, Any], unbounded: tuple[str, ...] = ()) -> None:
    """Command-line counts by flag (`{'--micro-batch': 4, ...}`): each given one >= 1 and within
    its FLAGS bound (those in `unbounded` only >= 1)."""
    for flag, value in counts.items():
        if value is None:
            continue
        if value < 1:
            raise ConfigError(f"{flag} must be >= 1, got {value}")
        if flag not in unbounded:
            check_flag(flag[2:].replace("-", "_"), value)


RESULTS_HEADER_BYTES = 1 << 20
"""Longest header line of a sweep results CSV read back (plot, resume): 1 MiB. A sweep writes
a few hundred columns of < 64 characters (~20 kB); 1M columns would hang pandas for minutes."""
