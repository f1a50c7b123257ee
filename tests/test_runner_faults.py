"""Issue 34: the runner's remaining faults. A Mixture-of-Experts model is refused, not trained
as a dense Llama; a full --out disk closes the record as failed ("disk full ...") with its
steps; a swap root another user could have planted is refused; a first JIT build of a
DeepSpeed op is said before and after.

Real files, a real tmpfs filled for real (root only, else skipped), the real CLI and
runner.train.run with only DeepSpeed's engine stood in for (tests/_fastengine.py)."""
from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

from _cli import assert_user_error, run as cli
from _fastengine import setup_engine as fast_engine
from _runnerhelp import REPO, mini_llama
from tierlab.errors import ConfigError
from tierlab.records.measurement import MeasurementWriter, Measurement, load_measurement
from tierlab.runner import ds_config as dsc
from tierlab.runner import jit_ops, train
from tierlab.runner.variants import RunnerOptions, runner_scenario, runner_spec

HF = REPO / "tests" / "data" / "hf_configs"
FAST = {"setup_engine": fast_engine}
MINI = mini_llama("mini-llama-faults")


@pytest.fixture
def mini(tmp_path) -> str:
    path = tmp_path / "mini.yaml"
    path.write_text(MINI)
    return str(path)


def _scenario(model: str, config: str = "no-offload") -> dict:
    return {"model": model, "ds_config": config, "overrides": (),
            "gpus": None, "nodes": None, "micro_batch": 1, "grad_accum": None, "seq": None,
            "checkpointing": None, "precision": None}


def _spec(model: str, out: Path, config: str = "no-offload", steps: int = 3, **opts):
    ro = RunnerOptions(steps=steps, warmup_steps=1, **opts)
    return runner_spec(runner_scenario(_scenario(model, config), ro), ro, out, "faults")


# ----------------------------------------------------------------------------------------------
# 1. Mixture-of-Experts models are refused by both verbs

@pytest.mark.parametrize("config, name", [("mixtral-8x7b.json", "mixtral-8x7b"),
                                          ("qwen1.5-moe-a2.7b.json", "qwen1.5-moe-a2.7b"),
                                          ("deepseek-v2.5.json", "deepseek-v2.5")])
def test_run_refuses_a_moe_model_and_writes_nothing(tmp_path, config, name):
    out = tmp_path / "out"
    res = cli("run", "-m", str(HF / config), "--out", str(out), "--no-progress", obj=FAST)
    assert_user_error(res, f"model {name}", "Mixture-of-Experts",
                      "the runner trains dense decoder models", "simulate, memory and plan")
    assert not out.exists() and not list(tmp_path.iterdir())


def test_compare_refuses_a_moe_model_and_writes_nothing(tmp_path):
    out = tmp_path / "cmp"
    res = cli("compare", "-m", str(HF / "mixtral-8x7b.json"), "--variants", "no-offload",
              "--out", str(out), obj=FAST)
    assert_user_error(res, "model mixtral-8x7b", "Mixture-of-Experts", "dense decoder models")
    assert not out.exists()


def test_a_dense_model_still_gets_its_spec(mini, tmp_path):
    spec = _spec(mini, tmp_path / "m")
    assert spec.model["moe"] is None and spec.model["name"] == "mini-llama-faults"


# ----------------------------------------------------------------------------------------------
# 2. a full --out disk: the record is closed as failed with the steps written before

