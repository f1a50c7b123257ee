"""What DeepSpeed runs: build the model, deepspeed.initialize with the resolved config, train N
steps, and keep a Measurement of it — also when the run fails or is interrupted.

Entry points: `run(spec)` in-process (one GPU or CPU), or `python -m tierlab.runner.train --spec
FILE` as the worker that compare's subprocesses and DeepSpeed's launcher start on every rank.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import errno
import json
import logging
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from tierlab.errors import ConfigError
from tierlab.runner import ds_config as dsc
from tierlab.runner import probes
from tierlab.runner.fsdp2 import setup_fsdp2
from tierlab.records.measurement import (DiskFull, FailureKind, Measurement, MeasurementWriter,
                                        Status, StepRecord, new_run_id)

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """Everything one real run needs, JSON-serialisable (it travels to launcher ranks)."""

    model: dict
    """A tierlab Model as a dict."""
    ds_config: dict
    """The resolved ds_config (runner_ds_config)."""
    precision: str
    micro_batch: int
    grad_accum: int = 1
    seq: int
    steps: int
    warmup_steps: int = 1
    out_dir: str
    model_path: str | None = None
    dataset: str | None = None
    tokenizer: str | None = None
    gpu_mem_cap_bytes: float | None = None
    """Emulate a smaller GPU: torch.cuda.set_per_process_memory_fraction(cap / total)."""
    breakdown: bool = False
    """Synchronised forward/backward/optimizer timing (adds device syncs; recorded as such)."""
    checkpointing: bool = True
    seed: int = 0
    world_size: int = 1
    keep_swap: bool = False
    """Leave the swap files in place after the run (default: removed)."""
    label: str = ""
    extra: dict = field(default_factory=dict)
    engine: str = "deepspeed"
    """Who trains: "deepspeed" (deepspeed.initialize with ds_config), "fsdp2" or
    "fsdp2-offload" (runner/fsdp2.py: fully_shard, CPUOffloadPolicy for the latter)."""
    fsdp: dict = field(default_factory=dict)
    """FSDP2's settings (runner.fsdp2.fsdp2_config); empty for DeepSpeed."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "RunSpec":
        return cls(**json.loads(text))


def spec_from_strategy(model, strategy, *, out_dir: str, steps: int, warmup_steps: int,
                       **kw) -> RunSpec:
    """A RunSpec from a tierlab Model and a parsed Strategy (batch, precision, checkpointing and
    the swap paths come from the Strategy: tierlab.scenario applies --swap-dir)."""
    cfg = dsc.runner_ds_config(strategy)
    if warmup_steps >= steps:
        from tierlab.errors import ConfigError

        raise ConfigError(f"--warmup-steps {warmup_steps} must be < --steps {steps}")
    return RunSpec(model=asdict(model), ds_config=cfg, precision=strategy.precision,
                   micro_batch=strategy.train_micro_batch_size_per_gpu,
                   grad_accum=strategy.gradient_accumulation_steps, seq=model.seq_len,
                   steps=steps, warmup_steps=warmup_steps, out_dir=str(out_dir),
                   checkpointing=strategy.activation_checkpointing,
                   world_size=strategy.data_parallel_size, **kw)


