"""What-if sweeps: a grid over any hardware, model, strategy or batch parameter.

`run_sweep(base, axes)` evaluates every point of the cartesian product of `axes` (see
sweeps/keys.py for the key namespace: `nvme.drives`, `zero_optimization.sub_group_size`,
`micro_batch`, `model.n_layers`, ...) in a process pool and returns a pandas DataFrame, one row per
point. A point that cannot be built or simulated (e.g. NVMe optimizer offload with ZeRO-2) is a
row whose `error` column says why. Rows carry a `point_id` (hash of the base scenario + the
point), so a sweep written to a CSV/Parquet file resumes where it stopped.

Nothing is lost (issue 16): while a sweep runs, every finished row is appended to a journal
`.NAME.rows.jsonl` beside `--out` at once; the results file itself is rewritten atomically at the
end (also on Ctrl-C/SIGTERM) and the journal removed. A sweep killed hard (SIGKILL, power) keeps
its journal, and the next run of the same command reads it back. One writer at a time: the file
is locked (flock) for the whole sweep, a second sweep on it refuses. Torn rows (a CSV cut
mid-row by another tool or a full disk) are ignored, reported and recomputed. Without `--out`,
Ctrl-C or SIGTERM hands the rows done so far to the caller on the exception (`.partial`), and
the CLI prints them as a finished sweep prints its rows.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from tierlab.errors import ConfigError, Interrupted
from tierlab.scenario import DEFAULT_CONFIG, DEFAULT_HARDWARE, DEFAULT_MODEL
from tierlab.sim.headroom import DEFAULT_HEADROOM
from tierlab.sim.resources import RESOURCES
from tierlab.sim.strategy import check_precision
from tierlab.sweeps.hardware import apply_hardware
from tierlab.sweeps.keys import (Axis, iter_grid, load_profile, key_kind, make_axis, make_grid,
                                 parse_vary)

log = logging.getLogger(__name__)

__all__ = ["Base", "Evaluator", "resolve", "check_base", "run_grid", "run_points", "run_sweep",
           "read_results", "write_results", "make_axis", "make_grid", "parse_vary",
           "SweepOutcome"]

# ----------------------------------------------------------------------------------------------
# base scenario + point -> (hardware, model, strategy)

@dataclass(frozen=True, kw_only=True)
class Base:
    """The scenario every point starts from: names (CLI) or objects (Python API)."""

    model: Any = DEFAULT_MODEL
    """Model profile name/path or a profiles.schema.Model."""
    hardware: Any = DEFAULT_HARDWARE
    """System profile name/path or a profiles.schema.Hardware."""
    ds_config: Any = DEFAULT_CONFIG
    """ds_config preset name/path or a ds_config dict."""
    overrides: tuple[str, ...] = ()
    """`--set dotted.key=value` items applied before the point's own ds_config keys."""
    micro_batch: int | None = None
    grad_accum: int | None = None
    seq: int | None = None
    gpus: int | None = None
    nodes: int | None = None
    precision: str | None = None
    checkpointing: bool = True
    gpu_headroom: Any = None
    """--gpu-headroom ('2%', '512MiB'; sim/headroom.py); None: the default."""
    host_headroom: Any = None
    """--host-headroom ('10%', '8GiB'); None: the default."""

    def __post_init__(self) -> None:
        for name in ("micro_batch", "grad_accum", "seq", "gpus", "nodes"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ConfigError(f"--{name.replace('_', '-')} ({name}) must be an integer >= 1, "
                                  f"got {value!r}")
        check_precision(self.precision)

    def identity(self) -> str:
        """A stable text of this base for point ids (objects by their dataclass repr)."""
        return self._identity

    @cached_property
    def _identity(self) -> str:
        """`identity`, worked out once (every point of a sweep names it in its id)."""
        def ident(v):
            if isinstance(v, Mapping):
                return json.dumps(v, sort_keys=True, default=str)
            return v if isinstance(v, (str, int, float, bool, type(None), tuple)) else repr(v)
        return json.dumps({f.name: ident(getattr(self, f.name)) for f in fields(self)
                           if f.name not in ("gpu_headroom", "host_headroom")     # ids kept
                           or getattr(self, f.name) is not None}, sort_keys=True, default=str)


def resolve(base: Base, point: Mapping[str, Any] = {}):
    """The tierlab.scenario.Scenario of one point: the point's hardware keys applied to the
    profile, its model.* keys to the model, its ds_config keys after --set; the rest is
    tierlab.scenario.resolve's. Raises ConfigError."""
    from tierlab.scenario import resolve as resolve_scenario

    get = lambda k: point[k] if k in point else getattr(base, k)    # noqa: E731
    hw = point.get("hardware", base.hardware)
    hw = apply_hardware(load_profile("hardware", hw) if isinstance(hw, str) else hw, point)
    model = point.get("model", base.model)
    model = load_profile("model", model) if isinstance(model, str) else model
    mpoint = {k.split(".", 1)[1]: v for k, v in point.items() if k.startswith("model.")}
    if mpoint:
        model = replace(model, **mpoint)
    return resolve_scenario(
        model, hw, point.get("config", base.ds_config),
        overrides=base.overrides, ds_keys={k: v for k, v in point.items() if key_kind(k) == "ds"},
        micro_batch=get("micro_batch"), grad_accum=get("grad_accum"),
        seq=None if "seq_len" in mpoint else get("seq"), gpus=get("gpus"), nodes=get("nodes"),
        precision=get("precision"), checkpointing=get("checkpointing"),
        gpu_headroom=base.gpu_headroom, host_headroom=base.host_headroom)


# ----------------------------------------------------------------------------------------------
# evaluation: one point -> one row

def scenario_columns(sc) -> dict[str, Any]:
    from tierlab.sim.layout import n_params

    s, hw, m = sc.strategy, sc.hardware, sc.model
    return {"model_name": m.name, "hardware_name": hw.name, "n_params": n_params(m),
            "stage": s.zero.stage, "offload_param": s.param_device,
            "offload_optimizer": s.optimizer_device, "micro_batch_size": s.train_micro_batch_size_per_gpu,
            "grad_accum_steps": s.gradient_accumulation_steps, "seq_len": m.seq_len,
            "world_size": hw.world_size, "nodes": hw.nodes, "gpus_per_node": hw.gpus_per_node,
            "precision": s.precision,
            "activation_checkpointing": s.activation_checkpointing}


def memory_columns(plan) -> dict[str, Any]:
    tiers = plan.tiers
    host = tiers["host"]
    return {"fits": bool(plan.fits), "binding_tier": plan.binding_tier,
            "gpu_bytes": tiers["gpu"].used_bytes, "gpu_capacity_bytes": tiers["gpu"].capacity_bytes,
            "host_pinned_bytes": host.part("pinned:"), "host_pageable_bytes": host.part("pageable:"),
            "host_capacity_bytes": host.capacity_bytes, "nvme_bytes": tiers["nvme"].used_bytes,
            "nvme_capacity_bytes": tiers["nvme"].capacity_bytes}


def result_columns(res) -> dict[str, Any]:
    """A SimResult flattened to scalars: times, phases, exposed and busy seconds per resource
    (sim/resources.py), the 80% range when it was simulated, memory per tier and fits."""
    out: dict[str, Any] = {name: getattr(res, name) for name in (
        "step_time_s", "first_step_time_s", "tokens_per_s", "tflops_per_gpu", "lower_bound_s",
        "efficiency", "bottleneck")}
    out.update(res.phases)
    for resource in RESOURCES:
        out[f"exposed_{resource}_s"] = res.exposed_s[resource]
        out[f"busy_{resource}_s"] = res.busy_s[resource]
    span = res.step_time_range_s
    if span is not None:        # the central 80% interval (sim/ranges.py)
        out["step_time_low_s"], out["step_time_high_s"] = span
    out.update(memory_columns(res.memory))
    out["fits"] = bool(res.fits)
    return out


@dataclass(frozen=True)
class Evaluator:
    """Picklable `point -> row` for the process pool. `simulator` None: memory plan only."""

    base: Base
    simulator: Callable | None = None
    strict: bool = False

    def __call__(self, point: Mapping[str, Any]) -> dict[str, Any]:
        row: dict[str, Any] = {"point_id": point_id(self.base, point), **point, "error": ""}
        try:
            sc = resolve(self.base, point)
            row["config_name"] = sc.config_name
            row.update(scenario_columns(sc))
            if self.simulator is None:
                row.update(memory_columns(sc.memory()))
            else:
                room = {} if sc.headroom == DEFAULT_HEADROOM else {"headroom": sc.headroom}
                res = self.simulator(sc.hardware, sc.model, sc.strategy, strict=self.strict,
                                     software=sc.software, **room)
                row.update(result_columns(res))
        except (ConfigError, ValueError, KeyError) as e:
            row["error"] = str(e).splitlines()[0] if str(e) else type(e).__name__
        except Exception as e:  # noqa: BLE001 - a simulator bug must not kill a 1,000-point sweep
            log.debug("point %s failed", point, exc_info=True)
            row["error"] = f"internal: {type(e).__name__}: {e}"
        return row


def _evaluate_chunk(evaluate: Callable, chunk: list[dict]) -> list[dict]:
    return [evaluate(p) for p in chunk]


def _journal_chunk(evaluate: Callable, chunk: list[dict]):
    """(rows, their journal lines, their ColumnStats): a worker's share of the driver's work
    (the driver writes the lines and keeps no row)."""
    from tierlab.sweeps.stream import ColumnStats

    rows = [evaluate(p) for p in chunk]
    text = "".join(json.dumps(r, default=_plain) + "\n" for r in rows)
    return rows, text, ColumnStats().add_rows(rows)


class _InOrder:
    """Items handed in by chunk number in any order, handed on in chunk order."""

    def __init__(self):
        self.pending: dict[int, Any] = {}
        self.next = 0

    def push(self, index: int, item) -> list:
        self.pending[index] = item
        out = []
        while self.next in self.pending:
            out.append(self.pending.pop(self.next))
            self.next += 1
        return out

    def rest(self) -> list:
        """What is still waiting (chunks after one that never finished), in chunk order."""
        out = [self.pending[i] for i in sorted(self.pending)]
        self.pending = {}
        return out


IN_FLIGHT = 4
"""Chunks handed to each worker ahead of its results: the driver holds the points of these
only, never the grid."""


def _run_chunks(chunks: Iterator[list[dict]], work: Callable, evaluate: Callable, jobs: int,
                on_done: Callable[[int, Any], None]) -> None:
    """`work(evaluate, chunk)` for each chunk (in a process pool when jobs > 1, at most
    IN_FLIGHT per worker ahead), `on_done(chunk number, result)` as each finishes."""
    if jobs == 1:
        for i, chunk in enumerate(chunks):
            on_done(i, work(evaluate, chunk))
        return
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    pool = ProcessPoolExecutor(max_workers=jobs, initializer=_worker_init)
    try:
        pending: dict = {}
        numbered = enumerate(chunks)
        while True:
            for i, chunk in itertools.islice(numbered, jobs * IN_FLIGHT - len(pending)):
                pending[pool.submit(work, evaluate, chunk)] = i
            if not pending:
                break
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=pending.get):
                on_done(pending.pop(fut), fut.result())
    except BaseException:
        _stop(pool)
        raise
    pool.shutdown(wait=True)


