"""The shipped profile data: every profile loads, every number has a source, published facts hold.

Parameter counts are the published ones (Hugging Face model cards / safetensors metadata, papers);
a mismatch means the profile is wrong, not the tolerance.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from tierlab.cli import main
from tierlab.profiles.load import (HARDWARE_DIR, MODELS_DIR, list_profiles, load_hardware,
                                   load_model, load_part)
from tierlab.profiles.schema import CPU, GPU, NVMe, Network, PCIe

GiB = 2.0**30


def _stems(directory) -> list[str]:
    return sorted(p.stem.lower() for p in directory.glob("*.yaml"))


# every profile: the shipped catalogue and the lab's test machines ($TIERLAB_PROFILES, conftest)
LAB_HARDWARE = Path(os.environ["TIERLAB_PROFILES"]) / "hardware"
GPUS = _stems(HARDWARE_DIR / "gpus") + _stems(LAB_HARDWARE / "gpus")
CPUS = _stems(HARDWARE_DIR / "cpus") + _stems(LAB_HARDWARE / "cpus")
DRIVES = _stems(HARDWARE_DIR / "nvme") + _stems(LAB_HARDWARE / "nvme")
SHIPPED_SYSTEMS = _stems(HARDWARE_DIR / "systems")
SYSTEMS = SHIPPED_SYSTEMS + _stems(LAB_HARDWARE / "systems")
MODELS = _stems(MODELS_DIR)

# Optional keys: when a profile leaves them out the loader uses the default and records no source.
_OPTIONAL_DEFAULTS = {"switch_uplink_Bps": None, "gpus_per_switch": 1, "nvme_per_switch": 0,
                      "nodes": 1}


def _numeric_fields(obj) -> dict[str, object]:
    """Numeric dataclass fields of obj; peak_flops is expanded to peak_flops.<dtype>."""
    out = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name == "peak_flops":
            out.update({f"peak_flops.{k}": v for k, v in value.items()})
        elif f.name == "matmul_efficiency":
            out[f.name] = value
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f.name] = value
        elif value is None and f.name in _OPTIONAL_DEFAULTS:
            out[f.name] = value
    return out


def _assert_sourced(obj, where: str) -> None:
    for name, value in _numeric_fields(obj).items():
        source = obj.sources.get(name)
        if source is None and name in _OPTIONAL_DEFAULTS:
            assert value == _OPTIONAL_DEFAULTS[name], f"{where}: {name} set without a source"
            continue
        assert source and source.strip(), f"{where}: {name} has no source"


# -------------------------------------------------------------------------------------------------
# every part loads and every number is sourced

@pytest.mark.lab
def test_every_kind_is_shipped():
    assert len(GPUS) >= 12 and len(CPUS) >= 6 and len(DRIVES) >= 8
    assert len(SYSTEMS) >= 6 and len(MODELS) >= 11


@pytest.mark.lab
@pytest.mark.parametrize("name", GPUS)
def test_gpu_profile(name):
    gpu = load_part("gpus", name)
    assert isinstance(gpu, GPU)
    _assert_sourced(gpu, name)
    assert "nvlink_bandwidth_Bps" in gpu.sources, f"{name}: say whether it has NVLink"
    assert gpu.peak_flops["fp16"] > gpu.peak_flops["fp32"]
    effs = [e for _, e in gpu.matmul_efficiency]
    assert all(0 < e <= 1 for e in effs), name
    if not gpu.sources["matmul_efficiency"].startswith("measured"):
        # an assumed curve must not fall with GEMM size; a measured one is data (GEMMs of equal
        # FLOPs but different shapes differ by a few %), checked for range only
        assert effs == sorted(effs), f"{name}: efficiency should not fall with GEMM size"


@pytest.mark.lab
@pytest.mark.parametrize("name", CPUS)
def test_cpu_profile(name):
    cpu = load_part("cpus", name)
    assert isinstance(cpu, CPU)
    _assert_sourced(cpu, name)
    # CPU Adam touches 28 B of DRAM per parameter: the throughput can't beat the DRAM bandwidth
    assert cpu.adam_params_per_s * 28 <= cpu.dram_bandwidth_Bps * 1.05, name


@pytest.mark.lab
@pytest.mark.parametrize("name", DRIVES)
def test_nvme_profile(name):
    drive = load_part("nvme", name)
    assert isinstance(drive, NVMe)
    _assert_sourced(drive, name)


@pytest.mark.lab
@pytest.mark.parametrize("name", SYSTEMS)
def test_system_profile(name):
    hw = load_hardware(name)
    assert hw == load_part("systems", name)
    _assert_sourced(hw, name)
    _assert_sourced(hw.gpu, f"{name}: gpu")
    _assert_sourced(hw.cpu, f"{name}: cpu")
    if hw.nvme is not None:
        _assert_sourced(hw.nvme, f"{name}: nvme")
    assert isinstance(hw.pcie, PCIe) and isinstance(hw.network, Network)
    _assert_sourced(hw.pcie, f"{name}: pcie")
    _assert_sourced(hw.network, f"{name}: network")
    assert hw.description.strip()


@pytest.mark.parametrize("name", MODELS)
def test_model_profile(name):
    model = load_model(name)
    assert model.source.strip(), f"{name}: no source"
    assert model.n_params > 0


@pytest.mark.lab
def test_list_profiles_covers_every_file():
    assert [n for n, _ in list_profiles("hardware")] == SHIPPED_SYSTEMS
    assert [n for n, _ in list_profiles("models")] == MODELS
    for kind in ("gpus", "cpus", "nvme"):
        assert [n for n, _ in list_profiles(kind)] == _stems(HARDWARE_DIR / kind)
        assert [n for n, _ in list_profiles(kind, LAB_HARDWARE)] == _stems(LAB_HARDWARE / kind)


# -------------------------------------------------------------------------------------------------
# published numbers

@pytest.mark.parametrize("name, params", [
    ("tinyllama-1.1b", 1_100_048_384),
    ("llama-2-7b", 6_738_415_616),
    ("llama-2-13b", 13_015_864_320),
    ("llama-2-70b", 68_976_648_192),
    ("llama-3-8b", 8_030_261_248),
    ("llama-3-70b", 70_553_706_496),
    ("llama-3b", 3_212_749_824),                      # Llama-3.2-3B
    # Qwen2.5-0.5B has 494,032,768 incl. q/k/v biases; the Llama-architecture twin drops them
    ("llama-0.5b", 494_032_768 - 24 * (896 + 128 + 128)),
])
def test_exact_parameter_counts(name, params):
    assert load_model(name).n_params == params


@pytest.mark.parametrize("name, params, rel", [
    ("gpt3-175b", 175e9, 0.01),
    ("dense-1t", 1e12, 0.05),
    ("gpt2-10b", 10e9, 0.05),
])
def test_approximate_parameter_counts(name, params, rel):
    assert math.isclose(load_model(name).n_params, params, rel_tol=rel)


@pytest.mark.lab
def test_h200_memory():
    assert load_part("gpus", "h200").hbm_bytes > 139 * GiB
    assert load_hardware("h200-host").gpu.hbm_bytes > 139 * GiB


@pytest.mark.lab
def test_v100_has_no_bf16():
    assert "bf16" not in load_part("gpus", "v100-sxm3-32gb").peak_flops
    for name in GPUS:
        if name != "v100-sxm3-32gb":
            assert "bf16" in load_part("gpus", name).peak_flops, name


def test_dgx2():
    hw = load_hardware("dgx-2")
    assert hw.gpus_per_node == 16
    assert hw.dram_bytes == pytest.approx(1.5e12)
    # ZeRO-Infinity: NVMe->GPU ~28 GB/s per DGX-2 node, CPU->GPU 64 GB/s
    assert hw.nvme_drives * hw.nvme.read_bandwidth_Bps == pytest.approx(28e9, rel=0.05)
    uplinks = hw.gpus_per_node / hw.pcie.gpus_per_switch
    assert uplinks * hw.pcie.switch_uplink_Bps == pytest.approx(64e9, rel=0.05)


def test_h200_gen5_matches_deepnvme():
    hw = load_hardware("h200-gen5")
    assert hw.nvme_drives == 8
    assert hw.nvme_drives * hw.nvme.read_bandwidth_Bps == pytest.approx(48e9, rel=0.02)
    assert hw.nvme_drives * hw.nvme.write_bandwidth_Bps == pytest.approx(26e9, rel=0.02)


@pytest.mark.lab
def test_h200_host_matches_measurements():
    hw = load_hardware("h200-host")
    assert hw.gpus_per_node == 1 and hw.cpu.cores == 16
    pcie = (hw.pcie.h2d_pinned_Bps, hw.pcie.d2h_pinned_Bps,
            hw.pcie.h2d_pageable_Bps, hw.pcie.d2h_pageable_Bps)
    assert pcie == pytest.approx((55.5e9, 55.4e9, 9.2e9, 17.1e9))
    assert 3.4e9 <= hw.cpu.adam_params_per_s <= 4.1e9
    assert 1.8e9 <= hw.nvme.read_bandwidth_Bps <= 2.1e9
    assert 2.0e9 <= hw.nvme.write_bandwidth_Bps <= 3.2e9
    assert hw.nvme_capacity_bytes == pytest.approx(64e9)


# -------------------------------------------------------------------------------------------------
# the CLI lists them

@pytest.mark.lab
def test_cli_profiles_lists_every_system_and_model():
    """`tierlab profiles` lists the catalogue and every model, then the profiles of
    $TIERLAB_PROFILES (here the lab's test machines)."""
    result = CliRunner().invoke(main, ["profiles"])
    assert result.exit_code == 0, result.output
    listed = {line.split()[0] for line in result.output.splitlines()
              if line.startswith("  ") and line.split()}
    assert set(SYSTEMS) | set(MODELS) <= listed


_MEDIAN = re.compile(r"\(median of ([^()]*): their CPU profiles' deepspeed_host_costs\.(\w+); "
                     r"range min-max\)$")


@pytest.mark.lab
def test_every_stored_median_is_the_median_of_exactly_the_cpu_profiles_that_measured_it():
    """A term kept for hosts without a measurement is the median over *all* hosts that measured
    it (the rule of lab/notes/host-costs.md), written as a plain value by lab/scripts/host_medians.py. Hand-kept
    copies drifted once (h200-q's zero12 terms were left out): a host whose calibration adds the
    term makes this fail until `python lab/scripts/host_medians.py --write` is run."""
    from tierlab.profiles.load import SOFTWARE_DIR, read_data
    from tierlab.units import parse_quantity

    cpus = {p.stem: read_data(p) for d in (HARDWARE_DIR, LAB_HARDWARE)
            for p in sorted((d / "cpus").glob("*.yaml"))}
    measured: dict[str, dict[str, float]] = {}
    for name, data in cpus.items():
        for key, entry in (data.get("deepspeed_host_costs") or {}).items():
            if isinstance(entry, dict) and "value" in entry and not _MEDIAN.search(entry["source"]):
                measured.setdefault(key, {})[name] = parse_quantity(entry["value"], "seconds", key)
    entries = [(f"software: {k}", k, e) for p in SOFTWARE_DIR.glob("*.yaml")
               for k, e in read_data(p).items()]
    entries += [(f"{n}: {k}", k, e) for n, d in cpus.items()
                for k, e in (d.get("deepspeed_host_costs") or {}).items()]
    medians = [(where, key, e, m) for where, key, e in entries if isinstance(e, dict)
               and (m := _MEDIAN.search(str(e.get("source", ""))))]
    assert len(medians) >= 11   # 5 software terms + 2 checkpoint terms on h200-g, -h and -i
    for where, key, entry, stamp in medians:
        assert stamp.group(2) == key, where
        listed = {part.rsplit(" ", 2)[0] for part in stamp.group(1).split(", ")}
        values = measured[key]
        assert listed == set(values), where
        assert parse_quantity(entry["value"], "seconds", where) == pytest.approx(
            statistics.median(values.values()), rel=1e-5), where
        low, high = (parse_quantity(v, "seconds", where) for v in entry["range"])
        assert (low, high) == pytest.approx((min(values.values()), max(values.values())),
                                            rel=1e-5), where


@pytest.mark.lab
def test_no_profile_reaches_into_another_at_load_time():
    """Nothing a user can load names a test machine's profile to read (rule 19)."""
    for path in [*HARDWARE_DIR.parent.rglob("*.yaml"), *LAB_HARDWARE.rglob("*.yaml")]:
        assert "median_of" not in path.read_text(), path
