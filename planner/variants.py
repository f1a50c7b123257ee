"""The planner's vocabulary: placements, variants (one concrete configuration each), the ds_config
a variant stands for, and the result types. The search is in planner/search.py.
"""
from __future__ import annotations

import copy

import logging
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from tierlab.errors import ConfigError
from tierlab.planner.trainer import launch_line, trainer_args, trainer_native
from tierlab.sim.layout import param_buffer_numel_needed, pipelined_buffer_count

log = logging.getLogger(__name__)

PREFER_NO_OFFLOAD_MARGIN = 0.10
"""An offloading config must beat the best no-offload config by more than 10% to be chosen."""
TUNED_PLACEMENTS = 3
NVME_DRIVE_COUNTS = (1, 2, 4, 8, 16)
DEFAULT_NVME_PATH = "/local_nvme"
OPTIMIZER_TEMPLATE = {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                                                  "weight_decay": 0.0}}
# knob -> values tried by the tuner, per condition on the placement
KNOBS: tuple[tuple[str, tuple, Callable[["Placement"], bool]], ...] = (
    ("zero_optimization.sub_group_size", (1e9, 5e8, 2e8, 1e8, 5e7),
     lambda p: p.optimizer != "none"),
    ("pipeline", ("none", "read", "read+write"), lambda p: p.optimizer == "nvme"),
    ("aio.block_size", (1 << 20, 8 << 20), lambda p: "nvme" in (p.param, p.optimizer)),
    ("aio.queue_depth", (8, 32, 128), lambda p: "nvme" in (p.param, p.optimizer)),
    ("aio.intra_op_parallelism", (1, 2, 4, 8), lambda p: "nvme" in (p.param, p.optimizer)),
    ("zero_optimization.offload_param.max_in_cpu", (1e9, 1e8, 0), lambda p: p.param == "nvme"),
    ("zero_optimization.stage3_prefetch_bucket_size", (5e7, 2e8, 5e8), lambda p: p.stage == 3),
)



def frugal_knobs(p: "Placement") -> dict[str, Any]:
    """The smallest-footprint settings, tried when the defaults do not fit: small reduce/
    all-gather buckets (GPU), small optimizer sub-groups (pinned swap buffers on the host), all
    NVMe-offloaded params on NVMe (max_in_cpu 0)."""
    out: dict[str, Any] = {"zero_optimization.reduce_bucket_size": 5e7}
    if p.stage in (1, 2):
        out["zero_optimization.allgather_bucket_size"] = 5e7
    if p.optimizer == "nvme":
        out["zero_optimization.sub_group_size"] = 5e7
    if p.param == "nvme":
        out["zero_optimization.offload_param.max_in_cpu"] = 0
    return out


@dataclass(frozen=True)
class Placement:
    """Where the model states live: ZeRO stage, parameter and optimizer devices."""

    label: str
    stage: int
    param: str = "none"
    optimizer: str = "none"

    @property
    def offloads(self) -> bool:
        return self.param != "none" or self.optimizer != "none"


def placements(world_size: int, has_nvme: bool) -> list[Placement]:
    """The placements worth trying (stage 1 is dominated by stage 2; ZeRO-1/2/3 without offload
    only differ from plain data parallelism when there is more than one GPU)."""
    out = [Placement("no offload (ZeRO-0)", 0)]
    if world_size > 1:
        out += [Placement("no offload, ZeRO-2", 2), Placement("no offload, ZeRO-3", 3)]
    out += [Placement("ZeRO-2, optimizer on CPU (ZeRO-Offload)", 2, optimizer="cpu"),
            Placement("ZeRO-3, optimizer on CPU", 3, optimizer="cpu"),
            Placement("ZeRO-3, params + optimizer on CPU", 3, param="cpu", optimizer="cpu")]
    if has_nvme:
        out += [Placement("ZeRO-3, optimizer on NVMe", 3, optimizer="nvme"),
                Placement("ZeRO-3, params on CPU, optimizer on NVMe (ZeRO-Infinity)", 3,
                          param="cpu", optimizer="nvme"),
                Placement("ZeRO-3, params + optimizer on NVMe (ZeRO-Infinity)", 3, param="nvme",
                          optimizer="nvme")]
    return out


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One concrete configuration: placement, batch, checkpointing, tuned knobs."""

    placement: Placement
    micro_batch: int
    grad_accum: int
    checkpointing: bool
    knobs: tuple[tuple[str, Any], ...] = ()
    """(dotted ds_config key or 'pipeline', value), sorted by key."""
    nvme_drives: int | None = None
    """Hardware what-if: this many NVMe drives instead of the profile's."""

    def with_knob(self, key: str, value: Any) -> "Variant":
        knobs = dict(self.knobs)
        knobs[key] = value
        return replace(self, knobs=tuple(sorted(knobs.items())))


