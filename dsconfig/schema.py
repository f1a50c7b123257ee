"""DeepSpeed 0.19.8's ds_config key table without DeepSpeed: the vendored schema and a validator
that gives the verdicts DeepSpeed's own pydantic config models give.

The table (profiles/deepspeed/ds_config_schema.json) is written by `schema_from_deepspeed()`
(bench/vendor_ds_schema.py runs it) from the models DeepSpeed builds a ds_config with:
runtime/zero/config.py (DeepSpeedZeroConfig), runtime/zero/offload_config.py (offload_param,
offload_optimizer), runtime/zenflow/zenflow_config.py, runtime/zero/leaf_module_config.py,
runtime/precision_config.py (fp16, bf16), runtime/config_utils.py (DeepSpeedConfigModel: extra
keys forbidden, "auto" values dropped, deprecated fields mapped), runtime/config.py (removed
keys), runtime/swap_tensor/aio_config.py and runtime/activation_checkpointing/config.py (blocks
read key by key, unknown keys ignored). tests/test_ds_read.py checks the table equals a fresh
dump and that both give the same verdicts on every test config.

The rules below are pydantic 2's lax mode as DeepSpeed uses it: an int field takes 1e8 and "12",
not 5.5; a bool field takes 0/1 and "yes"/"off"; "auto" is dropped before validation
(DeepSpeedConfigModel.__init__ with strict=False).
"""
from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path
from typing import Any, Mapping

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "profiles" / "deepspeed" / \
    "ds_config_schema.json"
_BOOL_TEXT = {"0": False, "off": False, "f": False, "false": False, "n": False, "no": False,
              "1": True, "on": True, "t": True, "true": True, "y": True, "yes": True}


class Rejected(Exception):
    """DeepSpeed refuses the config: `loc` is the dotted key, `kind` the pydantic error type."""

    def __init__(self, loc: str, kind: str, detail: str):
        super().__init__(f"{loc}: {detail}")
        self.loc, self.kind, self.detail = loc, kind, detail

    @property
    def items(self) -> list["Rejected"]:
        """Every refusal (one here; Rejections holds several)."""
        return [self]


class Rejections(Rejected):
    """Several keys of one block refused at once (pydantic reports every field's error in one
    ValidationError; so does the table), sorted by key; the first is `loc`/`detail`."""

    def __init__(self, items: list[Rejected]):
        self.all = sorted({(r.loc, r.kind, r.detail): r for r in items}.values(),
                          key=lambda r: r.loc)
        first = self.all[0]
        super().__init__(first.loc, first.kind, first.detail)

    @property
    def items(self) -> list[Rejected]:
        return list(self.all)


def refused(items: list[Rejected]) -> None:
    """Raise nothing for [], the one Rejected, or Rejections for several."""
    if len(items) == 1:
        raise items[0]
    if items:
        raise Rejections(items)


@functools.lru_cache(maxsize=1)
def load_schema(path: str = str(SCHEMA_PATH)) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def ds_default(model: str, key: str) -> Any:
    """DeepSpeed 0.19.8's default of `key` (its documented name or alias) in config model
    `model` ('DeepSpeedZeroConfig', ...), or of a key read key by key (model 'aio',
    'activation_checkpointing'), or of a top-level scalar (model 'top_level'): the one home of
    DeepSpeed's defaults, the vendored table (tests hold it equal to a fresh dump)."""
    schema = load_schema()
    if model == "top_level":
        return schema["top_level_defaults"][key]
    if model in schema["read_key_by_key"]:
        return schema["read_key_by_key"][model][key]
    for name, spec in schema["models"][model]["fields"].items():
        if key in (name, spec.get("alias")):
            return spec["default"]
    raise KeyError(f"{model}.{key}")


# ----------------------------------------------------------------------------------------------
# the table's validator (the same verdicts as DeepSpeedConfigModel, without DeepSpeed)

def _int(value: Any, loc: str) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer():
            return int(value)
        raise Rejected(loc, "int_from_float", f"expected an integer, got {value!r}")
    if isinstance(value, str):          # "12", "1_000", "12.0"; not "5e8" (int_parsing)
        m = re.fullmatch(r"\s*([+-]?\d+(?:_\d+)*)(?:\.0*)?\s*", value)
        if m:
            return int(m.group(1))
    raise Rejected(loc, "int_parsing", f"expected an integer, got {value!r}")


