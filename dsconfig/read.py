"""A ds_config read as DeepSpeed 0.19.8 reads it.

Text: hjson, as DeepSpeedConfig opens a config path (runtime/config.py): comments, trailing
commas and a BOM are fine; a duplicate key anywhere is refused, as DeepSpeed's
`dict_raise_error_on_duplicate_keys` hook refuses it (config_utils.py).

Keys: the blocks DeepSpeed builds pydantic models from (`zero_optimization` with its offload
blocks, `fp16`, `bf16`) are judged by DeepSpeed's own models when deepspeed is importable, else
by the vendored table of dsconfig/schema.py, with the same verdicts: aliases (`max_live_parameters`
for `stage3_max_live_parameters`) are read, deprecated keys mapped (`cpu_offload: true` ->
`offload_optimizer.device: cpu`), "auto" dropped to DeepSpeed's default, an unknown key refused
with the closest valid one named. Keys DeepSpeed 0.19.8 has removed (`amp`, `sparse_attention`,
`zero_optimization.mics_shard_size`, ...) are refused, as DeepSpeedConfig refuses them. Top-level
keys and `aio`/`activation_checkpointing` keys DeepSpeed does not read are ignored by DeepSpeed:
they are warnings here, with the closest key DeepSpeed reads.
"""
from __future__ import annotations

import copy

import difflib
import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Mapping

from tierlab.errors import ConfigError
from tierlab.dsconfig.schema import Rejected, load_schema, refused, validate_model

log = logging.getLogger(__name__)

TOP_LEVEL_KEYS = (
    # runtime/config.py DeepSpeedConfig._initialize_params and the getters it calls
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "managed_gradient_accumulation", "steps_per_print", "dump_state", "disable_python_gc",
    "disable_allgather", "communication_data_type", "seq_parallel_communication_data_type",
    "prescale_gradients", "gradient_predivide_factor", "gradient_allreduce_op",
    "zero_optimization", "activation_checkpointing", "comms_logger", "gradient_clipping", "fp16",
    "bf16", "bfloat16", "torch_autocast", "optimizer", "scheduler",
    "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "flops_profiler",
    "wall_clock_breakdown", "memory_breakdown", "autotuning", "use_data_before_expert_parallelism",
    "hybrid_engine", "pipeline", "data_efficiency", "checkpoint", "data_types", "aio",
    "dataloader_drop_last", "log_level", "datastates", "weight_quantization", "compile", "timers",
    "tensor_parallel", "expert_parallel", "sequence_parallel_size", "vocabulary_size",
    # monitor/config.py
    "tensorboard", "wandb", "csv_monitor", "comet",
)
HF_FILLED = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
             "gradient_clipping", "fp16.enabled", "bf16.enabled",
             "zero_optimization.reduce_bucket_size",
             "zero_optimization.stage3_prefetch_bucket_size",
             "zero_optimization.stage3_param_persistence_threshold")
"""The "auto" keys tierlab fills (from flags and the model), as transformers' HfDeepSpeedConfig
fills them (integrations/deepspeed.py trainer_config_process/finalize; the stage3_* pair only at
stage 3). Every other "auto" inside a DeepSpeed config model is dropped to DeepSpeed's default."""


HJSON_ONLY = "_tierlab_hjson_only"
"""The key `loads` sets on a config JSON would refuse: its warning, which parse_ds_config
reports with every other (a `_` key: DeepSpeed and ignored_keys read past it)."""

RETIRED = {"aio.thread_count": ("is ignored by DeepSpeed since 0.16.4",
                                "use aio.intra_op_parallelism")}
"""Keys DeepSpeed once read and now ignores: (why, what replaced them)."""


@dataclass(frozen=True)
class Reading:
    """The blocks as DeepSpeed reads them: {canonical key: value} for the keys the config sets
    (aliases -> DeepSpeed's documented `stage3_*` names, deprecations mapped, "auto" dropped)."""

    blocks: Mapping[str, Mapping[str, Any]]
    warnings: tuple[str, ...] = ()
    authority: str = ""
    """'deepspeed 0.19.8' (its own config models) or 'table 0.19.8' (dsconfig/schema.py)."""


# ----------------------------------------------------------------------------------------------
# text