@dataclass(frozen=True, kw_only=True)
class Request:
    """What is planned for (all objects, already resolved)."""

    hardware: Any
    model: Any
    precision: str
    nvme_path: str = DEFAULT_NVME_PATH
    base: Mapping[str, Any] | None = None
    """The user's ds_config (`plan --ds-config`): variants change it, not a template
    (sim/plan_from.base_ds_config)."""
    headroom: Any = None
    """sim.headroom.Headroom each fit verdict keeps free (None: the default)."""


def ds_config_dict(v: Variant, req: Request) -> dict:
    """The ds_config of a variant (before DeepSpeed defaults are written out by to_ds_config)."""
    from tierlab.scenario import set_dotted

    if req.base is not None:
        return base_ds_config(v, req)
    p, hw, model = v.placement, req.hardware, req.model
    zero: dict[str, Any] = {"stage": p.stage, "overlap_comm": p.stage > 0,
                            "contiguous_gradients": True, "reduce_bucket_size": 5e8}
    if p.stage in (1, 2):
        zero["allgather_bucket_size"] = 5e8
    if p.stage == 3:
        zero.update(sub_group_size=1e8 if p.optimizer == "nvme" else 1e9,
                    stage3_prefetch_bucket_size=5e7, stage3_param_persistence_threshold=1e5,
                    stage3_max_live_parameters=1e9, stage3_max_reuse_distance=1e9)
    if p.optimizer != "none":
        zero["offload_optimizer"] = {"device": p.optimizer, "pin_memory": True}
    if p.param != "none":
        zero["offload_param"] = {"device": p.param, "pin_memory": True}
    if p.param == "nvme":
        per_rank = param_buffer_numel_needed(model, hw.world_size)
        zero["offload_param"].update(buffer_count=5, buffer_size=max(100_000_000, per_rank),
                                     max_in_cpu=1e9)
    for dev, key in ((p.param, "offload_param"), (p.optimizer, "offload_optimizer")):
        if dev == "nvme":
            zero[key]["nvme_path"] = req.nvme_path
    per_gpu = v.micro_batch * v.grad_accum
    cfg = {"train_batch_size": per_gpu * hw.world_size, "train_micro_batch_size_per_gpu":
           v.micro_batch, "gradient_accumulation_steps": v.grad_accum,
           req.precision if req.precision != "fp32" else "fp16": {"enabled": req.precision != "fp32"},
           "optimizer": OPTIMIZER_TEMPLATE, "gradient_clipping": 1.0, "zero_optimization": zero,
           "aio": {"block_size": 1 << 20, "queue_depth": 32, "intra_op_parallelism": 4,
                   "single_submit": False, "overlap_events": True, "use_gds": False}}
    knobs = dict(v.knobs)
    pipe = knobs.pop("pipeline", "none")
    if p.optimizer == "nvme":
        read, write = "read" in pipe, "write" in pipe
        zero["offload_optimizer"].update(pipeline_read=read, pipeline_write=write,
                                         buffer_count=pipelined_buffer_count(read, write))
    for key, value in knobs.items():
        set_dotted(cfg, key, int(value) if isinstance(value, float) and value.is_integer() else value)
    return cfg


def build(v: Variant, req: Request):
    """(hardware, strategy) of a variant, resolved by tierlab.scenario. Raises ConfigError."""
    from tierlab.scenario import resolve

    hw = req.hardware if v.nvme_drives is None else replace(req.hardware, nvme_drives=v.nvme_drives)
    sc = resolve(req.model, hw, ds_config_dict(v, req), seq=req.model.seq_len,
                 precision=req.precision, checkpointing=v.checkpointing, where="plan")
    return sc.hardware, sc.strategy


def to_deepspeed(strategy) -> dict:
    """The ds_config DeepSpeed gets: every modelled key explicit (sim/strategy.to_ds_config)."""
    from tierlab.sim.strategy import to_ds_config

    return to_ds_config(strategy)


