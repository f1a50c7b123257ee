"""The offload-vs-baseline comparison: the same model and data with no offload, ZeRO-2 CPU
optimizer offload, ZeRO-3 CPU param+optimizer offload and ZeRO-3 NVMe (ZeRO-Infinity). Each
variant runs in its own subprocess, so an OOM (or a crash, or a timeout) is a row, not the end.
"""
from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from tierlab.errors import Interrupted
from tierlab.records.measurement import (MEASUREMENT_FILE, SAMPLES_FILE, STEPS_FILE, SUMMARY_FILE,
                                        Measurement, MeasurementWriter, load_measurement,
                                        loss_warnings)
from tierlab.runner.train import RunSpec
from tierlab.units import GiB

RECORD_FILES = (MEASUREMENT_FILE, STEPS_FILE, SAMPLES_FILE, SUMMARY_FILE)
TABLE_FILES = ("compare.csv", "compare.json", "compare.png")
"""What `tierlab compare` writes in --out besides one Measurement folder per variant."""

COLUMNS = ["variant", "status", "gpu_mem_cap_GiB", "gpu_peak_allocated_GiB",
           "gpu_peak_reserved_GiB", "step_time_s", "step_time_iqr_s", "tokens_per_s", "loss_last",
           "host_rss_peak_GiB", "swap_GiB", "disk_read_GiB_per_step", "disk_written_GiB_per_step",
           "steps", "reason", "warnings"]


def earlier_outputs(out_dir: str | Path, labels: Iterable[str]) -> list[str]:
    """What an earlier comparison left in `out_dir` that this one would replace: its table
    files and the Measurements of these variants (paths relative to `out_dir`)."""
    out = Path(out_dir)
    names = [*TABLE_FILES, *(f"{label}/{MEASUREMENT_FILE}" for label in labels)]
    return [name for name in names if (out / name).exists()]


def run_variant(spec: RunSpec, timeout_s: float | None = None, python: str = sys.executable
                ) -> Measurement:
    """Run one variant in a subprocess (the runner's worker) and return its Measurement. A worker
    killed hard (the kernel's OOM killer, a segfault) or over time still gives a closed record."""
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in RECORD_FILES:     # an earlier run's (compare --overwrite) is never read as this one's
        (out / name).unlink(missing_ok=True)
    spec_path = out / "spec.json"
    spec_path.write_text(spec.to_json())
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    with open(out / "worker.log", "w") as log:
        proc = subprocess.Popen([python, "-m", "tierlab.runner.train", "--spec", str(spec_path)],
                                stdout=log, stderr=subprocess.STDOUT, env=env)
        timed_out = False
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            rc = _stop(proc)
        except (KeyboardInterrupt, Interrupted) as exc:   # Ctrl-C or SIGTERM to `compare`
            _stop(proc)
            signum = getattr(exc, "signum", signal.SIGINT)
            raise Interrupted(signum, partial=_closed_record(spec, out, proc.returncode, False,
                                                             timeout_s)) from None
    return _closed_record(spec, out, rc, timed_out, timeout_s)