def loads(text: str, where: str) -> dict:
    """hjson text -> dict, as DeepSpeedConfig(path) parses it (hjson.load, duplicate keys
    refused). Without the hjson package (a dependency of tierlab and of DeepSpeed), plain JSON
    is read and anything else is one line saying that hjson is missing. Raises ConfigError."""
    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        dup = sorted({k for k in keys if keys.count(k) > 1})
        if dup:
            raise ConfigError(f"{where}: duplicate key {', '.join(map(repr, dup))} (DeepSpeed "
                              "0.19.8 refuses a ds_config with duplicate keys)")
        return dict(pairs)

    try:
        import hjson
    except ImportError:
        return _loads_json(text.lstrip("\ufeff"), where, no_duplicates)
    try:
        data = hjson.loads(text.lstrip("\ufeff"), object_pairs_hook=no_duplicates)
    except hjson.HjsonDecodeError as e:
        raise ConfigError(f"{where}: malformed JSON at line {e.lineno} column {e.colno}: "
                          f"{e.msg} (read as hjson, as DeepSpeed reads it)") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply") from None
    except OverflowError:     # hjson 3.1 crashes on 1e400 (int(inf)); so does DeepSpeed's reading
        return _overflow(text.lstrip("\ufeff"), where, no_duplicates)
    _top_level_object(data, where)
    try:
        json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        if data and not any(k in TOP_LEVEL_KEYS for k in data):
            # hjson reads nearly any text as an object ('root:x:0:0:...' of /etc/passwd is one
            # key): not JSON and no key DeepSpeed reads is not a ds_config
            raise ConfigError(f"{where}: not a ds_config: not JSON, and read as hjson it holds "
                              f"no key DeepSpeed 0.19.8 reads (first: "
                              f"{str(next(iter(data)))[:40]!r})")
        data[HJSON_ONLY] = (f"{where}: DeepSpeed reads this hjson (comments, trailing commas or "
                            "a BOM) from a path, but the HF Trainer and accelerate load a "
                            "ds_config file with json.load and refuse it")
    return data


def _loads_json(text: str, where: str, hook) -> dict:
    """`loads` without the hjson package: JSON only."""
    try:
        data = json.loads(text, object_pairs_hook=hook)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where}: not JSON (line {e.lineno} column {e.colno}: {e.msg}); "
                          "DeepSpeed reads a ds_config as hjson (comments, unquoted keys), but "
                          "the hjson package is not installed: pip install hjson") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply") from None
    _top_level_object(data, where)
    return data


def _overflow(text: str, where: str, hook) -> dict:
    """A number hjson cannot hold (1e400): named by its key where the text is also JSON."""
    from tierlab.safeio import check_finite

    try:
        data = json.loads(text, object_pairs_hook=hook)
    except (json.JSONDecodeError, RecursionError):
        raise ConfigError(f"{where}: a number too large for a float (such as 1e400); hjson, "
                          "which DeepSpeed reads a ds_config with, fails on it too") from None
    check_finite(data, where)
    return data


def _top_level_object(data, where: str) -> None:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: the top level must be an object")


# ----------------------------------------------------------------------------------------------
# keys

def _deepspeed():
    """DeepSpeed's config modules, or None without deepspeed (a core install)."""
    import logging

    # importing deepspeed on a machine without a GPU logs "Setting accelerator to CPU" to
    # stdout (its logger's handler): not news for a simulator, and it would break --json
    quiet = logging.Filter("nothing")      # passes no record named "DeepSpeed"
    ds_log = logging.getLogger("DeepSpeed")
    ds_log.addFilter(quiet)
    try:
        import deepspeed  # noqa: F401   (imports torch: ~2 s, once per process)
        from deepspeed.runtime import config as ds_config

        from tierlab.dsconfig.schema import deepspeed_block_models
        models = deepspeed_block_models()
    except ImportError:
        return None
    finally:
        ds_log.removeFilter(quiet)
    return {**models, "removed_top_level": ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS,
            "removed_zero": ds_config._REMOVED_ZERO_CONFIG_KEYS,
            "version": deepspeed.__version__}


def authority(prefer: str = "auto") -> str:
    """'deepspeed' when importable (and not told otherwise), else 'table'."""
    if prefer == "table":
        return "table"
    if prefer == "deepspeed" or _deepspeed() is not None:
        return "deepspeed"
    return "table"


