"""`tierlab sweep --no-ranges` (issue 32): the point answers without the 80% range columns, the
same point answers as a ranged sweep's; a combination that cannot mean anything exits 2."""
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _cli import assert_user_error, run  # noqa: E402

RANGE_COLUMNS = {"step_time_low_s", "step_time_high_s"}
GRID = ["-c", "zero3-cpu", "--vary", "micro_batch=1,2", "--vary", "cpu.adam_throughput=1e9,4e9",
        "--no-progress", "-q", "-j", "1"]


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_no_ranges_sweep_has_no_range_columns_and_the_same_points(tmp_path):
    fast, ranged = tmp_path / "fast.csv", tmp_path / "ranged.csv"
    r = run("sweep", *GRID, "--no-ranges", "--out", str(fast), "--plot", str(tmp_path / "f.png"))
    assert r.exit_code == 0, r.output
    r = run("sweep", *GRID, "--out", str(ranged))
    assert r.exit_code == 0, r.output
    rows, want = _rows(fast), _rows(ranged)
    assert len(rows) == len(want) == 4
    assert not RANGE_COLUMNS & set(rows[0]) and RANGE_COLUMNS <= set(want[0])
    for got, ref in zip(rows, want):
        assert {k: v for k, v in ref.items() if k not in RANGE_COLUMNS} == got
    assert (tmp_path / "f.png").stat().st_size > 0


def test_no_ranges_to_stdout():
    r = run("sweep", *GRID, "--no-ranges")
    assert r.exit_code == 0, r.output
    header = r.output.splitlines()[0].split(",")
    assert "step_time_s" in header and not RANGE_COLUMNS & set(header)


def test_no_ranges_with_memory_only_exits_2():
    assert_user_error(run("sweep", *GRID, "--no-ranges", "--memory-only"),
                      "--no-ranges with --memory-only")


def test_help_explains_no_ranges():
    r = run("sweep", "--help")
    assert r.exit_code == 0
    text = " ".join(r.output.split())
    assert "--no-ranges" in text and "without its 80% range" in text
    assert "tierlab sweep --no-ranges" in text        # an example (commands/examples.py)


def test_a_row_records_the_node_split_of_its_world_size(tmp_path):
    out = tmp_path / "n.csv"
    r = run("sweep", "-m", "llama-2-7b", "-H", "dgx-a100", "-c", "zero3-cpu", "--vary",
            "nodes=1,2", "--vary", "gpus=4,8", "--memory-only", "-q", "--out", str(out))
    assert r.exit_code == 0, r.output
    got = sorted((int(x["nodes"]), int(x["gpus_per_node"]), int(x["world_size"]))
                 for x in _rows(out))
    assert got == [(1, 4, 4), (1, 8, 8), (2, 4, 8), (2, 8, 16)]
