"""The Measurement record of one real run: config, versions, host, per-step records, summary.

Layout of a measurement directory (written by `MeasurementWriter`, read by `load_measurement`):
  measurement.json  everything but the steps; `status` is "running" until the run is closed
  steps.jsonl       one StepRecord per line, appended and flushed after every step
  samples.jsonl     the ~10 Hz probe samples (NVML, psutil, diskstats), written at close
  summary.json      steady-state statistics (warm-up dropped), written at close

A failed or interrupted run is a Measurement too: status "failed"/"interrupted" with a reason,
and every step that finished before the fault is kept.
"""
from __future__ import annotations

import errno
import json
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, Mapping

from tierlab.bounds import QUANTITIES

Status = Literal["running", "ok", "failed", "interrupted"]
FailureKind = Literal["", "oom", "assertion", "disk_full", "signal", "timeout", "error"]
Timing = Literal["wall", "synchronised"]

MEASUREMENT_FILE = "measurement.json"
STEPS_FILE = "steps.jsonl"
SAMPLES_FILE = "samples.jsonl"
SUMMARY_FILE = "summary.json"


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """One optimizer step as measured."""

    step: int
    """0-based optimizer step index."""
    wall_s: float
    """Back-to-back wall time: end of the previous step (or loop start) to the end of this
    `engine.step()`. No synchronisation is added in the default timing mode; the loss is read
    after the step ends, so any GPU tail lands in the next interval and the sum stays exact."""
    timing: Timing
    """"wall" (no extra sync) or "synchronised" (--breakdown: device sync around each phase)."""
    loss: float
    tokens: int
    """Tokens processed in this step over all ranks (micro-batch x seq x grad-accum x world)."""
    forward_s: float | None = None
    """--breakdown only: synchronised forward time (summed over micro-steps)."""
    backward_s: float | None = None
    optimizer_s: float | None = None
    gpu_max_allocated_bytes: int | None = None
    """torch.cuda.max_memory_allocated during this step (peak stats reset after each step)."""
    gpu_max_reserved_bytes: int | None = None
    host_rss_bytes: int | None = None
    swap_bytes: int | None = None
    """Bytes of the swap files under the nvme_path(s) after this step."""
    disk_read_bytes: int | None = None
    """Bytes read from the block device under the swap path since the run started (diskstats)."""
    disk_written_bytes: int | None = None
    gc_s: float | None = None
    """Seconds this step spent in Python's garbage collector (this rank's process, all phases)."""
    gc_collections: list[int] | None = None
    """Collections of generation 0, 1 and 2 during this step (a generation-2 one is a full walk
    of every tracked object)."""
    time_unix: float = 0.0


@dataclass(kw_only=True)
class Measurement:
    """One real training run (or the attempt at one)."""

    run_id: str
    status: Status = "running"
    reason: str = ""
    """Why the run failed or was interrupted, one line."""
    failure_kind: FailureKind = ""
    model: Mapping[str, Any] = field(default_factory=dict)
    """The tierlab Model as a dict (plus the parameter count)."""
    ds_config: Mapping[str, Any] = field(default_factory=dict)
    """The fully resolved ds_config handed to deepspeed.initialize."""
    run: Mapping[str, Any] = field(default_factory=dict)
    """Runner settings: micro-batch, seq, steps, warm-up, dataset, cap, breakdown, world size."""
    versions: Mapping[str, str] = field(default_factory=dict)
    host: Mapping[str, Any] = field(default_factory=dict)
    started_unix: float = 0.0
    finished_unix: float | None = None
    steps: list[StepRecord] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)

    def header(self) -> dict:
        """Everything but steps and samples (what measurement.json holds)."""
        out = asdict(self)
        out.pop("steps")
        out.pop("samples")
        return out


def _percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of an already sorted list."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _stats(values: list[float]) -> dict:
    vals = sorted(v for v in values if v is not None and math.isfinite(v))
    if not vals:
        return {"n": 0}
    q1, q3 = _percentile(vals, 0.25), _percentile(vals, 0.75)
    return {"n": len(vals), "median": statistics.median(vals), "iqr": q3 - q1, "q1": q1, "q3": q3,
            "mean": statistics.fmean(vals), "min": vals[0], "max": vals[-1]}


