"""Which shipped hardware profiles are the catalogue (hardware a user picks) and which are this
project's own test machines (validation data: calibrations of the H200 machines the committed runs
in validate/cases were measured on).

The test machines stay where they are (validate/cases and the tests name them) and load by name as
before; they are only left out of `tierlab profiles` unless `--test-machines` is given. A part
(GPU, CPU, NVMe profile) is a test-machine part when every system that names it is a test machine
(h200-host-virtio, the h200x2-* CPUs); a part no system names, or one a catalogue system also names
(the h200 GPU, named by h200-gen5), is catalogue.
"""
from __future__ import annotations

import re

from tierlab.profiles.load import HARDWARE_DIR, list_profiles, read_data

TEST_MACHINES = frozenset({
    "h200-host",                # the first H200 machine (/work/shared/gpu-host/README.md)
    "h200-g", "h200-h",         # single-H200 machines calibrated by tierlab calibrate (issue 12)
    "h200x2-host", "h200x2-b", "h200x2-c", "h200x2-d", "h200x2-e", "h200x2-f",  # 2x H200 ones
})
"""System profiles (file stems) that are calibrations of this project's test machines."""

_PARTS = {"gpus": "gpu", "cpus": "cpu", "nvme": "nvme"}


def _parts_named(test: bool) -> dict[str, set[str]]:
    """{part kind: stems named by the test-machine systems (test=True) or by the others}."""
    out: dict[str, set[str]] = {kind: set() for kind in _PARTS}
    for path in (HARDWARE_DIR / "systems").glob("*.yaml"):
        if (path.stem.lower() in TEST_MACHINES) != test:
            continue
        data = read_data(path)
        for kind, key in _PARTS.items():
            name = data.get(key) if isinstance(data, dict) else None
            if isinstance(name, str) and re.fullmatch(r"[\w.+-]+", name):
                out[kind].add(name.lower())
    return out


def hidden_stems(kind: str) -> set[str]:
    """Stems of a kind (hardware/systems, gpus, cpus, nvme) that are test machines or parts only
    test-machine systems name."""
    if kind in ("hardware", "systems"):
        return set(TEST_MACHINES)
    if kind not in _PARTS:
        return set()
    return _parts_named(True)[kind] - _parts_named(False)[kind]


def list_catalogue(kind: str, *, test_machines: bool = False) -> list[tuple[str, str]]:
    """`list_profiles(kind)` less the test machines (all of them with test_machines=True)."""
    rows = list_profiles(kind)
    if test_machines:
        return rows
    hidden = hidden_stems(kind)
    return [(name, summary) for name, summary in rows if name.lower() not in hidden]
