"""A sweep's results file streamed from its row journal in grid order (issue 32: memory flat in
the point count).

While a sweep runs, each finished chunk of rows is appended to the journal (`Journal`), its byte
span kept by chunk number; the driver holds no row. At the end the CSV is written row by row in
grid order: the journal's chunks in order, the previous file's rows where the grid skipped a
point, then the previous rows outside this grid, as `sweeps.run`'s in-memory assembly orders them.

The text of a cell is what pandas' `to_csv` writes for the frame of every row: a number in a
column pandas reads as float64 (numbers only, and a float or a hole in it) is written as a float
(`5` -> `5.0`), except the integer scenario columns (`_INT_COLUMNS`, nullable Int64 there); a
hole is empty; everything else is `str(value)`. `ColumnStats` gathers what decides it (the
columns in order of first appearance, whether each holds only numbers, a float, a hole) chunk by
chunk, in the workers. Pure but for `Journal` and `write_csv`, which the sweep driver calls.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

INT_COLUMNS = ("n_params", "stage", "micro_batch_size", "grad_accum_steps", "seq_len",
               "world_size", "nodes", "gpus_per_node")
"""Integer scenario columns: integers also where error rows leave holes (pandas' Int64)."""


ROWS_AT_ONCE = 4096
"""Rows of a previous file turned into dicts at a time (`Records`; a finished file summed up by
sweeps.run)."""


def _missing(value: Any) -> bool:
    """None, NaN or pandas' NA: an empty cell."""
    if value is None:
        return True
    if isinstance(value, float):
        return value != value
    return type(value).__name__ == "NAType"


def number(value: Any) -> bool:
    """An int or a float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class ColumnStats:
    """Per column, in order of first appearance: [rows holding it, numbers only, a float seen,
    a hole seen]; mergeable in arrival order (the union of columns keeps its order)."""

    def __init__(self):
        self.cols: dict[str, list] = {}
        self.rows = 0

    def add_rows(self, rows: Iterable[dict]) -> "ColumnStats":
        cols = self.cols
        for row in rows:
            self.rows += 1
            for key, value in row.items():
                c = cols.get(key)
                if c is None:
                    c = cols[key] = [0, True, False, False]
                c[0] += 1
                if _missing(value):
                    c[3] = True
                elif isinstance(value, float):
                    c[2] = True
                elif not number(value):
                    c[1] = False
        return self

    def merge(self, other: "ColumnStats") -> None:
        self.rows += other.rows
        for key, (n, numeric, flt, hole) in other.cols.items():
            c = self.cols.get(key)
            if c is None:
                self.cols[key] = [n, numeric, flt, hole]
            else:
                c[0] += n
                c[1] = c[1] and numeric
                c[2] = c[2] or flt
                c[3] = c[3] or hole

    def floaty(self, total: int) -> set[str]:
        """Columns pandas would hold as float64 over `total` rows (a row without the column
        is a hole), the integer scenario columns excepted."""
        return {k for k, (n, numeric, flt, hole) in self.cols.items()
                if numeric and (flt or hole or n < total) and k not in INT_COLUMNS}


def column_order(first: Sequence[str], arrived: Iterable[str], keys: Sequence[str]) -> list[str]:
    """`sweeps.run.to_frame`'s order over the columns `first` (a previous file's), then those
    that arrived: point_id, the swept keys, the rest as they came, `error` last."""
    seen = dict.fromkeys([*first, *arrived])
    head = ["point_id", *[k for k in keys if k in seen]]
    rest = [c for c in seen if c not in head and c != "error"]
    return head + rest + (["error"] if "error" in seen else [])


def cell(value: Any, floaty: bool, integer: bool = False) -> str:
    """The CSV text of one value (see the module's docstring)."""
    if _missing(value):
        return ""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        if integer and value.is_integer():
            return str(int(value))
        return float.__repr__(value)
    if isinstance(value, int):
        return float.__repr__(float(value)) if floaty else str(value)
    return str(value)


def row_cells(row: dict, columns: Sequence[tuple[str, bool, bool]]) -> list[str]:
    """`cell` of each of `columns` ((name, floaty, integer) each), the common types inline
    (a 100,000-row file is 7.5 million cells)."""
    out = []
    add = out.append
    get = row.get
    for name, floaty, integer in columns:
        v = get(name)
        t = type(v)
        if t is float and not integer:
            add("" if v != v else float.__repr__(v))
        elif t is str:
            add(v)
        elif t is int and not floaty:
            add(str(v))
        else:
            add(cell(v, floaty, integer))
    return out


class Journal:
    """The append-only row journal beside a results file: one JSON line per row, each chunk's
    rows appended at once and its byte span kept by chunk number."""

    def __init__(self, path: Path):
        self.path = path
        self.file = open(path, "ab")
        self.spans: dict[int, tuple[int, int]] = {}
        self._reader = None

    def write(self, index: int, text: str) -> None:
        data = text.encode()
        start = self.file.tell()
        self.file.write(data)
        self.file.flush()
        self.spans[index] = (start, len(data))

    def chunk(self, index: int) -> list[dict] | None:
        """The rows of chunk `index` as journalled; None if it never finished."""
        span = self.spans.get(index)
        if span is None:
            return None
        if self._reader is None:
            self._reader = open(self.path, "rb")
        self._reader.seek(span[0])
        return [json.loads(line) for line in self._reader.read(span[1]).splitlines()]

    def close(self) -> None:
        self.file.close()
        if self._reader is not None:
            self._reader.close()


def write_csv(target: Path, columns: Sequence[str], floaty: set[str],
              rows: Iterable[dict]) -> None:
    """Write `rows` to `target` as pandas' to_csv(index=False) would write their frame."""
    with open(target, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns)
        plan = [(c, c in floaty, c in INT_COLUMNS) for c in columns]
        write = w.writerow
        for row in rows:
            write(row_cells(row, plan))


class Tally:
    """What the summary needs of the rows as they are written: how many, how many with an
    error, the first error, and the first fitting row with the most tokens/s."""

    def __init__(self):
        self.rows = self.errors = 0
        self.first_error: str | None = None
        self.best: dict | None = None
        self.all_failed = True

    def add(self, row: dict) -> dict:
        self.rows += 1
        error = row.get("error")
        error = "" if _missing(error) else str(error)
        if error:
            self.errors += 1
            if self.first_error is None:
                self.first_error = error
            return row
        self.all_failed = False
        tps = row.get("tokens_per_s")
        if str(row.get("fits")).lower() == "true" and number(tps) and not math.isnan(tps) \
                and (self.best is None or tps > self.best["tokens_per_s"]):
            self.best = row
        return row


class Records:
    """A DataFrame's rows as dicts (to_dict("records")), made ROWS_AT_ONCE at a time when read
    (in order, or nearly: the last block is kept), so a resume over a previous file holds its
    frame (~0.7 KB a row), not ~6 KB of dicts a row."""

    def __init__(self, frame, at_once: int = ROWS_AT_ONCE):
        self.frame, self.at_once, self.at, self.block = frame, at_once, -1, []

    def __len__(self) -> int:
        return len(self.frame.index)

    def __getitem__(self, n: int) -> dict:
        b, k = divmod(n, self.at_once)
        if b != self.at:
            self.at = b
            rows = self.frame.iloc[b * self.at_once:(b + 1) * self.at_once]
            self.block = rows.to_dict("records")
        return self.block[k]

    def __iter__(self):
        return (self[n] for n in range(len(self)))

    def point_ids(self) -> list[str]:
        return [str(i) for i in self.frame["point_id"]] if len(self) else []


class FileRows:
    """The rows of a results CSV as `Records` gives them, read from the file ROWS_AT_ONCE at a
    time (pandas' chunks; typed as in the whole frame, for `cell`, once ColumnStats has seen
    them all) and never held: `chunks()` yields the file's blocks of `at_once` rows from the top
    (read again when a row before the current block is asked for); `keep`: the file's row
    numbers still standing, `ids`: their point ids."""

    def __init__(self, chunks, keep: list[int], ids: list[str], at_once: int = ROWS_AT_ONCE):
        self.chunks, self.keep, self.ids, self.at_once = chunks, keep, ids, at_once
        self.at, self.block, self.source = -1, [], None

    def __len__(self) -> int:
        return len(self.keep)

    def __getitem__(self, n: int) -> dict:
        b, k = divmod(self.keep[n], self.at_once)
        if b != self.at:
            if self.source is None or b < self.at:      # backwards: read again from the top
                self.source, self.at = self.chunks(), -1
            while self.at < b:
                self.block, self.at = next(self.source), self.at + 1
        return self.block[k]

    def __iter__(self):
        return (self[n] for n in range(len(self)))

    def point_ids(self) -> list[str]:
        return self.ids


def walk(points: Iterable[str | None], size: int, journal: Journal, previous: "Records | FileRows",
         done: set[str]) -> Iterator[dict]:
    """The rows in grid order: for each point of the grid (its id, or None when no previous row
    can be its), the previous row when the point was skipped (in `done`) or its chunk never
    finished, else its row from the journal (the points not skipped are cut into chunks of
    `size`, in order); then the previous rows of points outside the grid, in their order.
    `previous`: the earlier rows still standing (none that a row of this sweep replaced)."""
    by_id: dict[str, list[int]] = {}
    for n, pid in enumerate(previous.point_ids()):
        by_id.setdefault(pid, []).append(n)
    todo_n, rows, at = 0, None, -1
    for pid in points:
        if pid is None or pid not in done:
            chunk, k = divmod(todo_n, size)
            todo_n += 1
            if chunk != at:
                rows, at = journal.chunk(chunk), chunk
            if rows is not None:
                yield rows[k]
                continue
        for n in by_id.pop(pid, ()) if pid is not None else ():
            yield previous[n]
    for n in sorted(n for ns in by_id.values() for n in ns):
        yield previous[n]
