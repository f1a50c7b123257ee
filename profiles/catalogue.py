"""The hardware catalogue: the shipped profiles a user picks (profiles/hardware/), and the
profiles of your own that $TIERLAB_PROFILES names (profiles/load.py PROFILES_ENV), listed apart.

This project's test machines (the H200 machines its measured runs ran on) are not in the
catalogue: they live in the repository's lab (lab/profiles/hardware), which the lab's scripts and
tests reach through $TIERLAB_PROFILES, and the wheel never holds.
"""
from __future__ import annotations

from tierlab.profiles.load import HARDWARE_DIR, list_profiles, read_data, user_hardware_dirs


def list_catalogue(kind: str) -> list[tuple[str, str]]:
    """(name, summary) of the shipped profiles of a kind (hardware, gpus, cpus, nvme, models,
    configs)."""
    return list_profiles(kind)


def list_user_profiles(kind: str) -> list[tuple[str, str]]:
    """(name, summary) of the hardware profiles of a kind in the $TIERLAB_PROFILES folders that
    are not shipped ones (empty without the variable, or for models and configs)."""
    if kind not in ("hardware", "gpus", "cpus", "nvme"):
        return []
    shipped = {name for name, _ in list_profiles(kind)}
    rows = []
    for root in user_hardware_dirs():
        rows += [r for r in list_profiles(kind, root) if r[0] not in shipped]
        shipped |= {name for name, _ in rows}
    return rows


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
