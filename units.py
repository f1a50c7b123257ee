"""Units, in one place: the size constants, the one quantity parser, and how sizes are shown.

Inside, every size is bytes (`*_bytes`); what a user reads is GiB (2^30 bytes, as torch and
nvidia-smi report), and a JSON key that holds GiB ends in `_GiB`. Transfer rates stay GB/s (10^9
bytes/s, as datasheets quote them).

One rule for prefixes, everywhere (profiles, flags, `--set`, `--vary`, calibrate's `--sweep`):
K/M/G/T/P are SI (10^3 ...), Ki/Mi/Gi/Ti/Pi are binary (2^10 ...). "8G" is 8e9 bytes, "8Gi" and
"8GiB" are 8 GiB. A size always carries a unit: "8" is refused, never read as 8 bytes.
"""
from __future__ import annotations

import math
import re
from typing import Any

from tierlab.errors import ConfigError

KiB, MiB, GiB = 2**10, 2**20, 2**30
"""Binary sizes in bytes (ints: buffer sizes built from them stay exact)."""

PREFIXES = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
            "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
DIMENSIONS = {"B": "bytes", "B/s": "bytes/s", "FLOP/s": "flop/s", "params/s": "params/s"}
"""Base unit -> dimension name; a value's unit must have the dimension its key expects (plus
"seconds" and "count", which take TIME_UNITS and no unit)."""
_QUANTITY = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z/]*)\s*$")
_LOOSE_SIZE = re.compile(r"(.*?\d)\s*([kKmMgGtTpP])(i?)[bB]?")


def parse_quantity(text: Any, dimension: str, where: str) -> float:
    """'80 GB' -> 8e10 (bytes), '2039 GB/s' -> 2.039e12, '312 TFLOP/s', '10 us' -> 1e-05, '16' -> 16
    (a count). ConfigError naming `where` for anything else."""
    if isinstance(text, bool):
        raise ConfigError(f"{where}: expected a quantity, got {text!r}")
    if isinstance(text, (int, float)):
        if dimension != "count":
            raise ConfigError(f"{where}: {text!r} needs a unit ({dimension})")
        return float(text)
    m = _QUANTITY.match(str(text))
    if not m:
        raise ConfigError(f"{where}: cannot read quantity {text!r}")
    number, unit = float(m.group(1)), m.group(2)
    if dimension == "count":
        if unit:
            raise ConfigError(f"{where}: {text!r} is a count and takes no unit")
        return number
    if dimension == "seconds":
        if unit not in TIME_UNITS:
            raise ConfigError(f"{where}: unit {unit!r} is not a time (s, ms, us, ns)")
        return number * TIME_UNITS[unit]
    for base, dim in DIMENSIONS.items():
        if dim == dimension and unit.endswith(base):
            prefix = unit[: -len(base)]
            if prefix in PREFIXES:
                return number * PREFIXES[prefix]
    raise ConfigError(f"{where}: unit {unit!r} does not measure {dimension}")


def unit_of(text: Any) -> str:
    """The unit of a quantity's text ('' for a bare number)."""
    m = _QUANTITY.match(str(text)) if not isinstance(text, (int, float)) else None
    return m.group(2) if m else ""


def parse_size(text: Any, what: str) -> float:
    """A size typed by a user -> bytes (> 0, finite): '8GiB', '8 GB', '8Gi', '8g' (the prefix's
    case does not matter, the B is optional); text that is a bare number is refused (it needs a
    unit). A Python int/float (the API, a stored `*_bytes` field) is bytes already."""
    given = str(text).strip()
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = _LOOSE_SIZE.fullmatch(given)
        normal = f"{m.group(1)}{m.group(2).upper()}{m.group(3)}B" if m else given
        if not unit_of(normal):
            raise ConfigError(f"{what} {given!r} needs a unit: e.g. 8GiB (2^30 bytes) or 8GB "
                              f"(10^9 bytes)")
        value = parse_quantity(normal, "bytes", f"{what} {given!r}")
    if not math.isfinite(value) or not value > 0:
        raise ConfigError(f"{what} must be > 0 (a finite number of bytes), got {given!r}")
    return value


def parse_count(text: Any, what: str) -> float:
    """A count typed by a user, with an optional prefix: '4M' -> 4e6, '4Mi' -> 4 * 2^20, '16'."""
    given = str(text).strip()
    m = re.fullmatch(r"(.*?\d)\s*([kKmMgGtTpP])(i?)", given)
    number = parse_quantity(m.group(1), "count", f"{what} {given!r}") if m else \
        parse_quantity(given, "count", f"{what} {given!r}")
    return number * (PREFIXES[m.group(2).upper() + m.group(3)] if m else 1.0)


def gib(nbytes: float | None) -> float | None:
    """Bytes -> GiB (None stays None)."""
    return None if nbytes is None else nbytes / GiB


def fmt_gib(nbytes: float | None, digits: int = 2) -> str:
    """'29.52 GiB' ('-' for None)."""
    return "-" if nbytes is None else f"{nbytes / GiB:,.{digits}f} GiB"


def gib_dict(items, digits: int | None = None) -> dict:
    """{name: bytes} -> {name: GiB}."""
    return {k: (round(v / GiB, digits) if digits is not None else v / GiB) for k, v in items.items()}
