"""Read a measured run's sampled utilisation / throughput defensively, for the timeline plot.

The runner writes ~10 Hz samples into the Measurement (runner/probes.py Sampler: `t`,
`gpu_util_percent`, `pcie_rx_Bps`/`pcie_tx_Bps`, cumulative `disk_read_bytes`/`disk_written_bytes`,
...); columns are found by name patterns, so renamed or missing ones are skipped, never fatal:
- time: the first of TIME_COLUMNS (seconds; made relative to the chosen step's start);
- utilisation: columns with 'util' in the name (0-1 fractions are scaled to %);
- rates: columns ending in _Bps / _bytes_per_s / _MBps / _GBps, and cumulative byte counters
  (ending in _bytes, non-decreasing, named after pcie/disk/nvme/read/write/rx/tx) as differences.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from tierlab.errors import ConfigError

TIME_COLUMNS = ("t_s", "time_s", "elapsed_s", "t", "time", "timestamp_s", "timestamp", "ts")
_RATE_SUFFIXES = {"_bytes_per_s": 1.0, "_Bps": 1.0, "_MBps": 1e6, "_GBps": 1e9}
_COUNTER_WORDS = ("pcie", "disk", "nvme", "read", "writ", "rx", "tx", "h2d", "d2h")


def _number(value) -> bool:
    """A finite int or float (not a bool): what a time or a step count read from a record is."""
    import math

    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value)


def _get(obj: Any, *names: str):
    """The first present field of a mapping or an object (runner Measurement / StepRecord)."""
    for name in names:
        value = obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)
        if value is not None:
            return value
    return None


def samples_frame(measurement):
    """The samples as a DataFrame, or None if the measurement has none."""
    import pandas as pd

    if measurement is None:
        return None
    if isinstance(measurement, pd.DataFrame):
        return measurement
    raw = _get(measurement, "samples", "sampled", "probe_samples", "utilisation", "utilization")
    if raw is None and isinstance(measurement, list):
        raw = measurement
    if raw is None:
        return None
    try:
        df = raw if isinstance(raw, pd.DataFrame) else pd.DataFrame(raw)
    except (ValueError, TypeError):
        return None
    return None if df.empty else df


def _step_span(step, started: float | None) -> tuple[float, float] | None:
    """(start, end) of one step on the samples' clock: explicit start/end seconds, or the
    runner's StepRecord (end `time_unix`, back-to-back `wall_s`) relative to the run's start
    (the sampler starts with the run: runner/train.py)."""
    t0 = _get(step, "start_s", "t_start_s", "t0", "start")
    t1 = _get(step, "end_s", "t_end_s", "t1", "end")
    if t0 is None and started:
        end, wall = _get(step, "time_unix"), _get(step, "wall_s")
        if isinstance(end, (int, float)) and isinstance(wall, (int, float)) and end > started:
            t0, t1 = end - wall - started, end - started
    if isinstance(t0, (int, float)) and isinstance(t1, (int, float)) and t1 > t0:
        return float(t0), float(t1)
    return None


def steady_window(measurement) -> tuple[float, float] | None:
    """(start, end) of a representative measured step (median duration, after warm-up), when
    the measurement says when its steps ran; else None."""
    steps = _get(measurement, "steps", "step_records") if measurement is not None else None
    if not isinstance(steps, (list, tuple)) or not steps:
        return None
    run = _get(measurement, "run") or {}
    warm = _get(measurement, "warmup_steps") or (run.get("warmup_steps") if isinstance(
        run, Mapping) else None) or 0
    started = _get(measurement, "started_unix")
    if not _number(started):        # a record's own field, hand-edited: no start, no span
        started = None
    warm = int(warm) if _number(warm) else 0
    spans = []
    for i, s in enumerate(steps):
        if _get(s, "warmup") or i < warm:
            continue
        span = _step_span(s, started)
        if span is not None:
            spans.append((span[1] - span[0], *span))
    if not spans:
        return None
    spans.sort()
    _, t0, t1 = spans[len(spans) // 2]
    return t0, t1


def _rate_columns(df, t) -> dict[str, tuple[list, list]]:
    out = {}
    for col in df.columns:
        name = str(col)
        scale = next((f for suf, f in _RATE_SUFFIXES.items() if name.endswith(suf)), None)
        values = df[col]
        if scale is not None:
            label = name
            for suf in _RATE_SUFFIXES:
                label = label.removesuffix(suf)
            v = [float(x) * scale for x in values]
            out[label.replace("_", " ")] = (list(t), v)
        elif name.endswith("_bytes") and any(w in name.lower() for w in _COUNTER_WORDS):
            v = [float(x) for x in values]
            if len(v) > 1 and all(b >= a for a, b in zip(v, v[1:])):
                rates = [(b - a) / (t2 - t1) if t2 > t1 else 0.0
                         for a, b, t1, t2 in zip(v, v[1:], t, t[1:])]
                out[name.removesuffix("_bytes").replace("_", " ")] = (list(t[1:]), rates)
    return out


def sample_series(measurement, window: tuple[float, float] | None = None) -> dict | None:
    """{'util': {name: (t, %)}, 'rates': {name: (t, B/s)}, 't_max': s} with t relative to the
    window's start (default: a steady measured step, else the first sample); None if no samples."""
    df = samples_frame(measurement)
    if df is None:
        return None
    tcol = next((c for c in TIME_COLUMNS if c in df.columns), None)
    if tcol is None:
        return None
    df = df.apply(lambda c: c.astype(float) if c.dtype.kind in "biuf" else c)
    df = df[[c for c in df.columns if df[c].dtype.kind in "biuf"]].dropna(subset=[tcol])
    if df.empty:
        return None
    window = window or steady_window(measurement)
    t = df[tcol].astype(float)
    if window is not None:
        keep = (t >= window[0]) & (t <= window[1])
        if keep.any():
            df, t = df[keep], t[keep] - window[0]
        else:
            t = t - float(t.iloc[0])
    else:
        t = t - float(t.iloc[0])
    t_list = list(t)
    util = {}
    for col in df.columns:
        if col != tcol and "util" in str(col).lower():
            v = [float(x) for x in df[col]]
            if v and max(v) <= 1.0:
                v = [x * 100 for x in v]
            util[str(col).removesuffix("_percent").replace("_", " ")] = (t_list, v)
    rates = _rate_columns(df.drop(columns=[tcol]), t_list)
    return {"util": util, "rates": rates, "t_max": max(t_list) if t_list else 0.0}


