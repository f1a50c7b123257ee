"""Write the host-cost medians into the profiles that keep them (a lab tool, never a runtime need).

A DeepSpeed host-cost term kept for hosts that did not measure it (the stock software profile's
ZeRO-3 step, pageable backward and ZeRO-1/2 terms; h200-g/-h/-i's checkpoint terms) is the median
over every calibrated host whose CPU profile measured it. That median is computed here, when the
profile is *written*, and stored as a plain `{value, range, source}`: the range is the hosts'
min-max and the source names each host and its value. Nothing a user loads reads a test machine's
profile at load time (ARCHITECTURE.md rule 19).

An entry is a median entry when its source carries the stamp this tool writes
("(median of HOST VALUE, ...: their CPU profiles' deepspeed_host_costs.KEY; range min-max)"), or,
in a hand-written entry, `{median_of: [...], source: ...}` (converted on the first `--write`).
The host list is always recomputed: every CPU profile with a measured `value` for the term.

    python lab/scripts/host_medians.py            # check: exit 1 and list every stale entry
    python lab/scripts/host_medians.py --write    # rewrite the stale entries in place
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

import yaml

from tierlab.units import parse_quantity

from labenv import ROOT  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)

CPUS_DIRS = [ROOT / "lab" / "profiles" / "hardware" / "cpus", ROOT / "profiles" / "hardware" / "cpus"]
SOFTWARE_DIR = ROOT / "profiles" / "software"
STAMP = re.compile(r" \(median of [^()]*: their CPU profiles' deepspeed_host_costs\.(\w+); "
                   r"range min-max\)$")
_NUMBER_UNIT = re.compile(r"^\s*([-+0-9.eE]+)\s*(\w*)\s*$")


def cpu_profiles() -> dict[str, Path]:
    """Every CPU profile the medians may draw on, by name (the lab's first)."""
    found: dict[str, Path] = {}
    for directory in CPUS_DIRS:
        for path in sorted(directory.glob("*.yaml")):
            found.setdefault(path.stem, path)
    return found


def is_median(entry: object) -> bool:
    return isinstance(entry, dict) and ("median_of" in entry
                                        or bool(STAMP.search(str(entry.get("source", "")))))


def measured_values(key: str, cpus: dict[str, Path]) -> list[tuple[str, str]]:
    """(host, value text) for every CPU profile whose deepspeed_host_costs.KEY is measured there
    (a plain value, not itself a median)."""
    out = []
    for name, path in cpus.items():
        costs = (yaml.safe_load(path.read_text()) or {}).get("deepspeed_host_costs") or {}
        entry = costs.get(key)
        if isinstance(entry, dict) and "value" in entry and not is_median(entry):
            out.append((name, str(entry["value"])))
    return out


def median_entry(key: str, base_source: str, values: list[tuple[str, str]]) -> dict:
    """The stored entry: the median in the hosts' unit, range min-max, the hosts in the source."""
    if not values:
        raise SystemExit(f"{key}: no CPU profile measured it, so there is no median to keep")
    unit = _NUMBER_UNIT.match(values[0][1]).group(2)
    scale = parse_quantity(f"1 {unit}", "seconds", key)
    numbers = [parse_quantity(text, "seconds", f"{host}: {key}") / scale for host, text in values]

    def text(x: float) -> str:
        return f"{round(x, 6)!r} {unit}"

    listed = ", ".join(f"{host} {value}" for host, value in values)
    return {"value": text(statistics.median(numbers)),
            "range": [text(min(numbers)), text(max(numbers))],
            "source": f"{base_source} (median of {listed}: their CPU profiles' "
                      f"deepspeed_host_costs.{key}; range min-max)"}


def flow_line(indent: str, key: str, entry: dict) -> str:
    """One YAML line in the profiles' style: `key: {value: .., range: [..], source: ".."}`."""
    low, high = entry["range"]
    return (f"{indent}{key}: {{value: {entry['value']}, range: [{low}, {high}], "
            f"source: {json.dumps(entry['source'], ensure_ascii=False)}}}")


def stale_lines(path: Path, section: str | None, cpus: dict[str, Path]) -> dict[int, str]:
    """Line number -> the line it should be, for each median entry of PATH that is out of date."""
    data = yaml.safe_load(path.read_text()) or {}
    entries = data.get(section) or {} if section else data
    lines = path.read_text().splitlines()
    out = {}
    for key, entry in entries.items():
        if not is_median(entry):
            continue
        base = STAMP.sub("", str(entry["source"]))
        new = median_entry(key, base, measured_values(key, cpus))
        if {k: entry.get(k) for k in new} == new:
            continue
        pattern = re.compile(rf"^(\s*){re.escape(key)}:\s*\{{")
        (number, indent), = [(i, m.group(1)) for i, line in enumerate(lines)
                             if (m := pattern.match(line))]
        out[number] = flow_line(indent, key, new)
    return out


def targets(cpus: dict[str, Path]) -> list[tuple[Path, str | None]]:
    return ([(p, None) for p in sorted(SOFTWARE_DIR.glob("*.yaml"))]
            + [(p, "deepspeed_host_costs") for p in cpus.values()])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite stale entries in place")
    args = parser.parse_args(argv)
    cpus = cpu_profiles()
    stale = 0
    for path, section in targets(cpus):
        changes = stale_lines(path, section, cpus)
        stale += len(changes)
        for number, line in changes.items():
            print(f"{path.relative_to(ROOT)}:{number + 1}: {line.split(':')[0].strip()} "
                  f"{'rewritten' if args.write else 'is stale'}")
        if changes and args.write:
            lines = path.read_text().splitlines()
            for number, line in changes.items():
                lines[number] = line
            path.write_text("\n".join(lines) + "\n")
    print(f"{stale} median entr{'y' if stale == 1 else 'ies'} "
          f"{'rewritten' if args.write else 'stale'}")
    return 1 if stale and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