class RunInterrupted(BaseException):
    """Raised from the SIGINT/SIGTERM handler so the loop unwinds and the record is closed."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# ----------------------------------------------------------------------------------------------
# fault classification (pure)

def _where(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    if not tb:
        return ""
    frame = tb[-1]
    path = frame.filename
    for marker in ("site-packages/", "tierlab/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f" at {path}:{frame.lineno} ({frame.name})"


def classify(exc: BaseException, steps_done: int, swap_free_bytes: dict | None = None
             ) -> tuple[Status, FailureKind, str]:
    """(status, failure kind, one-line reason) of an exception that ended a run."""
    done = f"after {steps_done} step{'s' if steps_done != 1 else ''}"
    if isinstance(exc, RunInterrupted):
        return "interrupted", "signal", f"received {exc} {done}"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", "signal", f"received SIGINT {done}"
    text = " ".join(str(exc).split())
    msg = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    low = msg.lower()
    if (type(exc).__name__ == "OutOfMemoryError" or "out of memory" in low
            or "can't allocate memory" in low or "cannot allocate memory" in low):
        return "failed", "oom", _cut(f"{msg} {done}")
    if (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or "no space left" in low:
        what = (f"no space left on the device of {exc.filename}"
                if isinstance(exc, OSError) and exc.filename else msg)
        return "failed", "disk_full", _cut(f"disk full: {what} {done}")
    full = [p for p, free in (swap_free_bytes or {}).items() if free is not None and free < 64 << 20]
    if full:
        return "failed", "disk_full", _cut(f"disk full: swap path {full[0]} "
                                           f"({swap_free_bytes[full[0]]} bytes free): "
                                           f"{msg}{_where(exc)} {done}")
    if isinstance(exc, AssertionError):
        return "failed", "assertion", _cut(f"{msg}{_where(exc)} {done}")
    return "failed", "error", _cut(f"{msg}{_where(exc)} {done}")


def _cut(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ----------------------------------------------------------------------------------------------
# device helpers (every CUDA call guarded)

def _cuda():
    import torch

    return torch.cuda if torch.cuda.is_available() else None


def device_sync() -> None:
    cuda = _cuda()
    if cuda is not None:
        cuda.synchronize()


def apply_gpu_mem_cap(cap_bytes: float | None, local_rank: int) -> dict:
    """Emulate a smaller card; returns what was applied (nothing on CPU)."""
    cuda = _cuda()
    if cap_bytes is None:
        return {}
    if cuda is None:
        log.warning("--gpu-mem-cap ignored: no CUDA device")
        return {"gpu_mem_cap_applied": False}
    cuda.set_device(local_rank)
    total = cuda.get_device_properties(local_rank).total_memory
    fraction = min(1.0, cap_bytes / total)
    cuda.set_per_process_memory_fraction(fraction, local_rank)
    return {"gpu_mem_cap_applied": True, "gpu_total_bytes": total, "gpu_mem_fraction": fraction}


def gpu_peaks(reset: bool = True) -> tuple[int | None, int | None]:
    cuda = _cuda()
    if cuda is None:
        return None, None
    peak = (int(cuda.max_memory_allocated()), int(cuda.max_memory_reserved()))
    if reset:
        cuda.reset_peak_memory_stats()
    return peak


# ----------------------------------------------------------------------------------------------
# the loop

def train_steps(engine, batches: Iterator, *, steps: int, grad_accum: int, breakdown: bool,
                on_step: Callable[[int, float, Any, dict], None]) -> None:
    """Train `steps` optimizer steps. Default timing: back-to-back wall clock around the DeepSpeed
    calls with no synchronisation; the loss tensor is handed to `on_step` unread, after the
    clock was taken. --breakdown: synchronise around forward, backward and step."""
    import torch

    device = engine.device
    t_prev = time.perf_counter()
    for step in range(steps):
        losses, phases = [], {"forward_s": 0.0, "backward_s": 0.0, "optimizer_s": 0.0}
        for _ in range(grad_accum):
            ids = next(batches).to(device, non_blocking=True)
            if breakdown:
                device_sync()
                t0 = time.perf_counter()
                loss = engine(input_ids=ids, labels=ids).loss
                device_sync()
                t1 = time.perf_counter()
                engine.backward(loss)
                device_sync()
                t2 = time.perf_counter()
                engine.step()
                device_sync()
                t3 = time.perf_counter()
                phases["forward_s"] += t1 - t0
                phases["backward_s"] += t2 - t1
                phases["optimizer_s"] += t3 - t2
            else:
                loss = engine(input_ids=ids, labels=ids).loss
                engine.backward(loss)
                engine.step()
            losses.append(loss.detach())
        t_end = time.perf_counter()
        wall, t_prev = t_end - t_prev, t_end
        loss_t = losses[0] if len(losses) == 1 else torch.stack(losses).mean()
        on_step(step, wall, loss_t, phases if breakdown else {})


class _Recorder:
    """Turns each finished step into a StepRecord: loss read, memory peaks, RSS, swap bytes,
    disk bytes since start; appended and flushed by the writer."""

    def __init__(self, writer: MeasurementWriter | None, spec: RunSpec, sampler, device: str | None,
                 swap_dirs: list[Path], gc_clock: probes.GcClock | None = None,
                 on_step: Callable[[StepRecord], None] | None = None,
                 gate: SignalGate | None = None):
        self.writer, self.spec, self.sampler, self.device = writer, spec, sampler, device
        self.gc_clock, self.on_step = gc_clock, on_step
        self.gate = gate or SignalGate()
        self.swap_dirs = swap_dirs
        self.disk0 = probes.disk_bytes(device)
        self.steps_done = 0
        self.tokens = spec.micro_batch * spec.seq * spec.grad_accum * spec.world_size

    def __call__(self, step: int, wall: float, loss_t, phases: dict) -> None:
        gc_time = self.gc_clock.take() if self.gc_clock else {}   # the step's, not this bookkeeping's
        loss = float(loss_t)
        alloc, reserved = gpu_peaks(reset=True)
        disk = probes.disk_bytes(self.device)
        rec = StepRecord(
            step=step, wall_s=wall, timing="synchronised" if self.spec.breakdown else "wall",
            loss=loss, tokens=self.tokens, gpu_max_allocated_bytes=alloc,
            gpu_max_reserved_bytes=reserved, host_rss_bytes=self.sampler.rss_bytes(),
            swap_bytes=sum(probes.dir_bytes(d) for d in self.swap_dirs) if self.swap_dirs else None,
            disk_read_bytes=disk[0] - self.disk0[0] if disk and self.disk0 else None,
            disk_written_bytes=disk[1] - self.disk0[1] if disk and self.disk0 else None,
            time_unix=time.time(), **gc_time, **phases)
        with self.gate.hold():     # the step is in steps.jsonl and the summary, or in neither
            if self.writer is not None:
                self.writer.append(rec)        # a full disk: DiskFull, the step not counted
            self.steps_done += 1
        if self.on_step is not None:
            self.on_step(rec)


# ----------------------------------------------------------------------------------------------
# one run

class SignalGate:
    """SIGINT/SIGTERM -> RunInterrupted, except while held: then the signal waits (kept, not
    lost) and is raised on release. Held while a step is written (it is in steps.jsonl and the
    summary, or in neither) and while the record is opened (a signal then finds one to close)."""

    def __init__(self, held: bool = False):
        self.held, self.pending, self.raised = held, 0, False

    def handler(self, signum, frame) -> None:
        if self.held or self.raised:     # once raised, a second signal (`compare` forwarding
            self.pending = self.pending or signum   # the Ctrl-C the worker got) is not raised
            return                                  # again while the record is closed
        self.raised = True
        raise RunInterrupted(signum)

    def release(self) -> None:
        self.held = False
        if self.pending and not self.raised:
            self.raised = True
            signum, self.pending = self.pending, 0
            raise RunInterrupted(signum)

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        self.held = True
        try:
            yield
        finally:
            self.held = False
        self.release()


def _install_signal_handlers(gate: SignalGate) -> dict:
    old = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, gate.handler)
    except ValueError:            # not the main thread: leave signals alone
        pass
    return old


def _ignore_signals() -> None:
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
    except ValueError:
        pass


def _restore_signal_handlers(old: dict) -> None:
    for sig, h in old.items():
        signal.signal(sig, h)


def setup_engine(spec: RunSpec, local_rank: int = 0):
    """deepspeed.initialize on a freshly built model; returns (engine, n_params). The ops it
    loads that this machine has not built yet are built first, said on stderr (runner.jit_ops)."""
    import deepspeed

    from tierlab.profiles.schema import Model
    from tierlab.runner import jit_ops
    from tierlab.runner.model import build_model, count_params

    jit_ops.build_missing(jit_ops.builders(jit_ops.ops_needed(spec.ds_config)),
                          say=jit_ops.say_stderr if local_rank == 0 else lambda text: None)
    deepspeed.init_distributed()
    net = build_model(Model(**spec.model), ds_config=spec.ds_config, precision=spec.precision,
                      model_path=spec.model_path, checkpointing=spec.checkpointing,
                      seed=spec.seed, seq_len=spec.seq)
    n_params = count_params(net)
    engine, *_ = deepspeed.initialize(model=net, config=dict(spec.ds_config),
                                      model_parameters=[p for p in net.parameters()
                                                        if p.requires_grad])
    return engine, n_params


def make_spec_batches(spec: RunSpec) -> Iterator:
    from tierlab.runner.data import make_batches

    return make_batches(vocab=spec.model["vocab"], micro_batch=spec.micro_batch, seq=spec.seq,
                        dataset=spec.dataset, tokenizer=spec.tokenizer,
                        seed=spec.seed + int(os.environ.get("RANK", "0")))


def check_swap_root(path: str | Path) -> None:
    """Refuse (ConfigError) a swap root that another local user could have planted: a symlink,
    a folder owned by someone other than this user or root, or one anyone may write in without
    the sticky bit (/var/tmp/tierlab-swap is a fixed name in a world-writable folder: whoever
    makes it first owns it, and could swap this run's folder for theirs). A root not there yet
    is fine: own_swap makes it, mode 0700."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise ConfigError(f"--swap-dir / nvme_path {path}: cannot read it: {e.strerror or e}"
                          ) from None
    why = ("is a symlink" if stat.S_ISLNK(st.st_mode)
           else f"is owned by another user (uid {st.st_uid})" if st.st_uid not in (os.geteuid(), 0)
           else "is writable by every user (no sticky bit)"
           if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX else "")
    if why:
        raise ConfigError(f"--swap-dir / nvme_path {path}: {why}, so another user could read or "
                          "replace the swap files; pass --swap-dir DIR (a folder of your own)")