def _canonical(model: str, out: Mapping[str, Any], schema: Mapping) -> dict:
    """{field name: value} -> {alias or name: value}, nested models too; overlap_comm None
    (DeepSpeed's stage-dependent default) dropped."""
    fields = schema["models"][model]["fields"]
    res = {}
    for name, value in out.items():
        spec = fields[name]
        if name == "overlap_comm" and value is None:
            continue
        if spec["kind"] == "model" and isinstance(value, Mapping):
            value = _canonical(spec["model"], value, schema)
        elif spec["kind"] == "path" and value is not None:
            from pathlib import PurePath
            value = str(PurePath(value))
        res[spec.get("alias") or name] = value
    return res


def _given_fields(obj, block: Mapping) -> dict:
    """A DeepSpeed config model instance -> {field name: value} of the fields the block set
    (after DeepSpeed's own deprecation mapping)."""
    from enum import Enum

    from pydantic import BaseModel

    cls = type(obj)
    out = {}
    for name in sorted(obj.model_fields_set):       # a set: sorted, so messages do not vary
        info = cls.model_fields[name]
        if (info.json_schema_extra or {}).get("deprecated"):
            continue
        if name == "overlap_comm" and block.get("overlap_comm") is None:
            continue
        value = getattr(obj, name)
        if isinstance(value, BaseModel):
            sub = block.get(info.alias or name, block.get(name))
            value = _given_fields(value, sub if isinstance(sub, Mapping) else {})
        elif isinstance(value, Enum):
            value = value.value
        out[name] = value
    return out


def _where_in_message(model_cls, msg: str, loc: str) -> str:
    """A model-level error has no field in pydantic's loc: take the field its message names."""
    if "Partial offloading" in msg:
        return f"{loc}.offload_optimizer.ratio"
    m = re.search(r"deprecated parameter '(\w+)'", msg)
    if m:
        return f"{loc}.{m.group(1)}"
    for name in sorted(model_cls.model_fields, key=len, reverse=True):
        if re.search(rf"\b{re.escape(name)}\b", msg):
            return f"{loc}.{name}"
    return loc


def _by_deepspeed(ds, block_name: str, block: Mapping) -> dict:
    import logging

    import pydantic

    cls = ds[block_name]
    ds_log = logging.getLogger("DeepSpeed")   # its deprecation lines: ours say the same, once
    level = ds_log.level
    ds_log.setLevel(logging.ERROR)
    try:
        obj = cls(**block)
    except pydantic.ValidationError as e:
        items = []
        for err in e.errors():          # every key pydantic refuses, not the first only
            path = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Assertion failed, ").removeprefix("Value error, ")
            where = f"{block_name}.{path}" if path else _where_in_message(cls, msg, block_name)
            items.append(Rejected(where, err["type"], msg))
        refused(items)
    except (AssertionError, ValueError, TypeError) as e:
        raise Rejected(_where_in_message(cls, str(e), block_name), "assertion_error",
                       str(e)) from None
    finally:
        ds_log.setLevel(level)
    return _given_fields(obj, block)


def _closest(key: str, options) -> str:
    near = _near(key, options)
    return f" (did you mean {near!r}?)" if near else ""


def _message(r: Rejected, where: str, schema: Mapping) -> str:
    if r.kind == "extra_forbidden":
        parts = r.loc.split(".")
        model = schema["blocks"].get(parts[0])
        for part in parts[1:-1]:
            if model:
                spec = schema["models"][model]["fields"].get(part) or next(
                    (s for s in schema["models"][model]["fields"].values()
                     if s.get("alias") == part), {})
                model = spec.get("model")
        valid = []
        if model:
            for name, spec in schema["models"][model]["fields"].items():
                if not spec.get("deprecated"):
                    valid.append(spec.get("alias") or name)
        return (f"{r.loc} is not a key DeepSpeed 0.19.8 accepts (its config model "
                f"forbids unknown keys){_closest(parts[-1], valid)}")
    return f"{r.loc}: {r.detail} (DeepSpeed 0.19.8 refuses it)"


def _worded(r: Rejected, model: str, block: Mapping, name: str, schema: Mapping) -> list[
        Rejected]:
    """DeepSpeed's refusals in the table's words (one wording whichever is the authority) where
    the table refuses the same key; else DeepSpeed's own."""
    try:
        validate_model(model, block, name, schema)
        table = {}
    except Rejected as t:
        table = {x.loc: x for x in t.items}
    return [table.get(x.loc, x) for x in r.items]