def read_measurement(path: str | Path):
    """A measured run for the timeline: Measurement JSON, JSONL (records or samples), a CSV of
    samples, or a run folder holding one of those."""
    import pandas as pd

    from tierlab.profiles.load import read_data

    p = Path(path)
    run_dir = p if p.is_dir() else p.parent if p.name == "measurement.json" else None
    if run_dir is not None and (run_dir / "measurement.json").is_file():
        from tierlab.records.measurement import load_measurement     # the runner's own reader

        try:
            return load_measurement(run_dir)
        except ConfigError:
            raise
        except (OSError, ValueError, TypeError) as e:
            raise ConfigError(f"{run_dir}: cannot read the measurement: {e}") from None
    if p.is_dir():
        found = sorted([*p.glob("*sample*.*"), *p.glob("measurement*.json"), *p.glob("*.json")])
        if not found:
            raise ConfigError(f"{p}: no measurement or samples file in this folder")
        p = found[0]
    if not p.is_file():
        raise ConfigError(f"{p}: no such file")
    if p.suffix == ".csv":
        import io

        from tierlab.safeio import read_text

        try:
            return pd.read_csv(io.StringIO(read_text(p)))
        except (ValueError, pd.errors.ParserError) as e:
            raise ConfigError(f"{p}: malformed CSV: {' '.join(str(e).split())}") from None
    if p.suffix == ".jsonl":
        from tierlab.safeio import read_jsonl

        records, _ = read_jsonl(p)      # a line cut by a kill is skipped
        merged = [r for r in records if isinstance(r, dict) and "samples" in r]
        return merged[-1] if merged else [r for r in records if isinstance(r, dict)]
    return read_data(p)
