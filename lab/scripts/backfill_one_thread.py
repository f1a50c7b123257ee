"""Add the one-thread CPU Adam rate (`adam_one_thread_throughput`) to the lab's calibrated CPU
profiles written before `tierlab calibrate` recorded it, from each profile's own raw record,
exactly as calibrate now writes it (runner/calibrate_profile.one_thread_entry: the median process), with the profile's
own date of measurement. Nothing else in a profile changes: rebuilding them with --from-raw would
also apply rules written since (the DRAM figure, the host-cost rule), which the lab's recorded
calibrations deliberately keep as they were.

    .venv/bin/python lab/scripts/backfill_one_thread.py [--check]

Profiles: lab/profiles/hardware/cpus/NAME.yaml with lab/cases/NAME/NAME-raw.json (h200x2-host
with lab/cases/h200x2/calibrate-raw.json), lab/fresh/NAME-profiles/hardware/cpus/NAME[-hc].yaml
with lab/fresh/NAME/NAME-raw.json. A profile that has the key already is left alone. --check:
exit 1 if any profile lacks it. validate/example/hardware/cpus/h200x2-e.yaml is a byte copy of
the lab's (tests/test_package_data.py): copy it again after a change.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from labenv import LAB  # noqa: E402

from tierlab.profiles.fields import yaml_key
from tierlab.runner.calibrate_profile import one_thread_entry, render_yaml

KEY = yaml_key("cpu", "adam_one_thread_params_per_s")
ADAM = yaml_key("cpu", "adam_params_per_s")


def pairs() -> list[tuple[Path, Path]]:
    """(CPU profile, its raw record) of every calibrated lab and fresh machine."""
    out = []
    for cpu in sorted((LAB / "profiles" / "hardware" / "cpus").glob("*.yaml")):
        name = cpu.stem
        raw = (LAB / "cases" / "h200x2" / "calibrate-raw.json" if name == "h200x2-host"
               else LAB / "cases" / name / f"{name}-raw.json")
        if raw.is_file():
            out.append((cpu, raw))
    for cpu in sorted((LAB / "fresh").glob("*-profiles/hardware/cpus/*.yaml")):
        name = cpu.parents[2].name.removesuffix("-profiles")
        out.append((cpu, LAB / "fresh" / name / f"{name}-raw.json"))
    return out


def backfill(cpu: Path, raw: Path) -> str | None:
    """The profile's new text, or None where it has the key or its record no one-thread point."""
    text = cpu.read_text(encoding="utf-8")
    if re.search(rf"^{KEY}:", text, re.M):
        return None
    adam = re.search(rf"^{ADAM}: .*source: \"(measured [^:]*by tierlab calibrate)", text, re.M)
    if adam is None:
        return None
    points = json.loads(raw.read_text(encoding="utf-8"))["results"].get("adam") or []
    entry = one_thread_entry(points, adam.group(1))
    if entry is None:
        return None
    line_end = text.index("\n", adam.start())
    return text[:line_end + 1] + render_yaml({KEY: entry}) + text[line_end + 1:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    check = ap.parse_args().check
    missing = 0
    for cpu, raw in pairs():
        new = backfill(cpu, raw)
        if new is None:
            continue
        missing += 1
        if not check:
            cpu.write_text(new, encoding="utf-8")
            print(f"added {KEY} to {cpu.relative_to(LAB.parent)}")
    if check and missing:
        print(f"{missing} calibrated CPU profiles lack {KEY}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
