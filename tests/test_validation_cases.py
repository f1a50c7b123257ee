"""CI regression (issue 5): `validate` over the committed real runs (validate/cases/h200x2, profile
h200x2-host) must keep its accuracy. Thresholds are issue 5's targets where the simulator meets
them; elsewhere the figure reached (2026-11-30) rounded up a little, so any loss of accuracy fails.
Reached (all cases / held-out): step MAPE 5.6% / 7.5% (max 26.4% / 26.4%), step 1 15.6% /
11.3% (held-out max 35.5%), forward 26.5%, backward 19.6%, optimizer 6.2% (max 14.8%), GPU peak
allocated 8.0% / 7.3%, host RSS 12.6% / 12.3%, OOM 15/15 — with host kernel dispatch per
submodule use on every stage (0.313 ms), ZeRO-1/2 offload per-parameter gradient copies
(0.371 ms) and ZeRO-3 hooks on top (0.435 ms), fitted on the training subset only. Before those
two terms: step 14.9% / 10.5% (max 58.1% / 34.3%). The CPU optimizer step is DRAM-bound
at 46 B/param (sim/devices.optimizer_dram_bytes_per_param) over the calibrated DRAM bandwidth
counted with the copy's read-for-ownership (runner/calibrate.memcpy_bandwidth)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tierlab.profiles.load import load_hardware, load_software
from tierlab.runner.measurement import load_measurement
from tierlab.validate.compare import (compare_measurement, find_measurements, summarize,
                                      summarize_split)

CASES = Path(__file__).resolve().parents[1] / "validate" / "cases" / "h200x2"

# metric -> (MAPE %, max %) bounds on all cases; None: no bound on the max. TARGET = issue 5.
ALL = {
    "step_time_s": (10.0, 27.0),           # TARGET 10 (MAPE): met; max 20 not (dp2 -26%)
    "first_step_time_s": (16.0, 82.0),
    "forward_s": (27.0, 43.0),             # target 15: not met
    "backward_s": (20.0, 40.0),            # target 15: not met
    "optimizer_s": (7.0, 15.0),            # TARGET 15: met
    "gpu_peak_allocated_bytes": (10.0, 17.0),   # TARGET 10 (MAPE): met; max not within 10
    "host_rss_bytes": (20.0, 41.0),        # TARGET 20 (MAPE): met; max not within 20
    "swap_bytes": (10.5, 50.0),
}
HELD_OUT = {"step_time_s": (10.0, 27.0), "first_step_time_s": (12.0, 36.0),
            "gpu_peak_allocated_bytes": (10.0, 17.0), "host_rss_bytes": (20.0, 28.0)}


@pytest.fixture(scope="module")
def rows():
    hw, sw = load_hardware("h200x2-host"), load_software()
    out = []
    for d in find_measurements([CASES]):
        out += compare_measurement(hw, load_measurement(d), name=d.name, software=sw)
    return out


def test_every_case_is_compared(rows):
    assert len({r.case for r in rows}) == 15


def test_oom_verdicts_all_agree(rows):
    s = summarize(rows)["oom"]
    assert s["n"] == 15 and s["mismatches"] == []


@pytest.mark.parametrize("metric", sorted(ALL))
def test_accuracy_all_cases(rows, metric):
    s = summarize(rows)[metric]
    mape, worst = ALL[metric]
    assert s["mape_pct"] <= mape, s
    assert s["max_pct"] <= worst, s


@pytest.mark.parametrize("metric", sorted(HELD_OUT))
def test_accuracy_held_out(rows, metric):
    train = load_software().train_cases
    held = summarize_split(rows, train)["held_out"][metric]
    mape, worst = HELD_OUT[metric]
    assert held["mape_pct"] <= mape, held
    assert held["max_pct"] <= worst, held


def test_training_subset_is_named_and_disjoint(rows):
    train = set(load_software().train_cases)
    cases = {r.case for r in rows}
    assert train <= cases and 0 < len(train) < len(cases)
