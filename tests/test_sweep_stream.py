"""sweeps/stream.py: a sweep written to --out is streamed from its journal in grid order, byte for
byte the CSV of the frame the in-memory assembly makes (pandas' to_csv of every row), on a
fresh sweep, with error rows, over 2 workers, resumed over a previous file and over a killed
sweep's journal (issue 32: memory flat in the point count)."""
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from tierlab.sweeps.keys import make_grid, parse_vary
from tierlab.sweeps.run import (Base, Evaluator, SweepOutcome, all_failed, journal_path,
                                read_results, run_points, run_sweep, summary, to_frame)
from tierlab.sweeps.stream import (ROWS_AT_ONCE, ColumnStats, FileRows, Records, cell,
                                   column_order)

sys.path.insert(0, str(Path(__file__).parent))
import fakesim  # noqa: E402

BASE = Base(micro_batch=4, seq=1024)
# NVMe optimizer offload with ZeRO-2 is an error row (fewer columns, holes in the integer
# columns); rows of nvme.drives=0 have columns the others lack
AXES = ["config=zero2-cpu,zero3-nvme", "zero_optimization.stage=2,3", "nvme.drives=0,2",
        "micro_batch=1,4", "cpu.adam_throughput=1e9,2.5e9"]
POINTS, ERRORS = 32, 8


def _axes(texts=AXES):
    return [parse_vary(v) for v in texts]


def _frame_csv(axes, simulator=fakesim.simulate) -> str:
    """The old assembly: every row in grid order as one frame, written by pandas."""
    rows = run_points(make_grid(axes), Evaluator(BASE, simulator), jobs=1)
    return to_frame(rows, [a.key for a in axes]).to_csv(index=False)


@pytest.mark.parametrize("jobs", [1, 2])
def test_streamed_file_is_the_frames_csv(tmp_path, jobs):
    axes = _axes()
    out = tmp_path / "s.csv"
    outcome = run_sweep(BASE, axes, simulator=fakesim.simulate, jobs=jobs, out=out)
    assert out.read_text() == _frame_csv(axes)
    assert outcome.errors == ERRORS and outcome.tally.rows == POINTS and outcome.computed == POINTS
    assert not journal_path(out).exists()
    held = run_sweep(BASE, axes, simulator=fakesim.simulate, jobs=1)       # no file: a frame
    assert summary(outcome, str(out)) == summary(held, str(out))
    assert outcome.frame.equals(read_results(out))


def test_streamed_file_with_the_real_simulator_and_ranges(tmp_path):
    from tierlab.sim.ranges import simulate_ranged

    axes = _axes(["config=zero3-cpu,zero3-nvme", "nvme.drives=0,2", "checkpointing=true,false"])
    out = tmp_path / "r.csv"
    run_sweep(BASE, axes, simulator=simulate_ranged, jobs=1, out=out)
    assert out.read_text() == _frame_csv(axes, simulate_ranged)


def test_resume_over_a_file_and_a_journal_is_the_whole_sweeps_file(tmp_path):
    axes = _axes()
    whole = _frame_csv(axes)
    out = tmp_path / "s.csv"
    # an earlier, smaller sweep wrote the file; a killed one left journal lines of others
    run_sweep(BASE, _axes(["config=zero2-cpu", *AXES[1:]]), simulator=fakesim.simulate,
              jobs=1, out=out)
    rows = run_points(make_grid(axes), Evaluator(BASE, fakesim.simulate), jobs=1)
    journal_path(out).write_text("".join(json.dumps(r) + "\n" for r in rows[20:25]))
    again = run_sweep(BASE, axes, simulator=fakesim.simulate, jobs=2, out=out)
    assert (again.computed, again.skipped) == (POINTS - 16 - 5, 16 + 5)
    assert out.read_text() == whole


def test_rows_outside_the_grid_stay_after_it(tmp_path):
    out = tmp_path / "s.csv"
    run_sweep(BASE, _axes(["micro_batch=8,16"]), simulator=fakesim.simulate, jobs=1, out=out)
    run_sweep(BASE, _axes(["micro_batch=1,2"]), simulator=fakesim.simulate, jobs=1, out=out)
    assert list(read_results(out)["micro_batch"]) == [1, 2, 8, 16]


def _held(outcome):
    """The same outcome summed up from its frame (the in-memory path), not its tally."""
    return SweepOutcome(frame_or_load=outcome.frame, computed=outcome.computed,
                        skipped=outcome.skipped, errors=outcome.errors, total=outcome.total)


