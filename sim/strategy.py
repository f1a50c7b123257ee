"""Strategy: DeepSpeed's own meaning for every ds_config key it honours for ZeRO, offload, aio,
precision and batch — with DeepSpeed 0.19.8's defaults where a key is absent.

Defaults are read off deepspeed/runtime/zero/config.py, zero/offload_config.py and
swap_tensor/constants.py of 0.19.8 (note: `pin_memory` defaults to True there, although older
docs say False; `overlap_comm` defaults to True only for stage 3).
"""
from __future__ import annotations

import copy
import json
import logging
import math
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Mapping, get_args

from tierlab import bounds
from tierlab.errors import ConfigError
from tierlab.safeio import first_non_finite
from tierlab.dsconfig import autotuning as ds_autotuning
from tierlab.dsconfig import data_efficiency as ds_data_efficiency
from tierlab.dsconfig import optimizer as ds_optimizer
from tierlab.dsconfig import parallel as ds_parallel
from tierlab.dsconfig.read import HJSON_ONLY, TOP_LEVEL_KEYS
from tierlab.dsconfig.schema import ds_default

log = logging.getLogger(__name__)

OffloadDevice = Literal["none", "cpu", "nvme"]
Precision = Literal["fp16", "bf16", "fp32"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
"""The compute precisions, the one list (flags, --vary precision, the planner)."""


def check_precision(value: Any, where: str = "precision") -> None:
    """None (the config decides) or one of PRECISIONS; anything else is a ConfigError."""
    if value is not None and value not in PRECISIONS:
        raise ConfigError(f"{where} must be {', '.join(PRECISIONS[:-1])} or {PRECISIONS[-1]}, "
                          f"got {value!r}")
_DEVICES = ("none", "cpu", "nvme")


@dataclass(frozen=True, kw_only=True)
class OffloadParam:
    """`zero_optimization.offload_param` (honoured by stage 3 only)."""

    device: OffloadDevice = ds_default("DeepSpeedZeroOffloadParamConfig", "device")
    """Where the 16-bit parameters live between uses."""
    nvme_path: str | None = ds_default("DeepSpeedZeroOffloadParamConfig", "nvme_path")
    """Directory of the swap files (must accept O_DIRECT)."""
    pin_memory: bool = ds_default("DeepSpeedZeroOffloadParamConfig", "pin_memory")
    """Page-locked CPU buffers (fast DMA)."""
    buffer_count: int = ds_default("DeepSpeedZeroOffloadParamConfig", "buffer_count")
    """Pinned 16-bit swap buffers for NVMe parameters."""
    buffer_size: int = ds_default("DeepSpeedZeroOffloadParamConfig", "buffer_size")
    """Elements per swap buffer; every parameter partition must fit one buffer."""
    max_in_cpu: int = ds_default("DeepSpeedZeroOffloadParamConfig", "max_in_cpu")
    """Elements of NVMe-offloaded parameters kept in pinned CPU memory instead of on NVMe."""


@dataclass(frozen=True, kw_only=True)
class OffloadOptimizer:
    """`zero_optimization.offload_optimizer` (stages 1-3; NVMe needs stage 3)."""

    device: OffloadDevice = ds_default("DeepSpeedZeroOffloadOptimizerConfig", "device")
    """Where the fp32 master weights, Adam m and v (and fp32 grads) live; the step runs on CPU."""
    nvme_path: str | None = ds_default("DeepSpeedZeroOffloadOptimizerConfig", "nvme_path")
    pin_memory: bool = ds_default("DeepSpeedZeroOffloadOptimizerConfig", "pin_memory")
    buffer_count: int = ds_default("DeepSpeedZeroOffloadOptimizerConfig", "buffer_count")
    """Pinned swap buffers of the optimizer swapper (each = largest sub-group x 4 B)."""
    pipeline_read: bool = ds_default("DeepSpeedZeroOffloadOptimizerConfig", "pipeline_read")
    """Read sub-group i+1 while Adam runs on i (NVMe only)."""
    pipeline_write: bool = ds_default("DeepSpeedZeroOffloadOptimizerConfig", "pipeline_write")
    """Write sub-group i-1 while Adam runs on i (NVMe only)."""
    fast_init: bool = ds_default("DeepSpeedZeroOffloadOptimizerConfig", "fast_init")
    ratio: float = ds_default("DeepSpeedZeroOffloadOptimizerConfig", "ratio")
    """Fraction of the optimizer step done on CPU (partial offload, ZeRO-3 only)."""

    @property
    def pipeline(self) -> bool:
        return self.pipeline_read or self.pipeline_write


@dataclass(frozen=True, kw_only=True)
class Aio:
    """Top-level `aio` block (DeepSpeed ignores an `aio` block inside zero_optimization)."""

    block_size: int = ds_default("aio", "block_size")
    """Bytes per I/O request."""
    queue_depth: int = ds_default("aio", "queue_depth")
    """Requests in flight per I/O thread."""
    intra_op_parallelism: int = ds_default("aio", "intra_op_parallelism")
    """I/O threads splitting each read/write."""
    single_submit: bool = ds_default("aio", "single_submit")
    overlap_events: bool = ds_default("aio", "overlap_events")
    """Refill the queue on each completion; False = submit a batch and wait for all."""
    use_gds: bool = ds_default("aio", "use_gds")

    def __post_init__(self) -> None:
        for name in ("block_size", "queue_depth", "intra_op_parallelism"):
            if getattr(self, name) < 1:
                raise ConfigError(f"aio.{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True, kw_only=True)
class Zero:
    """`zero_optimization`."""

    stage: int = ds_default("DeepSpeedZeroConfig", "stage")
    offload_param: OffloadParam = field(default_factory=OffloadParam)
    offload_optimizer: OffloadOptimizer = field(default_factory=OffloadOptimizer)
    contiguous_gradients: bool = ds_default("DeepSpeedZeroConfig", "contiguous_gradients")
    reduce_scatter: bool = ds_default("DeepSpeedZeroConfig", "reduce_scatter")
    use_multi_rank_bucket_allreduce: bool = ds_default(
        "DeepSpeedZeroConfig", "use_multi_rank_bucket_allreduce")
    """ZeRO-1/2 reduce each gradient bucket with one all-reduce (stage_1_and_2.py `average_tensor`
    -> `allreduce_and_scatter`); False: each rank's slice is reduced to its owner
    (`allreduce_no_retain`, reduce-scatter volume)."""
    reduce_bucket_size: int = ds_default("DeepSpeedZeroConfig", "reduce_bucket_size")
    """Elements per gradient reduction bucket."""
    allgather_partitions: bool = ds_default("DeepSpeedZeroConfig", "allgather_partitions")
    allgather_bucket_size: int = ds_default("DeepSpeedZeroConfig", "allgather_bucket_size")
    overlap_comm: bool | None = ds_default("DeepSpeedZeroConfig", "overlap_comm")
    """None = DeepSpeed's dynamic default: True for stage 3, else False (see `overlap`)."""
    sub_group_size: int = ds_default("DeepSpeedZeroConfig", "sub_group_size")
    """Elements per optimizer sub-group (the unit of swap-in/Adam/swap-out)."""
    stage3_prefetch_bucket_size: int = ds_default(
        "DeepSpeedZeroConfig", "stage3_prefetch_bucket_size")
    stage3_param_persistence_threshold: int = ds_default(
        "DeepSpeedZeroConfig", "stage3_param_persistence_threshold")
    """Parameters with fewer elements stay on the GPU for good."""
    stage3_max_live_parameters: int = ds_default(
        "DeepSpeedZeroConfig", "stage3_max_live_parameters")
    stage3_max_reuse_distance: int = ds_default("DeepSpeedZeroConfig", "stage3_max_reuse_distance")
    stage3_gather_16bit_weights_on_model_save: bool = ds_default(
        "DeepSpeedZeroConfig", "stage3_gather_16bit_weights_on_model_save")
    round_robin_gradients: bool = ds_default("DeepSpeedZeroConfig", "round_robin_gradients")
    zero_hpz_partition_size: int = ds_default("DeepSpeedZeroConfig", "zero_hpz_partition_size")

    @property
    def overlap(self) -> bool:
        return self.stage == 3 if self.overlap_comm is None else self.overlap_comm


@dataclass(frozen=True, kw_only=True)
class Strategy:
    """Everything DeepSpeed does with a ds_config that matters for time and memory."""

    zero: Zero = field(default_factory=Zero)
    aio: Aio = field(default_factory=Aio)
    precision: Precision = "fp32"
    """Model/compute dtype: fp16 or bf16 mixed precision (fp32 master weights), or fp32."""
    train_batch_size: int = 1
    train_micro_batch_size_per_gpu: int = 1
    gradient_accumulation_steps: int = 1
    data_parallel_size: int = 1
    """Ranks holding one replica's ZeRO partitions (pure data parallelism: the world size)."""
    activation_checkpointing: bool = False
    """Recompute each block's activations in backward (HF gradient checkpointing)."""
    gradient_clipping: float = ds_default("top_level", "gradient_clipping")
    """runtime/constants.py GRADIENT_CLIPPING_DEFAULT (1.0) when the config does not set it."""
    raw: Mapping[str, Any] = field(default_factory=dict)
    """The ds_config as given (after overrides and "auto" resolution), for passthrough keys."""

    def __post_init__(self) -> None:
        for name in ("train_batch_size", "train_micro_batch_size_per_gpu",
                     "gradient_accumulation_steps", "data_parallel_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        expected = (self.train_micro_batch_size_per_gpu * self.gradient_accumulation_steps
                    * self.data_parallel_size)
        if self.train_batch_size != expected:
            raise ConfigError(
                f"train_batch_size {self.train_batch_size} != train_micro_batch_size_per_gpu "
                f"{self.train_micro_batch_size_per_gpu} x gradient_accumulation_steps "
                f"{self.gradient_accumulation_steps} x data parallel {self.data_parallel_size}")

    @property
    def bytes_per_param(self) -> int:
        """Bytes of one model (compute) parameter."""
        return 4 if self.precision == "fp32" else 2

    @property
    def param_device(self) -> OffloadDevice:
        """Where parameters really live (stage < 3 ignores offload_param)."""
        return self.zero.offload_param.device if self.zero.stage == 3 else "none"

    @property
    def optimizer_device(self) -> OffloadDevice:
        return self.zero.offload_optimizer.device if self.zero.stage >= 1 else "none"


# ----------------------------------------------------------------------------------------------
# ds_config.json -> Strategy

# which keys DeepSpeed reads, and how, is dsconfig/read.py's (DeepSpeed's own config models, or
# the vendored 0.19.8 table); below is only what tierlab models of the keys DeepSpeed accepts
PASSTHROUGH_TOP = frozenset(TOP_LEVEL_KEYS)
_ZERO_PASSTHROUGH = {
    "compute_grad_norm", "load_from_fp32_weights",
    "elastic_checkpoint", "stage3_model_persistence_threshold", "ignore_unused_parameters",
    "legacy_stage1", "parameter_alignment", "memory_efficient_linear", "log_trace_cache_warnings",
    "stage3_module_granularity_threshold", "override_module_apply", "enable_sanity_checks",
    "pipeline_loading_checkpoint", "leaf_module", "save_muon_momentum_buffer_in_memory",
}
"""zero_optimization keys DeepSpeed reads that do not change step time or memory here."""
_ZERO_UNMODELLED = {
    "zero_quantized_weights", "zero_quantized_nontrainable_weights", "zero_quantized_gradients",
    "stage3_use_all_reduce_for_fetch_params", "stage3_allgather_sequential", "zenflow",
}
"""zero_optimization keys that change time or memory in ways tierlab does not model: refused
by name when switched on."""
_OPTIMIZER_UNMODELLED = {"super_offload"}
_OPTIMIZER_PASSTHROUGH = {"cpuadam_cores_perc"}
ACTIVATION_CHECKPOINTING_UNMODELLED = ("partition_activations", "cpu_checkpointing",
                                       "contiguous_memory_optimization")
"""activation_checkpointing keys refused when true: DeepSpeed applies them only to models that
checkpoint through deepspeed.checkpointing (Megatron-DeepSpeed); neither transformers nor
accelerate call it, and tierlab models Hugging Face gradient checkpointing (--checkpointing)."""


@dataclass(frozen=True, kw_only=True)
class Flags:
    """Command-line values that resolve Hugging Face-style "auto" entries and override the file."""

    micro_batch: int | None = None
    grad_accum: int | None = None
    world_size: int = 1
    precision: Precision | None = None
    """--precision as the user gave it: fills fp16/bf16 "auto"; a config that says otherwise is
    an error naming the flag."""
    default_precision: Precision | None = None
    """What fills fp16/bf16 "auto" when `precision` is None (tierlab's pick for the GPU), if the
    config allows it; never named in a message as if the user had asked for it."""
    activation_checkpointing: bool = False
    hidden: int | None = None
    """Model hidden size, for "auto" bucket sizes (HF: hidden^2, 0.9 hidden^2, 10 hidden)."""


def coerce(value: Any, default: Any, where: str) -> Any:
    """Check/convert one value to the type of its default (DeepSpeed accepts 1e8 for ints)."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        if value < 0:
            raise ConfigError(f"{where}: must be >= 0, got {value!r}")
        return int(value)
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    return value


def _build(cls, block: Any, where: str, passthrough: set[str] = frozenset(),
           unmodelled: set[str] = frozenset(), warnings: list[str] | None = None, **nested):
    if not isinstance(block, Mapping):
        raise ConfigError(f"{where}: expected an object, got {block!r}")
    defaults = {f.name: f for f in fields(cls)}
    kwargs = dict(nested)
    given = [f"{where}.{key}={'{...}' if isinstance(value, Mapping) else repr(value)}"
             for key, value in sorted(block.items()) if key in unmodelled and key not in nested
             and key not in passthrough and value not in (None, False, 0, {})]
    if given:       # every such key in one line, sorted: the same whichever way it was read
        it = "them" if len(given) > 1 else "it"
        raise ConfigError(f"{', '.join(given)}: DeepSpeed accepts {it}, but tierlab does not "
                          f"model {it}; remove {it} to simulate without {it}")
    for key, value in block.items():
        if key in nested or key in passthrough:
            continue
        if key in unmodelled:
            continue
        if key not in defaults:     # ds_read has judged it (and warned where DeepSpeed ignores it)
            continue
        f = defaults[key]
        default = f.default if f.default is not None else None
        if key in ("device",):
            if value not in _DEVICES:
                raise ConfigError(f"{where}.device must be one of none/cpu/nvme, got {value!r}")
        elif key == "nvme_path":
            value = None if value is None else str(value)
        elif key == "overlap_comm":
            value = None if value is None else coerce(value, False, f"{where}.{key}")
        elif default is not None:
            value = coerce(value, default, f"{where}.{key}")
        kwargs[key] = value
    return cls(**kwargs)


_OBJECT_BLOCKS = ("zero_optimization", "aio", "fp16", "bf16", "optimizer", "scheduler",
                  "activation_checkpointing", "data_types", "comms_logger", "flops_profiler")
"""Top-level keys whose value DeepSpeed reads as an object (`bf16: true` crashes it)."""


def _check_blocks(cfg: Mapping[str, Any], where: str) -> None:
    """Wrong-typed blocks are one ConfigError, not an AttributeError deep inside."""
    for key in _OBJECT_BLOCKS:
        value = cfg.get(key)
        if key == "zero_optimization" and isinstance(value, bool):
            continue        # DeepSpeed's old format (true: stage 1), read by ds_read
        if value is not None and not isinstance(value, Mapping):
            example = ' such as {"enabled": true}' if key in ("fp16", "bf16") else ""
            raise ConfigError(f"{where}: {key} must be an object{example}, got {value!r}")


NO_OPTIMIZER_BLOCK = {"type": "AdamW", "params": {"lr": 1e-5, "betas": [0.9, 0.999],
                                                  "eps": 1e-8, "weight_decay": 0.0}}
"""What a ds_config without an optimizer block gets (the HF docs' AdamW; the learning rate
does not change the step time)."""


def _resolve_auto(cfg: dict, flags: Flags, precision: Precision) -> dict:
    """Fill the "auto" values transformers' HfTrainerDeepSpeedConfig fills (ds_read.HF_FILLED):
    bucket sizes from the hidden size (the stage3_* pair only at stage 3, as HF does), fp16/bf16
    from the precision, gradient_clipping from max_grad_norm's default 1.0. Any other "auto" is
    left for ds_read, which drops it to DeepSpeed's default as DeepSpeed does."""
    zero = cfg.get("zero_optimization")
    zero = zero if isinstance(zero, dict) else {}
    h = flags.hidden
    auto_zero = {"reduce_bucket_size": lambda: h * h}
    if zero.get("stage") in (3, "3", 3.0):
        auto_zero.update(stage3_prefetch_bucket_size=lambda: int(0.9 * h * h),
                         stage3_param_persistence_threshold=lambda: 10 * h)
    for key, fn in auto_zero.items():
        if zero.get(key) == "auto":
            if h is None:
                raise ConfigError(f"zero_optimization.{key}='auto' needs the model's hidden size")
            zero[key] = fn()
    for block in ("fp16", "bf16"):
        if isinstance(cfg.get(block), dict) and cfg[block].get("enabled") == "auto":
            cfg[block]["enabled"] = precision == block
    if cfg.get("gradient_clipping") == "auto":
        cfg["gradient_clipping"] = 1.0
    return cfg


BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


def _batch(cfg: dict, flags: Flags, where: str = "ds_config") -> tuple[int, int, int]:
    """(train_batch_size, micro batch, accumulation steps) as DeepSpeed 0.19.8 completes and
    checks them (runtime/config.py:607-650 `_set_batch_related_parameters`, :590-605
    `_batch_assertion`: train_batch_size == micro x accumulation x world size). --micro-batch
    and --grad-accum replace the file's values (or fill "auto"); a train_batch_size the file
    fixes is never rewritten: where the identity fails, the error names the file and each flag,
    as the HF Trainer refuses a fixed value that mismatches its arguments
    (integrations/deepspeed.py fill_match)."""
    dp = flags.world_size
    for key in BATCH_KEYS:
        value = cfg.get(key)
        if value not in (None, "auto") and (isinstance(value, bool) or not isinstance(value, int)
                                            or value < 1):
            raise ConfigError(f"{where}: {key} must be a positive integer or \"auto\", got "
                              f"{value!r}")
    fixed = {k: cfg[k] for k in BATCH_KEYS if cfg.get(k) not in (None, "auto")}
    if flags.micro_batch is not None:
        if fixed.get(BATCH_KEYS[1], flags.micro_batch) != flags.micro_batch:
            log.info("train_micro_batch_size_per_gpu %s overridden by --micro-batch %s",
                     fixed[BATCH_KEYS[1]], flags.micro_batch)
        fixed[BATCH_KEYS[1]] = flags.micro_batch
    if flags.grad_accum is not None:
        fixed[BATCH_KEYS[2]] = flags.grad_accum
    tbs, mb, gas = (fixed.get(k) for k in BATCH_KEYS)
    if tbs is None:
        mb, gas = mb or 1, gas or 1
        return mb * gas * dp, mb, gas
    if mb is not None and gas is None:
        gas = tbs // mb // dp
    elif gas is not None and mb is None:
        mb = tbs // dp // gas
    elif mb is None:
        mb, gas = tbs // dp, 1
    if mb < 1 or gas < 1 or mb * gas * dp != tbs:
        def said(key, flag):
            given = getattr(flags, {"--micro-batch": "micro_batch",
                                    "--grad-accum": "grad_accum"}[flag]) is not None
            return flag if given else "the file" if key in cfg and cfg[key] != "auto" else \
                "derived"
        raise ConfigError(
            f"{where}: train_batch_size {tbs} != train_micro_batch_size_per_gpu {mb} "
            f"({said(BATCH_KEYS[1], '--micro-batch')}) x gradient_accumulation_steps {gas} "
            f"({said(BATCH_KEYS[2], '--grad-accum')}) x {dp} GPU(s) (train_batch_size fixed by "
            "the file); DeepSpeed 0.19.8 and the HF Trainer refuse it (runtime/config.py "
            "_batch_assertion); set train_batch_size to \"auto\" in the file or pass values "
            "that multiply to it")
    return tbs, mb, gas


def _enabled(cfg: Mapping, block: str):
    value = cfg.get(block)
    return value.get("enabled", False) if isinstance(value, Mapping) else False


def _precision_why(fixed: list[str], auto: list[str]) -> str:
    """'fp16.enabled is "auto", and it has no bf16 block' and the like."""
    if fixed:
        return f"{fixed[0]}.enabled is true"
    if not auto:
        return "neither fp16 nor bf16 is enabled"
    text = " and ".join(f'{b}.enabled is "auto"' for b in auto)
    if len(auto) == 1:
        other = "bf16" if auto[0] == "fp16" else "fp16"
        text += f", and it has no {other} block"
    return text


def _precision(cfg: Mapping, flags: Flags, where: str) -> tuple[Precision, list[str]]:
    """(the precision DeepSpeed trains in, warnings), before "auto" is filled. The flag wins
    over "auto"; a config that fixes another precision is an error naming the flag only when
    the user gave it; tierlab's default only fills "auto" the config leaves open."""
    from tierlab.dsconfig.schema import Rejected, ds_bool

    states = {}
    for block in ("fp16", "bf16"):
        value = _enabled(cfg, block)
        try:
            states[block] = value if value == "auto" else ds_bool(value, f"{block}.enabled")
        except Rejected:
            states[block] = value     # ds_read names it
    fixed = [b for b, v in states.items() if v is True]
    auto = [b for b, v in states.items() if v == "auto"]
    if len(fixed) == 2:
        raise ConfigError(f"{where}: fp16.enabled and bf16.enabled are both true; DeepSpeed "
                          "allows one")
    implied = fixed[0] if fixed else " or ".join(auto + ["fp32"])
    why = _precision_why(fixed, auto)
    if flags.precision:
        if fixed and flags.precision != fixed[0] or not fixed and flags.precision not in (
                *auto, "fp32"):
            raise ConfigError(f"{where}: --precision {flags.precision} contradicts the config, "
                              f"which trains in {implied} ({why})")
        return flags.precision, []
    if fixed:
        return fixed[0], []
    if flags.default_precision in auto:
        return flags.default_precision, []
    if auto:
        note = (f"{where}: {why}: simulating {auto[0]}"
                + (f" ({flags.default_precision}, tierlab's default on this GPU, needs a "
                   f"{flags.default_precision} block)" if flags.default_precision
                   and flags.default_precision != "fp32" else ""))
        return auto[0], [note]
    if flags.default_precision not in (None, "fp32"):
        return "fp32", [f"{where}: {why}: DeepSpeed trains in fp32"]
    return "fp32", []


EXPERT_PARALLEL_KEYS = ("moe", "expert_parallel_size", "ep_size", "moe_expert_parallel_size")
"""ds_config keys that ask for expert parallelism (a `moe` block, an expert-parallel degree)."""


def _refuse_expert_parallel(cfg: Mapping[str, Any], where: str) -> None:
    """Expert parallelism is not modelled: every rank holds a ZeRO partition of every expert
    (docs/models.md), so a config asking for it is refused by name, never simulated as if not."""
    for key in EXPERT_PARALLEL_KEYS:
        if key in cfg:
            raise ConfigError(f"{where}: {key!r} asks for expert parallelism, which tierlab does "
                              "not model (MoE experts are ZeRO-partitioned across all ranks); "
                              "remove the key to simulate that")


def _refuse_activation_checkpointing(cfg: Mapping[str, Any], where: str) -> None:
    block = cfg.get("activation_checkpointing")
    if not isinstance(block, Mapping):
        return
    for key in ACTIVATION_CHECKPOINTING_UNMODELLED:
        if block.get(key):
            raise ConfigError(
                f"{where}: activation_checkpointing.{key}={json.dumps(block[key])} is not "
                "modelled: DeepSpeed applies it only to models that checkpoint through "
                "deepspeed.checkpointing "
                "(Megatron-DeepSpeed); Hugging Face models ignore it. Set it false (tierlab's "
                "--checkpointing models Hugging Face gradient checkpointing)")


def _blocks(zcfg: Mapping, aio: Any, warnings: list[str]) -> tuple[Zero, Aio]:
    """zero_optimization (as DeepSpeed read it) and aio -> Zero, Aio; unmodelled switches
    refused by name."""
    op = _build(OffloadParam, zcfg.get("offload_param") or {}, "zero_optimization.offload_param",
                warnings=warnings)
    oo = _build(OffloadOptimizer, zcfg.get("offload_optimizer") or {},
                "zero_optimization.offload_optimizer", unmodelled=_OPTIMIZER_UNMODELLED,
                passthrough=_OPTIMIZER_PASSTHROUGH, warnings=warnings)
    zero = _build(Zero, zcfg, "zero_optimization", passthrough=_ZERO_PASSTHROUGH,
                  unmodelled=_ZERO_UNMODELLED, warnings=warnings, offload_param=op,
                  offload_optimizer=oo)
    return zero, _build(Aio, aio, "aio", warnings=warnings)


def parse_ds_config(cfg: Mapping[str, Any], flags: Flags = Flags(),
                    where: str = "ds_config", judge: str = "auto") -> tuple[Strategy, list[str]]:
    """ds_config dict -> (Strategy, warnings about DeepSpeed quirks). Raises ConfigError.

    The keys are read as DeepSpeed 0.19.8 reads them (dsconfig/read.py; `judge`: its `prefer`,
    'auto' = DeepSpeed's own models when importable, 'table' = the vendored table); "auto" is
    filled as the Hugging Face integration fills it, from the flags."""
    from tierlab.dsconfig.read import legacy_blocks, read

    if not isinstance(cfg, Mapping):
        raise ConfigError(f"{where}: the top level must be a JSON object")
    _check_blocks(cfg, where)
    _refuse_expert_parallel(cfg, where)
    cfg = copy.deepcopy(dict(cfg))
    hjson_note = [cfg.pop(HJSON_ONLY)] if HJSON_ONLY in cfg else []
    cfg, legacy = legacy_blocks(cfg, where)     # bfloat16 -> bf16 first
    precision, warnings = _precision(cfg, flags, where)
    warnings = hjson_note + warnings
    cfg = _resolve_auto(cfg, flags, precision)
    if not isinstance(cfg.get("optimizer"), Mapping) or "type" not in cfg["optimizer"]:
        # no type: DeepSpeed builds no optimizer (engine.py has_optimizer; config.py:289)
        given = cfg.get("optimizer") if isinstance(cfg.get("optimizer"), Mapping) else {}
        cfg["optimizer"] = {**copy.deepcopy(NO_OPTIMIZER_BLOCK), **given,
                            "type": NO_OPTIMIZER_BLOCK["type"]}
        warnings.append(
            f"{where} has no optimizer {'type' if given else 'block'}: tierlab simulates and "
            "runs DeepSpeed's AdamW (DeepSpeedCPUAdam when offloaded; DeepSpeed alone would "
            "train nothing); the Hugging Face Trainer passes torch's AdamW instead, slower on "
            "the CPU than predicted")
    cfg, reading = read(cfg, where, prefer=judge)
    warnings = legacy + list(reading.warnings) + warnings + ds_autotuning.notes(cfg, where)
    _refuse_activation_checkpointing(cfg, where)
    cfg.update({k: dict(v) for k, v in reading.blocks.items() if k in cfg})
    try:
        zero, aio = _blocks(reading.blocks["zero_optimization"], cfg.get("aio") or {}, warnings)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    try:
        _check_zero(zero, warnings, where)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    _refuse_unmodelled(cfg, zero, where)
    tbs, mb, gas = _batch(cfg, flags, where)
    clip = cfg.get("gradient_clipping", ds_default("top_level", "gradient_clipping"))
    if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not math.isfinite(clip):
        raise ConfigError(f"{where}: gradient_clipping must be a finite number, got {clip!r}")
    cfg.update(train_batch_size=tbs, train_micro_batch_size_per_gpu=mb,
               gradient_accumulation_steps=gas)
    strategy = Strategy(zero=zero, aio=aio, precision=precision, train_batch_size=tbs,
                        train_micro_batch_size_per_gpu=mb, gradient_accumulation_steps=gas,
                        data_parallel_size=flags.world_size,
                        activation_checkpointing=flags.activation_checkpointing,
                        gradient_clipping=float(clip), raw=cfg)
    return strategy, warnings


def _refuse_unmodelled(cfg: Mapping[str, Any], zero: Zero, where: str) -> None:
    """The optimizer DeepSpeed refuses or tierlab does not time (dsconfig/optimizer.py) and the
    parallelism beyond ZeRO data parallelism (dsconfig/parallel.py), the data-efficiency features
    that change the work of a step (dsconfig/data_efficiency.py): every one in one line."""
    device = zero.offload_optimizer.device if zero.stage >= 1 else "none"
    problems = (ds_optimizer.judge(cfg, zero.stage, device) + ds_parallel.refusals(cfg)
                + ds_data_efficiency.refusals(cfg))
    if problems:
        raise ConfigError(f"{where}: " + "; ".join(problems))


def _check_zero(zero: Zero, warnings: list[str], where: str = "ds_config") -> None:
    if zero.stage not in (0, 1, 2, 3):
        raise ConfigError(f"zero_optimization.stage must be 0, 1, 2 or 3, got {zero.stage}")
    op, oo = zero.offload_param, zero.offload_optimizer
    if op.device != "none" and zero.stage != 3:
        warnings.append(f"{where}: ZeRO stage {zero.stage} ignores offload_param (device "
                        f"{op.device}); "
                        "only stage 3 offloads parameters")
    if oo.device != "none" and zero.stage == 0:
        warnings.append(f"{where}: ZeRO stage 0 ignores offload_optimizer; use stage >= 1")
    if oo.device == "nvme" and zero.stage in (1, 2):
        raise ConfigError(f"zero_optimization.offload_optimizer.device=nvme needs stage 3 "
                          f"(stage {zero.stage} offloads the optimizer to cpu only)")
    for name, off in (("offload_param", op), ("offload_optimizer", oo)):
        if off.device == "nvme" and not off.nvme_path:
            raise ConfigError(f"zero_optimization.{name}.device=nvme needs "
                              f"zero_optimization.{name}.nvme_path")
    if oo.pipeline and oo.device != "nvme":
        warnings.append(f"{where}: offload_optimizer.pipeline_read/pipeline_write only act with "
                        f"device nvme")
    if not 0.0 <= oo.ratio <= 1.0:
        raise ConfigError(f"zero_optimization.offload_optimizer.ratio must be in [0, 1], "
                          f"got {oo.ratio}")


# ----------------------------------------------------------------------------------------------
# Strategy -> ds_config.json

def _block(obj) -> dict:
    out = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if hasattr(value, "__dataclass_fields__"):
            value = _block(value)
        out[f.name] = value
    return out


def to_ds_config(strategy: Strategy) -> dict:
    """Strategy -> a ds_config dict DeepSpeed accepts: the passthrough keys as given, every
    modelled key explicit (defaults written out)."""
    cfg = {k: v for k, v in copy.deepcopy(dict(strategy.raw)).items() if not k.startswith("_")}
    zero = _block(strategy.zero)
    zero["overlap_comm"] = strategy.zero.overlap
    raw_zero = cfg.get("zero_optimization") or {}
    for key in _ZERO_PASSTHROUGH:
        if key in raw_zero:
            zero[key] = raw_zero[key]
    if strategy.zero.stage < 3:   # DeepSpeed asserts on stage-3 offload_param only when used
        zero["offload_param"] = raw_zero.get("offload_param") if "offload_param" in raw_zero else None
        if zero["offload_param"] is None:
            del zero["offload_param"]
    cfg["zero_optimization"] = zero
    cfg["aio"] = _block(strategy.aio)
    cfg.update(train_batch_size=strategy.train_batch_size,
               train_micro_batch_size_per_gpu=strategy.train_micro_batch_size_per_gpu,
               gradient_accumulation_steps=strategy.gradient_accumulation_steps)
    if strategy.precision in ("fp16", "bf16"):
        cfg.setdefault(strategy.precision, {})["enabled"] = True
    return cfg


# ----------------------------------------------------------------------------------------------
# --set dotted.key=value

def parse_value(text: str, where: str = "value") -> Any:
    """'3' -> 3, '1e8' -> 100000000, 'true' -> True, 'cpu' -> 'cpu', '{"a":1}' -> dict. JSON
    nested beyond Python's recursion limit, or an integer of more digits than Python converts
    (sys.get_int_max_str_digits), is one ConfigError line naming `where`."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ConfigError(f"{where}: JSON nested too deep ({len(text)} characters)") from None
    except json.JSONDecodeError:
        try:
            value = float(text)
        except ValueError:
            return text
    except ValueError as e:       # int beyond the digit limit: json.loads raises a plain one
        raise ConfigError(f"{where}: a number of {len(text)} characters is beyond what Python "
                          f"converts ({str(e).split(':')[0]})") from None
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value


def apply_overrides(cfg: Mapping[str, Any], overrides: list[str]) -> dict:
    """Apply `--set a.b.c=value` overrides to a copy of a ds_config dict."""
    out = copy.deepcopy(dict(cfg))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected dotted.key=value")
        path, text = item.split("=", 1)
        keys = path.strip().split(".")
        if not all(keys):
            raise ConfigError(f"--set {item!r}: empty key in {path!r}")
        node = out
        for key in keys[:-1]:
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"--set {item!r}: {key!r} is not an object")
            node = child
        value = parse_value(text.strip(), f"--set {path.strip()}")
        if first_non_finite(value):
            raise ConfigError(f"--set {item!r}: not a finite number")
        bound = bounds.DS_CONFIG.get(".".join(keys))
        if bound is not None and value != "auto":     # named as the flag, not as the file
            bounds.check(value, bound, f"--set {path.strip()}={text.strip()}")
        node[keys[-1]] = value
    return out
