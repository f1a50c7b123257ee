"""One resolver: names or objects plus flags -> one Scenario.

Every verb (`memory`, `simulate`, `plan`, `sweep`, `preflight`, `run`, `compare`, `plot`), the
Python API (`tierlab.simulate`/`sweep`/`scenario`), the planner, the validator and the tests
build their (hardware, model, strategy, software) here, so the defaults below are written once:
the precision that fills fp16/bf16 "auto", the sequence length when --seq is not given, the
software profile with the host's measured DeepSpeed costs, the GPU memory cap and the swap
directory.

    sc = resolve("tinyllama-1.1b", "workstation-rtx3070", "zero3-cpu", micro_batch=4, seq=1024)
    sc.memory().fits, sc.simulate().step_time_s
"""
from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from tierlab.bounds import check_ds_config, check_flag, check_model
from tierlab.errors import ConfigError
from tierlab.units import parse_size

DEFAULT_MODEL = "tinyllama-1.1b"
DEFAULT_HARDWARE = "workstation-rtx3070"
DEFAULT_CONFIG = "zero3-cpu"
DEFAULT_SEQ_CAP = 4096
"""--seq when not given: the model's sequence length, at most this many tokens (Llama-3.1's
131,072-token context would otherwise be simulated as one sequence)."""


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """What every verb needs, resolved once."""

    hardware: Any
    """profiles.schema.Hardware; GPU count, nodes and the GPU memory cap applied."""
    model: Any
    """profiles.schema.Model; seq_len resolved."""
    strategy: Any
    """sim.strategy.Strategy parsed from the ds_config with the flags."""
    software: Any
    """profiles.schema.Software: the fitted DeepSpeed host terms, with the host costs the
    hardware's CPU profile measured (sim/host_costs.software_for)."""
    warnings: tuple[str, ...] = ()
    """DeepSpeed quirks in the ds_config (ignored or misspelled keys, ...)."""
    notes: tuple[str, ...] = ()
    """Defaults the resolver chose that change the answer (e.g. the sequence length cap)."""
    config_where: str = "ds_config"
    """Where the ds_config came from: a preset path, a file, or what the caller named a dict."""
    config_name: str = "custom"
    """'zero3-nvme' for a preset, the file stem for a path, 'custom' for a dict or Strategy."""
    gpu_mem_cap_bytes: float | None = None
    """The GPU memory cap (already applied to hardware.gpu.hbm_bytes), or None."""
    swap_dir: str | None = None
    """The directory every nvme_path points at (already applied to the strategy), or None."""
    headroom: Any = None
    """sim.headroom.Headroom: what each tier keeps free for the fit verdicts (--gpu-headroom,
    --host-headroom); None until resolved (resolve always sets it)."""

    def describe(self) -> str:
        """One line: model, hardware, GPUs, config and what it does, batch, seq, precision."""
        s, hw = self.strategy, self.hardware
        gpus = (f"{hw.world_size} GPU" if hw.nodes == 1 else
                f"{hw.nodes} nodes x {hw.gpus_per_node} GPU")
        return (f"{self.model.name} on {hw.name} ({gpus}), {self.config_name}: "
                f"ZeRO-{s.zero.stage}, params on {s.param_device}, optimizer on "
                f"{s.optimizer_device}, micro-batch {s.train_micro_batch_size_per_gpu}, "
                f"grad accum {s.gradient_accumulation_steps}, seq {self.model.seq_len}, "
                f"{s.precision}")

    def header(self) -> dict:
        """The scenario's names and sizes for a JSON output."""
        return {"model": self.model.name, "hardware": self.hardware.name,
                "ds_config": self.config_where, "world_size": self.hardware.world_size,
                "nodes": self.hardware.nodes, "gpus_per_node": self.hardware.gpus_per_node,
                "seq_len": self.model.seq_len,
                "micro_batch": self.strategy.train_micro_batch_size_per_gpu,
                "grad_accum": self.strategy.gradient_accumulation_steps,
                "precision": self.strategy.precision,
                "headroom": {t: self.headroom.of(t).text() for t in ("gpu", "host")}
                if self.headroom else None}

    def _modelled(self, check) -> None:
        """`check(strategy)` (sim/workload.py): a key tierlab does not model is one line naming
        the file it came from."""
        try:
            check(self.strategy)
        except ConfigError as e:
            raise ConfigError(f"{self.config_where}: {e}") from None

    def memory(self):
        """The per-tier MemoryPlan (sim/memory.plan_memory) with this scenario's software."""
        from tierlab.sim.memory import plan_memory
        from tierlab.sim.workload import check_memory_supported

        self._modelled(check_memory_supported)
        return plan_memory(self.hardware, self.model, self.strategy, software=self.software,
                           headroom=self.headroom)

    def simulate(self, *, strict: bool = False, ranges: bool = False,
                 engine: str = "deepspeed"):
        """The SimResult (sim/engine.simulate) with this scenario's software; `ranges`: with the
        step time's 80% range and the fits margin (sim/ranges.py, docs/ranges.md).
        `engine="fsdp2-offload"`: PyTorch FSDP2 with CPUOffloadPolicy instead, its own schedule
        (sim/fsdp2.simulate_fsdp2 -> Fsdp2Result; the strategy's batch, precision and
        checkpointing only, its ZeRO keys unused)."""
        if engine != "deepspeed":
            from tierlab.sim.fsdp2 import check_engine, simulate_fsdp2

            check_engine(engine)
            return simulate_fsdp2(self.hardware, self.model, self.strategy,
                                  host_baseline_bytes=self.software.process_baseline_bytes)
        from tierlab.sim.engine import simulate
        from tierlab.sim.ranges import simulate_ranged
        from tierlab.sim.workload import check_supported

        self._modelled(check_supported)
        return (simulate_ranged if ranges else simulate)(
            self.hardware, self.model, self.strategy, strict=strict, software=self.software,
            headroom=self.headroom)


