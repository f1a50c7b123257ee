"""How far the software profile's fitted terms and the simulator itself can be trusted: the ranges
the software profile states (issue 14).

- `machine_spread`: each fitted term refitted on each machine's training runs alone (the runs of
  one lab/cases folder among train_cases); its range is the lowest to the highest of those
  refits and the pooled value.
- `simulator_error`: measured / predicted steady step over the finished runs the fitted terms
  were NOT fitted on (each on its folder's calibrated profile); its range is their 10th to 90th
  percentile, a factor on the step time (sim/ranges.py adds it as one more input).

    python lab/scripts/spread.py lab/cases            # print
    python lab/scripts/spread.py lab/cases --write    # into the software profile
    python lab/scripts/spread.py lab/cases --stock h200-host --write

- `kind_spread`: a stock profile's host figures (CPU Adam, DRAM, PCIe) get the spread of the
  calibrations of machines of its kind (the profiles lab/cases folders name) around its own
  value: the uncertainty of using one machine's figures for another of the same kind.

Pure functions: they compute and return (the `write_*` ones return the YAML text with the
ranges). lab/scripts/spread.py is the lab's front end that prints and (with --write) rewrites the
profiles.
"""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import replace

from tierlab.profiles.fields import FITTED_TERMS, FOLDERS, hardware_field
from tierlab.profiles.load import load_hardware
from tierlab.profiles.schema import Software
from tierlab.records.measurement import load_measurement
from tierlab.sim.engine import simulate
from tierlab.units import parse_quantity, unit_of
from tierlab.validate.compare import (case_key, find_measurements, folder_hardware,
                                      measured_metrics, scenario_of, with_profiles)
from tierlab.validate.fit import fit_software

FITTED = {t.key: t.field for t in FITTED_TERMS}
"""YAML key -> Software field of the terms validate/fit.py fits (profiles/fields.py)."""


def machine_spread(paths, base: Software) -> tuple[dict[str, tuple[float, float]], list[str]]:
    """({field: (low, high)} over the per-machine refits and the pooled value, machines)."""
    machines = sorted({c.split("/")[0] for c in base.train_cases})
    fits = []
    for machine in machines:
        mine = tuple(c for c in base.train_cases if c.split("/")[0] == machine)
        fits.append(fit_software(paths, replace(base, train_cases=mine)))
    out = {}
    for field in FITTED.values():
        values = [getattr(f, field) for f in fits] + [getattr(base, field)]
        out[field] = (min(values), max(values))
    return out, machines


def simulator_error(paths, software: Software) -> tuple[float, float, int]:
    """(10th, 90th percentile of measured / predicted steady step, runs) over the finished runs
    not in software.train_cases."""
    ratios = []
    for d, hw in with_profiles(find_measurements(paths)):
        m = load_measurement(d)
        if m.status != "ok" or case_key(d) in software.train_cases:
            continue
        measured = measured_metrics(m).get("step_time_s")
        if measured is None:
            continue
        sc = scenario_of(m, hw, software)
        ratios.append(measured / simulate(sc.hardware, sc.model, sc.strategy,
                                          software=sc.software).step_time_s)
    q = statistics.quantiles(ratios, n=10, method="inclusive")
    return min(q[0], 1.0), max(q[-1], 1.0), len(ratios)


KIND_FIGURES = (("cpu", "adam_params_per_s"), ("cpu", "dram_bandwidth_Bps"),
                *(("pcie", f"{k}_{m}_Bps") for m in ("pinned", "pageable") for k in ("h2d", "d2h")),
                ("pcie", "latency_s"))
"""The host figures calibrations of one machine kind differ in: (part, field)."""
KIND_FIELDS = {(part, field): (FOLDERS[part], row.key, row.dimension)
               for part, field in KIND_FIGURES for row in [hardware_field(part, field)]}
"""(part, field) -> (profile folder, YAML key, dimension), read off the field table."""


def kind_calibrations(paths, stock: str) -> list[str]:
    """The calibrated profiles the folders of runs under `paths` name (validate.yaml), other
    than `stock`: the machines of its kind whose spread `kind_spread` takes."""
    folders = sorted({d.parent for d in find_measurements(paths)})
    return sorted({n for n in map(folder_hardware, folders) if n and n != stock})