def _stop(proc: subprocess.Popen) -> int:
    """SIGINT to the worker, which closes its record and removes its swap (a Ctrl-C at the
    terminal has sent it one already: a second is ignored while it closes); killed after 60 s."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _closed_record(spec: RunSpec, out: Path, rc: int, timed_out: bool, timeout_s) -> Measurement:
    try:
        m = load_measurement(out)
    except (OSError, ValueError):
        m = None
    if m is not None and m.status != "running" and not timed_out:
        return m
    if m is None:
        m = Measurement(run_id=f"{spec.label}-{int(time.time())}", ds_config=spec.ds_config,
                        model=spec.model, started_unix=time.time())
    if timed_out:
        kind, reason = "timeout", f"over the {timeout_s:.0f} s limit after {len(m.steps)} steps"
    else:
        kind, reason = ("oom" if rc in (-9, 137) else "error",
                        f"worker exited with code {rc} before closing its record "
                        f"({_last_line(out / 'worker.log')})")
    return MeasurementWriter.reopen(out, m).close("failed", reason, kind, samples=m.samples,
                                                   warmup_steps=spec.warmup_steps)


def _last_line(path: Path) -> str:
    try:
        lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return "no log"
    return lines[-1][:200] if lines else "no output"


@dataclass(frozen=True)
class Planned:
    """One variant to run: its row label, resolved scenario (tierlab.scenario) and RunSpec."""

    label: str
    scenario: Any
    spec: RunSpec


BUDGET_MARGIN_S = 15.0
"""Seconds of --budget kept back for closing records and writing the table."""
MIN_VARIANT_S = 30.0
"""A variant with less budget left than this is skipped (it could not finish a step)."""


def run_comparison(planned: Iterable[Planned], *, preflight: bool = True,
                   timeout_s: float | None = None, budget_s: float | None = None,
                   say: Callable[[str], None] = lambda text: None,
                   train: Callable[[RunSpec, float | None], Measurement] | None = None,
                   check: Callable[..., list] | None = None) -> list[dict]:
    """Run the variants one after another (never two trainings at once), each after its
    pre-flight check, within `timeout_s` each and `budget_s` for all; one row per variant
    (`row`), a failed pre-flight or a spent budget a row too. `say` gets progress lines.
    Ctrl-C or SIGTERM (as `Interrupted`) stops the running variant's worker, which closes its
    record, and raises `Interrupted` with every row so far as `partial` (the stopped variant's
    row, the rest "skipped"), so the caller still writes the table. `train(spec, limit_s)`
    trains one variant (`run_variant`: a worker process) and `check(hardware, model, strategy,
    ...)` is its pre-flight (`runner.preflight.run_preflight`); a caller may pass its own."""
    from tierlab.runner.preflight import run_preflight

    planned = list(planned)
    rows: list[dict] = []
    try:
        _run_all(planned, rows, (check or run_preflight) if preflight else None, timeout_s,
                 budget_s, say, train or run_variant)
    except (KeyboardInterrupt, Interrupted) as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        m = getattr(exc, "partial", None)
        if isinstance(m, Measurement):                  # the variant the signal stopped
            rows.append(row(planned[len(rows)].label, m))
        name = signal.Signals(signum).name
        rows += [{"variant": p.label, "status": "skipped", "reason": f"interrupted ({name})"}
                 for p in planned[len(rows):]]
        raise Interrupted(signum, partial=rows) from None
    return rows


def _run_all(planned: list[Planned], rows: list[dict], check, timeout_s, budget_s, say,
             train) -> None:
    t_start = time.monotonic()
    for p in planned:
        sc = p.scenario
        problems = check(sc.hardware, sc.model, sc.strategy,
                         gpu_mem_cap_bytes=p.spec.gpu_mem_cap_bytes,
                         check_memory_plan=False) if check else []
        for problem in problems:
            say(problem.line())
        if any(x.severity == "error" for x in problems):
            rows.append({"variant": p.label, "status": "preflight", "reason":
                         "; ".join(x.message for x in problems if x.severity == "error")})
            continue
        limit = timeout_s
        if budget_s is not None:
            left = budget_s - (time.monotonic() - t_start) - BUDGET_MARGIN_S
            if left < MIN_VARIANT_S:
                rows.append({"variant": p.label, "status": "skipped", "reason": "budget spent"})
                continue
            limit = min(limit or left, left)
        say(f"running {p.label} ...")
        m = train(p.spec, limit)
        rows.append(row(p.label, m))
        say(f"  {p.label}: {rows[-1]['status']} step {rows[-1]['step_time_s']} s "
            f"{m.reason}".rstrip())
        for warning in rows[-1]["warnings"]:
            say(f"  {p.label}: warning: {warning}")


def _g(x, scale):
    return None if x is None else round(x / scale, 3)


def row(label: str, m: Measurement) -> dict:
    """One table row of a Measurement."""
    s = m.summary or {}
    st = s.get("step_time_s") or {}
    cap = (m.run or {}).get("gpu_mem_cap_bytes")
    return {"variant": label, "status": m.status if m.status == "ok" else
            f"{m.status}:{m.failure_kind}" if m.failure_kind else m.status,
            "gpu_mem_cap_GiB": _g(cap, GiB),
            "gpu_peak_allocated_GiB": _g(s.get("peak_gpu_max_allocated_bytes"), GiB),
            "gpu_peak_reserved_GiB": _g(s.get("peak_gpu_max_reserved_bytes"), GiB),
            "step_time_s": _r(st.get("median")), "step_time_iqr_s": _r(st.get("iqr")),
            "tokens_per_s": _r(s.get("tokens_per_s"), 1), "loss_last": _r(s.get("loss_last")),
            "host_rss_peak_GiB": _g(s.get("peak_host_rss_bytes"), GiB),
            "swap_GiB": _g(s.get("peak_swap_bytes"), GiB),
            "disk_read_GiB_per_step": _g(s.get("disk_read_bytes_per_step"), GiB),
            "disk_written_GiB_per_step": _g(s.get("disk_written_bytes_per_step"), GiB),
            "steps": s.get("steps_total", len(m.steps)), "reason": m.reason,
            "warnings": _warnings(m)}


def _warnings(m: Measurement) -> list[str]:
    """The run's own loss check: its summary's, or (a record written before the check
    existed) the same check on its steps."""
    s = m.summary or {}
    if isinstance(s.get("warnings"), list):
        return list(s["warnings"])
    return loss_warnings(m.model or {}, m.run or {}, m.steps)


def _r(x, nd=4):
    return None if x is None else round(x, nd)


def rows_to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({**r, "warnings": "; ".join(r.get("warnings") or [])})
    return buf.getvalue()


def format_table(rows: list[dict]) -> str:
    """A fixed-width text table (every size in GiB, written out)."""
    cols = [("variant", 14), ("status", 18), ("gpu_peak_allocated_GiB", 10),
            ("gpu_peak_reserved_GiB", 10), ("step_time_s", 9), ("tokens_per_s", 10),
            ("loss_last", 8), ("host_rss_peak_GiB", 9), ("disk_written_GiB_per_step", 10)]
    heads = ["variant", "status", "GPU alloc GiB", "GPU resv GiB", "step s", "tokens/s", "loss",
             "RSS GiB", "disk W GiB/step"]
    lines = ["  ".join(h[:w].ljust(w) for h, (_, w) in zip(heads, cols))]
    for r in rows:
        status = r["status"] + ("!" if r.get("warnings") else "")
        lines.append("  ".join(("-" if v is None else str(v))[:w].ljust(w) for v, w in
                               zip([r["variant"], status, *(r.get(k) for k, _ in cols[2:])],
                                   (w for _, w in cols))))
    lines += [f"! {r['variant']}: {text}" for r in rows for text in r.get("warnings") or []]
    return "\n".join(lines)


def variant_records(planned: Iterable[Planned]) -> list[tuple[str, Measurement]]:
    """(label, Measurement) of each planned variant whose record is on disk (for the figure's
    loss panel); a variant skipped or refused by its pre-flight has none."""
    out = []
    for p in planned:
        if (Path(p.spec.out_dir) / MEASUREMENT_FILE).is_file():
            try:
                out.append((p.label, load_measurement(p.spec.out_dir)))
            except (OSError, ValueError):
                continue
    return out