WORKER_GC_THRESHOLD = (50_000, 50, 100)
"""The workers' gc thresholds (Python's default: 700, 10, 10). A worker allocates millions of
short-lived objects per chunk (ops' records, spans, row dicts) beside long-lived caches
(schedules, workloads) that every full collection walks again; collected less often, a ranged
sweep point takes ~9% less CPU (25,000-point quarter's configs in-process: 2.16-2.25 -> 1.97 ms).
Young cycles are still collected every 50,000 allocations; results are the same bit for bit."""


def _worker_init() -> None:
    """Workers leave Ctrl-C (sent to the whole terminal process group) and SIGTERM handling
    to the parent, which flushes the rows and then terminates them; they collect garbage less
    often (WORKER_GC_THRESHOLD)."""
    import ctypes
    import gc
    import signal

    gc.set_threshold(*WORKER_GC_THRESHOLD)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:      # Linux: die with the parent (a SIGKILLed sweep must not leave workers holding its lock)
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)     # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _stop(pool) -> None:
    """Stop a pool now: cancel what has not started and terminate the workers (an interrupted
    sweep must not leave processes computing rows nobody will read). The workers and the result
    queue are taken before shutdown, which forgets them (`_processes = None`): taken after, none
    was stopped and the queued chunks ran to their end before the process could exit.

    A worker terminated while it was sending a chunk's rows (larger than a pipe's buffer) leaves
    half a message in the result pipe, and the pool's manager thread waits in `recv` for the rest
    for ever; Python joins that thread at exit, so the process never ended (1 CI run in 5: the
    sweep printed its "interrupted" line and hung). The parent holds a write end of that pipe
    too: closed once the workers are dead, the read sees end-of-file, the manager thread takes
    the pool as broken and ends (bounded join)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    results = getattr(pool, "_result_queue", None)
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(timeout=5)
    if results is not None and not any(proc.is_alive() for proc in procs):
        results._writer.close()
    if manager is not None:
        manager.join(timeout=5)


def _canon(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    return json.dumps(value, sort_keys=True, default=str)


def point_id(base: Base, point: Mapping[str, Any]) -> str:
    """16 hex digits identifying base + point (stable across runs and processes)."""
    text = json.dumps({"base": base.identity(),
                       "point": {k: _canon(v) for k, v in sorted(point.items())}},
                      sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------------------------
# running a grid

def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:      # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


CHUNK_POINTS = 256
"""Most points one worker task evaluates (a grid is cut into at least 8 tasks per worker, each
of consecutive points): neighbours in a grid differ in its last keys, often hardware rates, and
share their workload and often their schedule (sim/engine's caches), so a worker that gets them
together builds each once; 256 points of a 100,000-point sweep are 390 tasks, each its rows
journalled at once."""


def run_points(points: Sequence[dict], evaluate: Callable[[dict], dict], *, jobs: int | None = None,
               on_rows: Callable[[list[dict]], None] | None = None,
               keep: bool = True) -> list[dict]:
    """Evaluate points (in a process pool when jobs > 1), calling `on_rows` as chunks finish.

    Returns rows in the order of `points`; with `keep` off, none (`on_rows` has had them all:
    a long sweep holds no row it has handed on)."""
    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    if jobs == 1 or len(points) < 4:
        rows = []
        for p in points:
            row = evaluate(p)
            if keep:
                rows.append(row)
            if on_rows:
                on_rows([row])
        return rows
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    size = max(1, min(CHUNK_POINTS, len(points) // (jobs * 8)))
    chunks = [list(points[i:i + size]) for i in range(0, len(points), size)]
    results: dict[int, list[dict]] = {}
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(chunks)), initializer=_worker_init)
    try:
        pending = {pool.submit(_evaluate_chunk, evaluate, c): i for i, c in enumerate(chunks)}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                i = pending.pop(fut)
                rows = fut.result()
                if keep:
                    results[i] = rows
                if on_rows:
                    on_rows(rows)
    except BaseException:
        _stop(pool)
        raise
    pool.shutdown(wait=True)
    return [row for i in range(len(chunks)) for row in results[i]] if keep else []


def to_frame(rows: list[dict], keys: Sequence[str] = ()):
    """Rows -> DataFrame with point_id and the swept keys first, `error` last."""
    import pandas as pd

    return _ordered(pd.DataFrame(rows), keys)


def _ordered(df, keys: Sequence[str] = ()):
    """`to_frame`'s column order and types on a DataFrame of rows."""
    if df.empty:
        return df
    first = ["point_id", *[k for k in keys if k in df.columns]]
    rest = [c for c in df.columns if c not in first and c != "error"]
    df = df[first + rest + (["error"] if "error" in df.columns else [])]
    return _tidy(df)


ROW_BLOCK = 256
"""Rows a sweep keeps as dicts before it packs them into a DataFrame: a row dict of ~75 columns
takes ~6 KB, a DataFrame row ~0.7 KB, so a 100,000-point sweep's rows take ~70 MB, not ~600 MB."""


class _Rows:
    """The rows a sweep computes, kept as DataFrames of ROW_BLOCK rows (in arrival order)."""

    def __init__(self):
        self.blocks: list = []
        self.pending: list[dict] = []
        self.count = 0

    def add(self, rows: list[dict]) -> None:
        self.pending.extend(rows)
        self.count += len(rows)
        if len(self.pending) >= ROW_BLOCK:
            self._pack()

    def _pack(self) -> None:
        import pandas as pd

        if self.pending:
            # copied: a DataFrame built from dicts keeps every row's Python number objects
            # alive (pandas 3.1 holds the object array it was read from; ~1.2 KB per row, the
            # driver's growth per point of issue 32); the copy holds the columns only
            self.blocks.append(pd.DataFrame(self.pending).copy())
            self.pending = []

    def frame(self):
        """Every row as one DataFrame (in arrival order, columns as they came), handed over:
        the blocks are let go, so the rows are held once."""
        import pandas as pd

        self._pack()
        blocks, self.blocks = self.blocks, []
        if not blocks:
            return pd.DataFrame()
        return blocks[0] if len(blocks) == 1 else pd.concat(blocks, ignore_index=True)


def _tidy(df):
    """`error` is text ('' = ok); integer scenario columns stay integers when error rows leave
    holes in them (pandas' nullable Int64)."""
    from tierlab.sweeps.stream import INT_COLUMNS

    df = df.copy()
    if "error" in df.columns:
        df["error"] = ["" if v is None or v != v else str(v) for v in df["error"]]
    for col in INT_COLUMNS:
        if col in df.columns and df[col].dtype.kind == "f":
            df[col] = df[col].astype("Int64")
    return df


# ----------------------------------------------------------------------------------------------
# files: CSV or Parquet, atomic, resumable

def _check_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".parquet", ".pq"):
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ConfigError(f"{path}: writing Parquet needs pyarrow (pip install pyarrow); "
                              "or use a .csv output") from None
        return "parquet"
    raise ConfigError(f"{path}: output must end in .csv or .parquet, got {suffix or 'no suffix'!r}")