# the grid turned round, drives=2 first: the file's order is not the grid's, ties go otherwise
TURNED = [a.replace("drives=0,2", "drives=2,0") for a in AXES[::-1]]


@pytest.mark.parametrize("order", [AXES, TURNED])
def test_a_rerun_over_a_finished_file_reads_no_row_and_says_what_the_frame_says(tmp_path, order):
    """Resume over a finished file (issue 32: memory flat) sums the file up a block at a time;
    the summary, the first error and the fastest row that fits (nvme.drives ties it: the first
    in this grid's order wins) are the frame's, and the file is left byte for byte."""
    out = tmp_path / "s.csv"
    run_sweep(BASE, _axes(), simulator=fakesim.simulate, jobs=1, out=out)
    before = out.read_bytes()
    again = run_sweep(BASE, _axes(order), simulator=fakesim.simulate, jobs=1, out=out)
    assert out.read_bytes() == before and not journal_path(out).exists()
    assert (again.computed, again.skipped, again.errors) == (0, POINTS, ERRORS)
    assert again.tally is not None and again.tally.rows == POINTS
    assert summary(again, str(out)) == summary(_held(again), str(out))
    assert all_failed(again) is None and again.frame.equals(_held(again).frame)
    first = list(_axes(order)[0].values)
    assert list(dict.fromkeys(again.frame[_axes(order)[0].key])) == first   # grid order


@pytest.mark.parametrize("order", [AXES, TURNED])
def test_a_resume_reads_the_previous_rows_from_the_file_as_it_writes(tmp_path, order):
    """The previous rows a resume keeps are read from the file as they are written (the grid
    turned round: out of the file's order), and the file is the one the whole sweep in this
    grid's order writes."""
    out = tmp_path / "s.csv"
    run_sweep(BASE, _axes(), simulator=fakesim.simulate, jobs=1, out=out)
    lines = out.read_text().splitlines(True)
    out.write_text("".join(lines[:10] + lines[20:]))        # 10 rows gone: recomputed
    again = run_sweep(BASE, _axes(order), simulator=fakesim.simulate, jobs=1, out=out)
    assert (again.computed, again.skipped) == (10, POINTS - 10)
    assert out.read_text() == _frame_csv(_axes(order))


def test_file_rows_read_a_block_at_a_time_forwards_backwards_and_less_the_replaced():
    rows = [{"point_id": f"{i:016x}", "x": i} for i in range(10)]
    reads = []

    def chunks():
        reads.append(1)
        return iter([rows[i:i + 3] for i in range(0, 10, 3)])

    keep = [n for n in range(10) if n != 4]                 # row 4 replaced by this sweep
    file_rows = FileRows(chunks, keep, [rows[n]["point_id"] for n in keep], at_once=3)
    assert list(file_rows) == [rows[n] for n in keep] and len(reads) == 1
    assert file_rows[8] == rows[9] and len(reads) == 1          # the block held
    assert file_rows[0] == rows[0] and len(reads) == 2          # backwards: from the top again
    assert file_rows[5] == rows[6] and len(reads) == 2          # forwards: read on
    assert file_rows.point_ids() == [rows[n]["point_id"] for n in keep]


def test_records_are_the_frames_rows_a_block_at_a_time():
    n = 2 * ROWS_AT_ONCE + 5
    frame = pd.DataFrame({"point_id": [f"{i:016x}" for i in range(n)],
                          "x": [float(i) if i % 7 else float("nan") for i in range(n)],
                          "stage": pd.array([i % 4 if i % 5 else None for i in range(n)],
                                            dtype="Int64")})
    rows = Records(frame)
    want = frame.to_dict("records")
    assert len(rows) == n and rows[n - 1] == want[n - 1] and rows[3] == want[3]
    assert str(list(rows)) == str(want)      # NaN and NA compare by their text


def _broken(hardware, model, strategy, *, strict=False, software=None):
    raise RuntimeError("boom")


def test_internal_errors_replaced_in_place_and_every_failed_row_said(tmp_path):
    out = tmp_path / "s.csv"
    axes = _axes(["micro_batch=1,2,4"])
    failed = run_sweep(BASE, axes, simulator=_broken, jobs=1, out=out)
    assert all_failed(failed).startswith("sweep: every one of the 3 rows could not be evaluated; "
                                         "the first: internal: RuntimeError: boom")
    fixed = run_sweep(BASE, axes, simulator=fakesim.simulate, jobs=1, out=out)
    assert fixed.computed == 3 and all_failed(fixed) is None
    assert out.read_text() == _frame_csv(axes)


