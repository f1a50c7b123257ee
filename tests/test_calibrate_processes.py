"""The host rates (CPU Adam, the 16-bit cast, the module call) measured in separate processes:
one process's draw is not the next one's (runner/calibrate_process.py), so `calibrate` measures
them in `host_processes` processes and the profile takes the median process, the processes'
spread as the range (runner/calibrate_profile.py `per_process`)."""
import pytest

from tierlab.errors import ConfigError
from tierlab.runner import calibrate as cal
from tierlab.runner.calibrate_profile import cpu_document, per_process, best_of, fastest_of


def adam(rate: float, process: int | None = None, threads: int = 16, rep: int = 0) -> dict:
    p = {"optimizer": "deepspeed", "threads": threads, "n_params": 2**26, "rep": rep,
         "seconds": 2**26 / rate, "params_per_s": rate}
    return p if process is None else {**p, "process": process}


def test_one_process_keeps_the_best_repeat_and_its_repeats_as_range():
    points = [adam(5.0e9), adam(5.5e9, rep=1), adam(3.0e9, threads=8)]
    b, reps, how = per_process(points, "params_per_s", best_of, optimizer="deepspeed")
    assert b["params_per_s"] == 5.5e9 and how == ""
    assert reps == points


def test_three_processes_give_the_median_process_and_their_spread():
    points = [adam(5.6e9), adam(5.8e9, rep=1), adam(2.9e9, threads=8),       # this process
              adam(4.3e9, 1), adam(4.4e9, 1, rep=1),                         # a slow draw
              adam(5.2e9, 2), adam(5.3e9, 2, rep=1),
              adam(9.9e9, 2, threads=8)]          # another setting: not this rate's draw
    b, reps, how = per_process(points, "params_per_s", best_of, optimizer="deepspeed")
    assert b["params_per_s"] == 5.3e9 and b["threads"] == 16
    assert sorted(p["params_per_s"] for p in reps) == [4.4e9, 5.3e9, 5.8e9]
    assert "median of 3 processes" in how and "4.4 G, 5.3 G, 5.8 G" in how


def test_the_module_call_takes_each_process_fastest():
    calls = [{"device": "cuda", "calls": 4000, "rep": r, "seconds": 1.0,
              "seconds_per_call": s, **({"process": k} if k else {})}
             for k, r, s in ((0, 0, 19e-6), (0, 1, 18e-6), (1, 0, 23e-6), (1, 1, 22e-6),
                             (2, 0, 17e-6))]
    b, reps, how = per_process(calls, "seconds_per_call", fastest_of)
    assert b["seconds_per_call"] == 18e-6
    assert sorted(p["seconds_per_call"] for p in reps) == [17e-6, 18e-6, 22e-6]
    assert "each its fastest" in how


def test_the_profile_saysmedian_of_processes_with_their_range():
    base = {"cpus": ("x", {"dram_bandwidth": {"value": "100 GB/s", "source": "datasheet"},
                           "adam_throughput": {"value": "4 Gparams/s", "source": "datasheet"}})}
    results = {"adam": [adam(5.8e9), adam(4.4e9, 1), adam(5.3e9, 2)]}
    doc = cpu_document(results, {"cpu_model": "test", "sockets": 1, "cores_physical": 16,
                                 "cores_usable": 16}, base, "measured today by tierlab calibrate")
    entry = doc["adam_throughput"]
    assert entry["value"] == "5.3 Gparams/s"
    assert entry["range"] == ["4.4 Gparams/s", "5.8 Gparams/s"]
    assert "median of 3 processes" in entry["source"]
    assert "range: min-max of its 3 processes" in entry["source"]


def test_a_record_without_processes_builds_the_profile_as_before():
    results = {"adam": [adam(5.8e9), adam(5.6e9, rep=1)]}
    base = {"cpus": ("x", {"dram_bandwidth": {"value": "100 GB/s", "source": "datasheet"}})}
    entry = cpu_document(results, {"cpu_model": "t", "sockets": 1, "cores_physical": 4,
                                   "cores_usable": 4}, base, "measured")["adam_throughput"]
    assert entry["value"] == "5.8 Gparams/s" and "processes" not in entry["source"]
    assert "min-max of its 2 repeats" in entry["source"]


def test_a_benchmark_runs_in_a_fresh_process_and_is_tagged():
    points = cal.in_fresh_process({"bench": "cast", "n_params": 2**16, "repeats": 3}, 2)
    assert len(points) == 3 and all(p["process"] == 2 for p in points)
    assert all(p["params_per_s"] > 0 for p in points)


def test_a_failing_process_is_one_line_naming_the_benchmark():
    with pytest.raises(RuntimeError, match=r"^nope in fresh process 1: exit 2: .*bench must be one of"):
        cal.in_fresh_process({"bench": "nope"}, 1)


def test_the_tasks_repeat_each_host_rate_in_fresh_processes_last():
    plan = cal.apply_sweep_overrides(cal.quick_plan(), ["host_processes=3"])
    tasks, skipped = cal.calibration_tasks(plan, nvme_path=None, skip={"dispatch"}, cuda=False,
                                           n_gpus=0, facts={})
    repeats = [t for t in tasks if "fresh process" in t.label]
    assert [t.label for t in repeats] == ["adam in fresh process 1 of 2",
                                          "cast in fresh process 1 of 2",
                                          "adam in fresh process 2 of 2",
                                          "cast in fresh process 2 of 2"]
    assert tasks[-len(repeats):] == repeats                  # after every other benchmark
    one = cal.apply_sweep_overrides(cal.quick_plan(), ["host_processes=1"])
    tasks, _ = cal.calibration_tasks(one, nvme_path=None, skip=set(), cuda=False, n_gpus=0,
                                     facts={})
    assert not [t for t in tasks if "fresh process" in t.label]


def test_a_failed_process_is_listed_as_skipped_and_measures_nothing():
    def fail(spec, k):
        raise RuntimeError(f"{spec['bench']} in fresh process {k}: exit 1: killed")

    skipped: dict = {}
    tasks = cal.host_process_tasks(cal.quick_plan(), set(), skipped, False, launch=fail)
    cast = next(t for t in tasks if t.label == "cast in fresh process 1 of 1")
    assert cast.run() == []
    assert skipped["cast in fresh process 1"] == "cast in fresh process 1: exit 1: killed"


def test_zero_processes_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="host_processes must be > 0"):
        cal.apply_sweep_overrides(cal.quick_plan(), ["host_processes=0"])
