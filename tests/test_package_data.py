"""The wheel holds code and the hardware a user can pick: no measured runs (validate/cases), no
test-machine calibrations. Asked of setuptools itself (build_py's data files from setup.cfg, the
list `pip wheel` packs), without building a wheel."""
from pathlib import Path

import pytest

from tierlab.profiles.catalogue import TEST_MACHINE, TEST_MACHINES, hidden_stems
from tierlab.profiles.load import HARDWARE_DIR

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def packaged() -> set[str]:
    """Paths (relative to the repository root) of every package data file setup.cfg ships."""
    import os

    from setuptools.dist import Distribution

    here = os.getcwd()
    os.chdir(ROOT)                      # package_dir maps tierlab -> "."
    try:
        dist = Distribution()
        dist.parse_config_files([str(ROOT / "setup.cfg")])
        cmd = dist.get_command_obj("build_py")
        cmd.ensure_finalized()
        return {Path(src, name).as_posix().removeprefix("./")
                for _, src, _, names in cmd.data_files for name in names}
    finally:
        os.chdir(here)


def test_no_measured_runs_in_the_wheel(packaged):
    assert any(Path(ROOT, "validate", "cases").rglob("*.json"))      # there is something to leave
    assert not [p for p in packaged if p.startswith("validate/cases")]


def test_no_test_machine_profile_in_the_wheel(packaged):
    hidden = {f"hardware/{kind}/{stem}.yaml" for kind in ("gpus", "cpus", "nvme")
              for stem in hidden_stems(kind)}
    hidden |= {f"hardware/systems/{stem}.yaml" for stem in TEST_MACHINES}
    assert len(hidden) > 20
    shipped = {p.removeprefix("profiles/") for p in packaged}
    assert not hidden & shipped, sorted(hidden & shipped)


def test_every_catalogue_profile_is_in_the_wheel(packaged):
    """...and the exclusion patterns catch nothing a user can pick (h200-gen5, the h200 GPU)."""
    for kind in ("systems", "gpus", "cpus", "nvme"):
        hidden = TEST_MACHINES if kind == "systems" else hidden_stems(kind)
        for path in (HARDWARE_DIR / kind).glob("*.yaml"):
            if path.stem.lower() not in hidden:
                assert f"profiles/hardware/{kind}/{path.name}" in packaged, path
    assert {"profiles/models/tinyllama-1.1b.yaml", "profiles/configs/zero3-nvme.json",
            "profiles/software/deepspeed-0.19.8.yaml"} <= packaged


@pytest.mark.parametrize("stem, test", [
    ("h200-j", True), ("h200-host", True), ("h200x4-a", True), ("h200x2-host", True),
    ("h200-gen5", False), ("h200", False), ("dgx-h100", False)])
def test_a_new_test_machine_needs_no_edit(stem, test):
    """`calibrate --name h200-j` (system and parts named h200-j) is a test machine by its name;
    setup.cfg's patterns say the same (fnmatch, as setuptools' exclude_package_data)."""
    from configparser import ConfigParser
    from fnmatch import fnmatch

    assert bool(TEST_MACHINE.fullmatch(stem)) is test
    cfg = ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    patterns = cfg["options.exclude_package_data"]["tierlab.profiles"].split()
    for kind in ("systems", "gpus", "cpus", "nvme"):
        excluded = any(fnmatch(f"hardware/{kind}/{stem}.yaml", p) for p in patterns)
        assert excluded is test, (kind, stem)


def test_the_shipped_example_is_a_faithful_copy_of_the_lab(packaged):
    """`tierlab validate --example` ships two measured runs with their machine's calibration: a
    copy, so it is held byte-equal to the lab's runs and profiles (one home: the lab's)."""
    example = ROOT / "validate" / "example"
    copies = [p for p in example.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl",
                                                                             ".yaml")]
    assert len(copies) >= 11
    for path in copies:
        rel = path.relative_to(example)
        assert f"validate/example/{rel.as_posix()}" in packaged, rel
        if rel.name == "validate.yaml":
            continue
        if rel.parts[0] == "hardware":
            original = HARDWARE_DIR.joinpath(*rel.parts[1:])
        else:
            original = ROOT / "validate" / "cases" / "h200x2-e" / rel
        assert path.read_bytes() == original.read_bytes(), rel
