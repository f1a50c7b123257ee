"""Fit the software profile's host-side terms on its training runs and print them (a lab tool:
tierlab.validate.fit computes, this prints and writes).

    python lab/scripts/fit.py lab/cases/h200x2-b lab/cases/h200x2-c lab/cases/h200x2-d
    python lab/scripts/fit.py lab/cases/h200x2-b lab/cases/h200x2-c lab/cases/h200x2-d --write

Each run is simulated on the profile its folder's validate.yaml names (or on -H for all); only
the software profile's train_cases enter. --write replaces the fitted values in
profiles/software/SOFTWARE.yaml (their sources unchanged; a stated range is dropped until
lab/scripts/spread.py --write states the new spread, docs/ranges.md). A bad folder, profile or
training set exits 2 with one line.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tierlab.errors import ConfigError
from tierlab.profiles.load import DEFAULT_SOFTWARE, SOFTWARE_DIR, load_hardware, load_software
from tierlab.validate.fit import fit_software, fitted_values, write_values

import labenv  # noqa: E402,F401  (sets $TIERLAB_PROFILES to the lab)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python lab/scripts/fit.py",
                                description=__doc__.splitlines()[0])
    p.add_argument("cases", nargs="+", help="folders of measured runs (lab/cases/NAME)")
    p.add_argument("-H", "--hardware", default=None,
                   help="simulate every run on this profile (default: each folder's validate.yaml)")
    p.add_argument("--software", default=DEFAULT_SOFTWARE,
                   help="software profile by name or path to its YAML")
    p.add_argument("--write", action="store_true",
                   help="write the values into the software profile (its sources unchanged)")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        sw = fit_software(a.cases, load_software(a.software),
                          load_hardware(a.hardware) if a.hardware else None)
        values = fitted_values(sw)
        if a.write:
            path = Path(a.software) if a.software.endswith(".yaml") else \
                SOFTWARE_DIR / f"{a.software}.yaml"
            path.write_text(write_values(path.read_text(), values))
            load_software(str(path))          # what was written loads
            print(f"wrote {path}")
    except (ConfigError, KeyError) as e:   # a missing folder, a bad validate.yaml, no training run
        print(f"error: {e.args[0] if isinstance(e, KeyError) else e}", file=sys.stderr)
        return 2
    print(f"train_cases: {list(sw.train_cases)}")
    for key, value in values.items():
        print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