def own_swap(ds_config: dict) -> tuple[dict, list[Path]]:
    """(a copy of `ds_config` whose every NVMe `nvme_path` is a new folder of this process's
    own inside the given one, those folders). The folder is made by mkdtemp (a unique name,
    mode 0700): two runs sharing a --swap-dir never see, nor delete, each other's swap files,
    and nothing another user planted there is used. The given root is checked first
    (check_swap_root) and, when this run makes it, made mode 0700. A nvme_path that is a file:
    ConfigError."""
    cfg = copy.deepcopy(ds_config)
    zero = cfg.get("zero_optimization") or {}
    made: dict[str, Path] = {}
    for key in ("offload_param", "offload_optimizer"):
        block = zero.get(key)
        if not (isinstance(block, dict) and block.get("device") == "nvme"
                and block.get("nvme_path")):
            continue
        given = str(block["nvme_path"])
        if given not in made:
            made[given] = _own_folder(Path(given))
        block["nvme_path"] = str(made[given])
    return cfg, list(made.values())


def _own_folder(base: Path) -> Path:
    """A new mode-0700 folder of this run's inside the swap root `base` (made 0700 if new)."""
    check_swap_root(base)
    if os.path.lexists(base) and not base.is_dir():
        raise ConfigError(f"--swap-dir / nvme_path {base}: is a file, not a folder")
    try:
        if not os.path.lexists(base):
            base.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):     # another process made it just now
                base.mkdir(mode=0o700)                     # only this user may enter it
        check_swap_root(base)           # again: whoever made it, it is still one of ours
        return Path(tempfile.mkdtemp(prefix="tierlab-run-", dir=base))
    except OSError as e:
        raise ConfigError(f"--swap-dir / nvme_path {base}: cannot create a folder in it: "
                          f"{e.strerror or e}") from None