def _check_header(path: Path, head: bytes) -> None:
    """A results CSV's header line within bounds.RESULTS_HEADER_BYTES, checked before the file
    is parsed (a million columns would take minutes); else one ConfigError line naming the file
    and the bound. `head`: the file's first RESULTS_HEADER_BYTES + 1 bytes."""
    from tierlab.bounds import RESULTS_HEADER_BYTES

    end = head.find(b"\n")
    if (len(head) if end < 0 else end) > RESULTS_HEADER_BYTES:
        raise ConfigError(f"{path}: header line longer than {RESULTS_HEADER_BYTES} bytes "
                          "(bounds.RESULTS_HEADER_BYTES); not a tierlab sweep file")


def _torn_rows(path: Path, f, keep=None) -> tuple[list[str] | None, int]:
    """(the header, None if none; torn rows) of a results CSV streamed from binary file `f` (never held
    whole: a 100,000-row file is 150 MB of text): a row with the wrong number of fields, or a
    last line without its newline (cut mid-row), is torn. `keep(row)`, if given, gets every
    other row, the header first."""
    import csv
    import io

    from tierlab.bounds import RESULTS_HEADER_BYTES

    _check_header(path, f.read(RESULTS_HEADER_BYTES + 1))
    f.seek(0, io.SEEK_END)
    size = f.tell()
    if size:
        f.seek(-1, io.SEEK_END)
    cut = size > 0 and f.read(1) not in (b"\n", b"\r")
    f.seek(0)
    text = io.TextIOWrapper(f, encoding="utf-8-sig", newline="")
    header, last, torn = None, None, 0
    reader = csv.reader(text)
    try:
        for row in reader:
            if not row:
                continue
            if header is None:
                header = row
                if keep:
                    keep(row)
                continue
            if last is not None:
                if len(last) == len(header):
                    if keep:
                        keep(last)
                else:
                    torn += 1
            last = row
    except csv.Error as e:
        raise ConfigError(f"{path}: malformed CSV: {e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text (near line {reader.line_num + 1}); save it "
                          "as UTF-8") from None
    finally:
        text.detach()
    if last is not None:
        if cut or len(last) != len(header):
            torn += 1
        elif keep:
            keep(last)
    return header, torn


