"""runner/compare.run_comparison: the loop `tierlab compare` calls (pre-flight per variant, time
limits, the budget), with the training worker replaced by a recorded Measurement."""
from tierlab.runner import compare
from tierlab.runner import preflight as pf
from tierlab.records.measurement import Measurement
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


def test_every_variant_is_a_row_and_preflight_errors_stop_only_theirs(tmp_path):
    ok.limits = []
    said = []

    def preflight(hw, model, strategy, **kw):
        if strategy.param_device == "cpu":
            return [pf.Problem("memory", "host needs 9 GiB of 8 GiB", "offload less")]
        return []

    rows = compare.run_comparison(planned(tmp_path, "no-offload", "zero3-cpu"), timeout_s=60,
                                  say=said.append, train=ok, check=preflight)
    assert [(r["variant"], r["status"]) for r in rows] == [("no-offload", "ok"),
                                                            ("zero3-cpu", "preflight")]
    assert rows[0]["step_time_s"] == 0.5 and "host needs 9 GiB" in rows[1]["reason"]
    assert ok.limits == [60] and any("error: [memory]" in s for s in said)
    skipped = compare.run_comparison(planned(tmp_path, "zero3-cpu"), preflight=False,
                                     say=said.append, train=ok, check=preflight)
    assert skipped[0]["status"] == "ok"


def test_budget_limits_each_variant_and_skips_what_cannot_start(tmp_path):
    ok.limits = []
    rows = compare.run_comparison(planned(tmp_path, "no-offload"), preflight=False,
                                  budget_s=100, train=ok)
    assert rows[0]["status"] == "ok" and 0 < ok.limits[0] <= 100 - compare.BUDGET_MARGIN_S
    rows = compare.run_comparison(planned(tmp_path, "no-offload"), preflight=False,
                                  budget_s=compare.MIN_VARIANT_S, train=ok)
    assert rows == [{"variant": "no-offload", "status": "skipped", "reason": "budget spent"}]


def test_compare_refuses_an_existing_comparison_unless_overwrite(tmp_path, monkeypatch):
    """`compare --out DIR` again: exit 2 with one line naming what is there; --overwrite
    replaces the table; the default folder never collides."""
    from _cli import assert_user_error, run

    def recorded(spec, limit):             # the variant's folder as a worker leaves it
        from tierlab.records.measurement import MeasurementWriter

        ok(spec, limit)
        return MeasurementWriter(spec.out_dir, Measurement(run_id=spec.label)).close(
            "ok", samples=[])
    ok.limits = []
    seams = {"train": recorded}           # the verb's worker (commands/common.seam)
    out = tmp_path / "cmp"
    args = ["compare", "-m", TINY, "--micro-batch", "1", "--seq", "64", "--steps", "3",
            "--warmup-steps", "1", "--variants", "no-offload", "--skip-preflight"]
    first = run(*args, "--out", str(out), obj=seams)
    assert first.exit_code == 0, first.output
    table = (out / "compare.csv").read_text()
    assert_user_error(run(*args, "--out", str(out), obj=seams), f"--out {out}: holds a comparison already",
                      "compare.csv", "no-offload/measurement.json", "--overwrite")
    assert (out / "compare.csv").read_text() == table            # untouched
    # another variant into the same folder: the table would be replaced, so refused too
    assert_user_error(run(*args[:-3], "--variants", "zero3-cpu", "--skip-preflight",
                          "--out", str(out), obj=seams), "compare.csv")
    again = run(*args, "--out", str(out), "--overwrite", obj=seams)
    assert again.exit_code == 0, again.output
    assert not [p for p in out.rglob("*") if ".tmp" in p.name]
    # the default folder: runs/compare-<time>, a new one each time
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        assert run(*args, obj=seams).exit_code == 0
    assert len(list((tmp_path / "runs").glob("compare-*/compare.csv"))) == 2
    assert compare.earlier_outputs(tmp_path / "nothing", ["no-offload"]) == []
