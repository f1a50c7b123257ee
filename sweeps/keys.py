"""The key namespace of what-if sweeps, value parsing and the grid.

Key namespace of `--vary KEY=V1,V2,...` (`tierlab sweep --list-keys` prints it):

| kind | keys | values |
|---|---|---|
| scenario | `model`, `hardware`, `config` | profile names or paths (config: a ds_config preset) |
| batch | `micro_batch`, `grad_accum`, `seq`, `gpus` (per node), `nodes` | integers >= 1 |
| flags | `precision` (fp16/bf16/fp32), `checkpointing` (true/false) | |
| ds_config | dotted keys as in ds_config.json: `zero_optimization.stage`, `zero_optimization.sub_group_size`, `zero_optimization.offload_optimizer.device`, `aio.queue_depth`, ... | JSON values (1e8 allowed) |
| hardware | `dram`, `gpu.hbm`, `nvme.drives`, `nvme.read_bandwidth`, `pcie.h2d_pinned`, `cpu.adam_throughput`, ... (the profile YAML's key names) | quantities with units (`8GB/s`, `512GiB`) or plain SI numbers |
| model | `model.n_layers`, `model.hidden`, ... (Model fields) | integers / true/false |

Values: comma-separated; integer ranges `1..8` (step 1), `1..64:x2` (geometric), `0..12:4`.
The grid is the cartesian product of the axes. Every point is one row of a DataFrame; a point that
cannot be built or simulated (e.g. NVMe optimizer offload with ZeRO-2) is a row whose `error`
column says why. Rows carry a `point_id` (hash of the base scenario + the point) so a sweep written
to a file resumes where it stopped.
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import itertools
import logging
import math
import re
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any, Iterable, Iterator, Sequence

from tierlab import bounds
from tierlab.errors import ConfigError
from tierlab.profiles.fields import HARDWARE_FIELDS
from tierlab.safeio import first_non_finite
from tierlab.sim.strategy import PRECISIONS, check_precision

log = logging.getLogger(__name__)

MAX_POINTS = 1_000_000

# ----------------------------------------------------------------------------------------------
# the key namespace

SCENARIO_KEYS = {"model": "model profile name or path", "hardware": "system profile name or path",
                 "config": "ds_config preset name or JSON path"}
BATCH_KEYS = {"micro_batch": "train_micro_batch_size_per_gpu", "grad_accum":
              "gradient_accumulation_steps", "seq": "sequence length (tokens)",
              "gpus": "GPUs per node", "nodes": "number of nodes"}
FLAG_KEYS = {"precision": " / ".join(PRECISIONS), "checkpointing": "activation checkpointing"}

# sweep key -> (attribute path in Hardware, dimension for parse_quantity, python type), read off
# the field table (profiles/fields.py): the profile YAML's key names, in the table's order
HARDWARE_KEYS: dict[str, tuple[tuple[str, ...], str, type]] = {
    f.sweep_key: (f.path, f.dimension, int if f.dimension == "count" else float)
    for f in HARDWARE_FIELDS if f.sweep_key is not None}
# display unit per dimension (for tables and plot axes)
DISPLAY_UNITS = {"bytes": ("GB", 1e9), "bytes/s": ("GB/s", 1e9), "flop/s": ("TFLOP/s", 1e12),
                 "params/s": ("G params/s", 1e9), "seconds": ("us", 1e-6), "count": ("", 1.0)}


@lru_cache(maxsize=1)
def _model_fields() -> dict[str, type]:
    from tierlab.profiles.schema import Model

    kinds = {"int": int, "bool": bool, "str": str}
    return {f"model.{f.name}": kinds[str(f.type)] for f in fields(Model)
            if f.name not in ("name", "source") and str(f.type) in kinds}


@lru_cache(maxsize=1)
def _ds_blocks() -> dict[str, dict[str, Any]]:
    """Modelled ds_config blocks -> {leaf key: default} (DeepSpeed's meaning, sim/strategy.py)."""
    from tierlab.sim.strategy import Aio, OffloadOptimizer, OffloadParam, Zero

    def defaults(cls, skip=()):
        return {f.name: (f.default if f.default is not dataclasses.MISSING else None)
                for f in fields(cls) if f.name not in skip}

    return {"zero_optimization": defaults(Zero, ("offload_param", "offload_optimizer")),
            "zero_optimization.offload_param": defaults(OffloadParam),
            "zero_optimization.offload_optimizer": defaults(OffloadOptimizer),
            "aio": defaults(Aio)}


@lru_cache(maxsize=1)
def _ds_top_keys() -> frozenset[str]:
    from tierlab.sim import strategy

    return frozenset(strategy.PASSTHROUGH_TOP)   # the top-level keys DeepSpeed reads


def key_kind(key: str) -> str:
    """'scenario' | 'batch' | 'flag' | 'hardware' | 'model' | 'ds'; unknown -> ConfigError."""
    if key in SCENARIO_KEYS:
        return "scenario"
    if key in BATCH_KEYS:
        return "batch"
    if key in FLAG_KEYS:
        return "flag"
    if key in HARDWARE_KEYS:
        return "hardware"
    if key in _model_fields():
        return "model"
    blocks = _ds_blocks()
    head, _, leaf = key.rpartition(".")
    if head in blocks and leaf in blocks[head]:
        return "ds"
    top = key.split(".", 1)[0]
    if top in _ds_top_keys() and top not in ("zero_optimization", "aio"):
        return "ds"               # passthrough keys (optimizer.params.lr, fp16.loss_scale, ...)
    known = list(all_keys())
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    hint = f"; closest: {', '.join(close)}" if close else ""
    raise ConfigError(f"unknown vary key {key!r}{hint} (tierlab sweep --list-keys lists them)")


def all_keys() -> dict[str, str]:
    """Every sweep key with a one-line description."""
    out = {k: f"scenario: {v}" for k, v in SCENARIO_KEYS.items()}
    out.update({k: f"batch: {v}" for k, v in BATCH_KEYS.items()})
    out.update({k: f"flag: {v}" for k, v in FLAG_KEYS.items()})
    for k, (_, dim, _) in HARDWARE_KEYS.items():
        out[k] = f"hardware: {dim}" + (f" (e.g. 8{DISPLAY_UNITS[dim][0]})" if dim not in
                                       ("count", "seconds") else " (e.g. 10us)" if dim ==
                                       "seconds" else "")
    out.update({k: f"model: {t.__name__}" for k, t in _model_fields().items()})
    for head, leaves in _ds_blocks().items():
        for leaf, default in leaves.items():
            out[f"{head}.{leaf}"] = f"ds_config (default {default!r})"
    return out


def key_unit(key: str) -> tuple[str, float]:
    """(display unit, scale) of a key's values, e.g. ('GB/s', 1e9); ('', 1) for plain numbers."""
    if key in HARDWARE_KEYS:
        return DISPLAY_UNITS[HARDWARE_KEYS[key][1]]
    return "", 1.0


# ----------------------------------------------------------------------------------------------
# values

_RANGE = re.compile(r"^\s*(-?\d+)\s*\.\.\s*(-?\d+)\s*(?::\s*(x?)(\d+(?:\.\d+)?))?\s*$")


def split_values(text: str) -> list[str]:
    """'1,2,{"a":1,"b":2}' -> ['1', '2', '{"a":1,"b":2}'] (commas inside brackets/quotes kept)."""
    out, depth, quote, cur = [], 0, False, ""
    for ch in text:
        if ch == '"':
            quote = not quote
        elif not quote and ch in "[{":
            depth += 1
        elif not quote and ch in "]}":
            depth -= 1
        if ch == "," and depth == 0 and not quote:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [v.strip() for v in out]


def _expand_range(token: str, where: str) -> list[str] | None:
    m = _RANGE.match(token)
    if not m:
        return None
    lo, hi, geometric, step = int(m.group(1)), int(m.group(2)), m.group(3) == "x", m.group(4)
    step_v = float(step) if step else (2.0 if geometric else 1.0)
    if hi < lo or (geometric and (step_v <= 1 or lo < 1)) or (not geometric and step_v < 1):
        raise ConfigError(f"{where}: bad range {token!r} (lo..hi, lo..hi:step, lo..hi:xFACTOR)")
    out, v = [], float(lo)
    while v <= hi and len(out) <= MAX_POINTS:
        out.append(str(int(round(v))))
        v = v * step_v if geometric else v + step_v
    return out


def _as_int(value: Any, where: str, minimum: int = 0) -> int:
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite integer, got {value!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{where}: must be >= {minimum}, got {value!r}")
    return int(value)


def _as_bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "on", "yes", "1"):
        return True
    if text in ("false", "off", "no", "0"):
        return False
    raise ConfigError(f"{where}: expected true/false, got {value!r}")


def parse_value(key: str, raw: Any, flag: str = "--vary") -> Any:
    """One value of `key`, from text (CLI) or a Python value (API); malformed -> ConfigError
    naming `flag` (--vary, or --hw for a what-if)."""
    from tierlab.units import parse_quantity
    from tierlab.sim.strategy import coerce, parse_value as parse_json

    where = f"{flag} {key}={raw}"
    kind = key_kind(key)
    text = raw.strip() if isinstance(raw, str) else raw
    if text == "" or text is None:
        raise ConfigError(f"{flag} {key}: empty value")
    if kind == "scenario":
        if not isinstance(text, str):
            raise ConfigError(f"{where}: expected a profile name or path")
        load_profile(key, text)           # unknown profile -> ConfigError now, not one error row each
        return text
    if kind == "batch":
        value = _as_int(parse_json(text) if isinstance(text, str) else text, where, minimum=1)
        return bounds.check(value, bounds.FLAGS[key], where) if key in bounds.FLAGS else value
    if kind == "flag":
        if key == "checkpointing":
            return _as_bool(text, where)
        check_precision(text, f"{where}: precision")
        return text
    if kind == "hardware":
        _, dim, typ = HARDWARE_KEYS[key]
        if isinstance(text, str):
            try:
                number = float(text)              # a plain number is in SI base units
            except ValueError:
                number = parse_quantity(text, dim, where)
        elif isinstance(text, (int, float)) and not isinstance(text, bool):
            number = float(text)
        else:
            raise ConfigError(f"{where}: expected a quantity")
        if not math.isfinite(number):
            raise ConfigError(f"{where}: not a finite number")
        bounds.check_quantity(number, dim, where)   # a profile's bound and rate floor, as loaded
        if typ is int:
            return _as_int(number, where)
        if number < 0:
            raise ConfigError(f"{where}: must be >= 0")
        return number
    if kind == "model":
        typ = _model_fields()[key]
        value = parse_json(text) if isinstance(text, str) else text
        if typ is int:
            value = _as_int(value, where, minimum=1)
            field = key.removeprefix("model.")
            return bounds.check(value, bounds.MODEL[field], where) if field in bounds.MODEL \
                else value
        if typ is bool:
            return _as_bool(value, where)
        return str(value)
    value = parse_json(text) if isinstance(text, str) else text     # ds_config key
    head, _, leaf = key.rpartition(".")
    default = _ds_blocks().get(head, {}).get(leaf)
    if leaf == "device":
        if value not in ("none", "cpu", "nvme"):
            raise ConfigError(f"{where}: device must be none, cpu or nvme")
    elif default is not None and not isinstance(default, str):
        value = coerce(value, default, where)
    if first_non_finite(value):
        raise ConfigError(f"{where}: not a finite number")
    if key in bounds.DS_CONFIG and value != "auto":
        bounds.check(value, bounds.DS_CONFIG[key], where)
    return value


@dataclass(frozen=True)
class Axis:
    """One swept key and its values, in the order given (duplicates dropped)."""

    key: str
    values: tuple


def make_axis(key: str, values: str | Iterable[Any]) -> Axis:
    """An axis from 'v1,v2,lo..hi' text or a list of Python values."""
    key = key.strip()
    key_kind(key)
    if isinstance(values, str):
        tokens: list[Any] = []
        for token in split_values(values):
            tokens.extend(_expand_range(token, f"--vary {key}") or [token])
    else:
        tokens = list(values)
    parsed, seen = [], set()
    for token in tokens:
        value = parse_value(key, token)
        try:                        # a set, not `in parsed`: 200,000 values stay linear
            mark = value
            if mark in seen:
                continue
            seen.add(mark)
        except TypeError:           # an unhashable value (a dict): compared one by one
            if value in parsed:
                continue
        parsed.append(value)
    if not parsed:
        raise ConfigError(f"--vary {key}: no values")
    return Axis(key, tuple(parsed))


def parse_vary(spec: str) -> Axis:
    """'nvme.drives=1,2,4,8' -> Axis('nvme.drives', (1, 2, 4, 8))."""
    if "=" not in spec:
        raise ConfigError(f"--vary {spec!r}: expected KEY=V1,V2,...")
    key, values = spec.split("=", 1)
    if not values.strip():
        raise ConfigError(f"--vary {spec!r}: no values after '='")
    return make_axis(key, values)


def make_grid(axes: Sequence[Axis]) -> list[dict[str, Any]]:
    """Cartesian product of the axes (first axis varies slowest)."""
    if not axes:
        raise ConfigError("empty grid: give at least one --vary KEY=V1,V2,...")
    keys = [a.key for a in axes]
    dup = {k for k in keys if keys.count(k) > 1}
    if dup:
        raise ConfigError(f"--vary {sorted(dup)[0]} given twice; list all its values in one --vary")
    size = 1
    for a in axes:
        size *= len(a.values)
    if size > MAX_POINTS:
        raise ConfigError(f"grid of {size:,} points is larger than {MAX_POINTS:,}")
    return [dict(zip(keys, combo)) for combo in itertools.product(*(a.values for a in axes))]


def iter_grid(axes: Sequence[Axis]) -> tuple[int, Iterator[dict[str, Any]]]:
    """(point count, the points of `make_grid` one at a time): a long sweep never holds its
    grid. Checked as make_grid checks it."""
    make_grid([dataclasses.replace(a, values=a.values[:1]) for a in axes])   # empty, twice
    size = math.prod(len(a.values) for a in axes)
    if size > MAX_POINTS:
        raise ConfigError(f"grid of {size:,} points is larger than {MAX_POINTS:,}")
    keys = [a.key for a in axes]
    return size, (dict(zip(keys, combo)) for combo in itertools.product(*(a.values for a in axes)))


DEFAULT_MAX_POINTS = 10_000
"""Most grid points a sweep runs unless told otherwise (`--max-points`): 10,000 simulated
points take about an hour on one core; `1..200000` is a typo, not a plan."""


def check_points(axes: Sequence[Axis], limit: int = DEFAULT_MAX_POINTS) -> int:
    """The grid's point count, stated before any work; above `limit` a ConfigError."""
    size = 1
    for a in axes:
        size *= len(a.values)
    if size > limit:
        shape = " x ".join(f"{len(a.values):,} {a.key}" for a in axes)
        raise ConfigError(f"--vary: the grid has {size:,} points ({shape}), more than "
                          f"--max-points {limit:,}; narrow it or raise --max-points")
    return size


@lru_cache(maxsize=64)
def _load_cached(kind: str, name: str):
    from tierlab.profiles.load import load_hardware, load_model
    from tierlab.dsconfig.read import load_ds_config

    return {"model": load_model, "hardware": load_hardware, "config": load_ds_config}[kind](name)


def load_profile(kind: str, name: str):
    value = _load_cached(kind, name)
    return copy.deepcopy(value) if kind == "config" else value
