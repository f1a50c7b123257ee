"""validate/fit.py: the software profile's fitted terms come from its training runs only, and the
committed numbers are what the fit gives (no hand-tuning)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tierlab.profiles.load import SOFTWARE_DIR, load_hardware, load_software
from tierlab.validate import fit
from tierlab.validate.compare import case_key

CASES = Path(__file__).resolve().parents[1] / "lab" / "cases"


@pytest.fixture(scope="module")
def refit():
    return fit.fit_software([CASES / f for f in ("h200x2-b", "h200x2-c", "h200x2-d")],
                            load_software())


def test_committed_terms_are_the_fit_on_the_training_runs(refit):
    committed = fit.fitted_values(load_software())
    assert fit.fitted_values(refit) == committed


def test_fit_reads_only_the_training_runs():
    sw = load_software()
    cases = fit._cases([CASES], set(sw.train_cases))
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
    text = (SOFTWARE_DIR / "deepspeed-0.19.8.yaml").read_text()
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
    got = fit._cases([tmp_path / "loose"], set(sw.train_cases), load_hardware("h200x2-c"))
    assert [h.name for _, _, h in got] == ["h200x2-c"]
