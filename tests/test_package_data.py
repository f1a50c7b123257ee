"""The wheel holds code and the hardware a user can pick: no measured runs (lab/cases), no
test-machine calibrations. Asked of setuptools itself (build_py's data files from setup.cfg, the
list `pip wheel` packs), without building a wheel."""
from pathlib import Path

import pytest

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


@pytest.mark.lab
def test_no_measured_runs_in_the_wheel(packaged):
    assert any(Path(ROOT, "lab", "cases").rglob("*.json"))      # there is something to leave
    assert not [p for p in packaged if p.startswith("lab/cases")]


@pytest.mark.lab
def test_no_lab_data_in_the_wheel(packaged):
    """The lab (test-machine profiles, measured runs, scripts, notes) lives outside the package."""
    assert (ROOT / "lab" / "profiles" / "hardware" / "systems").is_dir()
    assert not [p for p in packaged if p.startswith("lab/")]


def test_every_catalogue_profile_is_in_the_wheel(packaged):
    for path in HARDWARE_DIR.rglob("*.yaml"):
        assert path.relative_to(ROOT).as_posix() in packaged, path
    assert {"profiles/models/tinyllama-1.1b.yaml", "profiles/configs/zero3-nvme.json",
            "profiles/software/deepspeed-0.19.8.yaml"} <= packaged


@pytest.mark.lab
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
            original = ROOT.joinpath("lab", "profiles", *rel.parts)
        else:
            original = ROOT / "lab" / "cases" / "h200x2-e" / rel
        assert path.read_bytes() == original.read_bytes(), rel


def test_one_deepspeed_version():
    """profiles/load.DEEPSPEED_VERSION is the one home: the pin, the vendored ds_config table and
    the stock software profile follow it."""
    import configparser
    import json

    from tierlab.profiles.load import DEEPSPEED_VERSION, DEFAULT_SOFTWARE, SOFTWARE_DIR

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    pins = [line.strip() for line in cfg["options.extras_require"]["runner"].splitlines()
            if line.strip().startswith("deepspeed")]
    assert pins == [f"deepspeed=={DEEPSPEED_VERSION}"]
    table = json.loads((ROOT / "profiles/deepspeed/ds_config_schema.json").read_text())
    assert table["deepspeed_version"] == DEEPSPEED_VERSION
    assert (SOFTWARE_DIR / f"{DEFAULT_SOFTWARE}.yaml").is_file()


def test_the_preset_ladder_is_shipped():
    from tierlab.profiles.load import CONFIGS_DIR, PRESET_LADDER, list_profiles

    assert all((CONFIGS_DIR / f"{name}.json").is_file() for name in PRESET_LADDER)
    assert set(PRESET_LADDER) <= {name for name, _ in list_profiles("configs")}