def remove_swap(folders: list[Path]) -> list[str]:
    """Remove the swap folders this run made (own_swap), and nothing else: a folder that is
    now a symlink is left alone (rmtree never follows one)."""
    removed = []
    for d in folders:
        if d.is_dir() and not d.is_symlink():
            shutil.rmtree(d, ignore_errors=True)
            removed.append(str(d))
    return removed


def _swap_free(ds_config: dict) -> dict:
    out = {}
    for p in dsc.swap_paths(ds_config):
        try:
            out[p] = shutil.disk_usage(p).free
        except OSError:
            out[p] = None
    return out


PROBE_BEFORE_INIT = "before deepspeed.initialize"


def host_speed(cuda: bool) -> dict:
    """This host's module-call time, measured in the training process before
    deepspeed.initialize (runner/calibrate.py module_call_time, ~0.1 s), as `tierlab calibrate`
    measures it: a recorded host fact. It is not a model input: over five H200 machines it did
    not track step time, and in one machine's runs it read 16-28 us (lab/cases/README.md).
    After a ZeRO-3 initialize the same probe reads 2.5-5x slower (DeepSpeed wraps every Linear)."""
    from tierlab.runner.microbench import module_call_time

    points = module_call_time(cuda, repeats=3, calls=2000)
    return {"module_call_s": min(p["seconds_per_call"] for p in points),
            "module_call_source": "tierlab run: hooked 64x64 nn.Linear forward, fastest of 3 x "
                                  f"{points[0]['calls']} calls, {PROBE_BEFORE_INIT}"}


