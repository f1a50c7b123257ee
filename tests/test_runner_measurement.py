import json
import math

from tierlab.records.measurement import (Measurement, MeasurementWriter, StepRecord,
                                        load_measurement, summarize)


def _rec(i, wall, loss=2.0, **kw):
    return StepRecord(step=i, wall_s=wall, timing="wall", loss=loss, tokens=100, **kw)


def test_summary_drops_warmup_and_reports_median_iqr():
    steps = [_rec(0, 10.0), _rec(1, 1.0), _rec(2, 2.0), _rec(3, 3.0), _rec(4, 4.0)]
    s = summarize(steps, warmup_steps=1)
    assert s["steps_steady"] == 4
    assert s["step_time_s"]["median"] == 2.5
    # numpy-style linear percentiles of [1, 2, 3, 4]: q1 1.75, q3 3.25
    assert math.isclose(s["step_time_s"]["iqr"], 1.5)
    assert math.isclose(s["tokens_per_s"], 100 / 2.5)
    assert s["step_time_s"]["max"] == 4.0        # the 10 s warm-up step is gone


def test_writer_flushes_each_step_and_closes_once(tmp_path):
    m = Measurement(run_id="t", ds_config={"a": 1})
    w = MeasurementWriter(tmp_path, m)
    assert json.loads((tmp_path / "measurement.json").read_text())["status"] == "running"
    w.append(_rec(0, 1.0))
    # readable by another process before the run ends (append + flush)
    lines = (tmp_path / "steps.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["wall_s"] == 1.0
    w.append(_rec(1, 2.0, disk_read_bytes=10, disk_written_bytes=20))
    w.close("failed", "boom", "error", samples=[{"t": 0.1, "host_rss_bytes": 5}], warmup_steps=1)
    w.close("ok")                                 # ignored: already closed
    back = load_measurement(tmp_path)
    assert back.status == "failed" and back.reason == "boom" and back.failure_kind == "error"
    assert [s.step for s in back.steps] == [0, 1]
    assert back.samples == [{"t": 0.1, "host_rss_bytes": 5}]
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "failed"


def test_load_survives_a_line_cut_by_a_hard_kill(tmp_path):
    w = MeasurementWriter(tmp_path, Measurement(run_id="t"))
    w.append(_rec(0, 1.0))
    with open(tmp_path / "steps.jsonl", "a") as f:
        f.write('{"step": 1, "wall')
    back = load_measurement(tmp_path)
    assert back.status == "running" and len(back.steps) == 1