def test_interrupted_sweep_writes_the_rows_done_in_grid_order(tmp_path):
    out, calls = tmp_path / "s.csv", []

    def stop_after_four(hardware, model, strategy, **kw):
        calls.append(1)
        if len(calls) > 4:
            raise KeyboardInterrupt
        return fakesim.simulate(hardware, model, strategy, **kw)

    axes = _axes(["micro_batch=1,2,4,8,16,32"])
    with pytest.raises(KeyboardInterrupt) as e:
        run_sweep(BASE, axes, simulator=stop_after_four, jobs=1, out=out)
    assert e.value.partial.tally.rows == 4
    assert list(read_results(out)["micro_batch"]) == [1, 2, 4, 8]
    done = run_sweep(BASE, axes, simulator=fakesim.simulate, jobs=1, out=out)
    assert (done.computed, done.skipped) == (2, 4) and out.read_text() == _frame_csv(axes)


@pytest.mark.parametrize("values", [
    [1, 2.5, None], [1, 2, 3], [0.1, 1e-5, 1e16, 1.5e16, 123456789.123, float("inf"), -0.0],
    [True, False], [True, None], ["a,b", 'q"uote', None], [1, "x"], [3, 10**17, None]])
def test_a_cell_is_what_pandas_writes(values):
    rows = [{"point_id": "0" * 16, "v": v} for v in values] + [{"point_id": "1" * 16}]
    stats = ColumnStats().add_rows(rows)
    floaty = stats.floaty(stats.rows)
    want = pd.DataFrame(rows).to_csv(index=False).splitlines()[1:]
    got = [f"{cell(r['point_id'], False)},{cell(r.get('v'), 'v' in floaty)}" for r in rows]
    assert [g.replace('"', "") for g in got] == [w.replace('"', "") for w in want]


def test_column_order_is_to_frames():
    assert column_order(["point_id", "a", "error"], ["b", "k", "error", "c"], ["k"]) == [
        "point_id", "k", "a", "b", "c", "error"]


def test_parquet_out_holds_the_same_rows(tmp_path):
    pytest.importorskip("pyarrow")
    axes = _axes()
    run_sweep(BASE, axes, simulator=fakesim.simulate, jobs=2, out=tmp_path / "s.parquet")
    run_sweep(BASE, axes, simulator=fakesim.simulate, jobs=1, out=tmp_path / "s.csv")
    a, b = read_results(tmp_path / "s.parquet"), read_results(tmp_path / "s.csv")
    assert list(a.columns) == list(b.columns) and a.to_csv(index=False) == b.to_csv(index=False)


def _thresholds(point):
    import gc

    return {"point_id": "0" * 16, "gc": gc.get_threshold()}


def test_workers_collect_garbage_less_often_the_caller_as_it_was():
    import gc

    from tierlab.sweeps.run import WORKER_GC_THRESHOLD

    before = gc.get_threshold()
    rows = run_points([{"micro_batch": m} for m in range(1, 9)], _thresholds, jobs=2)
    assert {r["gc"] for r in rows} == {WORKER_GC_THRESHOLD} and gc.get_threshold() == before


STOP_MID_SEND = """
import time
from concurrent.futures import ProcessPoolExecutor
from tierlab.sweeps.run import _stop, _worker_init

def rows(i):
    return b"x" * (32 << 20)      # far above a pipe's buffer: a worker is mid-send most of the time

if __name__ == "__main__":
    pool = ProcessPoolExecutor(max_workers=2, initializer=_worker_init)
    futures = [pool.submit(rows, i) for i in range(40)]
    time.sleep({delay_s})
    manager = pool._executor_manager_thread
    _stop(pool)
    print("manager ended" if not manager.is_alive() else "manager still waiting", flush=True)
"""


@pytest.mark.parametrize("delay_s", [0.4, 0.9])
def test_a_pool_stopped_while_a_worker_sends_its_rows_lets_the_process_exit(tmp_path, delay_s):
    """Workers terminated mid-send left half a message in the result pipe; the pool's manager
    thread waited for the rest for ever and Python's exit joined it (the sweep said
    "interrupted" and hung: CI, test_sweep_signal_then_resume[15]). _stop closes the parent's
    write end, so the manager sees end-of-file and the process exits."""
    import subprocess

    script = tmp_path / "stop.py"
    script.write_text(STOP_MID_SEND.replace("{delay_s}", str(delay_s)))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "manager ended" in p.stdout, p.stdout + p.stderr