def default_precision(hardware) -> str:
    """The precision that fills fp16/bf16 "auto": bf16 where the GPU has it, else fp16."""
    return "bf16" if "bf16" in hardware.gpu.peak_flops else "fp16"


def _check_counts(**values) -> None:
    for name, value in values.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1 (an integer), "
                              f"got {value!r}")
        check_flag(name, value)       # and within its physical bound (tierlab.bounds)


def _hardware(hardware, gpus, nodes, cap_bytes):
    from tierlab.profiles.load import load_hardware
    from tierlab.profiles.schema import Hardware

    if isinstance(hardware, str):
        hw = load_hardware(hardware, gpus_per_node=gpus, nodes=nodes)
    elif isinstance(hardware, Hardware):
        hw = hardware
        if gpus is not None or nodes is not None:
            hw = replace(hw, gpus_per_node=gpus or hw.gpus_per_node, nodes=nodes or hw.nodes)
    else:
        raise ConfigError(f"hardware: expected a profile name/path or a Hardware, got "
                          f"{type(hardware).__name__} (the order is model, hardware, ds_config)")
    if cap_bytes is not None:
        hw = replace(hw, gpu=replace(hw.gpu, hbm_bytes=cap_bytes))
    return hw


MODEL_CACHE_SIZE = 64
"""Models `resolve` keeps by the identity of the Model it was given and the sequence length: a
sweep or a plan passes one Model for many points, and the same object back lets what is built
from it (the parameter layout, sim/layout.param_layout) be built once."""

_models: OrderedDict[tuple, tuple[Any, tuple]] = OrderedDict()


def _model(model, seq):
    """(Model, notes): `_load_model`'s, once per (Model object, seq) for a Model."""
    from tierlab.profiles.schema import Model

    if not isinstance(model, Model):
        return _load_model(model, seq)
    key = (id(model), seq)
    hit = _models.get(key)
    if hit is not None and hit[0] is model:
        _models.move_to_end(key)
        return hit[1]
    out = _load_model(model, seq)
    _models[key] = (model, out)          # holds `model`: its id is not reused while kept
    if len(_models) > MODEL_CACHE_SIZE:
        _models.popitem(last=False)
    return out