def run(spec: RunSpec, on_step: Callable[[StepRecord], None] | None = None, *,
        setup: Callable[[RunSpec, int], tuple[Any, int]] | None = None,
        speed: Callable[[bool], dict] | None = None) -> Measurement:
    """Train per `spec` in this process and return the closed Measurement (never raises for a
    training fault: OOM, DeepSpeed assertion, disk full and SIGINT/SIGTERM become a status).
    `on_step(record)` is called after each step is written (a progress bar's update).
    `setup(spec, local_rank) -> (engine, n_params)` builds the engine (`setup_engine`: the model
    under deepspeed.initialize) and `speed(cuda)` probes the host first (`host_speed`); a caller
    may pass its own (a test stands in for DeepSpeed's engine so)."""
    from tierlab.runner.launch import ensure_dist_env

    ensure_dist_env()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    out_dir = Path(spec.out_dir) if rank == 0 else Path(spec.out_dir) / f"rank{rank}"
    paths = dsc.swap_paths(spec.ds_config)
    device = probes.block_device(paths[0]) if paths else None
    own_cfg, own = own_swap(spec.ds_config)       # this run's own swap folders
    m = Measurement(run_id=new_run_id(), model=dict(spec.model), ds_config=spec.ds_config,
                    run={k: v for k, v in asdict(spec).items() if k not in ("model", "ds_config")},
                    versions=probes.library_versions(), host=probes.host_facts(paths),
                    started_unix=time.time())
    m.run["swap_device"] = device
    gate = SignalGate(held=True)      # a signal from here on finds a record to close
    old = _install_signal_handlers(gate)
    try:
        writer = MeasurementWriter(out_dir, m)
    except BaseException as exc:
        _restore_signal_handlers(old)
        remove_swap(own)
        if isinstance(exc, OSError):        # a full or read-only --out: nothing to close yet
            raise ConfigError(f"--out {out_dir}: cannot write the measurement: "
                              f"{exc.strerror or exc}") from None
        raise
    spec = replace(spec, ds_config=own_cfg)      # DeepSpeed swaps into the run's own folders
    cuda = _cuda()
    sampler = probes.Sampler(gpu_index=local_rank if cuda else None, swap_device=device).start()
    gc_clock = probes.GcClock()
    recorder = _Recorder(writer, spec, sampler, device, dsc.swap_dirs(spec.ds_config), gc_clock,
                         on_step, gate)
    status, kind, reason = "ok", "", ""
    try:
        gate.release()
        applied = apply_gpu_mem_cap(spec.gpu_mem_cap_bytes, local_rank)
        if cuda is not None:
            cuda.set_device(local_rank)
        probed = (speed or host_speed)(cuda is not None)
        setup = setup or (setup_engine if spec.engine == "deepspeed" else setup_fsdp2)
        engine, n_params = setup(spec, local_rank)
        writer.update_header(run={**m.run, **applied, **_engine_record(engine),
                                  "n_params": n_params,
                                  "init_s": time.time() - m.started_unix},
                             host={**m.host, **probed})
        gc_clock.start()
        train_steps(engine, make_spec_batches(spec), steps=spec.steps,
                    grad_accum=spec.grad_accum, breakdown=spec.breakdown, on_step=recorder)
    except BaseException as exc:  # noqa: BLE001 - every fault becomes a status
        status, kind, reason = classify(exc, recorder.steps_done, _swap_free(spec.ds_config))
        log.debug("run ended by %r", exc, exc_info=True)
        if kind == "error":
            traceback.print_exc()
    finally:
        _ignore_signals()          # a second Ctrl-C must not cut the record short
        gc_clock.stop()
        samples = sampler.stop()
        if not spec.keep_swap:
            m.run["swap_removed"] = remove_swap(own)
    closed = _close(writer, status, reason, kind, samples, spec.warmup_steps)
    _restore_signal_handlers(old)
    return closed


