"""validate/loco.py: classes of the committed runs, a held-out class never reaches its refit,
and `tierlab validate --loco` on bad input."""
from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests._cli import assert_user_error, run
from tierlab.errors import ConfigError
from tierlab.profiles.load import load_software
from tierlab.records.measurement import load_measurement
from tierlab.validate import loco as L
from tierlab.validate.fit import fit_software

pytestmark = pytest.mark.lab      # reads the lab's data (setup.cfg)

CASES = Path(__file__).resolve().parents[1] / "lab" / "cases"


def _classes(key: str) -> tuple[str, ...]:
    folder, name = key.split("/")
    return L.classes_of(load_measurement(CASES / folder / name), folder)


def test_classes_of_committed_runs():
    assert _classes("h200x2-b/c-tinyllama-noofl-bd") == (
        "stage0-none", "model:tinyllama-1.1b", "machine:h200x2-b")
    assert _classes("h200x2-c/v-tinyllama-z3cpu-dp2") == (
        "stage3-cpu", "multi-rank", "model:tinyllama-1.1b", "machine:h200x2-c")
    assert _classes("h200x2/v-0.5b-z3nvme-pipe") == (
        "stage3-nvme", "nvme-pipeline", "model:llama-0.5b", "machine:h200x2")
    assert _classes("h200x2-f/v-0.5b-z3nvme-params-buf") == (
        "stage3-nvme", "nvme-no-pipeline", "nvme-params", "model:llama-0.5b", "machine:h200x2-f")
    assert "model:llama-3b" in _classes("h200x2-c/v-3b-z3cpu-mb8")


def _variant(edit) -> tuple[str, ...]:
    """The classes of the committed ZeRO-3 CPU run with its ds_config edited."""
    m = load_measurement(CASES / "h200x2-b" / "c-tinyllama-z3cpu-bd")
    cfg = copy.deepcopy(dict(m.ds_config))
    edit(cfg, cfg["zero_optimization"])
    return L.classes_of(replace(m, ds_config=cfg), "h200x2-b")


def test_classes_of_mechanisms_no_committed_run_has_yet():
    def accum(cfg, z):
        cfg["gradient_accumulation_steps"] = 4
        cfg["train_batch_size"] = 4 * cfg["train_micro_batch_size_per_gpu"]

    def pageable(cfg, z):
        z["offload_param"]["pin_memory"] = False

    def no_offload(cfg, z):
        z.pop("offload_param")
        z["offload_optimizer"] = {"device": "none"}

    def unpinned_key_absent(cfg, z):     # DeepSpeed 0.19.8's default is pin_memory true
        z["offload_param"].pop("pin_memory", None)
        z["offload_optimizer"].pop("pin_memory", None)

    assert _variant(accum)[:2] == ("stage3-cpu", "grad-accum")
    assert _variant(pageable)[:2] == ("stage3-cpu", "pageable")
    assert _variant(no_offload)[:2] == ("stage3-none", "zero3-no-offload")
    assert "pageable" not in _variant(unpinned_key_absent)


@pytest.fixture(scope="module")
def held_out_stage2():
    """stage2-cpu held out of the h200x2-b/-c pool, every fit recorded (the real fit)."""
    calls = []

    def recording_fit(paths, base, hardware=None, *, train=None):
        sw = fit_software(paths, base, hardware, train=train)
        calls.append((tuple(train), sw))
        return sw

    base = load_software()
    report = L.loco([CASES / "h200x2-b", CASES / "h200x2-c"], base, classes=["stage2-cpu"],
                    fit=recording_fit)
    return report, calls, base


def test_a_held_out_class_never_reaches_its_refit(held_out_stage2):
    report, calls, base = held_out_stage2
    (c,) = report.classes
    assert c.members == ("h200x2-b/c-tinyllama-z2cpu-bd", "h200x2-b/v-tinyllama-z2cpu-dp2",
                         "h200x2-c/c-tinyllama-z2cpu-bd")
    assert c.excluded == ("h200x2-b/c-tinyllama-z2cpu-bd", "h200x2-c/c-tinyllama-z2cpu-bd")
    assert set(report.pool) == {k for k in base.train_cases if k.split("/")[0] in
                                ("h200x2-b", "h200x2-c")}
    # two fits: the whole pool (in-sample line) and the pool without the class
    assert [set(t) for t, _ in calls] == [set(report.pool), set(report.pool) - set(c.excluded)]
    refit = calls[1][1]
    assert set(refit.train_cases) == set(report.pool) - set(c.members) == set(c.fit_on)
    assert set(calls[0][1].train_cases) >= set(c.excluded)
    assert c.summary["step_time_s"]["n"] == 3 and c.summary["optimizer_s"]["n"] == 3


def test_terms_nothing_left_can_fit_are_flagged(held_out_stage2):
    report, calls, base = held_out_stage2
    (c,) = report.classes
    full, refit = calls[0][1], calls[1][1]
    terms = L.fitted_terms(full, base)
    for t in terms:       # a kept term is the base value; every other one was refitted
        assert (getattr(refit, t) == getattr(base, t)) == (t in c.kept), t
    if "offload_grad_s_per_param" in terms:     # fitted only on 1-rank ZeRO-1/2 offload runs
        assert "offload_grad_s_per_param" in c.kept


def test_training_pool_and_bad_classes():
    cases = L.load_cases([CASES / "h200x2-b"])
    assert len(L.training_pool(cases, load_software(), "all")) == len(cases) == 7
    assert len(L.training_pool(cases, load_software())) == 4
    with pytest.raises(ConfigError, match="unknown class 'stage3'"):
        L.check_classes(["stage3"], cases)
    with pytest.raises(ConfigError, match="no finished run of class 'nvme-params'"):
        L.check_classes(["nvme-params"], cases)
    with pytest.raises(ConfigError, match="training pool"):
        L.training_pool(L.load_cases([CASES / "h200x2-e"]), load_software())


def test_cli_loco_bad_input(tmp_path):
    b = str(CASES / "h200x2-b")
    assert_user_error(run("validate", "--loco", "--class", "nosuch", b), "unknown class",
                      "nosuch")
    assert_user_error(run("validate", "--loco", str(tmp_path)), "no measurement.json")
    assert_user_error(run("validate", "--class", "multi-rank", b), "--loco")
    assert_user_error(run("validate", "--loco", str(CASES / "h200x2-e")), "training pool")


def test_cli_loco_json_and_strict(tmp_path):
    r = run("validate", "--loco", "--class", "stage0-none", "--strict", "--json",
            "--out", str(tmp_path), str(CASES / "h200x2-b"))
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert json.loads((tmp_path / "loco.json").read_text()) == got
    (c,) = got["classes"]
    assert c["class"] == "stage0-none" and c["excluded"] == ["h200x2-b/c-tinyllama-noofl-bd"]
    assert "h200x2-b/c-tinyllama-noofl-bd" not in c["fit_on"] and len(c["fit_on"]) == 3
    assert (got["blind"] == {}) == bool(c["kept"])     # a class with a kept term is not blind
    # one machine: every pool run shares machine:h200x2-b with every run, nothing left to fit
    assert len(got["strict_unfit"]) == 7 and got["strict"] == {}