@dataclass(frozen=True)
class Simulate:
    """Picklable `variant -> result columns` for the process pool."""

    req: Request
    simulator: Callable

    def __call__(self, v: Variant) -> dict:
        from tierlab.sweeps.run import result_columns

        try:
            hw, strategy = build(v, self.req)
            return result_columns(self.simulator(hw, self.req.model, strategy))
        except (ConfigError, ValueError) as e:
            return {"error": str(e)}


# ----------------------------------------------------------------------------------------------
# results

@dataclass(kw_only=True)
class Candidate:
    """One configuration the planner looked at, with its verdict."""

    variant: Variant
    fits: bool
    memory: Any = None
    """The MemoryPlan."""
    over: str = ""
    """'host needs 1,234 GiB > 1,000 GiB per node' when it does not fit."""
    result: Mapping[str, Any] = field(default_factory=dict)
    """Flattened SimResult (step_time_s, tokens_per_s, bottleneck, ...); empty if not simulated."""
    verdict: str = ""
    """'best', "doesn't fit", 'slower', 'tie' (its 80% range overlaps the best's), 'too slow',
    'offload not needed', 'error'."""
    reason: str = ""
    ds_config: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.variant.placement.label

    @property
    def tokens_per_s(self) -> float:
        return float(self.result.get("tokens_per_s") or 0.0)

    @property
    def step_time_s(self) -> float | None:
        return self.result.get("step_time_s")

    @property
    def bottleneck(self) -> str | None:
        return self.result.get("bottleneck")

    @property
    def step_time_range_s(self) -> tuple[float, float] | None:
        """The step time's 80% range (plan adds it to each placement's best), None without."""
        lo, hi = self.result.get("step_time_low_s"), self.result.get("step_time_high_s")
        return (lo, hi) if lo and hi else None

    @property
    def tokens_per_s_range(self) -> tuple[float, float] | None:
        """(low, high) tokens/s from the step time's 80% range, None without one."""
        span, step = self.step_time_range_s, self.step_time_s
        if not (span and step):
            return None
        tokens = self.tokens_per_s * step
        return tokens / span[1], tokens / span[0]

    def to_dict(self) -> dict:
        v = self.variant
        return {"placement": self.label, "stage": v.placement.stage,
                "offload_param": v.placement.param, "offload_optimizer": v.placement.optimizer,
                "micro_batch": v.micro_batch, "grad_accum": v.grad_accum,
                "activation_checkpointing": v.checkpointing, "knobs": dict(v.knobs),
                "fits": self.fits, "over": self.over, "verdict": self.verdict,
                "reason": self.reason, "step_time_s": self.step_time_s,
                "step_time_range_s": self.step_time_range_s,
                "tokens_per_s": self.tokens_per_s or None,
                "tokens_per_s_range": self.tokens_per_s_range, "bottleneck": self.bottleneck,
                "memory": self.memory.to_dict() if self.memory is not None else None}