def _csv_rows(path: Path, only: tuple[str, ...] | None = None):
    """(DataFrame, torn rows, header) of a results CSV (`_torn_rows`; the torn rows left out),
    of the columns `only` if given: streamed once to find them, then parsed by pandas from the
    file itself when none is torn."""
    import csv
    import io

    import pandas as pd

    from tierlab.safeio import open_checked

    cols = None if only is None else (lambda c: c in only)
    with open_checked(path) as f:
        header, torn = _torn_rows(path, f)
        if header is None:
            return pd.DataFrame(), 0, []
        f.seek(0)
        if not torn:
            return pd.read_csv(f, keep_default_na=False, na_values=[""], encoding="utf-8-sig",
                               usecols=cols), 0, header
        buf = io.StringIO()
        _torn_rows(path, f, csv.writer(buf).writerow)
    buf.seek(0)
    return pd.read_csv(buf, keep_default_na=False, na_values=[""], usecols=cols), torn, header


def read_results_checked(path: str | Path, fix: str = "choose another --out",
                         columns: tuple[str, ...] = (), only: tuple[str, ...] | None = None):
    """(rows of a previous sweep, torn rows left out); empty if the file does not exist; of
    the columns `only` if given (a CSV; what a resume needs to know which points are done). A file
    with a column name no sweep writes (a control character) or without one of `columns` (the
    keys this grid varies: another sweep's results, or an edited header) is refused, so a resume
    never takes its rows as done nor replaces it."""
    import pandas as pd

    path = Path(path)
    fmt = _check_format(path)
    if not path.exists():
        return pd.DataFrame(), 0
    torn = 0
    try:
        if fmt == "csv":
            df, torn, header = _csv_rows(path, only)
        else:
            df = pd.read_parquet(path)
            header = [str(c) for c in df.columns]
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - pandas raises many kinds
        raise ConfigError(f"{path}: cannot read previous sweep results: {e}") from None
    if len(df.index) and "point_id" not in header:
        raise ConfigError(f"{path}: not a tierlab sweep file (no point_id column); {fix}")
    _check_columns(path, header, columns, fix)
    if not df.empty:
        ok = df["point_id"].astype(str).str.fullmatch(r"[0-9a-f]{16}")
        torn += int((~ok).sum())
        df = df[ok]
    return (_tidy(df) if not df.empty else df), torn