def _float(value: Any, loc: str) -> float:
    if isinstance(value, (bool, int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise Rejected(loc, "float_parsing", f"expected a number, got {value!r}")


def ds_bool(value: Any, loc: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in _BOOL_TEXT:
        return _BOOL_TEXT[value.lower()]
    raise Rejected(loc, "bool_parsing", f"expected true/false, got {value!r}")


def _bounds(value: float, spec: Mapping, loc: str) -> None:
    for op, ok, word in (("gt", value > spec.get("gt", -math.inf), ">"),
                         ("ge", value >= spec.get("ge", -math.inf), ">="),
                         ("lt", value < spec.get("lt", math.inf), "<"),
                         ("le", value <= spec.get("le", math.inf), "<=")):
        if op in spec and not ok:
            raise Rejected(loc, f"{'greater' if op[0] == 'g' else 'less'}_than",
                           f"must be {word} {spec[op]}, got {value!r}")


def _value(value: Any, spec: Mapping, loc: str, schema: Mapping) -> Any:
    if value is None:
        if spec.get("optional"):
            return None
        raise Rejected(loc, "none", f"may not be null, got {value!r}")
    kind = spec["kind"]
    if kind == "model":
        return validate_model(spec["model"], value, loc, schema)
    if kind in ("int", "int_enum"):
        out = _int(value, loc)
    elif kind == "float":
        out = _float(value, loc)
    elif kind == "bool":
        return ds_bool(value, loc)
    elif kind == "str_enum":
        out = value
    elif kind in ("str", "path"):
        if not isinstance(value, str):
            raise Rejected(loc, "string_type", f"expected a string, got {value!r}")
        return value
    else:                                   # lists, unions: DeepSpeed checks them, we pass
        return value
    if "choices" in spec and out not in spec["choices"]:
        raise Rejected(loc, "enum", f"must be one of {', '.join(map(str, spec['choices']))}, "
                                    f"got {value!r}")
    if kind in ("int", "float"):
        _bounds(out, spec, loc)
    return out


def _keyed(fields: Mapping, block: Mapping, loc: str) -> list[tuple[str, str, Any]]:
    """[(key, field name, value)]: a field is given by its alias or its name (pydantic's
    populate_by_name); with both given, the alias wins and the name is an extra key."""
    names = {}
    for name, spec in fields.items():
        names[name] = name
        if spec.get("alias"):
            names[spec["alias"]] = name
    out, extra = [], []
    for key, value in block.items():
        name = names.get(key)
        alias = fields[name].get("alias") if name else None
        if name is None or (alias and key != alias and alias in block):
            extra.append(Rejected(f"{loc}.{key}" if loc else key, "extra_forbidden",
                                  "is not a key DeepSpeed 0.19.8 accepts here"))
        else:
            out.append((key, name, value))
    return out, extra


def validate_model(model: str, block: Any, loc: str, schema: Mapping | None = None) -> dict:
    """A DeepSpeedConfigModel's verdict on a block -> {field name: value} for the keys it set
    (deprecated keys mapped to their new ones). Raises Rejected."""
    schema = schema or load_schema()
    if not isinstance(block, Mapping):
        raise Rejected(loc, "model_type", f"expected an object, got {block!r}")
    fields = schema["models"][model]["fields"]
    given = {k: v for k, v in block.items() if v != "auto"}
    keyed, errors = _keyed(fields, given, loc)
    out = {}
    for key, name, value in keyed:          # every field's refusal, as pydantic reports them
        try:
            out[name] = _value(value, fields[name], f"{loc}.{key}" if loc else key, schema)
        except Rejected as r:
            errors += r.items
    refused(errors)
    for rule in schema["models"][model].get("checks", ()):
        _CHECKS[rule](out, given, loc)
    for name in [n for n in out if fields[n].get("deprecated")]:
        dep = fields[name]["deprecated"]
        value = out.pop(name)
        new = dep.get("new_param")
        if not new or not dep.get("set_new_param", True):
            continue
        if new in out:
            raise Rejected(f"{loc}.{name}" if loc else name, "deprecated_and_new",
                           f"cannot be given together with {new}")
        out[new] = value if dep["maps"] == "identity" else dep["maps"][str(bool(value)).lower()]
    return out


def _ratio_stage3(out: dict, given: Mapping, loc: str) -> None:
    """DeepSpeedZeroConfig.offload_ratio_check."""
    ratio = (out.get("offload_optimizer") or {}).get("ratio", 1.0)
    if ratio < 1.0 and out.get("stage", 0) != 3:
        raise Rejected(f"{loc}.offload_optimizer.ratio", "assertion_error",
                       "partial offloading (ratio < 1) needs stage 3")


def _grad_norm_stage(out: dict, given: Mapping, loc: str) -> None:
    """DeepSpeedZeroConfig.compute_grad_norm_valid."""
    if out.get("compute_grad_norm", True) is False and out.get("stage", 0) not in (1, 2):
        raise Rejected(f"{loc}.compute_grad_norm", "value_error",
                       "false is supported only with ZeRO stage 1 or 2")


def _fp16_scales(out: dict, given: Mapping, loc: str) -> None:
    """DeepSpeedFP16Config._validate_loss_scale, _reject_non_integer_scale_params (a bool is
    refused before pydantic would coerce it) and _validate_dynamic_loss_scale_params."""
    for key in ("loss_scale", "loss_scale_window", "min_loss_scale"):
        if isinstance(given.get(key), bool):
            raise Rejected(f"{loc}.{key}", "value_error", f"must be a number, not {given[key]}")
    if "loss_scale" in out and out["loss_scale"] < 0:
        raise Rejected(f"{loc}.loss_scale", "value_error", "must be >= 0")
    if out.get("enabled") and out.get("loss_scale", 0) == 0:
        for key, default in (("loss_scale_window", 1000), ("min_loss_scale", 1)):
            if out.get(key, default) <= 0:
                raise Rejected(f"{loc}.{key}", "value_error",
                               "must be > 0 when dynamic loss scaling is on (loss_scale 0)")


_CHECKS = {"offload_ratio_check": _ratio_stage3, "compute_grad_norm_valid": _grad_norm_stage,
           "fp16_loss_scale": _fp16_scales}


# ----------------------------------------------------------------------------------------------
# the table, from DeepSpeed itself

def _field_spec(info, models: dict) -> dict:
    import enum
    import typing
    from pathlib import PurePath

    from pydantic import BaseModel

    ann, spec = info.annotation, {}
    args = typing.get_args(ann)
    if typing.get_origin(ann) is typing.Union and type(None) in args:
        spec["optional"] = True
        rest = [a for a in args if a is not type(None)]
        ann = rest[0] if len(rest) == 1 else ann
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        spec.update(kind="model", model=ann.__name__)
        _model_spec(ann, models)
    elif isinstance(ann, type) and issubclass(ann, enum.Enum):
        values = [m.value for m in ann]
        spec.update(kind="int_enum" if isinstance(values[0], int) else "str_enum",
                    choices=sorted(set(values), key=values.index))
    elif ann in (bool, int, float, str):
        spec["kind"] = ann.__name__
    elif isinstance(ann, type) and issubclass(ann, PurePath):
        spec["kind"] = "path"
    else:
        spec["kind"] = "any"
    for meta in info.metadata:
        for op in ("gt", "ge", "lt", "le"):
            if getattr(meta, op, None) is not None:
                spec[op] = getattr(meta, op)
    if info.alias:
        spec["alias"] = info.alias
    default = getattr(info.default, "value", info.default)
    if default is None or isinstance(default, (bool, str, float)):
        spec["default"] = default
    elif isinstance(default, int):
        spec["default"] = int(default)
    extra = info.json_schema_extra or {}
    if extra.get("deprecated"):
        fn = extra.get("new_param_fn", lambda x: x)
        maps = {str(v).lower(): _dump(fn(v)) for v in (True, False)}
        spec["deprecated"] = {"new_param": extra.get("new_param", ""),
                              "set_new_param": extra.get("set_new_param", True),
                              "maps": "identity" if maps == {"true": True, "false": False}
                              else maps}
    return spec


def _dump(value):
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        return {k: getattr(getattr(value, k), "value", getattr(value, k))
                for k in value.model_fields_set}
    return value


def _model_spec(cls, models: dict) -> None:
    if cls.__name__ in models:
        return
    models[cls.__name__] = {}
    fields = {name: _field_spec(info, models) for name, info in cls.model_fields.items()}
    checks = [c for c in ("offload_ratio_check", "compute_grad_norm_valid")
              if c in cls.__pydantic_decorators__.model_validators]
    if cls.__name__ == "DeepSpeedFP16Config":
        checks.append("fp16_loss_scale")
    models[cls.__name__] = {"fields": fields, **({"checks": checks} if checks else {})}


def deepspeed_block_models() -> dict[str, type]:
    """Top-level block -> the DeepSpeedConfigModel DeepSpeedConfig builds from it
    (runtime/config.py _initialize_params and the getters it calls). Needs deepspeed."""
    from deepspeed.comm.config import CommsLoggerConfig
    from deepspeed.compile.config import CompileConfig
    from deepspeed.monitor.config import CometConfig, CSVConfig, TensorBoardConfig, WandbConfig
    from deepspeed.runtime.config import HybridEngineConfig
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    return {"zero_optimization": DeepSpeedZeroConfig, "fp16": DeepSpeedFP16Config,
            "bf16": DeepSpeedBF16Config, "tensorboard": TensorBoardConfig, "wandb": WandbConfig,
            "csv_monitor": CSVConfig, "comet": CometConfig, "comms_logger": CommsLoggerConfig,
            "hybrid_engine": HybridEngineConfig, "compile": CompileConfig}


def schema_from_deepspeed() -> dict:
    """The table, read off the installed DeepSpeed (needs deepspeed importable)."""
    import deepspeed
    from deepspeed.runtime import config as ds_config
    from deepspeed.runtime import constants
    from deepspeed.runtime.activation_checkpointing import config as act
    from deepspeed.runtime.swap_tensor import aio_config

    models: dict = {}
    blocks = deepspeed_block_models()
    for cls in blocks.values():
        _model_spec(cls, models)
    return {
        "deepspeed_version": deepspeed.__version__,
        "sources": ["deepspeed/runtime/zero/config.py", "deepspeed/runtime/zero/offload_config.py",
                    "deepspeed/runtime/zenflow/zenflow_config.py",
                    "deepspeed/runtime/zero/leaf_module_config.py",
                    "deepspeed/runtime/precision_config.py", "deepspeed/runtime/config_utils.py",
                    "deepspeed/monitor/config.py", "deepspeed/comm/config.py",
                    "deepspeed/compile/config.py",
                    "deepspeed/runtime/config.py", "deepspeed/runtime/swap_tensor/aio_config.py",
                    "deepspeed/runtime/activation_checkpointing/config.py"],
        "blocks": {k: v.__name__ for k, v in blocks.items()},
        "models": models,
        "removed_top_level": dict(ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS),
        "removed_zero": dict(ds_config._REMOVED_ZERO_CONFIG_KEYS),
        # runtime/constants.py: the top-level scalars DeepSpeedConfig reads with get_scalar_param
        "top_level_defaults": {
            "gradient_clipping": constants.GRADIENT_CLIPPING_DEFAULT,
            "zero_allow_untested_optimizer": constants.ZERO_ALLOW_UNTESTED_OPTIMIZER_DEFAULT,
            "zero_force_ds_cpu_optimizer": constants.ZERO_FORCE_DS_CPU_OPTIMIZER_DEFAULT,
            "steps_per_print": constants.STEPS_PER_PRINT_DEFAULT,
            "prescale_gradients": constants.PRESCALE_GRADIENTS_DEFAULT,
            "gradient_predivide_factor": constants.GRADIENT_PREDIVIDE_FACTOR_DEFAULT},
        "read_key_by_key": {"aio": dict(aio_config.AIO_DEFAULT_DICT),
                            "activation_checkpointing": dict(act.ACT_CHKPT_DEFAULT)},
    }