def summarize(steps: list[StepRecord], warmup_steps: int, samples: list[dict] | None = None) -> dict:
    """Steady-state statistics: drop the first `warmup_steps` (ZeRO-3's first step has no
    prefetch trace), then median/IQR of step time, tokens/s from the median step, last loss,
    memory and disk peaks."""
    steady = steps[warmup_steps:]
    wall = _stats([s.wall_s for s in steady])
    out: dict[str, Any] = {"warmup_steps": warmup_steps, "steps_total": len(steps),
                           "steps_steady": len(steady), "step_time_s": wall,
                           "timing": steady[0].timing if steady else None}
    if steady and wall.get("median"):
        out["tokens_per_s"] = steady[-1].tokens / wall["median"]
    for phase in ("forward_s", "backward_s", "optimizer_s", "gc_s"):
        vals = [getattr(s, phase) for s in steady if getattr(s, phase) is not None]
        if vals:
            out[phase] = _stats(vals)
    out["loss_first"] = steps[0].loss if steps else None
    out["loss_last"] = steps[-1].loss if steps else None
    for key in ("gpu_max_allocated_bytes", "gpu_max_reserved_bytes", "host_rss_bytes", "swap_bytes"):
        vals = [getattr(s, key) for s in steps if getattr(s, key) is not None]
        out[f"peak_{key}"] = max(vals) if vals else None
    last = steps[-1] if steps else None
    out["disk_read_bytes"] = last.disk_read_bytes if last else None
    out["disk_written_bytes"] = last.disk_written_bytes if last else None
    if steady and len(steps) > 1 and last.disk_read_bytes is not None:
        before = steps[warmup_steps - 1] if warmup_steps >= 1 else None
        if before is not None and before.disk_read_bytes is not None:
            n = len(steady)
            out["disk_read_bytes_per_step"] = (last.disk_read_bytes - before.disk_read_bytes) / n
            out["disk_written_bytes_per_step"] = (
                (last.disk_written_bytes - before.disk_written_bytes) / n)
    if samples:
        out["samples"] = summarize_samples(samples)
    return out


def summarize_samples(samples: list[dict]) -> dict:
    """Peak and mean of every numeric probe field."""
    keys = sorted({k for s in samples for k, v in s.items()
                   if isinstance(v, (int, float)) and k != "t"})
    out = {"n": len(samples)}
    for key in keys:
        vals = [s[key] for s in samples if isinstance(s.get(key), (int, float))]
        if vals:
            out[key] = {"max": max(vals), "mean": statistics.fmean(vals)}
    return out


INIT_STD = 0.02
"""The standard deviation of a random init: transformers' `LlamaConfig.initializer_range`
default, which the runner's models keep."""
LOSS_TOLERANCE = 1.5
"""How far (in nats) a random init's step-0 loss may sit from `expected_initial_loss`."""


def expected_initial_loss(vocab: int, hidden: int, init_std: float = INIT_STD) -> float:
    """Step-0 loss of a randomly initialised Llama on tokens it cannot predict: the final
    RMSNorm leaves the hidden state with unit RMS (|h|^2 = hidden), so each logit h.w is
    ~N(0, s^2) with s^2 = hidden x init_std^2, and E[logsumexp of V such] ~ ln V + s^2 / 2.
    TinyLlama: ln 32000 + 2048 x 0.02^2 / 2 = 10.37 + 0.41 = 10.78 (measured 10.785 at
    every stage, lab/exercise-h200-a)."""
    return math.log(vocab) + hidden * init_std ** 2 / 2


def loss_warnings(model: Mapping[str, Any], run: Mapping[str, Any],
                  steps: list[StepRecord]) -> list[str]:
    """What a run's own losses say about it: a non-finite loss, or (random init only) a
    step-0 loss more than LOSS_TOLERANCE from `expected_initial_loss` (a broken init: the
    timings stay usable, the losses do not)."""
    out = []
    bad = [s.step for s in steps if not math.isfinite(s.loss)]
    if bad:
        out.append(f"non-finite loss at step {bad[0]} ({len(bad)} of {len(steps)} steps)")
    vocab, hidden = model.get("vocab"), model.get("hidden")
    if (steps and math.isfinite(steps[0].loss) and not run.get("model_path")
            and isinstance(vocab, int) and isinstance(hidden, int) and vocab > 1):
        want = expected_initial_loss(vocab, hidden)
        if abs(steps[0].loss - want) > LOSS_TOLERANCE:
            out.append(f"step-0 loss {steps[0].loss:.2f} is not a random init's "
                       f"{want:.2f} (ln {vocab} + {hidden} x {INIT_STD}^2 / 2, tolerance "
                       f"{LOSS_TOLERANCE}): the initialisation is broken; timings stay usable")
    return out