def _check_columns(path: Path, have: list[str], want: tuple[str, ...], fix: str) -> None:
    odd = next((c for c in have if any(ord(ch) < 32 or ord(ch) == 127 for ch in c)), None)
    if odd is not None:
        raise ConfigError(f"{path}: column {odd[:40]!r} has a control character: not a results "
                          f"file tierlab wrote; {fix}")
    missing = next((k for k in want if have and k not in have), None)
    if missing is not None:
        raise ConfigError(f"{path}: no {missing!r} column, which this sweep varies (another "
                          f"sweep's results, or an edited header); {fix}")


def read_results(path: str | Path, fix: str = "choose another --out"):
    """A previous sweep's rows (empty DataFrame if the file does not exist; torn rows left out)."""
    return read_results_checked(path, fix)[0]


def write_results(df, path: str | Path) -> None:
    """Write CSV/Parquet atomically (temp file in the same folder + rename)."""
    from tierlab.safeio import atomic_target

    path = Path(path)
    fmt = _check_format(path)
    with atomic_target(path, "--out") as tmp:
        if fmt == "csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_parquet(tmp, index=False)


def journal_path(out: str | Path) -> Path:
    """The append-only row journal beside a results file (removed once the file is written)."""
    out = Path(out)
    return out.with_name(f".{out.name}.rows.jsonl")


def _journal_rows(out: Path):
    """(rows, torn lines) left in a journal by a sweep killed before it wrote `out`."""
    from tierlab.safeio import read_jsonl

    path = journal_path(out)
    if not path.exists():
        return [], 0
    rows, torn = read_jsonl(path)
    good = [r for r in rows if isinstance(r, dict) and isinstance(r.get("point_id"), str)]
    return good, len(torn) + len(rows) - len(good)


def _done_ids(previous) -> set[str]:
    """Rows to skip: everything computed before, except internal failures (retried)."""
    if previous.empty:
        return set()
    errors = previous["error"] if "error" in previous.columns else None
    keep = previous if errors is None else previous[~errors.str.startswith("internal:")]
    return set(keep["point_id"].astype(str))


@dataclass
class SweepOutcome:
    frame_or_load: Any
    """The rows as a DataFrame, or a function that reads them back (a sweep written to `out`
    holds none): `frame`."""
    computed: int
    skipped: int
    errors: int = 0
    extra: dict = field(default_factory=dict)
    torn: int = 0
    """Torn rows of the previous file or journal that were ignored (and recomputed)."""
    total: int = 0
    """Points in the grid (fewer rows in `frame`: the sweep was interrupted)."""
    tally: Any = None
    """stream.Tally of the rows written (rows, errors, first error, the fastest that fits);
    None when `frame` is held."""

    @cached_property
    def frame(self):
        """All rows: this grid's (in grid order) then earlier rows of the file not in this grid;
        of a sweep written to a file, read back from it on first use."""
        return self.frame_or_load() if callable(self.frame_or_load) else self.frame_or_load


def run_sweep(base: Base, axes: Sequence[Axis], *, simulator: Callable | None = None,
              strict: bool = False, jobs: int | None = None, out: str | Path | None = None,
              on_rows: Callable[[list[dict]], None] | None = None,
              on_start: Callable[[int, int], None] | None = None) -> SweepOutcome:
    """Run the grid of `axes` over `base`; resume from and write to `out` (CSV/Parquet) if given.

    `on_start(todo, skipped)` is called once the grid is known; `on_rows(rows)` per finished
    chunk. With `out`, the file is locked for the whole sweep (a second writer gets a
    ConfigError), each finished row is appended to the journal at once, and the file is
    rewritten atomically at the end, also when an exception (Ctrl-C, SIGTERM) ends the sweep.
    Ctrl-C (KeyboardInterrupt) or SIGTERM (raised as Interrupted) stops the workers and is
    raised on with `.partial`: the SweepOutcome of the rows done so far, in grid order."""
    if out is None:
        return _run_grid(base, axes, simulator, strict, jobs, None, on_rows, on_start)
    from tierlab.safeio import exclusive

    _check_format(Path(out))
    with exclusive(out):
        return _run_grid(base, axes, simulator, strict, jobs, Path(out), on_rows, on_start)