def legacy_blocks(cfg: Mapping[str, Any], where: str = "ds_config") -> tuple[dict, list[str]]:
    """(cfg with the old block formats read as DeepSpeed reads them, warnings): before anything
    judges a block, e.g. the precision (`bfloat16: {enabled: true}` trains in bf16)."""
    warnings: list[str] = []
    return _legacy_blocks(dict(cfg), warnings, where), warnings


def _legacy_blocks(cfg: dict, warnings: list[str], where: str) -> dict:
    """`zero_optimization: true` (DeepSpeed's old format: stage 1) and `bfloat16` (the old name
    of bf16, read when bf16 is absent or null: precision_config.py get_bfloat16_config), as
    runtime/zero/config.py and precision_config.py read them."""
    cfg = dict(cfg)
    if isinstance(cfg.get("zero_optimization"), bool):
        on = cfg["zero_optimization"]
        cfg["zero_optimization"] = ({"stage": 1, "allgather_bucket_size":
                                     cfg.get("allgather_size", 500_000_000)} if on else {})
        warnings.append(f"{where}: zero_optimization: {str(on).lower()} is DeepSpeed's deprecated "
                        f"format; read as stage {1 if on else 0}")
    if cfg.get("bf16") is None and "bfloat16" in cfg:
        cfg["bf16"] = cfg.pop("bfloat16")
        warnings.append(f"{where}: bfloat16 is the old name of bf16; read as bf16")
    return cfg


@dataclass(frozen=True)
class Ignored:
    """A key DeepSpeed 0.19.8 reads past (it ignores it)."""

    key: str
    """Dotted: 'monitor_config', 'aio.queue_dept'."""
    why: str
    """'is not a key DeepSpeed 0.19.8 reads; it ignores it' or what replaced it."""
    closest: str = ""
    """The closest key DeepSpeed reads there, or ''."""
    fix: str = ""
    """What replaced a retired key, or ''."""

    @property
    def in_block(self) -> bool:
        """Inside a block DeepSpeed reads (a typo, most likely), not at the top level (often
        another tool's key)."""
        return "." in self.key

    def text(self) -> str:
        return f"{self.key} {self.why}" + (f"; {self.fix}" if self.fix else
                                           f" (did you mean {self.closest!r}?)"
                                           if self.closest else "")


def _near(key: str, options) -> str:
    near = difflib.get_close_matches(key, list(options), n=1, cutoff=0.6)
    return near[0] if near else ""


def ignored_keys(cfg: Mapping[str, Any]) -> list[Ignored]:
    """The keys of `cfg` DeepSpeed 0.19.8 ignores: top-level keys it does not read, `aio` and
    `activation_checkpointing` keys it does not read (it reads those blocks key by key), and
    keys it once read (RETIRED). Preflight and the warnings both take them from here."""
    schema = load_schema()
    unread = "is not a key DeepSpeed 0.19.8 reads; it ignores it"
    out = [Ignored(key, unread, _near(key, TOP_LEVEL_KEYS)) for key in cfg
           if key not in TOP_LEVEL_KEYS and not key.startswith("_")]
    for block, defaults in schema["read_key_by_key"].items():
        if isinstance(cfg.get(block), Mapping):
            for key in cfg[block]:
                dotted = f"{block}.{key}"
                if dotted in RETIRED:
                    out.append(Ignored(dotted, *RETIRED[dotted][:1], fix=RETIRED[dotted][1]))
                elif key not in defaults:
                    out.append(Ignored(dotted, unread, _near(key, defaults)))
    return out


def _deprecations(block_name: str, block: Mapping, schema: Mapping, where: str) -> list[str]:
    out = []
    fields = schema["models"][schema["blocks"][block_name]]["fields"]
    for key in block:
        dep = (fields.get(key) or {}).get("deprecated")
        if dep and block[key] != "auto":
            new = dep["new_param"]
            maps = dep["maps"]
            how = (f"read as {new}" if maps == "identity" else
                   f"read as {new}={maps[str(bool(block[key])).lower()]}"
                   if dep.get("set_new_param", True) else f"ignored; set {new} instead")
            out.append(f"{where}: {block_name}.{key} is deprecated in DeepSpeed 0.19.8: {how}")
    return out