@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs (a real filesystem that fills); skipped where mounting is not allowed."""
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs",
                               str(disk)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"cannot mount a tmpfs to fill: {e}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root): {done.stderr.strip()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False, timeout=30)


def _fill(disk: Path) -> None:
    """Write a ballast file on `disk` until the filesystem says ENOSPC."""
    with open(disk / "ballast", "wb", buffering=0) as f:
        for chunk in (1 << 16, 1 << 12, 1 << 8, 1):
            try:
                while True:
                    f.write(b"\xff" * chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC


@pytest.fixture
def fast_steps(monkeypatch):
    monkeypatch.setenv("TIERLAB_TEST_STEP_S", "0.02")
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")


def test_a_full_disk_mid_run_closes_the_record_as_failed(mini, tiny_disk, fast_steps, capfd):
    out = tiny_disk / "m"
    spec = _spec(mini, out, steps=400)

    def fill_after_two(rec):
        if rec.step == 1:
            _fill(tiny_disk)

    m = train.run(spec, fill_after_two, setup=fast_engine, speed=lambda cuda: {})
    assert (m.status, m.failure_kind) == ("failed", "disk_full")
    assert m.reason == (f"disk full: no space left on the device of {out / 'steps.jsonl'} "
                        f"after {len(m.steps)} steps")
    assert "Traceback" not in capfd.readouterr().err
    back = load_measurement(out)
    assert back.status == "failed" and back.reason == m.reason
    assert 2 <= len(back.steps) == len(m.steps) < 400                # the steps written are kept
    assert [s.step for s in back.steps] == list(range(len(back.steps)))
    lines = (out / "steps.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(x) for x in lines[:-1])   # no line cut
    assert json.loads((out / "summary.json").read_text())["failure_kind"] == "disk_full"
    assert sorted(p.name for p in out.iterdir()) == [      # no temp file, reserve given back;
        "measurement.json", "steps.jsonl", "summary.json"]  # the samples dropped, not the header
    assert train.exit_code(m) == 1


def test_a_disk_full_before_the_first_step_is_one_error_line(mini, tiny_disk, fast_steps):
    _fill(tiny_disk)
    with pytest.raises(ConfigError, match="--out .*: cannot write the measurement: No space"):
        train.run(_spec(mini, tiny_disk / "m"), setup=fast_engine, speed=lambda cuda: {})
    assert not [p for p in (tiny_disk / "m").iterdir()]       # no reserve, no half header


def test_the_writer_reserve_is_given_back(tmp_path):
    w = MeasurementWriter(tmp_path / "m", Measurement(run_id="r"))
    assert (tmp_path / "m" / ".reserve").stat().st_size == 128 << 10
    w.close("ok")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == [
        "measurement.json", "steps.jsonl", "summary.json"]


def test_classify_names_the_full_file():
    from tierlab.records.measurement import DiskFull

    status, kind, reason = train.classify(DiskFull("/runs/m/steps.jsonl"), 3)
    assert (status, kind) == ("failed", "disk_full")
    assert reason == "disk full: no space left on the device of /runs/m/steps.jsonl after 3 steps"
    assert train.classify(OSError(28, "No space left on device"), 1)[2].startswith("disk full: ")


# ----------------------------------------------------------------------------------------------
# 3. the swap root: not another user's, not a symlink; made 0700

def _nvme_cfg(path: Path) -> dict:
    return {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme",
                                                                     "nvme_path": str(path)}}}


def test_a_swap_root_tierlab_makes_is_0700(tmp_path):
    root = tmp_path / "new" / "swap"
    cfg, made = train.own_swap(_nvme_cfg(root))
    assert root.stat().st_mode & 0o777 == 0o700
    assert made[0].parent == root and made[0].stat().st_mode & 0o777 == 0o700
    assert dsc.swap_paths(cfg) == [str(made[0])]
    train.remove_swap(made)
    assert root.is_dir() and not made[0].exists()


def test_a_symlinked_swap_root_is_refused(tmp_path, mini):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "swap"
    link.symlink_to(real)
    with pytest.raises(ConfigError, match=f"{link}: is a symlink.*--swap-dir DIR"):
        train.own_swap(_nvme_cfg(link))
    out = tmp_path / "out"
    res = cli("run", "-m", mini, "-c", "zero3-nvme", "--swap-dir", str(link), "--out", str(out),
              "--no-progress", obj=FAST)
    assert_user_error(res, str(link), "is a symlink", "--swap-dir DIR")
    assert not out.exists() and not list(real.iterdir())


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a folder another user owns")
def test_a_swap_root_of_another_user_is_refused_by_run_and_compare(tmp_path, mini):
    theirs = tmp_path / "tierlab-swap"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)             # nobody's, as another local user would make it
    with pytest.raises(ConfigError, match="owned by another user"):
        train.own_swap(_nvme_cfg(theirs))
    for verb in (["run"], ["compare", "--variants", "zero3-nvme"]):
        out = tmp_path / f"out-{verb[0]}"
        res = cli(*verb, "-m", mini, "-c", "zero3-nvme", "--swap-dir", str(theirs),
                  "--out", str(out), *(["--no-progress"] if verb == ["run"] else []), obj=FAST)
        assert_user_error(res, f"--swap-dir / nvme_path {theirs}", "owned by another user "
                          "(uid 65534)", "pass --swap-dir DIR")
        assert not out.exists()
    assert not list(theirs.iterdir())          # nothing of this run's went in


def test_a_world_writable_swap_root_without_sticky_bit_is_refused(tmp_path):
    root = tmp_path / "open"
    root.mkdir()
    root.chmod(0o777)
    with pytest.raises(ConfigError, match="writable by every user"):
        train.check_swap_root(root)
    root.chmod(0o1777)                         # /var/tmp's own mode: sticky, so fine
    train.check_swap_root(root)


# ----------------------------------------------------------------------------------------------
# 4. a first JIT build of a DeepSpeed op is said before and after

def test_op_built_reads_the_build_folder(tmp_path):
    folder = tmp_path / "cpu_adam"
    folder.mkdir()
    assert not jit_ops.op_built(folder, "cpu_adam")
    (folder / "cpu_adam.o").write_bytes(b"")
    assert not jit_ops.op_built(folder, "cpu_adam")          # objects, no library yet
    (folder / "cpu_adam.so").write_bytes(b"")
    assert jit_ops.op_built(folder, "cpu_adam")
    (folder / "build.ninja").write_bytes(b"")
    os.utime(folder / "cpu_adam.so", (1e9, 1e9))
    assert not jit_ops.op_built(folder, "cpu_adam")          # older than its build file
    os.utime(folder / "build.ninja", (1e9 - 1, 1e9 - 1))
    assert jit_ops.op_built(folder, "cpu_adam")
    (folder / "lock").write_bytes(b"")
    assert not jit_ops.op_built(folder, "cpu_adam")          # a build holds the folder
    assert not jit_ops.op_built(tmp_path / "missing", "cpu_adam")


def test_the_ops_each_preset_loads(mini, tmp_path):
    def ops(config):
        return jit_ops.ops_needed(_spec(mini, tmp_path / config, config).ds_config)

    assert ops("no-offload") == ["deepspeed_shm_comm", "fused_adam"]
    assert ops("zero3-cpu") == ["deepspeed_shm_comm", "cpu_adam"]
    assert ops("zero3-nvme") == ["deepspeed_shm_comm", "cpu_adam", "async_io"]


class _Op:
    """An op builder's two members build_missing uses; load() 'builds' it in `folder`."""

    def __init__(self, name: str, folder: Path):
        self.name, self.folder, self.loads = name, folder, 0

    def load(self, verbose=False):
        self.folder.mkdir(exist_ok=True)
        (self.folder / f"{self.name}.so").write_bytes(b"")
        self.loads += 1