def _engine_record(engine) -> dict:
    """What an engine says it ran (runner.fsdp2.Fsdp2Engine.record); {} for DeepSpeed's."""
    record = getattr(engine, "record", None)
    return record if isinstance(record, dict) else {}


def _close(writer: MeasurementWriter, status, reason, kind, samples, warmup_steps) -> Measurement:
    """writer.close; a disk still too full for the closing record even with the writer's
    reserve given back leaves measurement.json at "running" (its steps kept): said, not raised."""
    try:
        return writer.close(status, reason, kind, samples=samples, warmup_steps=warmup_steps)
    except DiskFull as e:
        log.error("could not close the record: %s", e)
        return writer.m


EXIT_CODES = {"ok": 0, "failed": 1, "interrupted": 130}
"""Exit code by status; an interrupted run exits 128 + its signal (`exit_code`)."""


def exit_code(m: Measurement) -> int:
    """0 ok, 1 failed, 128 + signal number for a run a signal stopped (130 SIGINT, 143 SIGTERM):
    the signal is the one `classify` wrote into the reason ("received SIGTERM after 3 steps")."""
    if m.status == "interrupted":
        for word in m.reason.split():
            if word in signal.Signals.__members__:
                return 128 + signal.Signals[word]
    return EXIT_CODES.get(m.status, 1)


def main(argv: list[str] | None = None) -> int:
    """Worker: `python -m tierlab.runner.train --spec FILE` (DeepSpeed's launcher adds
    --local_rank)."""
    ap = argparse.ArgumentParser(description="tierlab runner worker (one rank)")
    ap.add_argument("--spec", required=True, help="RunSpec JSON file")
    ap.add_argument("--local_rank", "--local-rank", type=int, default=None,
                    help="set by DeepSpeed's launcher")
    args = ap.parse_args(argv)
    if args.local_rank is not None:
        os.environ.setdefault("LOCAL_RANK", str(args.local_rank))
    spec = RunSpec.from_json(Path(args.spec).read_text())
    try:
        m = run(spec)
    except ConfigError as e:            # refused before training (swap root, --out): one line
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"tierlab run: {m.status} {m.reason}".rstrip(), file=sys.stderr)
    return exit_code(m)


if __name__ == "__main__":
    sys.exit(main())
