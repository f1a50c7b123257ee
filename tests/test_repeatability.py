"""lab/scripts/bench_repeatability.py's noise floor and lab/scripts/gpu_validate.py's repeated cases: the
figures the accuracy targets are read against (docs/accuracy.md), so their arithmetic is tested."""
from __future__ import annotations

import pytest

import bench_repeatability as rep       # lab/scripts (tests/conftest.py puts it on sys.path)
import gpu_validate as gv
from labenv import LAB

pytestmark = pytest.mark.lab


def test_a_case_named_k_times_runs_k_times_into_numbered_folders():
    plan = {"a": {"model": "m"}, "b": {"model": "n"}}
    assert gv.run_names(["a", "b", "a", "a", "b"], plan) == [
        ("a", plan["a"]), ("b", plan["b"]), ("a.p2", plan["a"]), ("a.p3", plan["a"]),
        ("b.p2", plan["b"])]


@pytest.mark.parametrize("name, case", [("c-x", "c-x"), ("c-x.p2", "c-x"), ("c-x.p12", "c-x"),
                                        ("v-0.5b-z3", "v-0.5b-z3"), ("c-x.p", "c-x.p")])
def test_a_repeat_folder_names_its_plan_entry(name, case):
    assert rep.case_of(name) == case


def test_each_value_is_predicted_by_the_median_of_the_others_of_its_group():
    groups = [[("m1", 1.0), ("m2", 2.0), ("m3", 4.0)], [("x", 5.0)], [("p1", 2.0), ("p2", 3.0)]]
    errors = rep.loo_median_errors(groups, 3)
    # m1: median(2, 4) = 3 -> +200%; m2: median(1, 4) = 2.5 -> +25%; m3: 1.5 -> -62.5%
    assert errors == pytest.approx({"m1": 200.0, "m2": 25.0, "m3": -62.5})
    pairs = rep.loo_median_errors(groups, 2)
    assert pairs["p1"] == pytest.approx(50.0) and pairs["p2"] == pytest.approx(-100 / 3)
    assert "x" not in pairs      # a group of one predicts nothing


def test_repeats_group_by_folder_and_case_and_machines_take_each_folders_first_run():
    runs = [("c", "f1", "c", {"step_time_s": 1.0}), ("c", "f1", "c.p2", {"step_time_s": 1.2}),
            ("c", "f2", "c", {"step_time_s": 1.5}), ("d", "f1", "d", {"step_time_s": 3.0})]
    assert rep.process_repeats(runs) == {("f1", "c"): [{"step_time_s": 1.0},
                                                       {"step_time_s": 1.2}]}
    assert rep.repeated_cases(runs) == {"c": {"f1": {"step_time_s": 1.0},
                                              "f2": {"step_time_s": 1.5}}}


def test_the_committed_runs_hold_process_repeats_on_one_machine():
    """h200-s ran the same configurations in separate processes of one command: the floor's
    same-machine half rests on them and must stay computable."""
    repeats = rep.process_repeats(rep.finished_runs())
    assert ("h200-s", "m-3b-z3-nooffload-s2048") in repeats
    assert len(repeats[("h200-s", "m-3b-z3-nooffload-s2048")]) == 3
    assert rep.summarize([-10.0, 30.0]) == "MAPE  20.0%  max  30.0%  n=2"
    assert rep.summarize([]) == "-"


def test_a_plan_entry_can_outlast_the_default_case_timeout():
    assert gv.case_timeout_s({"name": "a"}, 100) == 100.0
    assert gv.case_timeout_s({"name": "a", "timeout_s": 200}, 100) == 200.0
    import yaml
    plan = yaml.safe_load((LAB / "plan.yaml").read_text())
    slow = next(c for c in plan["cases"] if c["name"] == "v-0.5b-z3nvme-params-buf")
    assert gv.case_timeout_s(slow, 100) >= 200