def _load_model(model, seq):
    """(Model, notes): a name/path is loaded; without --seq its sequence length is capped at
    DEFAULT_SEQ_CAP (the context length itself is kept for position tables)."""
    from tierlab.profiles.load import load_model
    from tierlab.profiles.schema import Model

    if isinstance(model, str):
        m = load_model(model, seq_len=seq)
    elif isinstance(model, Model):
        m = replace(model, seq_len=seq) if seq is not None else model
    else:
        raise ConfigError(f"model: expected a profile name/path or a Model, got "
                          f"{type(model).__name__} (the order is model, hardware, ds_config)")
    check_model(m, model if isinstance(model, str) else m.name)
    left = tuple(f"{m.name}: not modelled, within the count check against transformers: {n}"
                 for n in m.not_modelled)
    if seq is None and m.seq_len > DEFAULT_SEQ_CAP:
        note = (f"--seq not given: simulating {DEFAULT_SEQ_CAP:,} tokens per sequence, not "
                f"{m.name}'s {m.seq_len:,} (pass --seq to change)")
        return replace(m, seq_len=DEFAULT_SEQ_CAP, max_seq_len=m.max_seq_len or m.seq_len), \
            left + (note,)
    if m.max_seq_len and m.seq_len > m.max_seq_len:
        beyond = (f"--seq {m.seq_len:,} is beyond {m.name}'s {m.max_seq_len:,} positions "
                  f"(max_position_embeddings)")
        if m.learned_pos_emb:      # its position table has no row past the last one
            raise ConfigError(f"{beyond}: its learned position table has no rows past them")
        return m, left + (f"{beyond}: simulated as asked, but the model was not trained that "
                          "long",)
    return m, left


def _ds_config(ds_config) -> tuple[dict, str]:
    from tierlab.dsconfig.read import load_ds_config
    from tierlab.sim.strategy import Strategy, to_ds_config

    if isinstance(ds_config, str):
        return load_ds_config(ds_config)
    if isinstance(ds_config, Strategy):
        return to_ds_config(ds_config), "ds_config"
    if isinstance(ds_config, Mapping):
        return copy.deepcopy(dict(ds_config)), "ds_config"
    raise ConfigError(f"ds_config: expected a preset name, a JSON path, a dict or a Strategy, "
                      f"got {type(ds_config).__name__}")


def _overrides(overrides) -> list[str]:
    """`--set` items from a list of 'key=value' texts or a {dotted.key: value} mapping."""
    import json

    if isinstance(overrides, Mapping):
        return [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in overrides.items()]
    return list(overrides)


def machine_and_model(model: Any = DEFAULT_MODEL, hardware: Any = DEFAULT_HARDWARE, *,
                      seq: int | None = None, gpus: int | None = None, nodes: int | None = None,
                      gpu_mem_cap: Any = None):
    """(Hardware, Model, notes) from names or objects: the part of `resolve` that the planner,
    which searches the strategy itself, needs."""
    _check_counts(seq=seq, gpus=gpus, nodes=nodes)
    cap = parse_size(gpu_mem_cap, "--gpu-mem-cap") if gpu_mem_cap is not None else None
    mdl, notes = _model(model, seq)
    return _hardware(hardware, gpus, nodes, cap), mdl, notes


