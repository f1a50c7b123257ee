"""runner/compare.run_comparison: the loop `tierlab compare` calls (pre-flight per variant, time
limits, the budget), with the training worker replaced by a recorded Measurement."""
from tierlab.runner import compare
from tierlab.runner import preflight as pf
from tierlab.runner.measurement import Measurement
from tierlab.runner.train import spec_from_strategy
from tierlab.scenario import resolve

from _runnerhelp import TINY


def planned(tmp_path, *variants, cap=None):
    out = []
    for v in variants:
        sc = resolve(TINY, "workstation-rtx3070", v, micro_batch=1, seq=64, gpus=1, nodes=1,
                     gpu_mem_cap=cap, swap_dir=str(tmp_path / "swap"))
        spec = spec_from_strategy(sc.model, sc.strategy, out_dir=str(tmp_path / v), steps=3,
                                  warmup_steps=1, gpu_mem_cap_bytes=sc.gpu_mem_cap_bytes,
                                  label=v)
        out.append(compare.Planned(v, sc, spec))
    return out


def ok(spec, limit):
    ok.limits.append(limit)
    return Measurement(run_id=spec.label, status="ok",
                       summary={"step_time_s": {"median": 0.5, "iqr": 0.01}, "tokens_per_s": 128.0,
                                "steps_total": 3})


def test_every_variant_is_a_row_and_preflight_errors_stop_only_theirs(tmp_path, monkeypatch):
    ok.limits = []
    said = []

    def preflight(hw, model, strategy, **kw):
        if strategy.param_device == "cpu":
            return [pf.Problem("memory", "host needs 9 GiB of 8 GiB", "offload less")]
        return []

    monkeypatch.setattr(compare, "run_variant", ok)
    monkeypatch.setattr(pf, "run_preflight", preflight)
    rows = compare.run_comparison(planned(tmp_path, "no-offload", "zero3-cpu"), timeout_s=60,
                                  say=said.append)
    assert [(r["variant"], r["status"]) for r in rows] == [("no-offload", "ok"),
                                                            ("zero3-cpu", "preflight")]
    assert rows[0]["step_time_s"] == 0.5 and "host needs 9 GiB" in rows[1]["reason"]
    assert ok.limits == [60] and any("error: [memory]" in s for s in said)
    skipped = compare.run_comparison(planned(tmp_path, "zero3-cpu"), preflight=False,
                                     say=said.append)
    assert skipped[0]["status"] == "ok"


def test_budget_limits_each_variant_and_skips_what_cannot_start(tmp_path, monkeypatch):
    ok.limits = []
    monkeypatch.setattr(compare, "run_variant", ok)
    rows = compare.run_comparison(planned(tmp_path, "no-offload"), preflight=False,
                                  budget_s=100)
    assert rows[0]["status"] == "ok" and 0 < ok.limits[0] <= 100 - compare.BUDGET_MARGIN_S
    rows = compare.run_comparison(planned(tmp_path, "no-offload"), preflight=False,
                                  budget_s=compare.MIN_VARIANT_S)
    assert rows == [{"variant": "no-offload", "status": "skipped", "reason": "budget spent"}]