RESERVE_FILE = ".reserve"
RESERVE_BYTES = 128 << 10
"""Space the writer holds from the start and gives back when the disk fills, so the record can
still be closed: measurement.json (~6 KB, lab/cases) written beside its old copy, plus
summary.json (~3 KB) need ~15 KB; 128 KiB leaves room for what else wrote meanwhile."""


class DiskFull(OSError):
    """ENOSPC while writing the record, naming the file (a write's own OSError names none)."""

    def __init__(self, path: str | Path):
        super().__init__(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


class MeasurementWriter:
    """Writes one Measurement directory as the run goes: header first (status "running"), one
    JSONL line per step written whole at once, samples + summary + header at close. A full disk
    raises DiskFull (a step's line cut by it is taken back); `close` gives back the space
    reserved at the start (RESERVE_BYTES) for the summary and header, so a failed record is
    still closed."""

    def __init__(self, out_dir: str | Path, measurement: Measurement,
                 reserve_bytes: int = RESERVE_BYTES):
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.m = measurement
        for stale in (STEPS_FILE, SAMPLES_FILE, SUMMARY_FILE, RESERVE_FILE):
            (self.dir / stale).unlink(missing_ok=True)
        try:
            self._reserve(reserve_bytes)
            self._write_header()
            self._steps = open(self.dir / STEPS_FILE, "ab", buffering=0)   # no buffer to lose
        except BaseException:
            self._release()
            raise
        self._steps_bytes = 0
        self.closed = False

    @classmethod
    def reopen(cls, out_dir: str | Path, measurement: Measurement) -> "MeasurementWriter":
        """A writer on a directory another process left open (its worker died before closing
        the record): the steps already there are kept, and `close` closes it."""
        self = cls.__new__(cls)
        self.dir, self.m, self.closed = Path(out_dir), measurement, False
        self._steps = open(self.dir / STEPS_FILE, "ab", buffering=0)
        self._steps_bytes = self._steps.tell()
        return self

    def _reserve(self, nbytes: int) -> None:
        """Hold `nbytes` of real blocks (zeros, not a sparse file) in RESERVE_FILE."""
        if nbytes > 0:
            self._write(RESERVE_FILE, b"\0" * nbytes, atomic=False)

    def _release(self) -> None:
        (self.dir / RESERVE_FILE).unlink(missing_ok=True)

    def _write(self, name: str, data: bytes, atomic: bool = True) -> None:
        """Write `name` whole (through a temp file renamed over it when `atomic`); on ENOSPC
        remove what was half written and raise DiskFull naming the file."""
        dest = self.dir / name
        tmp = self.dir / (name + ".tmp") if atomic else dest
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            if atomic:
                tmp.replace(dest)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            if e.errno == errno.ENOSPC:
                raise DiskFull(dest) from None
            raise

    def _write_json(self, name: str, obj: Any) -> None:
        self._write(name, (json.dumps(obj, indent=2, default=str) + "\n").encode())

    def _write_header(self) -> None:
        self._write_json(MEASUREMENT_FILE, self.m.header())

    def update_header(self, **changes) -> None:
        """Set header fields (e.g. the resolved ds_config once known) and rewrite the header."""
        for key, value in changes.items():
            setattr(self.m, key, value)
        self._write_header()

    def append(self, record: StepRecord) -> None:
        """Append the step's line to steps.jsonl and the step to the record, both or neither:
        a line a full disk cut is truncated away (DiskFull)."""
        line = (json.dumps(asdict(record)) + "\n").encode()
        view = memoryview(line)
        try:
            while view:
                view = view[self._steps.write(view):]
        except OSError as e:
            self._steps.truncate(self._steps_bytes)
            if e.errno != errno.ENOSPC:
                raise
            raise DiskFull(self.dir / STEPS_FILE) from None
        self._steps_bytes += len(line)
        self.m.steps.append(record)

    def close(self, status: Status, reason: str = "", failure_kind: FailureKind = "",
              samples: list[dict] | None = None, warmup_steps: int = 0) -> Measurement:
        """Close the record once; later calls are ignored (a signal during close). On a full
        disk the samples are dropped (samples.jsonl not written), and the summary and header
        are written in the reserved space; DiskFull if even that is not enough."""
        if self.closed:
            return self.m
        self.closed = True
        self._steps.close()
        self.m.status, self.m.reason, self.m.failure_kind = status, reason, failure_kind
        self.m.finished_unix = time.time()
        self.m.samples = list(samples or [])
        if self.m.samples:
            try:
                self._write(SAMPLES_FILE, "".join(json.dumps(s) + "\n"
                                                  for s in self.m.samples).encode())
            except DiskFull:
                self.m.samples = []
        self.m.summary = summarize(self.m.steps, min(warmup_steps, max(len(self.m.steps) - 1, 0)),
                                   self.m.samples)
        self.m.summary.update(status=status, reason=reason, failure_kind=failure_kind)
        self.m.summary["warnings"] = loss_warnings(self.m.model, self.m.run, self.m.steps)
        self._release()                   # the summary and header get the reserved space
        self._write_json(SUMMARY_FILE, self.m.summary)
        self._write_header()
        return self.m


_NUMBER_FIELDS = {"step", "wall_s", "loss", "tokens", "forward_s", "backward_s", "optimizer_s",
                  "gpu_max_allocated_bytes", "gpu_max_reserved_bytes", "host_rss_bytes",
                  "swap_bytes", "disk_read_bytes", "disk_written_bytes", "gc_s", "time_unix"}


def _step(rec: Any, where: str) -> StepRecord:
    """One steps.jsonl record, its numbers checked (a string is a ConfigError naming the key)."""
    from tierlab.errors import ConfigError

    if not isinstance(rec, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    known = {f.name for f in fields(StepRecord)}
    rec = {k: v for k, v in rec.items() if k in known}
    for key in ("step", "wall_s", "timing", "loss", "tokens"):
        if key not in rec:
            raise ConfigError(f"{where}: missing key {key!r}")
    for key, value in rec.items():
        if key in _NUMBER_FIELDS and value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ConfigError(f"{where}: {key} must be a number, got {value!r}")
    wall = rec["wall_s"]
    # a step takes time: none, zero, negative, NaN or beyond 11 days is a broken record, and a
    # comparison made from it would be a number made up (bounds.QUANTITIES["seconds"])
    if wall is None or not 0 < wall <= QUANTITIES["seconds"].high:
        raise ConfigError(f"{where}: wall_s must be a step time in seconds (> 0), got {wall!r}")
    return StepRecord(**rec)


def load_measurement(directory: str | Path) -> Measurement:
    """Read a measurement directory back (a run killed hard keeps status "running"). A line cut
    by a kill in steps.jsonl or samples.jsonl is skipped; a malformed measurement.json or a
    step with a string for a number is a ConfigError naming the file."""
    from tierlab.errors import ConfigError
    from tierlab.safeio import read_data, read_jsonl

    d = Path(directory)
    head = read_data(d / MEASUREMENT_FILE, finite=False)
    if not isinstance(head, dict):
        raise ConfigError(f"{d / MEASUREMENT_FILE}: expected a JSON object, got "
                          f"{type(head).__name__}")
    head.pop("steps", None)
    head.pop("samples", None)
    known = {f.name for f in fields(Measurement)}
    try:
        m = Measurement(**{k: v for k, v in head.items() if k in known})
    except TypeError as e:
        raise ConfigError(f"{d / MEASUREMENT_FILE}: {e}") from None
    if not isinstance(m.run_id, str) or m.status not in ("running", "ok", "failed", "interrupted"):
        raise ConfigError(f"{d / MEASUREMENT_FILE}: not a tierlab measurement (run_id "
                          f"{m.run_id!r}, status {m.status!r})")
    for key in ("model", "ds_config", "run", "summary"):
        if not isinstance(getattr(m, key), dict):
            raise ConfigError(f"{d / MEASUREMENT_FILE}: {key} must be an object")
    for key in ("steps", "warmup_steps"):
        value = m.run.get(key)
        if value is not None and (type(value) is not int or value < 0):
            raise ConfigError(f"{d / MEASUREMENT_FILE}: run.{key} must be a whole number >= 0, "
                              f"got {value!r}")
    if (d / STEPS_FILE).exists():
        records, _ = read_jsonl(d / STEPS_FILE)     # a line cut by a hard kill is skipped
        m.steps = [_step(r, f"{d / STEPS_FILE}: record {n}") for n, r in enumerate(records, 1)]
    if (d / SAMPLES_FILE).exists():
        records, _ = read_jsonl(d / SAMPLES_FILE)
        # a record whose time is not a number is skipped as a torn line is (a plot of the
        # samples has no x for it)
        m.samples = [r for r in records if isinstance(r, dict)
                     and (r.get("t") is None or type(r["t"]) in (int, float))]
    return m


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