def resolve(model: Any = DEFAULT_MODEL, hardware: Any = DEFAULT_HARDWARE,
            ds_config: Any = DEFAULT_CONFIG, *, overrides: Iterable[str] | Mapping = (),
            ds_keys: Mapping[str, Any] | None = None, micro_batch: int | None = None,
            grad_accum: int | None = None, seq: int | None = None, gpus: int | None = None,
            nodes: int | None = None, precision: str | None = None,
            checkpointing: bool | None = True, gpu_mem_cap: Any = None,
            gpu_headroom: Any = None, host_headroom: Any = None,
            swap_dir: str | None = None, software: Any = None,
            where: str | None = None, judge: str | None = None) -> Scenario:
    """One Scenario from names (profile name or path) or objects (Hardware, Model, a ds_config
    dict or a Strategy) plus flags. `overrides`: `--set` items or {dotted.key: value}; `ds_keys`:
    ds_config keys set after them (a sweep point's); `gpu_mem_cap`: bytes or text ('8GiB');
    `gpu_headroom`/`host_headroom`: '5%', '4GiB' or a sim.headroom.Margin (None: the default,
    sim/headroom.py); `software`: a Software (default: profiles/software/'s, with the host's measured costs);
    `where`: how errors name a ds_config given as a dict; `judge`: who judges its keys:
    'table' (the default), the vendored copy of DeepSpeed 0.19.8's config classes, which the tests
    hold equal to DeepSpeed's own verdicts, so no simulation imports torch (~2 s); 'deepspeed' or
    'auto' (DeepSpeed when importable), for the verbs that train or probe with it anyway.
    A Strategy as `ds_config` keeps its own activation checkpointing. Raises ConfigError."""
    from tierlab.sim.headroom import headroom_of
    from tierlab.sim.host_costs import software_for
    from tierlab.sim.strategy import Flags, Strategy, apply_overrides, check_precision

    _check_counts(micro_batch=micro_batch, grad_accum=grad_accum)
    check_precision(precision)
    room = headroom_of(gpu_headroom, host_headroom)
    if isinstance(ds_config, Strategy):
        checkpointing = ds_config.activation_checkpointing
    hw, mdl, notes = machine_and_model(model, hardware, seq=seq, gpus=gpus, nodes=nodes,
                                       gpu_mem_cap=gpu_mem_cap)
    cap = hw.gpu.hbm_bytes if gpu_mem_cap is not None else None
    room.check(hw)
    cfg, found = _ds_config(ds_config)
    where = where or found
    items = _overrides(overrides)
    if items:           # a copy with them; `cfg` is this call's own copy already
        cfg = apply_overrides(cfg, items)
    for key, value in (ds_keys or {}).items():
        set_dotted(cfg, key, value)
    # --precision as given; the GPU's default only fills "auto" the config leaves open, and a
    # message never names it as a flag the user passed (sim/strategy._precision)
    flags = Flags(micro_batch=micro_batch, grad_accum=grad_accum, world_size=hw.world_size,
                  precision=precision, default_precision=default_precision(hw),
                  activation_checkpointing=bool(checkpointing), hidden=mdl.hidden)
    if swap_dir is not None and not str(swap_dir).strip():
        raise ConfigError("--swap-dir: empty path (leave it out to keep the config's nvme_path)")
    strategy, warnings = _strategy(cfg, flags, where, judge or "table", swap_dir)
    return Scenario(hardware=hw, model=mdl, strategy=strategy, software=software_for(hw, software),
                    warnings=tuple(warnings), notes=notes, config_where=where,
                    config_name=Path(found).stem if isinstance(ds_config, str) else "custom",
                    gpu_mem_cap_bytes=cap, swap_dir=swap_dir or None, headroom=room)




STRATEGY_CACHE_SIZE = 256
"""Parsed ds_configs `resolve` keeps (least recently used dropped): a sweep or a plan resolves
the same config with the same flags for many points (only the hardware differs), and it is
checked and judged once."""

_strategies: OrderedDict[tuple, tuple[Any, tuple[str, ...]]] = OrderedDict()


def _strategy(cfg: dict, flags, where: str, judge: str, swap_dir: str | None):
    """check_ds_config + with_swap_dir + parse_ds_config -> (Strategy, warnings), once per
    (the config's repr, flags, where, judge, swap_dir). The repr tells apart what the parse
    tells apart (1 / 1.0 / True, -0.0, a tuple from a list, key order, which orders the
    warnings). A Strategy is frozen and its `raw` only read, so a kept one is shared; an error
    is raised each time, never kept."""
    from tierlab.dsconfig.read import with_swap_dir
    from tierlab.sim.strategy import parse_ds_config

    key = (repr(cfg), flags, where, judge, swap_dir)
    hit = _strategies.get(key)
    if hit is not None:
        _strategies.move_to_end(key)
        return hit
    check_ds_config(cfg, where)
    if swap_dir:      # every NVMe offload's nvme_path, here and nowhere else
        cfg = with_swap_dir(cfg, swap_dir)
    strategy, warnings = parse_ds_config(cfg, flags, where=where, judge=judge)
    _strategies[key] = (strategy, tuple(warnings))
    if len(_strategies) > STRATEGY_CACHE_SIZE:
        _strategies.popitem(last=False)
    return strategy, tuple(warnings)


def get_dotted(cfg: Mapping, key: str, default: Any = None) -> Any:
    """cfg['a']['b']['c'] for key 'a.b.c', or `default` where a block or the key is missing."""
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def set_dotted(cfg: dict, key: str, value) -> None:
    """cfg['a']['b']['c'] = value for key 'a.b.c' (missing blocks created)."""
    node = cfg
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value
