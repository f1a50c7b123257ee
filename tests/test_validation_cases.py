"""CI regression (issue 5): `validate` over the committed real runs must keep its accuracy.

The runs are the folders of validate/cases measured in the same device command as a calibrated
profile, each simulated on that profile: h200x2 (h200x2-host), h200x2-b (h200x2-b), h200x2-c
(h200x2-c). The software profile's fitted terms come from h200x2-b's four c-* runs only; the other
25 are held out. Thresholds are issue 5's targets where the simulator meets them; elsewhere the
figure reached (2026-11-30, stop 9) rounded up a little, so any loss of accuracy fails.

Reached (all 29 / held-out 25): step MAPE 7.2% / 8.0% (max 31.1%), forward 18.7% / 19.4%,
backward 13.9% / 14.8%, optimizer 5.5% / 6.0% (max 17.6%), GPU peak allocated 4.3% / 4.7% (max
20.2%), host RSS 0.2% / 0.2% (max 3.3%), OOM 29/29. The same configuration differs between two
machines of this kind by a median 16% in step time and 27% in forward time
(bench/bench_repeatability.py): the time maxima sit on that noise, the memory figures do not."""
from __future__ import annotations

from pathlib import Path

import pytest

from tierlab.profiles.load import load_hardware, load_software
from tierlab.runner.measurement import load_measurement
from tierlab.validate.compare import (case_key, compare_measurement, find_measurements, summarize,
                                      summarize_split)

CASES = Path(__file__).resolve().parents[1] / "validate" / "cases"
PAIRED = {"h200x2": "h200x2-host", "h200x2-b": "h200x2-b", "h200x2-c": "h200x2-c"}
"""As each folder's validate.yaml says (test_folders_name_their_profiles)."""

# metric -> (MAPE %, max %) bounds; TARGET = issue 5's figure (met where marked).
ALL = {
    "step_time_s": (10.0, 32.0),           # TARGET 10 (MAPE): met; max 20 not (31.1%, noise)
    "first_step_time_s": (28.0, 75.0),
    "forward_s": (20.0, 48.0),             # target 15: not met (machines differ by 27%)
    "backward_s": (15.0, 54.0),            # TARGET 15: met
    "optimizer_s": (15.0, 18.0),           # TARGET 15: met
    "gpu_peak_allocated_bytes": (10.0, 21.0),   # TARGET 10 (MAPE): met; one case -20%
    "host_rss_bytes": (20.0, 4.0),         # TARGET 20: met, every case within 4%
    "swap_bytes": (10.0, 1.0),            # node swap folder vs the NVMe tier: within 0.3%
}
HELD_OUT = {"step_time_s": (10.0, 32.0), "first_step_time_s": (28.0, 70.0),
            "forward_s": (20.0, 48.0), "backward_s": (15.0, 54.0), "optimizer_s": (15.0, 18.0),
            "gpu_peak_allocated_bytes": (10.0, 21.0), "host_rss_bytes": (20.0, 4.0)}


@pytest.fixture(scope="module")
def rows():
    sw = load_software()
    out = []
    for folder, hardware in PAIRED.items():
        hw = load_hardware(hardware)
        for d in find_measurements([CASES / folder]):
            out += compare_measurement(hw, load_measurement(d), name=case_key(d), software=sw)
    return out


def test_every_case_is_compared(rows):
    assert len({r.case for r in rows}) == 29


def test_oom_verdicts_all_agree(rows):
    s = summarize(rows)["oom"]
    assert s["n"] == 29 and s["mismatches"] == []


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
    assert all(c.startswith("h200x2-b/c-") for c in train)


def test_each_folder_profile_was_calibrated_with_its_runs():
    """The profile a folder is validated on names the calibration record beside its runs."""
    for folder, hardware in PAIRED.items():
        raw = list((CASES / folder).glob("*raw.json"))
        assert raw, folder
        hw = load_hardware(hardware)
        assert "measured 2026-11-30 by tierlab calibrate" in hw.cpu.sources["adam_params_per_s"]


def test_folders_name_their_profiles():
    from tierlab.validate.compare import folder_hardware

    for folder, hardware in PAIRED.items():
        assert folder_hardware(CASES / folder) == hardware
    assert folder_hardware(CASES / "h200x2-s3") == "h200x2-b"