def check_base(base: Base):
    """The base scenario, resolved once before the grid: a broken base (a bad profile, a config
    that contradicts a flag) is one ConfigError, not an error in every row."""
    try:
        return resolve(base)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def run_grid(base: Base, axes: Sequence[Axis], *, memory_only: bool = False,
             strict: bool = False, jobs: int | None = None, out: str | Path | None = None,
             on_rows: Callable[[list[dict]], None] | None = None,
             on_start: Callable[[int, int], None] | None = None,
             ranges: bool = True) -> SweepOutcome:
    """The sweep driver of `tierlab sweep` and `tierlab.sweep()`: the base checked once
    (check_base), then every point of the grid simulated with its 80% range (columns
    step_time_low_s / step_time_high_s, docs/ranges.md), or with `ranges` off the point answer
    only (about 1.7x faster: no range columns), or with `memory_only` its memory planned only;
    resumed from and written to `out` as `run_sweep` does."""
    from tierlab.sim.engine import simulate
    from tierlab.sim.ranges import simulate_ranged

    check_base(base)
    simulator = None if memory_only else simulate_ranged if ranges else simulate
    return run_sweep(base, axes, simulator=simulator, strict=strict, jobs=jobs, out=out,
                     on_rows=on_rows, on_start=on_start)


def _run_grid(base, axes, simulator, strict, jobs, out: Path | None, on_rows, on_start):
    import pandas as pd

    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    total, _ = iter_grid(axes)
    keys = tuple(a.key for a in axes)
    previous, torn = read_results_checked(out, columns=keys, only=DONE_COLUMNS) if out \
        else (pd.DataFrame(), 0)
    journalled, torn_j = _journal_rows(out) if out else ([], 0)
    if out and _unchanged(Path(out), previous, torn, journalled, base, axes):   # no row read
        return _as_it_is(out, axes, lambda: (point_id(base, p) for p in iter_grid(axes)[1]),
                         total)
    csv_out = bool(out) and _check_format(Path(out)) == "csv"
    in_file = csv_out and not torn and not journalled and not previous.empty
    if csv_out and not in_file:       # torn rows or a journal: read whole (a Parquet file was)
        previous, torn = read_results_checked(out, columns=keys)
    if journalled:
        previous = _merge(previous, to_frame(journalled))
    done = _done_ids(previous)

    def ids():
        """Each grid point's id, or None where no earlier row can be its (nothing to skip)."""
        if previous.empty:
            return itertools.repeat(None, total)
        return (point_id(base, p) for p in iter_grid(axes)[1])

    n_todo = total - (sum(i in done for i in ids()) if done else 0)
    if on_start:
        on_start(n_todo, total - n_todo)
    size = 1 if jobs == 1 or n_todo < 4 else max(1, min(CHUNK_POINTS, n_todo // (jobs * 8)))
    todo = (p for p, i in zip(iter_grid(axes)[1], ids()) if i is None or i not in done)
    chunks = iter(lambda: list(itertools.islice(todo, size)), [])
    run = _run_to_file if out else _run_in_memory
    return run(base, axes, Evaluator(base, simulator, strict), chunks, jobs, out, on_rows,
               previous=previous, in_file=in_file, done=done, ids=ids, size=size, total=total,
               skipped=total - n_todo, torn=torn + torn_j, rewrite=bool(journalled or torn))


DONE_COLUMNS = ("point_id", "error")
"""What a resume reads of a previous file first: which points are done (`_done_ids`)."""

def _unchanged(out: Path, previous, torn: int, journalled: list, base, axes) -> bool:
    """Every point of the grid done in the previous CSV (of `DONE_COLUMNS`), nothing torn, no
    journal: the file stands as it is, and no row of it needs to be held."""
    if _check_format(out) != "csv" or previous.empty or torn or journalled \
            or len(previous.columns) < len(DONE_COLUMNS):
        return False
    done = _done_ids(previous)
    return all(point_id(base, p) in done for p in iter_grid(axes)[1])


def _as_it_is(out: Path, axes, ids: Callable, total: int) -> "SweepOutcome":
    """The outcome of a resume over a finished CSV, summed up `ROWS_AT_ONCE` rows at a time as
    the in-memory frame would be (its rows in grid order: the first error and the fastest row
    that fits are the first in that order); the frame itself read only if asked for."""
    from tierlab.sweeps.stream import ColumnStats, Tally, column_order, number

    rank = {i: n for n, i in enumerate(ids())}
    tally, stats = Tally(), ColumnStats()
    best, first_error = (None, None), (None, None)
    for records in _file_chunks(out):
        stats.add_rows(records)
        for row in records:
            r = rank.get(str(row["point_id"]), len(rank) + tally.rows)
            tally.add(row)
            error = row.get("error") or ""
            if error and (first_error[0] is None or r < first_error[0]):
                first_error = (r, error)
            tps = row.get("tokens_per_s")
            if not error and str(row.get("fits")).lower() == "true" and number(tps) \
                    and tps == tps and (best[0] is None or (tps, -r) > best[0]):
                best = ((tps, -r), row)
    tally.columns = column_order(_header(out), [], [a.key for a in axes])
    tally.floaty = stats.floaty(stats.rows)
    tally.first_error, tally.best = first_error[1], best[1]
    return SweepOutcome(frame_or_load=lambda: _grid_order(read_results(out), ids(), axes),
                        computed=0, skipped=total, errors=tally.errors, torn=0, total=total,
                        tally=tally)


def _run_in_memory(base, axes, evaluate, chunks, jobs, out, on_rows, *, total, torn, **_):
    """No file: the rows kept as blocks in grid order, handed over as one frame."""
    new_rows, order = _Rows(), _InOrder()

    def done(index, rows):
        for block in order.push(index, rows):
            new_rows.add(block)
        if on_rows:
            on_rows(rows)

    stopped: BaseException | None = None
    try:
        _run_chunks(chunks, _evaluate_chunk, evaluate, jobs, done)
    except (KeyboardInterrupt, Interrupted) as e:     # Ctrl-C / SIGTERM: keep the rows done
        stopped = e
    for block in order.rest():
        new_rows.add(block)
    frame = _ordered(new_rows.frame(), [a.key for a in axes])
    errors = int((frame["error"] != "").sum()) if "error" in frame.columns else 0
    return _outcome(SweepOutcome(frame_or_load=frame, computed=new_rows.count, skipped=0,
                                 errors=errors, torn=torn, total=total), stopped)


def _outcome(outcome: SweepOutcome, stopped: BaseException | None) -> SweepOutcome:
    if stopped is not None:
        stopped.partial = outcome
        raise stopped
    return outcome


def _run_to_file(base, axes, evaluate, chunks, jobs, out: Path, on_rows, *, previous, in_file,
                 done, ids, size, total, skipped, torn, rewrite):
    """Every finished chunk journalled at once (no row kept); at the end, or on Ctrl-C /
    SIGTERM, the file streamed from the journal in grid order (sweeps/stream.py). `in_file`:
    `previous` holds DONE_COLUMNS only, the rows are read from `out` as they are written."""
    from tierlab.sweeps.stream import ColumnStats, Journal, Records

    retry = (set(previous["point_id"].astype(str)) - done) if not previous.empty else set()
    replaced: set[str] = set()
    stats, order, computed = ColumnStats(), _InOrder(), [0]
    try:
        journal = Journal(journal_path(out))
    except OSError as e:
        raise ConfigError(f"--out {out}: cannot write its row journal: {e.strerror}") from None

    def finished(index, result):
        rows, text, chunk_stats = result
        journal.write(index, text)
        for s in order.push(index, chunk_stats):
            stats.merge(s)
        computed[0] += len(rows)
        if retry:
            replaced.update(r["point_id"] for r in rows if r["point_id"] in retry)
        if on_rows:
            on_rows(rows)

    stopped: BaseException | None = None
    try:
        _run_chunks(chunks, _journal_chunk, evaluate, jobs, finished)
    except (KeyboardInterrupt, Interrupted) as e:     # Ctrl-C / SIGTERM: keep the rows done
        stopped = e
    finally:
        journal.file.close()
        for s in order.rest():
            stats.merge(s)
        write, tally = bool(computed[0] or rewrite), None
        try:
            if write:
                if in_file:
                    kept, first = _file_rows(out, previous, replaced), _header(out)
                else:
                    kept = Records(previous[~previous["point_id"].astype(str).isin(replaced)]
                                   if replaced else previous)
                    first = list(previous.columns)
                tally = _stream_out(out, [a.key for a in axes], first, stats, kept, ids(), size,
                                    journal, done)
        finally:
            journal.close()
        journal_path(out).unlink(missing_ok=True)
    if write:
        outcome = SweepOutcome(frame_or_load=lambda: read_results(out), computed=computed[0],
                               skipped=skipped, errors=tally.errors, torn=torn, total=total,
                               tally=tally)
    else:          # nothing new: the file stands as it was
        errors = int((previous["error"] != "").sum()) if "error" in previous.columns else 0
        frame = (lambda: _grid_order(read_results(out), ids(), axes)) if in_file \
            else _grid_order(previous, ids(), axes)
        outcome = SweepOutcome(frame_or_load=frame, computed=0, skipped=skipped, errors=errors,
                               torn=torn, total=total)
    return _outcome(outcome, stopped)


def _header(out: Path) -> list[str]:
    """A results CSV's column names."""
    import pandas as pd

    from tierlab.safeio import open_checked

    with open_checked(out) as f:
        return [str(c) for c in pd.read_csv(f, nrows=0, encoding="utf-8-sig").columns]


def _file_chunks(out: Path) -> Iterator[list[dict]]:
    """A results CSV's rows, ROWS_AT_ONCE at a time, as `read_results` types them (`_tidy`)."""
    import pandas as pd

    from tierlab.safeio import open_checked
    from tierlab.sweeps.stream import ROWS_AT_ONCE

    with open_checked(out) as f:
        for chunk in pd.read_csv(f, keep_default_na=False, na_values=[""], encoding="utf-8-sig",
                                 chunksize=ROWS_AT_ONCE):
            yield _tidy(chunk).to_dict("records")


def _file_rows(out: Path, previous, replaced: set[str]):
    """stream.FileRows of `out`, less the rows this sweep replaced; `previous`: its
    DONE_COLUMNS, row for row (no row of the file torn)."""
    from tierlab.sweeps.stream import FileRows

    ids = [str(i) for i in previous["point_id"]]
    keep = [n for n, i in enumerate(ids) if i not in replaced]
    return FileRows(lambda: _file_chunks(out), keep, [ids[n] for n in keep])


def _stream_out(out: Path, keys, first_columns, stats, kept, ids, size, journal, done):
    """Write the rows in grid order (stream.walk) into `out`, tallying them for the summary;
    a Parquet file is assembled as one frame (a CSV streams)."""
    from tierlab.safeio import atomic_target
    from tierlab.sweeps.stream import ColumnStats, Tally, column_order, walk, write_csv

    every = ColumnStats().add_rows(kept)
    every.merge(stats)
    tally = Tally()
    tally.columns = column_order(first_columns, stats.cols, keys)
    tally.floaty = every.floaty(every.rows)
    rows = (tally.add(r) for r in walk(ids, size, journal, kept, done))
    fmt = _check_format(out)
    with atomic_target(out, "--out") as tmp:
        if fmt == "csv":
            write_csv(tmp, tally.columns, tally.floaty, rows)
        else:
            to_frame(list(rows), keys).to_parquet(tmp, index=False)
    return tally


def _grid_order(previous, ids, axes):
    """A file's rows (nothing computed) in grid order, then those outside the grid."""
    if previous.empty:
        return previous
    order = {i: n for n, i in enumerate(ids)}
    rank = previous["point_id"].astype(str).map(order).fillna(len(order)
                                                              + previous.index.to_series())
    frame = previous.iloc[rank.argsort(kind="stable")].reset_index(drop=True)
    return _ordered(frame, [a.key for a in axes])


def _plain(value):
    """numpy scalars -> Python (a journal row reads back as the same number, not a string)."""
    return value.item() if hasattr(value, "item") else str(value)


def _merge(previous, new):
    """Rows of `previous` not in `new`, then `new` (a recomputed point replaces its old row)."""
    import pandas as pd

    if not previous.empty and not new.empty:
        previous = previous[~previous["point_id"].astype(str).isin(set(new["point_id"]))]
    frames = [f for f in (previous, new) if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _num(value) -> str:
    """1000000000 -> 1e9; other values as they are."""
    import numbers

    if isinstance(value, numbers.Real) and not isinstance(value, bool) and abs(value) >= 1e5:
        return f"{value:.4g}".replace("e+0", "e").replace("e+", "e")
    return str(value)


def all_failed(outcome: "SweepOutcome") -> str | None:
    """When every row has an error (a bad profile, a missing file), the line to exit 2 with:
    such a sweep evaluated nothing, and no row is a verdict. None otherwise."""
    t = outcome.tally
    if t is not None:
        if not t.rows or "error" not in t.columns or not t.all_failed:
            return None
        rows, first = t.rows, t.first_error
    else:
        df = outcome.frame
        if df.empty or "error" not in df.columns or (df["error"].fillna("").astype(str)
                                                     == "").any():
            return None
        rows, first = len(df), df["error"].iloc[0]
    return f"sweep: every one of the {rows} rows could not be evaluated; the first: {first}"


def _best(outcome: "SweepOutcome"):
    """(the grid's key columns, the first fitting row with the most tokens/s or None)."""
    t = outcome.tally
    if t is not None:
        if "tokens_per_s" not in t.columns or "fits" not in t.columns or t.best is None:
            return [], None
        best = {k: float(v) if k in t.floaty and isinstance(v, int) and not isinstance(v, bool)
                else v for k, v in t.best.items()}      # as the file's column holds it
        return t.columns[1:t.columns.index("config_name")], best
    df = outcome.frame
    if "tokens_per_s" in df.columns and "fits" in df.columns:
        ok = df[(df["error"] == "") & (df["fits"].astype(str).str.lower() == "true")]
        if not ok.empty:
            return list(df.columns[1:df.columns.get_loc("config_name")]), \
                ok.loc[ok["tokens_per_s"].idxmax()]
    return [], None


def summary(outcome: "SweepOutcome", out: str | None = None) -> str:
    """Rows computed / skipped / failed, and the point with the most tokens/s that fits."""
    n = outcome.tally.rows if outcome.tally is not None else len(outcome.frame)
    where = f" -> {out}" if out else ""
    text = (f"{n} rows{where}: {outcome.computed} computed, {outcome.skipped} already "
            f"there, {outcome.errors} with an error")
    keys, best = _best(outcome)
    if best is not None:
        point = ", ".join(f"{k}={_num(best[k])}" for k in keys)
        text += (f"\nfastest that fits (most tokens/s): {point}: {best['tokens_per_s']:,.0f} "
                 f"tokens/s, {best['step_time_s']:.3f} s/step, {best['bottleneck']} binds")
    return text


def sweep_json(outcome, out: str | None) -> str:
    """`sweep --json`: {rows (the table's, when no --out file holds them; NaN as null), out,
    rows_total, errors}."""
    if out and outcome.tally is not None:        # the file holds the rows: none read back
        return json.dumps({"rows": None, "out": out, "rows_total": outcome.tally.rows,
                           "errors": outcome.tally.errors}, indent=2)
    frame = outcome.frame
    errors = int((frame["error"].astype(str) != "").sum()) if "error" in frame else 0
    rows = None if out else json.loads(frame.to_json(orient="records"))
    return json.dumps({"rows": rows, "out": out, "rows_total": len(frame), "errors": errors},
                      indent=2)