def kind_spread(stock: str, calibrated: list[str]) -> dict[tuple[str, str], tuple[float, float]]:
    """{(part, field): (low, high)}: the lowest to highest of each host figure over the
    calibrated profiles of machines of one kind and the stock profile's own value (which must
    stay inside its range)."""
    profiles = [load_hardware(n) for n in [stock, *calibrated]]
    return {(part, field): (min(getattr(getattr(h, part), field) for h in profiles),
                            max(getattr(getattr(h, part), field) for h in profiles))
            for part, field in KIND_FIELDS}


def write_kind_ranges(text: str, folder: str, spread: dict, n: int) -> str:
    """A stock profile part's YAML (folder 'cpus' or 'systems') with `range:` on each figure of
    KIND_FIELDS, its source noting where the range comes from."""
    for (part, field), (fold, key, dim) in KIND_FIELDS.items():
        if fold != folder:
            continue
        pattern = re.compile(rf'^(\s*{key}: {{value: )([^,]+)(, range: \[[^\]]*\])?'
                             rf'(, source: ")(.*?)(; range: min-max over [^"]*)?("}})$', re.M)
        m = pattern.search(text)
        if m is None:
            raise KeyError(f"{key}: not in the profile")
        span = _bounds(m.group(2), *spread[part, field], dim)
        note = (f"; range: min-max over this profile and the {n} calibrated profiles of machines "
                f"of its kind (lab/scripts/spread.py --stock)")
        text = pattern.sub(lambda mm: f"{mm.group(1)}{mm.group(2)}, range: {span}{mm.group(4)}"
                                      f"{mm.group(5)}{note}{mm.group(7)}", text, count=1)
    return text


# ----------------------------------------------------------------------------------------------
# the YAML text

_ENTRY = r"^({key}: {{value: )([^,]+)(, range: \[[^\]]*\])?,"


def _bounds(value_text: str, low: float, high: float, dimension: str) -> str:
    """'[0.1983 ms, 0.2497 ms]': low and high (SI) in the value's unit, rounded outward."""
    unit = unit_of(value_text)
    scale = parse_quantity(f"1 {unit}".strip(), dimension, "range")
    out = []
    for x, rnd in ((low / scale, math.floor), (high / scale, math.ceil)):
        digits = 3 - int(math.floor(math.log10(abs(x)))) if x else 0
        out.append(f"{rnd(x * 10**digits) / 10**digits:.{max(digits, 0)}f} {unit}".strip())
    return f"[{', '.join(out)}]"


def write_ranges(text: str, ranges: dict[str, tuple[float, float]]) -> str:
    """The software YAML with `range: [...]` after each fitted term's value (replacing one)."""
    for term in FITTED_TERMS:
        key = term.key
        if term.field not in ranges:
            continue
        pattern = re.compile(_ENTRY.format(key=re.escape(key)), re.M)
        m = pattern.search(text)
        if m is None:
            raise KeyError(f"{key}: not in the software profile")
        span = _bounds(m.group(2), *ranges[term.field], term.dimension)
        text = pattern.sub(lambda mm: f"{mm.group(1)}{mm.group(2)}, range: {span},", text,
                           count=1)
    return text


def write_error(text: str, low: float, high: float, n: int, date: str) -> str:
    """The software YAML with its `simulator_error` line (added after train_cases, or replaced)."""
    line = (f'simulator_error: {{value: 1, range: [{math.floor(low * 1000) / 1000:.3f}, '
            f'{math.ceil(high * 1000) / 1000:.3f}], source: "measured {date} by '
            f'lab/scripts/spread.py: 10th-90th percentile of measured / predicted steady step '
            f'over the {n} finished runs of lab/cases not in train_cases, each on its '
            f'folder\'s calibrated profile"}}')
    if re.search(r"^simulator_error:", text, re.M):
        return re.sub(r"^simulator_error:.*$", lambda _: line, text, count=1, flags=re.M)
    return re.sub(r"^(train_cases:.*)$", lambda m: f"{m.group(1)}\n{line}", text, count=1,
                  flags=re.M)

