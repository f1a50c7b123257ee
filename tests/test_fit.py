"""validate/fit.py: the software profile's fitted terms come from its training runs only, and the
committed numbers are what the fit gives (no hand-tuning); lab/scripts/fit.py is its front end."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

import fit as fit_script          # lab/scripts/fit.py (tests/conftest.py puts lab/scripts on sys.path)
from tierlab.profiles.load import DEFAULT_SOFTWARE, SOFTWARE_DIR, load_hardware, load_software
from tierlab.validate import fit
from tierlab.validate.compare import case_key

CASES = Path(__file__).resolve().parents[1] / "lab" / "cases"

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def refit():
    return fit.fit_software([CASES / f for f in ("h200x2-b", "h200x2-c", "h200x2-d")],
                            load_software())


def test_committed_terms_are_the_fit_on_the_training_runs(refit):
    committed = fit.fitted_values(load_software())
    assert fit.fitted_values(refit) == committed


def test_fit_reads_only_the_training_runs():
    sw = load_software()
    cases = fit.training_cases([CASES], set(sw.train_cases))
    assert sorted(n for n, _, _ in cases) == sorted(sw.train_cases)
    assert all(m.status == "ok" for _, m, _ in cases)
    # each run on the profile calibrated beside it (its folder's validate.yaml)
    assert {(n.split("/")[0], h.name) for n, _, h in cases} == {
        ("h200x2-b", "h200x2-b"), ("h200x2-c", "h200x2-c"), ("h200x2-d", "h200x2-d")}


def test_fit_refuses_a_training_set_it_cannot_find(tmp_path):
    from tierlab.errors import ConfigError

    sw = replace(load_software(), train_cases=("nowhere/c-none",))
    with pytest.raises(ConfigError, match="nowhere/c-none"):
        fit.fit_software([CASES / "h200x2-b"], sw)


def test_write_values_replaces_values_and_keeps_sources():
    text = (SOFTWARE_DIR / f"{DEFAULT_SOFTWARE}.yaml").read_text()
    out = fit.write_values(text, {"zero3_hook_per_module": "9.9999 ms"})
    assert "zero3_hook_per_module: {value: 9.9999 ms, source:" in out
    assert out.replace("9.9999 ms", "X") != text and len(out.splitlines()) == len(text.splitlines())
    with pytest.raises(KeyError, match="no_such_term"):
        fit.write_values(text, {"no_such_term": "1 ms"})


def test_case_key_is_folder_and_run():
    assert case_key(CASES / "h200x2-b" / "c-tinyllama-z3cpu-bd") == "h200x2-b/c-tinyllama-z3cpu-bd"


def test_a_folder_without_a_profile_needs_one_given(tmp_path):
    import shutil

    from tierlab.errors import ConfigError

    src = CASES / "h200x2-b" / "c-tinyllama-noofl-bd"
    shutil.copytree(src, tmp_path / "loose" / src.name)
    sw = replace(load_software(), train_cases=("loose/c-tinyllama-noofl-bd",))
    with pytest.raises(ConfigError, match="no validate.yaml"):
        fit.fit_software([tmp_path / "loose"], sw)
    got = fit.training_cases([tmp_path / "loose"], set(sw.train_cases), load_hardware("h200x2-c"))
    assert [h.name for _, _, h in got] == ["h200x2-c"]


def test_lab_script_refuses_a_missing_folder_in_one_line(tmp_path, capsys):
    assert fit_script.main([str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "nowhere" in err[0]


def test_lab_script_prints_and_writes_the_fit(tmp_path, capsys):
    """A folder whose one run is the training set: the script prints what fit_software gives,
    without --write leaves the profile as it was, with --write stores exactly those values."""
    import shutil

    src = CASES / "h200x2-b" / "c-tinyllama-noofl-bd"
    shutil.copytree(src, tmp_path / "loose" / src.name)
    text = (SOFTWARE_DIR / f"{DEFAULT_SOFTWARE}.yaml").read_text()
    sw = replace(load_software(), train_cases=("loose/c-tinyllama-noofl-bd",))
    profile = tmp_path / "sw.yaml"
    profile.write_text(re.sub(r"^train_cases: .*$", "train_cases: [loose/c-tinyllama-noofl-bd]",
                              text, count=1, flags=re.M))      # the copy's training set: one run
    assert fit_script.main([str(tmp_path / "loose"), "-H", "h200x2-b",
                            "--software", str(profile)]) == 0
    out = capsys.readouterr().out
    expected = fit.fitted_values(fit.fit_software([tmp_path / "loose"], sw,
                                                  load_hardware("h200x2-b")))
    assert "train_cases: ['loose/c-tinyllama-noofl-bd']" in out
    for key, value in expected.items():
        assert f"{key}: {value}" in out
    assert profile.read_text().count("loose/") == 1          # no --write: untouched
    assert fit_script.main([str(tmp_path / "loose"), "-H", "h200x2-b",
                            "--software", str(profile), "--write"]) == 0
    assert f"wrote {profile}" in capsys.readouterr().out
    assert fit.fitted_values(load_software(str(profile))) == expected
    assert (SOFTWARE_DIR / f"{DEFAULT_SOFTWARE}.yaml").read_text() == text