def read(cfg: Mapping[str, Any], where: str = "ds_config", prefer: str = "auto") -> tuple[
        dict, Reading]:
    """(cfg with legacy blocks renamed, Reading). `prefer`: 'auto' (DeepSpeed when importable),
    'deepspeed' or 'table'. Raises ConfigError naming the key DeepSpeed refuses."""
    schema = load_schema()
    warnings: list[str] = []
    cfg = _legacy_blocks(cfg, warnings, where)
    ds = _deepspeed() if authority(prefer) == "deepspeed" else None
    if prefer == "deepspeed" and ds is None:
        raise ConfigError("deepspeed is not importable")
    removed_top = ds["removed_top_level"] if ds else schema["removed_top_level"]
    removed_zero = ds["removed_zero"] if ds else schema["removed_zero"]
    # every key DeepSpeed refuses, in one pass (one line, "; " between them)
    problems = [f"{key}: DeepSpeed 0.19.8 refuses it: {why.strip()}"
                for key, why in removed_top.items() if key in cfg]
    zero = cfg.get("zero_optimization")
    problems += [f"zero_optimization.{key}: DeepSpeed 0.19.8 refuses it: {why.strip()}"
                 for key, why in removed_zero.items() if isinstance(zero, Mapping) and key in zero]
    blocks = {}
    for name, model in schema["blocks"].items():
        if name in cfg and cfg[name] is None and name != "bf16":   # bf16: null -> bfloat16/{}
            problems.append(f"{name}: null (DeepSpeed 0.19.8 refuses it: it builds its config "
                            "from an object)")
            continue
        block = cfg.get(name) or {}
        if not isinstance(block, Mapping):
            problems.append(f"{name} must be an object, got {block!r}")
            continue
        try:
            out = (_by_deepspeed(ds, name, block) if ds else
                   validate_model(model, block, name, schema))
        except Rejected as r:
            items = _worded(r, model, block, name, schema) if ds else r.items
            problems += [_message(x, where, schema) for x in items]
            continue
        blocks[name] = _canonical(model, out, schema)
        warnings += _deprecations(name, block, schema, where)
    if problems:
        raise ConfigError(f"{where}: " + "; ".join(problems))
    warnings += [f"{where}: {i.text()}" for i in ignored_keys(cfg)]
    label = f"deepspeed {ds['version']}" if ds else f"table {schema['deepspeed_version']}"
    return cfg, Reading(blocks=blocks, warnings=tuple(warnings), authority=label)


# ----------------------------------------------------------------------------------------------
# files and paths

def load_ds_config(name: str) -> tuple[dict, str]:
    """A ds_config preset by name or a JSON/hjson file path -> (dict, where it came from).
    Parsed once per file and process (profiles/load.cached_document): a sweep over presets
    parses each once."""
    from tierlab.profiles.load import cached_document, find_config

    path = find_config(name)
    return cached_document(path, lambda: _parse_file(path), ("ds_config",)), str(path)


def _parse_file(path) -> dict:
    from tierlab.safeio import MAX_DATA_BYTES, check_finite, decode, read_bytes

    # hjson, as DeepSpeedConfig reads a config path: comments, trailing commas, a BOM; a
    # duplicate key is refused; at most MAX_DATA_BYTES, as every JSON/YAML input (a 200 MB
    # file is not a ds_config, and hjson takes minutes over it)
    text = decode(read_bytes(path, MAX_DATA_BYTES), str(path))
    if not text.strip():      # hjson reads an empty file as {}: DeepSpeed's defaults, unasked
        raise ConfigError(f"{path}: empty file, expected a ds_config JSON object")
    try:
        data = check_finite(loads(text, str(path)), str(path))
    except ConfigError:
        raise
    except ValueError as e:           # an integer of more than 4300 digits
        raise ConfigError(f"{path}: malformed JSON: {e}") from None
    return dict(data)


def with_swap_dir(ds_config: Mapping[str, Any], directory: str) -> dict:
    """A copy with every NVMe offload pointed at `directory`."""
    cfg = copy.deepcopy(dict(ds_config))
    zero = cfg.get("zero_optimization") or {}
    for key in ("offload_param", "offload_optimizer"):
        block = zero.get(key)
        if isinstance(block, dict) and block.get("device") == "nvme":
            block["nvme_path"] = str(directory)
    return cfg