def test_a_build_not_cached_is_said_before_and_after(tmp_path):
    op, said, ticks = _Op("async_io", tmp_path / "async_io"), [], iter([10.0, 137.4])
    cached = lambda o: jit_ops.op_built(o.folder, o.name)      # noqa: E731
    took = jit_ops.build_missing([op], say=said.append, is_cached=cached, clock=lambda: next(ticks))
    assert said == ["building DeepSpeed's async_io op (first use on this machine; about 2 min) ...",
                    "built async_io in 127 s"]
    assert took == {"async_io": pytest.approx(127.4)} and op.loads == 1
    said.clear()
    assert jit_ops.build_missing([op], say=said.append, is_cached=cached) == {}
    assert said == [] and op.loads == 1                        # built: left to DeepSpeed


def test_cached_looks_in_torchs_extension_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    (op,) = jit_ops.builders(["cpu_adam"])
    assert op.name == "cpu_adam" and not jit_ops.cached(op)
    folder = tmp_path / "cpu_adam"            # $TORCH_EXTENSIONS_DIR/<op> (no <py_cu_tag>)
    assert folder.is_dir() and not list(folder.iterdir())
    (folder / "cpu_adam.so").write_bytes(b"")
    assert jit_ops.cached(op)


def test_a_stale_lock_under_torch_extensions_dir_is_found(tmp_path):
    from tierlab.runner.preflight import stale_build_locks

    for lock in (tmp_path / "async_io" / "lock", tmp_path / "py311_cpu" / "cpu_adam" / "lock"):
        lock.parent.mkdir(parents=True)
        lock.write_bytes(b"")
        os.utime(lock, (1e9, 1e9))            # 2001: no live build holds it
    assert sorted(p.parent.name for p in stale_build_locks(tmp_path)) == ["async_io", "cpu_adam"]


def test_a_record_left_open_by_a_dead_worker_is_reopened_and_closed(tmp_path):
    """compare closes the record of a worker that died before closing it (OOM-killed, a
    timeout): MeasurementWriter.reopen keeps the steps already on disk and closes it failed."""
    from tierlab.records.measurement import StepRecord

    out = tmp_path / "v"
    w = MeasurementWriter(out, Measurement(run_id="dead"))
    for i in range(3):
        w.append(StepRecord(step=i, wall_s=1.0, timing="wall", loss=10.0, tokens=64))
    # the worker dies here: no close
    m = load_measurement(out)
    assert m.status == "running" and len(m.steps) == 3
    closed = MeasurementWriter.reopen(out, m).close("failed", "worker exited with code -9",
                                                    "oom", warmup_steps=1)
    again = load_measurement(out)
    assert closed.status == again.status == "failed" and again.failure_kind == "oom"
    assert len(again.steps) == 3 and again.summary["step_time_s"]["n"] == 2
    assert (out / "steps.jsonl").read_text().count("\n") == 3


def test_a_stale_lock_is_refused_before_any_load_would_wait_on_it(tmp_path, monkeypatch):
    """A build killed mid-way leaves `<op>/lock`; torch's load then waits forever (a CI run hung
    90 min on one). build_missing and calibrate's load_aio refuse it first, naming the file."""
    from tierlab.runner.calibrate import load_aio

    lock = tmp_path / "async_io" / "lock"
    lock.parent.mkdir()
    lock.write_bytes(b"")
    os.utime(lock, (1e9, 1e9))
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    op = _Op("async_io", tmp_path / "async_io")
    with pytest.raises(ConfigError, match=f"rm {lock}"):
        jit_ops.build_missing([op], say=lambda _: None, is_cached=lambda _: False)
    assert op.loads == 0
    with pytest.raises(ConfigError, match="async_io op with no live builder"):
        load_aio()
