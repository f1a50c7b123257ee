"""The catalogue listing: `tierlab profiles` shows the shipped hardware a user picks, then the
profiles of the folders $TIERLAB_PROFILES names (the tests point it at the lab's test machines,
tests/conftest.py), which load by name too."""
import os
from pathlib import Path

import pytest

from tierlab.profiles.catalogue import list_catalogue, list_user_profiles
from tierlab.profiles.load import HARDWARE_DIR, load_hardware

from _cli import run  # noqa: E402

LAB_HARDWARE = Path(os.environ["TIERLAB_PROFILES"]) / "hardware"
CATALOGUE = sorted(p.stem.lower() for p in (HARDWARE_DIR / "systems").glob("*.yaml"))
LAB_SYSTEMS = sorted(p.stem.lower() for p in (LAB_HARDWARE / "systems").glob("*.yaml"))


@pytest.mark.lab
def test_no_test_machine_is_shipped():
    assert len(LAB_SYSTEMS) > 15 and not set(LAB_SYSTEMS) & set(CATALOGUE)
    for kind in ("gpus", "cpus", "nvme"):
        lab = {p.stem for p in (LAB_HARDWARE / kind).glob("*.yaml")}
        assert not lab & {p.stem for p in (HARDWARE_DIR / kind).glob("*.yaml")}, kind


@pytest.mark.lab
def test_hardware_listing_is_the_catalogue_then_yours():
    assert [n for n, _ in list_catalogue("hardware")] == CATALOGUE
    assert [n for n, _ in list_user_profiles("hardware")] == LAB_SYSTEMS
    assert list_user_profiles("models") == []


@pytest.mark.lab
@pytest.mark.parametrize("kind, lab, shown", [
    ("cpus", {"h200-host-cpu", "h200x2-b", "h200-g"}, {"2x-epyc-7742", "ryzen-9-5900x"}),
    ("nvme", {"h200-host-virtio", "h200x2-host"}, {"gen4-datacenter", "pny-cs3040"}),
    ("gpus", {"h200-g", "h200x2-f"}, {"h200", "a100-sxm4-80gb"}),
])
def test_parts_of_the_test_machines_are_yours_not_the_catalogue(kind, lab, shown):
    names = {n for n, _ in list_catalogue(kind)}
    assert not names & lab and shown <= names
    assert lab <= {n for n, _ in list_user_profiles(kind)}


@pytest.mark.parametrize("name", CATALOGUE)
def test_catalogue_systems_hold_no_test_machine_measurement(name):
    """A catalogue system whose CPU, NVMe or PCIe figures are a calibration of a test machine is a
    test machine in disguise: its figures must be sourced, not copied from a `measured` record."""
    hw = load_hardware(name)
    parts = [("system", hw.sources), ("cpu", hw.cpu.sources), ("pcie", hw.pcie.sources)]
    if hw.nvme is not None:
        parts.append(("nvme", hw.nvme.sources))
    for part, sources in parts:
        for key, source in sources.items():
            assert not source.lower().startswith("measured"), f"{name}: {part}.{key}: {source}"


@pytest.mark.lab
def test_cli_lists_the_catalogue_then_yours_and_both_load_by_name(tmp_path):
    out = run("profiles", "hardware")
    assert out.exit_code == 0, out.output
    catalogue, _, yours = out.output.partition("hardware ($TIERLAB_PROFILES):")
    assert "dgx-a100" in catalogue and "h200x2-b" not in catalogue
    assert "h200x2-b" in yours and "h200-host " in yours and "dgx-a100" not in yours
    assert load_hardware("h200x2-b").name == "h200x2-b"
    # a profile of yours, by name: its system finds its parts among yours and the shipped
    mine = tmp_path / "hardware" / "systems"
    mine.mkdir(parents=True)
    (mine / "my-box.yaml").write_text((HARDWARE_DIR / "systems" / "workstation-rtx3070.yaml")
                                      .read_text().replace("name: workstation-rtx3070",
                                                           "name: my-box"))
    env = f"{tmp_path}{os.pathsep}{os.environ['TIERLAB_PROFILES']}"
    out = run("simulate", "-H", "my-box", "-c", "zero2-cpu", env={"TIERLAB_PROFILES": env})
    assert out.exit_code == 0 and "on my-box" in out.output, out.output


def test_docs_catalogue_tables_match_the_profiles():
    """docs/catalogue.md's tables are the profiles' figures (bench/render_catalogue.py writes them)."""
    import render_catalogue as render   # bench/ (tests/conftest.py puts it on sys.path)

    text = render.DOC.read_text()
    assert render.render(text) == text, "docs/catalogue.md is stale: run bench/render_catalogue.py"


def test_catalogue_figures_have_ranges():
    """Every CPU, PCIe, NVMe and network rate of a catalogue system states its range and the
    range holds its value (issue 14: the catalogue says how sure it is)."""
    from tierlab.profiles.catalogue import _FIGURES

    for name in CATALOGUE:
        hw = load_hardware(name)
        for part_kind, figures in _FIGURES.items():
            part = getattr(hw, part_kind)
            if part is None:
                continue
            for field, *_ in figures:
                value = getattr(part, field)
                if value is None:
                    continue
                lo, hi = part.ranges[field]
                assert lo <= value <= hi and hi > lo, f"{name}: {part_kind}.{field}"
                assert "range" in part.sources[field].lower() or "rule" in \
                    part.sources[field].lower(), f"{name}: {part_kind}.{field}: say why the width"
