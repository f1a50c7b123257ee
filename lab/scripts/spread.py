"""How far the software profile's fitted terms and the simulator can be trusted: print the ranges
and (with --write) state them in the profiles (a lab tool: tierlab.validate.spread computes,
this prints and writes; docs/ranges.md).

    python lab/scripts/spread.py lab/cases            # print
    python lab/scripts/spread.py lab/cases --write    # into the software profile
    python lab/scripts/spread.py lab/cases --stock h200-host --write

Without --stock: each fitted term refitted on each machine's training runs alone, and the
simulator's error (measured / predicted steady step, P10-P90) over the runs not fitted on.
With --stock SYSTEM: the stock profile's host figures get the spread of the calibrations of
machines of its kind (the profiles the folders' validate.yaml name). Errors exit 2, one line.
"""
from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

from tierlab.errors import ConfigError
from tierlab.profiles import load
from tierlab.profiles.load import DEFAULT_SOFTWARE
from tierlab.validate.spread import (FITTED, kind_calibrations, kind_spread, machine_spread,
                                     simulator_error, write_error, write_kind_ranges,
                                     write_ranges)

import labenv  # noqa: E402,F401  (sets $TIERLAB_PROFILES to the lab)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python lab/scripts/spread.py",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", help="folders of measured runs (lab/cases)")
    ap.add_argument("--software", default=DEFAULT_SOFTWARE,
                    help="software profile by name or path to its YAML")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--stock", default=None, metavar="SYSTEM",
                    help="instead: the stock profile (e.g. h200-host) gets the spread of the host "
                         "figures over the profiles the folders' validate.yaml name")
    return ap


def software(args) -> None:
    sw = load.load_software(args.software)
    spread, machines = machine_spread(args.paths, sw)
    print(f"fitted terms, refitted on each of {', '.join(machines)} alone (low - pooled - high):")
    for key, field in FITTED.items():
        lo, hi = spread[field]
        pooled = getattr(sw, field)
        print(f"  {key:30s} {lo:.4g} - {pooled:.4g} - {hi:.4g}  "
              f"({lo / pooled:.2f}x - {hi / pooled:.2f}x)")
    lo, hi, n = simulator_error(args.paths, sw)
    print(f"simulator error: measured / predicted over {n} held-out runs, P10 {lo:.3f}, "
          f"P90 {hi:.3f}")
    if args.write:
        path = Path(args.software) if args.software.endswith(".yaml") else \
            load.SOFTWARE_DIR / f"{args.software}.yaml"
        text = write_ranges(path.read_text(), spread)
        path.write_text(write_error(text, lo, hi, n, datetime.date.today().isoformat()))
        load.load_software(str(path))
        print(f"wrote {path}")


def stock(args) -> None:
    calibrated = kind_calibrations(args.paths, args.stock)
    spread = kind_spread(args.stock, calibrated)
    print(f"{args.stock}: host figures over {', '.join(calibrated)}:")
    for (part, field), (lo, hi) in spread.items():
        print(f"  {part}.{field:22s} {lo:.4g} - {hi:.4g}")
    if args.write:
        system = load.find_part("systems", args.stock)
        cpu = load.find_part("cpus", load.read_data(system)["cpu"], near=system)
        for folder, path in (("systems", system), ("cpus", cpu)):
            path.write_text(write_kind_ranges(path.read_text(), folder, spread, len(calibrated)))
            print(f"wrote {path}")
        load.load_hardware(args.stock)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        (stock if args.stock else software)(args)
    except (ConfigError, KeyError) as e:
        print(f"error: {e.args[0] if isinstance(e, KeyError) else e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
