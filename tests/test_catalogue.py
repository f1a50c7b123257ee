"""The catalogue listing: `tierlab profiles` shows the hardware a user picks, not the calibrations
of this project's test machines (they stay loadable by name: validate/cases uses them)."""
import pytest

from tierlab.profiles.catalogue import TEST_MACHINES, list_catalogue, hidden_stems
from tierlab.profiles.load import HARDWARE_DIR, list_profiles, load_hardware

from _cli import run  # noqa: E402

SYSTEMS = sorted(p.stem.lower() for p in (HARDWARE_DIR / "systems").glob("*.yaml"))
CATALOGUE = [n for n in SYSTEMS if n not in TEST_MACHINES]


def test_every_test_machine_is_a_shipped_system():
    assert TEST_MACHINES <= set(SYSTEMS)


def test_hardware_listing_is_the_catalogue():
    names = [n for n, _ in list_catalogue("hardware")]
    assert names == CATALOGUE and not set(names) & TEST_MACHINES
    assert [n for n, _ in list_catalogue("hardware", test_machines=True)] == SYSTEMS


@pytest.mark.parametrize("kind, hidden, shown", [
    ("cpus", {"h200-host-cpu", "h200x2-b", "h200-g"}, {"2x-epyc-7742", "ryzen-9-5900x"}),
    ("nvme", {"h200-host-virtio", "h200x2-host"}, {"gen4-datacenter", "pny-cs3040"}),
    # h200 is also named by the catalogue's h200-gen5, so it stays
    ("gpus", {"h200-g", "h200x2-f"}, {"h200", "a100-sxm4-80gb"}),
])
def test_parts_only_test_machines_name_are_hidden(kind, hidden, shown):
    names = {n for n, _ in list_catalogue(kind)}
    assert not names & hidden and shown <= names
    assert hidden <= hidden_stems(kind)
    assert {n for n, _ in list_catalogue(kind, test_machines=True)} == \
        {n for n, _ in list_profiles(kind)}


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


def test_cli_lists_test_machines_only_when_asked():
    out = run("profiles", "hardware")
    assert out.exit_code == 0, out.output
    assert "dgx-a100" in out.output and "h200x2-b" not in out.output
    assert "h200-host " not in out.output
    out = run("profiles", "hardware", "--test-machines")
    assert out.exit_code == 0 and "h200x2-b" in out.output and "h200-host " in out.output
    # still loadable by name
    assert load_hardware("h200x2-b").name == "h200x2-b"


def test_docs_catalogue_tables_match_the_profiles():
    """docs/catalogue.md's tables are the profiles' figures (bench/render_catalogue.py writes them)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "bench" / "render_catalogue.py"
    spec = importlib.util.spec_from_file_location("render_catalogue", path)
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
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
