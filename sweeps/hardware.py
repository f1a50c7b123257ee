"""The sweep's hardware keys applied to a hardware profile: one point's (`apply_hardware`) and
the verbs' `--hw KEY=VALUE` what-ifs (`what_if`). Pure: profiles in, profiles out; apart from
sweeps/run.py so that a verb with `--hw` does not import the sweep's pool and file handling."""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Mapping, Sequence

from tierlab.errors import ConfigError
from tierlab.sweeps.keys import HARDWARE_KEYS, key_kind, load_profile, parse_value

log = logging.getLogger(__name__)


def _set_path(obj, path: tuple[str, ...], value):
    """dataclasses.replace along an attribute path (mappings replaced by an updated copy)."""
    head, rest = path[0], path[1:]
    if isinstance(obj, Mapping):
        return {**obj, head: value if not rest else _set_path(obj[head], rest, value)}
    if not rest:
        return replace(obj, **{head: value})
    child = getattr(obj, head)
    if child is None:
        raise ConfigError(f"hardware {getattr(obj, 'name', '')!r} has no {head} "
                          f"(cannot set {'.'.join(path)})")
    return replace(obj, **{head: _set_path(child, rest, value)})


def apply_hardware(hw, point: Mapping[str, Any]):
    """`hw` with the point's hardware keys set (the others are left to the caller)."""
    for key, value in point.items():
        if key_kind(key) == "hardware":
            path = HARDWARE_KEYS[key][0]
            if path[0] == "gpu" and path[1] == "peak_flops" and path[2] not in hw.gpu.peak_flops:
                log.debug("adding peak_flops.%s to %s", path[2], hw.gpu.name)
            hw = _set_path(hw, path, value)
    return hw


def what_if(hardware: Any, items: Sequence[str]):
    """The hardware profile (a name, a path or a Hardware) with `--hw KEY=VALUE` items applied:
    the sweep's hardware keys, units and bounds (`tierlab sweep --list-keys`); its name says
    what changed. No items: the profile as it is."""
    hw = load_profile("hardware", hardware) if isinstance(hardware, str) else hardware
    if not items:
        return hw
    point: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--hw {item!r}: expected KEY=VALUE, e.g. --hw cpu.dram=64GiB "
                              "(tierlab sweep --list-keys lists the hardware keys)")
        try:
            kind = key_kind(key)
        except ConfigError as e:          # the sweep's message, in --hw's words
            raise ConfigError(f"--hw {key}: {str(e).replace('unknown vary key', 'unknown key')}") \
                from None
        if kind != "hardware":
            raise ConfigError(f"--hw {key}: not a hardware key (--hw takes the hardware keys "
                              "of tierlab sweep --list-keys; a DeepSpeed key goes to --set)")
        point[key] = parse_value(key, raw, flag="--hw")
    try:
        changed = apply_hardware(hw, point)
    except ValueError as e:      # the profile's own checks (GPU.hbm_bytes must be > 0)
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(f"--hw {', '.join(items)}: {e}") from None
    return replace(changed, name=f"{hw.name} with {', '.join(items)}")
