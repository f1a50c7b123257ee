"""Where `tierlab calibrate` writes, and the writing: the profile paths (default: your profiles
folder, profiles/load.own_hardware_dir, never the installed package), each checked writable
before anything is measured, the raw record first (the measured points are the expensive part),
then the system and part profiles; and the one-line summary of what was measured."""
from __future__ import annotations

import socket
from pathlib import Path
from typing import Callable

from tierlab.errors import ConfigError
from tierlab.profiles.fields import SCALED_BY_HOST_SPEED
from tierlab.profiles.load import own_hardware_dir, read_data
from tierlab.runner import calibrate as cal
from tierlab.runner.calibrate_profile import layout
from tierlab.safeio import check_writable, write_json, write_text
from tierlab.sim.host_costs import default_software, host_speed_factor, host_speed_rates


def refuse_empty(**flags: str | None) -> None:
    """An empty --out/--raw/--from-raw must not mean the default folder: a ConfigError."""
    for flag, value in flags.items():
        if value is not None and not value.strip():
            raise ConfigError(f"--{flag.replace('_', '-')}: empty path")


def default_name(out: str | None) -> str:
    """The profile name: the --out file stem, else calibrated-HOSTNAME."""
    return Path(out).stem if out else f"calibrated-{socket.gethostname().split('.')[0]}"


def calibration_paths(out: str | None, name: str, raw: str | None) -> dict[str, Path]:
    """The profile paths by kind (systems, gpus, cpus, nvme), each checked writable (with
    `raw`) now, before anything is measured; `out` None: DIR/hardware/systems/NAME.yaml in your
    profiles folder."""
    out_path = Path(out) if out else own_hardware_dir() / "systems" / f"{name}.yaml"
    paths = layout(out_path, name)
    for path in paths.values():
        check_writable(path, "--out")
    if raw is not None:
        check_writable(raw, "--raw")
    return paths


def rebuild_from_raw(from_raw: str, name: str | None, out: str | None):
    """The Calibration of a raw record an earlier `calibrate --raw` wrote, measuring
    nothing; a record that cannot be rebuilt is a ConfigError naming the file."""
    record = read_data(Path(from_raw))
    name = name or (Path(out).stem if out else None)
    results = record.get("results") if isinstance(record, dict) else None
    if isinstance(results, dict) and not any(isinstance(v, list) and v for v in results.values()):
        raise ConfigError(f"{from_raw}: results holds no measured point: nothing to rebuild a "
                          "profile from")
    try:
        result = cal.from_raw(record, name=name, where=from_raw)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError,
            ZeroDivisionError) as e:
        if isinstance(e, ConfigError):
            if str(e).startswith("--hardware"):      # the base the record names, not a flag
                raise ConfigError(f"{from_raw}: base {record.get('base')!r}: "
                                  f"{str(e).partition(': ')[2]}") from None
            if str(from_raw) not in str(e):         # what its points rebuilt is refused
                raise ConfigError(f"{from_raw}: {e}") from None
            raise
        raise ConfigError(f"{from_raw}: not a usable calibrate raw record "
                          f"({type(e).__name__}: {e})") from None
    return result


def raw_saver(raw: str | None) -> Callable[[dict], None] | None:
    """calibrate()'s `save_raw`: rewrite the raw record at `raw` after every benchmark."""
    return (lambda rec: write_json(raw, rec)) if raw else None


def write_calibration(result, paths: dict[str, Path], raw: str | None,
                      wrote: Callable[[str | Path], None] = lambda path: None) -> None:
    """Write the raw record (first: the measured points are the expensive part), then each
    profile document; `wrote(path)` after each file."""
    if raw:
        write_json(raw, result.raw)
        wrote(raw)
    for kind, text in result.texts.items():
        write_text(paths[kind], text)
        wrote(paths[kind])


def calibration_summary(result) -> list[str]:
    """What was measured, in one line (PCIe, DRAM, CPU Adam, module call, NVMe), then one line
    per benchmark skipped with why."""
    hw = result.hardware
    line = (f"{hw.name}: PCIe H2D/D2H pinned {hw.pcie.h2d_pinned_Bps / 1e9:.1f}/"
            f"{hw.pcie.d2h_pinned_Bps / 1e9:.1f} GB/s, DRAM {hw.cpu.dram_bandwidth_Bps / 1e9:.1f}"
            f" GB/s, CPU Adam {hw.cpu.adam_params_per_s / 1e9:.2f} G params/s"
            + (f", module call {hw.cpu.module_call_s * 1e6:.2f} us" if hw.cpu.module_call_s
               else "")
            + (f", NVMe read/write {hw.nvme.read_bandwidth_Bps / 1e9:.2f}/"
               f"{hw.nvme.write_bandwidth_Bps / 1e9:.2f} GB/s" if hw.nvme else ""))
    in_table = {f"deepspeed:{r.field}" for r in result.host_costs if not isinstance(r, tuple)}
    skipped = (f"skipped {group}: {why}" for group, why in result.skipped.items()
               if group not in in_table)
    return [line, *host_speed_line(hw, default_software()), *skipped,
            *host_cost_table(result.host_costs)]


def host_speed_line(hw, sw) -> list[str]:
    """How software profile `sw`'s fitted host terms follow this host's measured CPU Adam rate
    (one line; none where the rate is not measured or the profile's host_speed_share is 0)."""
    rates = host_speed_rates(sw, hw)
    if rates is None:
        return []
    return [f"host speed: CPU Adam {rates[1] / 1e9:.2f} G params/s, the fit machines' "
            f"{rates[0] / 1e9:.2f}: the fitted host terms "
            f"({', '.join(k for k in SCALED_BY_HOST_SPEED if getattr(sw, k))}) "
            f"x{host_speed_factor(sw, hw):.3f} here "
            f"(host_speed_share {sw.host_speed_share:g}; docs/calibration.md#host-speed)"]


def host_cost_table(rows: list) -> list[str]:
    """The DeepSpeed host-cost terms a calibration measured: stock value, measured value, kept or
    not and why, then the held-out check's errors with the stock and the kept terms."""
    decisions = [r for r in rows if not isinstance(r, tuple)]
    if not decisions:
        return []
    us = lambda v: "-" if v is None else f"{v * 1e6:.1f}"       # noqa: E731
    out = [f"{'DeepSpeed host cost (us)':38s} {'stock':>8s} {'measured':>9s}  kept"]
    out += [f"{d.field:38s} {us(d.stock_s):>8s} {us(d.measured_s):>9s}  "
            f"{'yes' if d.adopted else 'no '}  {d.why}" for d in decisions]
    for r in rows:
        if isinstance(r, tuple) and r[0] == "held-out" and r[1] is not None:
            out.append(f"held-out check ({r[3]} phases of configurations no term was derived "
                       f"from): {r[1]:.1f}% with the stock terms, {r[2]:.1f}% with those kept")
    return out
