"""Load hardware/model/config profiles: YAML/JSON data -> typed, SI-unit dataclasses.

Every number in a hardware YAML is `{value: "<number> <unit>", source: "<where it came from>"}`;
units are converted here, once. Unknown and missing keys are rejected with the file and key named.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import stat
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Mapping

from tierlab.bounds import ATTENTION_WINDOW, MODEL, check, check_model, check_quantity
from tierlab.errors import ConfigError
from tierlab.safeio import read_data as safe_read_data
from tierlab.units import parse_quantity, unit_of
from tierlab.profiles.fields import SOFTWARE_TERMS, HardwareField, part_fields
from tierlab.profiles.schema import CPU, GPU, Hardware, Model, Network, NVMe, PCIe, Software
from tierlab.profiles.ranges import default_range

ROOT = Path(__file__).resolve().parent
HARDWARE_DIR = ROOT / "hardware"
MODELS_DIR = ROOT / "models"
CONFIGS_DIR = ROOT / "configs"
SOFTWARE_DIR = ROOT / "software"
DEEPSPEED_VERSION = "0.19.8"
"""The DeepSpeed release the simulator models and the runner pins (setup.cfg's `deepspeed==`, the
vendored ds_config table and the stock software profile agree with it: tests/test_package_data.py)."""
DEFAULT_SOFTWARE = f"deepspeed-{DEEPSPEED_VERSION}"
PRESET_LADDER = ("no-offload", "zero2-cpu", "zero3-cpu", "zero3-nvme")
"""The shipped presets from no offload to ZeRO-Infinity, in order: the built-in comparison of
`simulate`/`plot`, `compare`'s variants and the docs' figures (each is profiles/configs/NAME.json)."""
PROFILES_ENV = "TIERLAB_PROFILES"
"""Folders of your own hardware profiles (each holding hardware/systems, gpus, cpus, nvme), searched
by name before the shipped ones; several are separated by ':' (os.pathsep)."""

def parse_range(entry: Any, value_text: Any, value: float, dimension: str,
                where: str) -> tuple[float, float]:
    """`range: [low, high]` beside `value`: each in the value's unit (a bare number is read in
    it), finite, low <= value <= high -> (low, high) in SI units."""
    where = f"{where}.range"
    if not isinstance(entry, (list, tuple)) or len(entry) != 2:
        raise ConfigError(f"{where}: expected [low, high], got {entry!r}")
    unit, out = unit_of(value_text), []
    for bound in entry:
        if isinstance(bound, bool):
            raise ConfigError(f"{where}: expected a quantity, got {bound!r}")
        if isinstance(bound, (int, float)):
            bound = f"{bound!r} {unit}".strip()
        elif unit_of(bound) != unit:
            raise ConfigError(f"{where}: {bound!r} must be in the value's unit "
                              f"({unit or 'no unit'})")
        number = parse_quantity(bound, dimension, where)
        if not math.isfinite(number):
            raise ConfigError(f"{where}: {bound!r} is not finite")
        out.append(number)
    low, high = out
    if not low <= value <= high:
        raise ConfigError(f"{where}: need low <= value <= high, got [{entry[0]}, {entry[1]}] "
                          f"around {value_text}")
    return low, high


DOCUMENT_CACHE_SIZE = 256
"""Parsed files `cached_document` keeps (least recently used dropped): every file a process
resolves, many times over in a sweep or a plan, is parsed once (issue 32). A file over
DOCUMENT_CACHE_MAX_BYTES (no profile is near it) is parsed each time it is read."""
DOCUMENT_CACHE_MAX_BYTES = 2**20

_documents: OrderedDict[tuple, Any] = OrderedDict()


def clear_document_cache() -> None:
    """Forget every parsed file (benchmarks time a cold resolve with it)."""
    _documents.clear()


SETTLED_NS = 2_000_000_000
"""A file modified less than 2 s ago is parsed again each time, never cached: a rewrite within the
file system's timestamp granularity (1-2 s on some) may leave mtime and size as they were (git's
'racy' index entries, the same rule)."""


def _stamp(path: Path) -> tuple | None:
    """(resolved path, device, inode, mtime_ns, size) of a regular file settled for SETTLED_NS,
    or None (missing, special, unreadable: the parser says why; just written or large: read
    uncached)."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size > DOCUMENT_CACHE_MAX_BYTES \
            or time.time_ns() - st.st_mtime_ns < SETTLED_NS:
        return None
    return real, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size


