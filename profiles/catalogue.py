"""Which hardware profiles are the catalogue (hardware a user picks) and which are this project's
own test machines (validation data: calibrations of the H200 machines the committed runs in
validate/cases were measured on).

The test machines stay in profiles/hardware beside the catalogue, so a checkout (`pip install -e .`
or PYTHONPATH) loads them by name as validate/cases and the tests do; they are left out of
`tierlab profiles` unless `--test-machines` is given, and out of the wheel by setup.cfg's
`exclude_package_data` (the same names as `TEST_MACHINE`; tests/test_package_data.py holds the two
together). A test machine is a system named by `TEST_MACHINE`: a new one (`calibrate --name
h200-j`, with its parts named h200-j too) needs no edit here or in setup.cfg. A part (GPU, CPU,
NVMe profile) is a test-machine part when every system that names it is a test machine
(h200-host-virtio, the h200x2-* CPUs); a part no system names, or one a catalogue system also
names (the h200 GPU, named by h200-gen5), is catalogue.
"""
from __future__ import annotations

import re

from tierlab.profiles.load import HARDWARE_DIR, list_profiles, read_data

TEST_MACHINE = re.compile(r"h200-(host[\w.+-]*|[a-z])|h200x\d+-[\w.+-]+")
"""System profile stems that are calibrations of this project's test machines: h200-host (the first
H200 machine), h200-<letter> (single-H200 machines calibrated by `tierlab calibrate`),
h200x<N>-<name> (N x H200 ones). h200-gen5 (a published Azure ND H200 v5 host) is catalogue."""

TEST_MACHINES = frozenset(p.stem.lower() for p in (HARDWARE_DIR / "systems").glob("*.yaml")
                          if TEST_MACHINE.fullmatch(p.stem.lower()))
"""The test-machine system profiles present (none in an installed wheel)."""

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


# ----------------------------------------------------------------------------------------------
# the catalogue's sourcing as a table (docs/catalogue.md holds its output; a test keeps them equal)

_FIGURES = {  # part -> (field, label, unit, scale)
    "cpu": (("adam_params_per_s", "CPU Adam", "G params/s", 1e9),
            ("dram_bandwidth_Bps", "DRAM bandwidth", "GB/s", 1e9)),
    "nvme": (("read_bandwidth_Bps", "read (per drive)", "GB/s", 1e9),
             ("write_bandwidth_Bps", "write (per drive)", "GB/s", 1e9)),
    "pcie": (("h2d_pinned_Bps", "PCIe H2D pinned", "GB/s", 1e9),
             ("d2h_pinned_Bps", "PCIe D2H pinned", "GB/s", 1e9),
             ("h2d_pageable_Bps", "PCIe H2D pageable", "GB/s", 1e9),
             ("d2h_pageable_Bps", "PCIe D2H pageable", "GB/s", 1e9),
             ("switch_uplink_Bps", "PCIe switch uplink", "GB/s", 1e9)),
    "network": (("nic_bandwidth_Bps", "network (node)", "GB/s", 1e9),),
}


def _num(x: float) -> str:
    return f"{x:.3g}"


def _rows(owner: str, part_kind: str, part) -> list[str]:
    rows = []
    for field, label, unit, scale in _FIGURES[part_kind]:
        value = getattr(part, field)
        if value is None:
            continue
        lo, hi = part.ranges.get(field, (value, value))
        source = part.sources.get(field, "").replace("|", "/")
        rows.append(f"| {owner} | {label} | {_num(value / scale)} {unit} | "
                    f"{_num(lo / scale)}-{_num(hi / scale)} | {source} |")
    return rows


def catalogue_table_md() -> str:
    """The catalogue's CPU, NVMe, PCIe and network figures with value, range and source, as
    markdown: one table of systems (their PCIe and network figures and which parts they use),
    one of the CPUs and one of the NVMe drives the catalogue systems name."""
    from tierlab.profiles.load import load_hardware, load_part

    systems = [name for name, _ in list_catalogue("hardware")]
    head = "| {} | figure | value | range (80%) | source |\n|---|---|---|---|---|"
    sys_rows, cpus, drives = [], {}, {}
    for name in systems:
        hw = load_hardware(name)
        data = read_data(HARDWARE_DIR / "systems" / f"{name}.yaml")
        nvme = f", {hw.nvme_drives}x `{data['nvme']}`" if hw.nvme else ""
        sys_rows.append(f"| {name} | parts | {hw.gpus_per_node}x `{data['gpu']}`, "
                        f"`{data['cpu']}`{nvme} | | {hw.description.replace('|', '/')} |")
        sys_rows += _rows(name, "pcie", hw.pcie) + _rows(name, "network", hw.network)
        cpus[data["cpu"]] = hw.cpu
        if hw.nvme:
            drives[data["nvme"]] = hw.nvme
    for name, _ in list_catalogue("cpus"):
        cpus.setdefault(name, load_part("cpus", name))
    for name, _ in list_catalogue("nvme"):
        drives.setdefault(name, load_part("nvme", name))
    cpu_rows = [r for name in sorted(cpus) for r in _rows(f"`{name}`", "cpu", cpus[name])]
    nvme_rows = [r for name in sorted(drives) for r in _rows(f"`{name}`", "nvme", drives[name])]
    return "\n".join(
        ["### Systems", "", head.format("system"), *sys_rows, "",
         "### CPUs", "", head.format("CPU"), *cpu_rows, "",
         "### NVMe drives", "", head.format("drive"), *nvme_rows])