@dataclass(kw_only=True)
class PlanResult:
    model: str
    hardware: str
    best: Candidate | None
    alternatives: list[Candidate]
    """Every placement's best variant, ranked (the best first)."""
    notes: list[str]
    """The practical answers (offload needed? host RAM? how many NVMe drives?)."""
    nvme_scaling: list[dict] = field(default_factory=list)
    """[{nvme_drives, step_time_s, tokens_per_s, bottleneck, fits}] for the best NVMe config."""
    simulations: int = 0
    gpus_per_node: int = 1
    nodes: int = 1
    precision: str = "bf16"
    """The compute dtype every candidate was simulated in."""
    trust: Mapping[str, Any] = field(default_factory=dict)
    """Where the inputs of the answer come from (profiles/ranges.trust_of)."""
    headroom: Mapping[str, str] = field(default_factory=dict)
    """What each tier's fit verdict kept free: {'gpu': '0', 'host': '5%', 'nvme': '0'}."""
    fsdp2: Mapping[str, Any] | None = None
    """`plan --fsdp2`: the PyTorch FSDP2 CPU-offload candidate (planner/fsdp2.py), not ranked
    with the DeepSpeed configurations (another framework; its own launch line)."""

    @property
    def scale(self) -> str:
        """'8 GPUs' on one node, '2 nodes x 8 GPUs' on several."""
        gpus = f"{self.gpus_per_node} GPU{'s' * (self.gpus_per_node > 1)}"
        return gpus if self.nodes == 1 else f"{self.nodes} nodes x {gpus}"

    @property
    def ds_config(self) -> dict | None:
        """The winner's ds_config, every modelled key explicit, ready for `deepspeed`."""
        return dict(self.best.ds_config) if self.best else None

    @property
    def trainer_config(self) -> dict | None:
        """The winner's ds_config as the HF Trainer takes it: "auto" wherever the Trainer fills
        a value (planner/trainer.py), what `plan -o` writes."""
        return trainer_native(self.best.ds_config) if self.best else None

    def written_config(self, config_for: str) -> dict | None:
        """What `plan -o` writes: trainer_config ('trainer') or ds_config ('deepspeed')."""
        return self.trainer_config if config_for == "trainer" else self.ds_config

    @property
    def trainer_args(self) -> list[str]:
        """The TrainingArguments flags that fill trainer_config's "auto" as simulated."""
        if self.best is None:
            return []
        v = self.best.variant
        return trainer_args(v.micro_batch, v.grad_accum, self.precision, v.checkpointing)

    def launch(self, path: str) -> str:
        """The launch line of the written config (multi-node: --hostfile, --num_nodes)."""
        return launch_line(path, self.gpus_per_node, self.nodes, self.trainer_args)

    def to_dict(self) -> dict:
        return {"model": self.model, "hardware": self.hardware,
                "gpus_per_node": self.gpus_per_node, "nodes": self.nodes,
                "world_size": self.gpus_per_node * self.nodes, "precision": self.precision,
                "best": self.best.to_dict() if self.best else None,
                "alternatives": [c.to_dict() for c in self.alternatives], "notes": self.notes,
                "nvme_scaling": self.nvme_scaling, "simulations": self.simulations,
                **({"fsdp2": dict(self.fsdp2)} if self.fsdp2 is not None else {}),
                "ds_config": self.ds_config, "trainer_config": self.trainer_config,
                "trainer_args": self.trainer_args, "trust": dict(self.trust),
                "headroom": dict(self.headroom)}


def base_ds_config(v: Variant, req: Request) -> dict:
    """The variant applied to the user's config (req.base): stage, offload devices (their other
    keys kept), nvme_path where missing, batch, knobs."""
    from tierlab.scenario import set_dotted

    p, hw = v.placement, req.hardware
    cfg = copy.deepcopy(dict(req.base))
    zero = cfg["zero_optimization"] = dict(cfg.get("zero_optimization") or {})
    zero["stage"] = p.stage
    for key, device in (("offload_optimizer", p.optimizer), ("offload_param", p.param)):
        if (key, p.stage) in (("offload_optimizer", 0), ("offload_param", 0),
                              ("offload_param", 1), ("offload_param", 2)):
            continue    # DeepSpeed ignores the block at this stage: yours stays as written
        block = dict(zero.get(key) or {})
        if device == "none" and block.get("device", "none") == "none":
            continue
        block["device"] = device
        if device == "nvme" and not block.get("nvme_path"):
            block["nvme_path"] = req.nvme_path
        zero[key] = block
    if p.param == "nvme":       # every partition must fit one swap buffer
        per_rank = param_buffer_numel_needed(req.model, hw.world_size)
        if zero["offload_param"].get("buffer_size", 100_000_000) < per_rank:
            zero["offload_param"]["buffer_size"] = per_rank
    if p.optimizer == "nvme" and "sub_group_size" not in zero:
        zero["sub_group_size"] = 100_000_000     # the template's NVMe choice; tuned after
    cfg.update(train_micro_batch_size_per_gpu=v.micro_batch,
               gradient_accumulation_steps=v.grad_accum,
               train_batch_size=v.micro_batch * v.grad_accum * hw.world_size)
    knobs = dict(v.knobs)
    pipe = knobs.pop("pipeline", None)
    if pipe is not None and p.optimizer == "nvme":
        read, write = "read" in pipe, "write" in pipe
        zero["offload_optimizer"].update(pipeline_read=read, pipeline_write=write,
                                         buffer_count=pipelined_buffer_count(read, write))
    for key, value in knobs.items():
        set_dotted(cfg, key, int(value) if isinstance(value, float) and value.is_integer()
                   else value)
    return cfg