def _copied(data: Any) -> Any:
    """A fresh copy of parsed YAML/JSON data: its dicts, lists and sets new, the scalars (str,
    numbers, dates, bytes: immutable) shared, so a caller never edits the cached document."""
    if isinstance(data, dict):
        return {k: _copied(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_copied(v) for v in data]
    if isinstance(data, set):
        return set(data)
    return data


def cached_document(path: str | Path, parse: Callable[[], Any], tag: tuple = ()) -> Any:
    """`parse()` of the file at `path`, parsed once per (resolved path, inode, mtime_ns, size,
    `tag`) and process: a later call returns a copy of the cached document (an edited file, with
    a new mtime or size, is parsed again; one modified in the last SETTLED_NS, a special file or
    one over DOCUMENT_CACHE_MAX_BYTES is never cached, nor a file that changes while it is
    parsed). `tag` names the reading (a parser and its options: the same file read as YAML data
    and as a ds_config are two documents). Errors are raised, never cached."""
    before = _stamp(Path(path))
    key = None if before is None else (*before, *tag)
    if key is not None and key in _documents:
        _documents.move_to_end(key)
        return _copied(_documents[key])
    data = parse()
    if key is not None and _stamp(Path(path)) == before:
        _documents[key] = _copied(data)
        if len(_documents) > DOCUMENT_CACHE_SIZE:
            _documents.popitem(last=False)
    return data


def read_data(path: Path, *, finite: bool = True,
              parse: Callable[..., Any] = safe_read_data) -> Any:
    """Read a YAML or JSON file; a missing, non-UTF-8, malformed or (unless `finite` is off)
    non-finite (NaN/1e400) file is a one-line ConfigError (tierlab.safeio, the one input layer).
    Parsed once per file and process (`cached_document`). `parse(path, finite=)`: the parser
    (tierlab.safeio.read_data; a test counts its calls)."""
    return cached_document(path, lambda: parse(path, finite=finite), ("data", finite))


class _Reader:
    """Reads one profile mapping, tracking which keys were used and collecting sources."""

    def __init__(self, data: Any, where: str):
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
        self.data, self.where, self.used, self.sources = data, where, set(), {}
        self.ranges: dict[str, tuple[float, float]] = {}

    def raw(self, key: str, required: bool = True, default: Any = None) -> Any:
        self.used.add(key)
        if key not in self.data:
            if required:
                raise ConfigError(f"{self.where}: missing key {key!r}")
            return default
        return self.data[key]

    def number(self, key: str, dimension: str, required: bool = True, field: str | None = None):
        entry = self.raw(key, required)
        if entry is None and required and key in self.data:     # `adam_throughput:` (null)
            raise ConfigError(f"{self.where}: {key}: expected {{value: ..., source: ...}}, "
                              "got null")
        if entry is None:
            return None
        where = f"{self.where}: {key}"
        if not isinstance(entry, Mapping) or not {"value", "source"} <= set(entry) \
                or set(entry) - {"value", "source", "range"}:
            raise ConfigError(f"{where}: expected {{value: ..., source: ...}} (and an optional "
                              f"range: [low, high]), got {entry!r}")
        if not str(entry["source"]).strip():
            raise ConfigError(f"{where}: empty source")
        name = field or key
        self.sources[name] = str(entry["source"])
        value = check_quantity(parse_quantity(entry["value"], dimension, where), dimension, where)
        span = (parse_range(entry["range"], entry["value"], value, dimension, where)
                if "range" in entry else default_range(name, value, self.sources[name]))
        if span is not None:
            self.ranges[name] = span
        return value

    def count(self, key: str, required: bool = True, default: int | None = None) -> int | None:
        """A whole-number count: `{value: 16, source: ...}`; absent -> default."""
        value = self.number(key, "count", required)
        if value is None:
            return default
        if value != int(value):
            raise ConfigError(f"{self.where}: {key} must be a whole number, got {value}")
        return int(value)

    def row(self, f: HardwareField) -> Any:
        """One row of the field table (profiles/fields.py) from this mapping: a count is a whole
        number; an optional key that is absent gives the row's default."""
        if f.dimension == "count":
            return self.count(f.key, f.required, f.default)
        value = self.number(f.key, f.dimension, f.required, field=f.field)
        return f.default if value is None else value

    def part(self, part: str, cls: type) -> dict[str, Any]:
        """{field: value} of every plain (not nested) row of `part`, read in the order of
        dataclass `cls`'s fields (so the first bad key of a file is the one reported)."""
        rows = {f.field: f for f in part_fields(part) if "." not in f.key}
        return {f.name: self.row(rows[f.name]) for f in dataclasses.fields(cls) if f.name in rows}

    def done(self) -> None:
        extra = set(self.data) - self.used
        if extra:
            raise ConfigError(f"{self.where}: unknown key {sorted(extra)[0]!r}")


def _gpu(data: Any, where: str) -> GPU:
    r = _Reader(data, where)
    r.raw("kind")
    flops_block = _Reader(r.raw("peak_flops"), f"{where}: peak_flops")
    peak = {}
    for f in part_fields("gpu"):
        block, _, dtype = f.key.partition(".")
        if block == "peak_flops":
            value = flops_block.number(dtype, f.dimension, required=f.required, field=f.field)
            if value is not None:
                peak[dtype] = value
    flops_block.done()
    eff = _Reader(r.raw("matmul_efficiency"), f"{where}: matmul_efficiency")
    points = eff.raw("points")
    eff_source = eff.raw("source")
    if not isinstance(eff_source, str) or not eff_source.strip():
        raise ConfigError(f"{where}: matmul_efficiency: empty source")
    r.sources["matmul_efficiency"] = eff_source
    _curve_range(r, eff, "matmul_efficiency", eff_source, where)
    eff.done()
    try:
        curve = tuple(sorted((float(f), float(e)) for f, e in points))
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: matmul_efficiency.points must be [[flops, efficiency], ...]")
    gpu = GPU(name=str(r.raw("name")), **r.part("gpu", GPU), peak_flops=peak, matmul_efficiency=curve,
              layer_time_curve=_layer_time_curve(r, where),
              sources={**r.sources, **flops_block.sources},
              ranges={**r.ranges, **flops_block.ranges})
    r.done()
    return gpu


def _layer_time_curve(r: "_Reader", where: str) -> tuple:
    """`layer_time: {source: ..., points: [[modelled fwd s, fwd s, bwd s], ...]}` (optional)."""
    block = r.raw("layer_time", required=False)
    if block is None:
        return ()
    lt = _Reader(block, f"{where}: layer_time")
    source, points = lt.raw("source"), lt.raw("points")
    lt.done()
    if not isinstance(source, str) or not source.strip():
        raise ConfigError(f"{where}: layer_time: empty source")
    try:
        curve = tuple(sorted((float(a), float(b), float(c)) for a, b, c in points))
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: layer_time.points must be [[modelled s, forward s, "
                          f"backward s], ...]") from None
    r.sources["layer_time_curve"] = source
    return curve


def gpu_from_data(data: Any, where: str) -> GPU:
    """A GPU from a profile document already in memory (calibrate checks what it writes)."""
    return _wrap(_gpu, data, where)


def _curve_range(r: _Reader, block: _Reader, name: str, source: str, where: str) -> None:
    """A measured curve's optional `range: [low, high]`: factors on every point of the curve
    (e.g. [0.9, 1.05]); without one, the default of its source kind."""
    given = block.raw("range", required=False)
    span = (parse_range(given, 1.0, 1.0, "count", f"{where}: {name}") if given is not None
            else default_range(name, 1.0, source))
    if span is not None:
        r.ranges[name] = span


def _cpu(data: Any, where: str) -> CPU:
    r = _Reader(data, where)
    r.raw("kind")
    cpu = CPU(name=str(r.raw("name")), **r.part("cpu", CPU),
              host_costs=_host_costs(r, data.get("deepspeed_host_costs")
                                     if isinstance(data, dict) else None, where),
              sources=r.sources, ranges=r.ranges)
    r.done()
    return cpu


def _host_costs(r: _Reader, block: Any, where: str) -> dict[str, float]:
    """A CPU profile's `deepspeed_host_costs: {KEY: {value: 0.1 ms, source: ...}}` -> {field: s};
    their sources and ranges go into `r`'s as `host_costs.FIELD`."""
    if block is None:
        return {}
    r.raw("deepspeed_host_costs")
    if not isinstance(block, dict):
        raise ConfigError(f"{where}: deepspeed_host_costs must be a mapping of terms")
    out = {}
    for key, entry in block.items():
        if key not in _HOST_COSTS_BY_KEY:
            raise ConfigError(f"{where}: deepspeed_host_costs.{key}: unknown term; one of "
                              f"{', '.join(sorted(_HOST_COSTS_BY_KEY))}")
        t = _HOST_COSTS_BY_KEY[key]
        term = _Reader({key: entry}, f"{where}: deepspeed_host_costs")
        out[t.field] = term.number(key, t.dimension, field=f"host_costs.{t.field}")
        term.done()
        r.sources.update(term.sources)
        r.ranges.update(term.ranges)
    return out


def _nvme(data: Any, where: str) -> NVMe:
    r = _Reader(data, where)
    r.raw("kind")
    drive = NVMe(name=str(r.raw("name")), **r.part("nvme", NVMe),
                 aio_points=_aio_points(r, where), sources=r.sources, ranges=r.ranges)
    r.done()
    return drive


def _aio_points(r: "_Reader", where: str) -> tuple:
    """Optional `aio_points: {source: ..., points: [[block_size, queue_depth,
    intra_op_parallelism, "read GB/s", "write GB/s"], ...]}`."""
    block = r.raw("aio_points", required=False)
    if block is None:
        return ()
    a = _Reader(block, f"{where}: aio_points")
    source, points = a.raw("source"), a.raw("points")
    if not isinstance(source, str) or not source.strip():
        raise ConfigError(f"{where}: aio_points: empty source")
    r.sources["aio_points"] = source
    _curve_range(r, a, "aio_points", source, where)
    a.done()
    if not isinstance(points, list) or not points:
        raise ConfigError(f"{where}: aio_points.points must be a non-empty list")
    out = []
    for i, pt in enumerate(points):
        at = f"{where}: aio_points.points[{i}]"
        if not isinstance(pt, list) or len(pt) != 5:
            raise ConfigError(f"{at}: expected [block_size, queue_depth, intra_op_parallelism, "
                              f"read, write], got {pt!r}")
        ints = [parse_quantity(v, "count", at) for v in pt[:3]]
        if any(v != int(v) for v in ints):
            raise ConfigError(f"{at}: block_size, queue_depth, intra_op_parallelism must be whole")
        rates = [parse_quantity(v, "bytes/s", at) for v in pt[3:]]
        out.append((*map(int, ints), *rates))
    return tuple(out)


def _pcie(data: Any, where: str) -> PCIe:
    r = _Reader(data, where)
    link = PCIe(**r.part("pcie", PCIe), sources=r.sources, ranges=r.ranges)
    r.done()
    return link


def _network(data: Any, where: str) -> Network:
    r = _Reader(data, where)
    net = Network(**r.part("network", Network), sources=r.sources, ranges=r.ranges)
    r.done()
    return net


def find_part(part: str, name: str, near: str | Path | None = None) -> Path:
    """The file of a hardware part (systems, gpus, cpus, nvme) by name or path: for a part a
    system file `near` names, from that file's own tree first (…/systems/X.yaml next to
    …/gpus/NAME.yaml, as `tierlab calibrate` writes them), then $TIERLAB_PROFILES', then the
    shipped profiles. Unknown -> ConfigError with the closest names."""
    if near is not None:
        # where `tierlab calibrate --out` puts the parts (runner/calibrate_profile.layout):
        # beside the systems/ folder, or beside a system file that is in no systems/ folder
        system_dir = Path(near).parent
        root = system_dir.parent if system_dir.name == "systems" else system_dir
        local = root / part / f"{name}.yaml"
        if "/" not in name and local.is_file():
            return local
    return _find(hardware_dirs(part), ".yaml", name, _KINDS[part])


def _system_part(where: str, part: str, name: str):
    """A part a system names, found by find_part near the system file."""
    return load_part(part, str(find_part(part, name, near=where)))


def _system(data: Any, where: str) -> Hardware:
    r = _Reader(data, where)
    r.raw("kind")
    nvme_name = r.raw("nvme", required=False)
    parts = {"gpu": lambda: _system_part(where, "gpus", str(r.raw("gpu"))),
             "cpu": lambda: _system_part(where, "cpus", str(r.raw("cpu"))),
             "nvme": lambda: _system_part(where, "nvme", str(nvme_name)) if nvme_name else None,
             "pcie": lambda: _pcie(r.raw("pcie"), f"{where}: pcie"),
             "network": lambda: _network(r.raw("network"), f"{where}: network")}
    rows = {f.field: f for f in part_fields("system")}
    values: dict[str, Any] = {"name": str(r.raw("name")), "description": str(r.raw("description"))}
    for f in dataclasses.fields(Hardware):      # parts and numbers in the dataclass's order
        if f.name in parts:
            values[f.name] = parts[f.name]()
        elif f.name in rows:
            values[f.name] = r.row(rows[f.name])
    hw = Hardware(**values, sources=r.sources, ranges=r.ranges)
    r.done()
    return hw


_PARTS: dict[str, Callable[[Any, str], Any]] = {"gpus": _gpu, "cpus": _cpu, "nvme": _nvme,
                                                "systems": _system}
_KINDS = {"gpus": "gpu", "cpus": "cpu", "nvme": "nvme", "systems": "system"}


def _wrap(fn, data, where):
    try:
        return fn(data, where)
    except ValueError as e:            # dataclass __post_init__ checks
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(f"{where}: {e}") from None


def user_hardware_dirs() -> list[Path]:
    """The `hardware/` folders named by $TIERLAB_PROFILES, in its order (read at each lookup)."""
    return [Path(d).expanduser() / "hardware"
            for d in os.environ.get(PROFILES_ENV, "").split(os.pathsep) if d.strip()]


def own_hardware_dir() -> Path:
    """Where `tierlab calibrate` writes a profile by default: the first $TIERLAB_PROFILES
    folder's hardware/, else ./tierlab-profiles/hardware (never into the installed package)."""
    own = user_hardware_dirs()
    return own[0] if own else Path("tierlab-profiles") / "hardware"


def hardware_dirs(part: str) -> list[Path]:
    """Where a hardware part is looked up by name: $TIERLAB_PROFILES' folders, then the shipped."""
    return [d / part for d in user_hardware_dirs()] + [HARDWARE_DIR / part]


def _names(directory: Path | list[Path], suffix: str) -> dict[str, Path]:
    """{stem: path} in name order ('h200' before 'h200-g': sorted by stem, not file name); over
    several folders the first that holds a stem wins."""
    found: dict[str, Path] = {}
    for d in [directory] if isinstance(directory, Path) else directory:
        for p in d.glob(f"*{suffix}"):
            found.setdefault(p.stem.lower(), p)
    return dict(sorted(found.items()))


def _find(directory: Path | list[Path], suffix: str, name: str, what: str) -> Path:
    """A profile by file stem (case-insensitive) or by path; unknown -> closest names."""
    candidate = Path(name).expanduser()
    paths = (".yaml", ".yml", ".json") + ((".hjson",) if suffix == ".json" else ())   # ds_configs
    if candidate.suffix in paths or "/" in name:
        if not candidate.is_file():
            raise ConfigError(f"{candidate}: no such file")
        return candidate
    known = _names(directory, suffix)
    key = name.lower()
    if key in known:
        return known[key]
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.4)
    hint = f"; closest: {', '.join(close)}" if close else f"; known: {', '.join(known)}"
    raise ConfigError(f"unknown {what} {name!r}{hint}")


def load_part(part: str, name: str):
    """One GPU / CPU / NVMe / system profile by name or path."""
    path = find_part(part, name)
    data = read_data(path)
    if isinstance(data, Mapping) and data.get("kind") != _KINDS[part]:
        raise ConfigError(f"{path}: kind must be {_KINDS[part]!r}, got {data.get('kind')!r}")
    return _wrap(_PARTS[part], data, str(path))


def load_hardware(name: str, *, gpus_per_node: int | None = None, nodes: int | None = None) -> Hardware:
    """A system (node) profile by name or path, optionally resized (--gpus, --nodes)."""
    from dataclasses import replace

    hw = load_part("systems", name)
    for flag, value in (("--gpus", gpus_per_node), ("--nodes", nodes)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be >= 1, got {value}")
    return replace(hw, gpus_per_node=gpus_per_node or hw.gpus_per_node, nodes=nodes or hw.nodes)


_MODEL_KEYS = {"kind", "name", "source", "n_layers", "hidden", "ffn", "n_heads", "n_kv_heads",
               "vocab", "seq_len", "gated_mlp", "tie_embeddings", "norm", "bias",
               "learned_pos_emb", "max_seq_len", "attention_windows", "attn_head_dim", "qkv_bias",
               "loops"}
"""A model profile's keys: Model's own field names (profiles/schema.py); `attn_head_dim` where
a config.json sets `head_dim`, `qkv_bias` for Qwen2's q/k/v biases; `loops` a list of
Model.loops entries (`- {layers: [8, 9, 10], passes: 2}`: profiles/schema.py Loop)."""


def _model_from_profile(data: Any, where: str) -> Model:
    r = _Reader(data, where)
    for key in _MODEL_KEYS - {"kind"}:
        r.raw(key, required=key in ("name", "source", "n_layers", "hidden", "ffn", "n_heads",
                                    "n_kv_heads", "vocab", "seq_len"))
    r.raw("kind")
    r.done()
    kwargs = {k: v for k, v in data.items() if k != "kind"}
    for key in ("n_layers", "hidden", "ffn", "n_heads", "n_kv_heads", "vocab", "seq_len",
                "max_seq_len", "attn_head_dim"):
        if key in kwargs and (isinstance(kwargs[key], bool) or not isinstance(kwargs[key], int)):
            raise ConfigError(f"{where}: {key} must be an integer, got {kwargs[key]!r}")
    for key in ("gated_mlp", "tie_embeddings", "bias", "learned_pos_emb", "qkv_bias"):
        if key in kwargs and not isinstance(kwargs[key], bool):
            raise ConfigError(f"{where}: {key} must be true or false, got {kwargs[key]!r}")
    if "attention_windows" in kwargs:
        kwargs["attention_windows"] = _profile_windows(kwargs["attention_windows"],
                                                       kwargs["n_layers"], where)
    return Model(**kwargs)


def _profile_windows(value: Any, n_layers: int, where: str) -> tuple[int, ...]:
    """A profile's `attention_windows`: one window (tokens) for every block, or a list of one
    per block, 0 = full attention (Model.attention_windows)."""
    key = f"{where}: attention_windows"
    check(n_layers, MODEL["n_layers"], f"{where}: n_layers")      # before a list of n_layers
    if isinstance(value, list) and len(value) != n_layers:
        raise ConfigError(f"{key}: lists {len(value)} blocks, n_layers is {n_layers}")
    items = value if isinstance(value, list) else [value] * n_layers
    out = tuple(0 if type(w) is int and w == 0 else int(check(w, ATTENTION_WINDOW, key))
                for w in items)
    return out if any(out) else ()


def _config_name(where: str) -> str:
    """'…/Llama-2-7b-hf/config.json' -> 'Llama-2-7b-hf'; '…/mixtral-8x7b.json' -> 'mixtral-8x7b'."""
    path = Path(where)
    return path.parent.name if path.stem == "config" else path.stem


def model_from_hf_config(data: Any, where: str, name: str | None = None) -> Model:
    """A Hugging Face config.json -> Model; the architecture readers are in hf_arch.py."""
    from tierlab.profiles.hf_arch import decode_special_floats, family as hf_family, model_fields

    data = decode_special_floats(data)
    try:
        fields = model_fields(data, where)
        check_model({**fields, "seq_len": fields["max_seq_len"]}, where)   # in the file's words
        seq = fields["max_seq_len"]
        family = hf_family(data, where)
        left = fields.get("not_modelled", ())       # a built model's: within its count check
        left_text = f"; not modelled, within the count check: {'; '.join(left)}" if left else ""
        return Model(name=name or str(data.get("_name_or_path") or _config_name(where)),
                     seq_len=seq, source=f"Hugging Face config {where} ({family}{left_text})",
                     **fields)
    except ValueError as e:     # Model's and check_model's words get the file's keys
        msg = _in_hf_words(str(e), data)
        raise ConfigError(msg if msg.startswith(where) else f"{where}: {msg}") from None


HF_KEYS = {"n_layers": ("num_hidden_layers", "n_layer", "num_layers"),
           "hidden": ("hidden_size", "n_embd", "n_embed", "d_model"),
           "n_heads": ("num_attention_heads", "n_head"),
           "n_kv_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv"),
           "vocab": ("vocab_size",),
           "ffn": ("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"),
           "expert_ffn": ("moe_intermediate_size", "intermediate_size", "ffn_dim"),
           "seq_len": ("max_position_embeddings", "n_positions", "seq_length"),
           "max_seq_len": ("max_position_embeddings", "n_positions", "seq_length")}
"""The config.json keys a Model field is read from (profiles/hf_arch.py's readers), so an error
that Model raises in its own words (`Model.hidden must be > 0`) names the key in the file."""


def _in_hf_words(msg: str, data: Mapping) -> str:
    """`msg` with the config.json keys of the Model fields it names as its subject appended
    (`hidden: must be >= 1`, `Model.hidden must be > 0`, `MoE.expert_ffn ...`; not a word in a
    refusal's prose)."""
    keys = []
    for field, names in HF_KEYS.items():
        if re.search(rf"(?:^|: |[A-Z]\w*\.){field}\b", msg):  # the subject (`MoE.expert_ffn`)
            keys += [k for k in names if k in data and k not in keys][:1]
    keys = [k for k in keys if k not in msg]
    return f"{msg} (config.json: {', '.join(keys)})" if keys else msg


HF_IDS_FILE = ROOT / "hf_ids.yaml"
"""Hugging Face model ids -> the shipped model profile of the same architecture."""


def hf_id_profile(name: str) -> str | None:
    """The model profile a Hugging Face id ('meta-llama/Llama-3.1-8B', any case) names, or None
    (a path that exists, or a name that is not an id: looked up as given)."""
    if Path(name).expanduser().exists() or not re.fullmatch(r"[\w.-]+/[\w.-]+", name):
        return None
    ids = {k.lower(): v for k, v in read_data(HF_IDS_FILE).items()}
    if name.lower() not in ids:
        close = difflib.get_close_matches(name.lower(), ids, n=3, cutoff=0.6)
        raise ConfigError(f"{name}: no such file, and not a Hugging Face id tierlab ships a "
                          f"profile for" + (f" (closest: {', '.join(close)})" if close else "")
                          + "; pass the model's config.json path instead")
    return ids[name.lower()]


def load_model(name: str, *, seq_len: int | None = None) -> Model:
    """A model profile by name, a profile YAML path, or a Hugging Face config.json path."""
    from dataclasses import replace

    path = _find(MODELS_DIR, ".yaml", hf_id_profile(name) or name, "model")
    # a config.json is judged as transformers judges it: its model_type first, then the fields
    # tierlab reads (each bounded); a non-finite value in a field it does not read is no concern
    data = read_data(path, finite=path.suffix != ".json")
    if path.suffix != ".json" and isinstance(data, Mapping) and data.get("kind") != "model":
        raise ConfigError(f"{path}: kind must be 'model', got {data.get('kind')!r}")
    try:
        if path.suffix == ".json":
            model = model_from_hf_config(data, str(path))
        else:
            model = _model_from_profile(data, str(path))
        if seq_len is not None:
            if seq_len < 1:
                raise ConfigError(f"--seq must be >= 1, got {seq_len}")
            # the architecture's context length stays (a learned position table keeps its rows)
            model = replace(model, seq_len=seq_len, max_seq_len=model.max_seq_len or model.seq_len)
    except (TypeError, ValueError) as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(f"{path}: {e}") from None
    return model


def find_config(name: str) -> Path:
    """A ds_config preset (profiles/configs/) by name, or a JSON/hjson file by path."""
    return _find(CONFIGS_DIR, ".json", name, "ds_config")


def list_profiles(kind: str, hardware_dir: Path = HARDWARE_DIR) -> list[tuple[str, str]]:
    """(name, one-line summary) of every shipped profile of a kind: hardware, models, configs
    (hardware kinds: those in `hardware_dir`, default the shipped)."""
    if kind == "hardware":
        return [(stem, load_part("systems", str(path)).description)
                for stem, path in _names(hardware_dir / "systems", ".yaml").items()]
    if kind == "models":
        out = []
        for stem in _names(MODELS_DIR, ".yaml"):
            m = load_model(stem)
            out.append((stem, f"{m.n_params / 1e9:.2f} B params, {m.n_layers} layers, hidden "
                              f"{m.hidden}, {m.n_heads} heads ({m.n_kv_heads} kv), seq {m.seq_len}"))
        return out
    if kind == "configs":
        out = []
        for stem, path in _names(CONFIGS_DIR, ".json").items():
            cfg = read_data(path)
            out.append((stem, str(cfg.get("_description", ""))))
        return out
    if kind in _PARTS:
        return [(stem, load_part(kind, str(path)).name)
                for stem, path in _names(hardware_dir / kind, ".yaml").items()]
    raise ConfigError(f"unknown profile kind {kind!r}; choose hardware, models, configs, gpus, "
                      "cpus, nvme")


_HOST_COSTS_BY_KEY = {t.key: t for t in SOFTWARE_TERMS if t.host_cost}
"""A CPU profile's deepspeed_host_costs keys (the software profile's keys of the host costs)."""


def _software(data: Any, where: str) -> Software:
    r = _Reader(data, where)
    if r.raw("kind") != "software":
        raise ConfigError(f"{where}: kind must be 'software', got {data.get('kind')!r}")
    values = {}
    for t in SOFTWARE_TERMS:
        value = r.number(t.key, t.dimension, required=t.required, field=t.field)
        if value is not None:
            values[t.field] = value
    error = r.number("simulator_error", "count", required=False)
    if error is not None and (error != 1.0 or "simulator_error" not in r.ranges):
        raise ConfigError(f"{where}: simulator_error: expected {{value: 1, range: [low, high], "
                          f"source: ...}} (a factor on the step time: the point is not scaled)")
    train = r.raw("train_cases")
    if not isinstance(train, list) or not all(isinstance(c, str) and c for c in train):
        raise ConfigError(f"{where}: train_cases must be a list of case names")
    sw = Software(name=str(r.raw("name")), train_cases=tuple(train), sources=r.sources,
                  ranges=r.ranges, **values)
    r.done()
    return sw


def load_software(name: str = DEFAULT_SOFTWARE) -> Software:
    """A software profile (profiles/software/NAME.yaml) by name or path."""
    path = _find(SOFTWARE_DIR, ".yaml", name, "software profile")
    return _wrap(_software, read_data(path), str(path))
