"""Issue 16: bad input never crashes and nothing is ever lost.

Hypothesis strategies generate CLI arguments, ds_configs, model and hardware profiles, raw
calibration records and measurement folders (valid, mutated, truncated, wrong-typed, non-UTF-8)
for every verb that reads them, and every case must: exit 0 or 2 (plan: 1 = nothing fits), print
no traceback, say what is wrong in exactly one `error:` line, and leave no half-written or
stray temp file. Deterministic (derandomize=True) and bounded, so it stays within CI's minute.
Signal tests: a sweep stopped by SIGTERM (and one killed by SIGKILL) resumes without losing or
recomputing a row; two sweeps on one file: the second refuses, the first keeps every row.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlab.cli import main

ROOT = Path(__file__).resolve().parent.parent
CASE = ROOT / "lab" / "cases" / "h200x2" / "c-tinyllama-noofl"
RAW = ROOT / "lab" / "cases" / "h200x2" / "calibrate-raw.json"
TINY = ROOT / "runner" / "data" / "tiny-llama.yaml"
SYSTEM = ROOT / "profiles" / "hardware" / "systems" / "workstation-rtx3070.yaml"
PRESETS = sorted((ROOT / "profiles" / "configs").glob("*.json"))

CASES = {"n": 0}


def fuzz(n: int):
    """Hypothesis settings for a bounded, reproducible fuzz test of `n` examples."""
    return settings(max_examples=n, derandomize=True, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    yield
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            tr.write_line(f"\ntest_fuzz_cli: {CASES['n']} fuzz cases ran")


def _stray(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob("*") if ".tmp" in p.name or p.name.startswith(".tierlab")]


def check(args: list[str], folder: Path | None = None, ok=(0, 2)) -> object:
    """Run one CLI case and assert the contract; returns the click Result."""
    CASES["n"] += 1
    r = CliRunner().invoke(main, [str(a) for a in args])
    text = r.output
    assert not (r.exception and not isinstance(r.exception, SystemExit)), \
        f"{args}: {type(r.exception).__name__}: {r.exception}\n{text}"
    assert "Traceback" not in text, f"{args}\n{text}"
    assert r.exit_code in ok, f"{args}: exit {r.exit_code}\n{text}"
    errors = [line for line in text.splitlines() if line.lower().startswith("error")]
    if r.exit_code == 2:
        assert len(errors) == 1, f"{args}: {len(errors)} error lines\n{text}"
    if folder is not None:
        assert not _stray(folder), f"{args}: stray files {_stray(folder)}"
    return r


# ----------------------------------------------------------------------------------------------
# values and mutations

ODD_VALUES = [None, True, False, 0, -1, 1, 3, 2**70, 1.5, -0.0, "auto", "", "x", "cpu", "nvme",
              [], [1], {}, {"enabled": True}, "1e400", "NaN"]
odd_value = st.sampled_from(ODD_VALUES)
RAW_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"]


def _paths(obj, prefix=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))


def mutate(doc, rnd: random.Random, n: int):
    """`n` random edits of a JSON-like document: set a key to an odd value, delete one, add an
    unknown one."""
    doc = json.loads(json.dumps(doc))
    for _ in range(n):
        paths = list(_paths(doc))
        if not paths:
            break
        path = rnd.choice(paths)
        node = doc
        for k in path[:-1]:
            node = node[k]
        op = rnd.random()
        if op < 0.6:
            node[path[-1]] = rnd.choice(ODD_VALUES)
        elif op < 0.8:
            del node[path[-1]]
        else:
            node[path[-1] + "_typo"] = rnd.choice(ODD_VALUES)
    return doc


def damage(data: bytes, how: str, rnd: random.Random) -> bytes:
    """valid / truncated / non-UTF-8 / a raw non-finite number / empty bytes."""
    if how == "truncated" and data:
        return data[:rnd.randrange(len(data))]
    if how == "non-utf8" and data:
        i = rnd.randrange(len(data))
        return data[:i] + rnd.choice([b"\xff", b"\xfe\xfe", b"\xe9", b"\xc3\x28"]) + data[i:]
    if how == "non-finite":
        for token in (b": 1.0", b": 1e8", b": 1e5", b": 5e8", b": 4", b": 2"):
            if token in data:
                return data.replace(token, b": " + rnd.choice(RAW_NUMBERS).encode(), 1)
    if how == "empty":
        return b""
    return data


damage_kind = st.sampled_from(["valid", "truncated", "non-utf8", "non-finite", "empty", "mutated",
                               "mutated"])


def _dump(doc, suffix: str) -> bytes:
    import yaml

    if suffix == ".json":
        return json.dumps(doc, indent=1).encode()
    return yaml.safe_dump(doc, sort_keys=False).encode()


def fuzzed_file(tmp: Path, source: Path, kind: str, seed: int, edits: int) -> Path:
    import yaml

    rnd = random.Random(seed)
    data = source.read_bytes()
    if kind == "mutated":
        doc = json.loads(data) if source.suffix == ".json" else yaml.safe_load(data)
        data = _dump(mutate(doc, rnd, edits), source.suffix)
    else:
        data = damage(data, kind, rnd)
    path = tmp / f"fuzz-{seed}{source.suffix}"
    path.write_bytes(data)
    return path


# ----------------------------------------------------------------------------------------------
# ds_config, model and hardware files through every verb that reads them

@pytest.mark.lab
@fuzz(60)
@given(preset=st.sampled_from(PRESETS), kind=damage_kind, seed=st.integers(0, 10**6),
       edits=st.integers(1, 4), verb=st.sampled_from(["simulate", "memory", "preflight"]))
def test_ds_config_files(tmp_path_factory, preset, kind, seed, edits, verb):
    tmp = tmp_path_factory.mktemp("ds")
    path = fuzzed_file(tmp, preset, kind, seed, edits)
    extra = ["--no-probe"] if verb == "preflight" else []
    check([verb, "-c", path, "-m", TINY, *extra], tmp)


@pytest.mark.lab
@fuzz(40)
@given(kind=damage_kind, seed=st.integers(0, 10**6), edits=st.integers(1, 3),
       verb=st.sampled_from(["simulate", "memory"]))
def test_model_files(tmp_path_factory, kind, seed, edits, verb):
    tmp = tmp_path_factory.mktemp("model")
    path = fuzzed_file(tmp, TINY, kind, seed, edits)
    check([verb, "-m", path, "-c", "zero3-cpu"], tmp)


@pytest.mark.lab
@fuzz(40)
@given(kind=damage_kind, seed=st.integers(0, 10**6), edits=st.integers(1, 3))
def test_hardware_files(tmp_path_factory, kind, seed, edits):
    tmp = tmp_path_factory.mktemp("hw")
    path = fuzzed_file(tmp, SYSTEM, kind, seed, edits)
    check(["simulate", "-H", path, "-c", "zero3-nvme", "-m", TINY], tmp)


SET_KEYS = ["bf16", "fp16", "bf16.enabled", "zero_optimization", "zero_optimization.stage",
            "zero_optimization.sub_group_size", "zero_optimization.offload_param",
            "zero_optimization.offload_param.device", "zero_optimization.offload_optimizer.device",
            "zero_optimization.offload_optimizer.buffer_count", "zero_optimization.overlap_comm",
            "zero_optimization.reduce_bucket_size", "zero_optimization.offload_param.buffer_size",
            "zero_optimization.offload_param.max_in_cpu", "zero_optimization.offload_optimizer.ratio",
            "aio", "aio.block_size", "aio.queue_depth", "aio.intra_op_parallelism",
            "gradient_clipping", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
            "train_batch_size", "optimizer", "zero_optimization.stage3_max_live_parameters"]
SET_VALUES = ["0", "-1", "1", "3", "5", "1e8", "1e400", "NaN", "nan", "Infinity", "-inf", "true",
              "false", "null", "\"auto\"", "auto", "cpu", "nvme", "{}", "[]", "[1]", "1.5",
              "{\"enabled\": 1}", "99999999999999999999999", "", "{\"a\": NaN}"]


@pytest.mark.lab
@fuzz(80)
@given(sets=st.lists(st.tuples(st.sampled_from(SET_KEYS), st.sampled_from(SET_VALUES)),
                     min_size=1, max_size=3),
       config=st.sampled_from(["zero3-cpu", "zero3-nvme", "zero2-cpu", "no-offload"]),
       verb=st.sampled_from(["simulate", "memory"]))
def test_set_overrides(sets, config, verb):
    args = [verb, "-c", config, "-m", TINY]
    for key, value in sets:
        args += ["--set", f"{key}={value}"]
    check(args)


INTS = st.sampled_from(["0", "-1", "1", "2", "3", "64", "10000000", "abc", "1.5", ""])
CAPS = st.sampled_from(["8g", "8G", "8GiB", "8 gb", "inf", "nan", "-1", "0", "1e400", "8XB", "x",
                        "8k", "1e9", "  "])


@pytest.mark.lab
@fuzz(40)
@given(opts=st.lists(st.tuples(st.sampled_from(["--gpus", "--nodes", "--micro-batch",
                                                "--grad-accum", "--seq"]), INTS), max_size=3),
       cap=st.none() | CAPS, verb=st.sampled_from(["simulate", "memory"]))
def test_numeric_options(opts, cap, verb):
    args = [verb, "-c", "zero3-cpu", "-m", TINY]
    for flag, value in opts:
        if flag == "--grad-accum" and value == "10000000":
            value = "64"      # the simulator steps every micro-step: 10M of them take hours
        args += [flag, value]
    if cap is not None:
        args += ["--gpu-mem-cap", cap]
    check(args)


# ----------------------------------------------------------------------------------------------
# sweep --vary values

VARY_KEYS = ["micro_batch", "seq", "gpus", "zero_optimization.sub_group_size", "aio.block_size",
             "nvme.drives", "nvme.read_bandwidth", "cpu.cores", "model.n_layers", "precision",
             "checkpointing", "config", "gpu.hbm", "zero_optimization.stage", "bogus.key"]
VARY_VALUES = ["1", "2", "0", "-1", "1e8", "1e400", "NaN", "inf", "x", "true", "1..3", "1..0",
               "3GB/s", "8GiB", "zero3-cpu", "bf16", "1..64:x2", ""]


@pytest.mark.lab
@fuzz(30)
@given(key=st.sampled_from(VARY_KEYS), values=st.lists(st.sampled_from(VARY_VALUES), min_size=1,
                                                       max_size=3))
def test_sweep_vary(tmp_path_factory, key, values):
    tmp = tmp_path_factory.mktemp("sweep")
    out = tmp / "rows.csv"
    check(["sweep", "-c", "zero3-cpu", "-m", TINY, "--no-progress", "-j", "1", "--vary",
           f"{key}={','.join(values)}", "--out", out], tmp)
    if out.exists():
        import pandas as pd

        assert "point_id" in pd.read_csv(out).columns


# ----------------------------------------------------------------------------------------------
# measurement folders and raw records

def _mutate_measurement(d: Path, part: str, kind: str, rnd: random.Random) -> None:
    name = {"head": "measurement.json", "steps": "steps.jsonl", "samples": "samples.jsonl",
            "summary": "summary.json"}[part]
    path = d / name
    data = path.read_bytes()
    if kind == "mutated" and part in ("head", "summary"):
        path.write_bytes(_dump(mutate(json.loads(data), rnd, 3), ".json"))
    elif kind == "mutated":
        lines = data.decode().splitlines()
        i = rnd.randrange(len(lines))
        rec = json.loads(lines[i])
        key = rnd.choice(sorted(rec))
        rec[key] = rnd.choice(ODD_VALUES)
        lines[i] = json.dumps(rec)
        path.write_text("\n".join(lines) + "\n")
    else:
        path.write_bytes(damage(data, kind, rnd))


@pytest.mark.lab
@fuzz(14)
@given(part=st.sampled_from(["head", "steps", "samples", "summary"]), kind=damage_kind,
       seed=st.integers(0, 10**6), verb=st.sampled_from(["validate", "plot"]))
def test_measurements(tmp_path_factory, part, kind, seed, verb):
    tmp = tmp_path_factory.mktemp("meas")
    d = tmp / "runs" / "case"
    shutil.copytree(CASE, d, ignore=shutil.ignore_patterns("*.png", "*.log", "compare.*"))
    _mutate_measurement(d, part, kind, random.Random(seed))
    if verb == "validate":
        check(["validate", d, "-H", "h200x2-host", "--out", tmp / "out"], tmp)
    else:
        check(["plot", "timeline", "-c", "zero3-cpu", "-m", TINY, "--measurement", d, "-o",
               tmp / "t.png"], tmp)


@pytest.mark.lab
@fuzz(30)
@given(kind=damage_kind, seed=st.integers(0, 10**6), edits=st.integers(1, 4))
def test_raw_records(tmp_path_factory, kind, seed, edits):
    tmp = tmp_path_factory.mktemp("raw")
    path = fuzzed_file(tmp, RAW, kind, seed, edits)
    check(["calibrate", "--from-raw", path, "--out", tmp / "prof" / "fuzz.yaml"], tmp)


# ----------------------------------------------------------------------------------------------
# output paths: refused up front, never a traceback, never a stray temp file

def _bad_out(tmp: Path, which: str, suffix: str) -> str:
    (tmp / "afile").write_text("x")
    (tmp / "adir").mkdir(exist_ok=True)
    return {"dir": str(tmp / "adir"), "under-file": str(tmp / "afile" / f"x{suffix}"),
            "proc": f"/proc/tierlab-fuzz{suffix}", "nested": str(tmp / "a" / "b" / f"x{suffix}"),
            "jpeg": str(tmp / "x.jpeg"), "empty": ""}[which]


@pytest.mark.lab
@fuzz(36)
@given(which=st.sampled_from(["dir", "under-file", "proc", "nested", "jpeg", "empty"]),
       verb=st.sampled_from(["trace", "plan", "plot", "sweep", "validate", "from-raw"]))
def test_output_paths(tmp_path_factory, which, verb):
    tmp = tmp_path_factory.mktemp("out")
    suffix = {"trace": ".json", "plan": ".json", "plot": ".png", "sweep": ".csv",
              "validate": "", "from-raw": ".yaml"}[verb]
    out = _bad_out(tmp, which, suffix)
    args = {"trace": ["simulate", "-c", "zero3-cpu", "-m", TINY, "--trace", out],
            "plan": ["plan", "-m", TINY, "-H", "workstation-rtx3070", "--micro-batch", "1",
                     "--checkpointing", "-o", out],
            "plot": ["plot", "memory", "-c", "zero3-cpu", "-m", TINY, "-o", out],
            "sweep": ["sweep", "-c", "zero3-cpu", "-m", TINY, "--vary", "micro_batch=1,2",
                      "--no-progress", "-j", "1", "--out", out],
            "validate": ["validate", CASE, "-H", "h200x2-host", "--out", out],
            "from-raw": ["calibrate", "--from-raw", RAW, "--out", out]}[verb]
    r = check(args, tmp, ok=(0, 1, 2) if verb == "plan" else (0, 2))
    refused = ("under-file", "proc") + (("dir",) if verb != "validate" else ()) + \
        (("jpeg",) if verb == "plot" else ())
    if which in refused:
        assert r.exit_code == 2, r.output


@pytest.mark.lab
def test_runner_arguments_refused_before_work(tmp_path):
    """Bounds that used to be accepted (or blamed the wrong flag) are one line, before training."""
    cases = [(["run", "--warmup-steps", "-1"], "--warmup-steps"), (["run", "--steps", "0"], "--steps"),
             (["compare", "--timeout", "-5"], "--timeout"), (["compare", "--budget", "0"], "--budget"),
             (["compare", "--timeout", "nan"], "--timeout")]
    for args, flag in cases:
        r = check([*args, "-m", TINY, "--out", tmp_path / "r"])
        assert r.exit_code == 2 and flag in r.output, r.output
    r = check(["validate", CASE, "-H", "h200x2-host", "--max-error", "nan", "--out", tmp_path / "v"])
    assert r.exit_code == 2 and "--max-error" in r.output


@pytest.mark.lab
def test_run_out_onto_a_measurement_refuses(tmp_path):
    d = tmp_path / "old"
    shutil.copytree(CASE, d)
    before = sorted((p.name, p.read_bytes()) for p in d.iterdir())
    r = check(["run", "-m", TINY, "--steps", "2", "--warmup-steps", "1", "--out", d])
    assert r.exit_code == 2 and "--overwrite" in r.output
    assert sorted((p.name, p.read_bytes()) for p in d.iterdir()) == before


@pytest.mark.lab
def test_validate_leaves_out_killed_runs(tmp_path):
    d = tmp_path / "runs" / "killed"
    shutil.copytree(CASE, d)
    head = json.loads((d / "measurement.json").read_text())
    (d / "measurement.json").write_text(json.dumps({**head, "status": "interrupted",
                                                    "failure_kind": "signal"}))
    r = check(["validate", d, "-H", "h200x2-host", "--out", tmp_path / "v", "--json"])
    assert "left out" in r.output and '"oom"' not in r.output


@pytest.mark.lab
def test_preflight_says_what_deepspeed_ignores(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"zero_optimization": {"stage": 2, "offload_param": {
        "device": "cpu"}}, "train_micro_batch_size_per_gpu": 1}))
    r = check(["preflight", "-c", cfg, "-m", TINY, "--no-probe", "--no-memory",
               "--precision", "fp32"])
    assert "ok: no problems found" not in r.output and "warning" in r.output
    # a typo inside zero_optimization is no warning: DeepSpeedZeroConfig refuses it
    cfg.write_text(json.dumps({"zero_optimization": {"stage": 3, "ofload_param": {
        "device": "cpu"}}, "train_micro_batch_size_per_gpu": 1}))
    r = check(["preflight", "-c", cfg, "-m", TINY, "--no-probe", "--no-memory",
               "--precision", "fp32"])
    assert r.exit_code == 2 and "zero_optimization.ofload_param is not a key DeepSpeed 0.19.8 " \
        "accepts" in r.output and "did you mean 'offload_param'" in r.output


@pytest.mark.lab
def test_core_install_without_torch_or_psutil(tmp_path):
    """preflight and calibrate --from-raw work without the runner extra; run, compare and a
    measuring calibrate name it."""
    code = ("import sys; sys.modules['psutil'] = None; sys.modules['torch'] = None; "
            "sys.modules['deepspeed'] = None; from tierlab.cli import main; main()")
    env = {**os.environ, "DS_ACCELERATOR": "cpu"}
    for args, rc in ((["preflight", "-m", str(TINY), "-c", "zero3-cpu", "--no-probe"], (0, 2)),
                     (["calibrate", "--from-raw", str(RAW), "--out", str(tmp_path / "p.yaml")], (0,)),
                     (["run", "-m", str(TINY), "--out", str(tmp_path / "r")], (2,)),
                     (["calibrate", "--quick", "--out", str(tmp_path / "q.yaml")], (2,))):
        p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                           env=env, timeout=120)
        out = p.stdout + p.stderr
        assert "Traceback" not in out and p.returncode in rc, (args, out)
        if p.returncode == 2 and args[0] != "preflight":
            assert "tierlab[runner]" in out, out


# ----------------------------------------------------------------------------------------------
# sweeps: torn rows, signals, two writers

GRID = ["--vary", "micro_batch=1..64", "--vary", "seq=128,256",
        "--vary", "zero_optimization.sub_group_size=1e7,1e8,1e9"]


def _sweep_cmd(out: Path, jobs: int = 2) -> list[str]:
    return [sys.executable, "-m", "tierlab.cli", "sweep", "-c", "zero3-cpu", "-m", str(TINY),
            "--no-progress", "-j", str(jobs), *GRID, "--out", str(out)]


def _default_sigint() -> None:
    """A job started in the background by a non-interactive shell inherits SIGINT ignored, and
    Python then keeps ignoring it: the child gets the default back, as from a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(out: Path) -> subprocess.Popen:
    return subprocess.Popen(_sweep_cmd(out), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "DS_ACCELERATOR": "cpu"},
                            start_new_session=True, preexec_fn=_default_sigint)


def _wait_for_rows(out: Path, p: subprocess.Popen, n: int = 20, limit_s: float = 60) -> None:
    journal = out.with_name(f".{out.name}.rows.jsonl")
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        if journal.exists() and journal.read_text().count("\n") >= n:
            return
        assert p.poll() is None, p.communicate()[0]
        time.sleep(0.05)
    raise AssertionError("the sweep wrote no rows")


def _group_alive(pgid: int) -> list[str]:
    ps = subprocess.run(["ps", "-eo", "pid=,pgid=,stat="], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines()
            if line.split()[1] == str(pgid) and not line.split()[2].startswith("Z")]


def _resume(out: Path) -> tuple[int, str]:
    p = subprocess.run(_sweep_cmd(out), capture_output=True, text=True, timeout=300,
                       env={**os.environ, "DS_ACCELERATOR": "cpu"})
    return p.returncode, p.stdout + p.stderr


TOTAL = 64 * 2 * 3


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_sweep_signal_then_resume(tmp_path, sig):
    import pandas as pd

    out = tmp_path / "grid.csv"
    p = _start(out)
    _wait_for_rows(out, p)
    os.kill(p.pid, sig)
    text = p.communicate(timeout=60)[0]     # the workers die with the parent, even on SIGKILL
    time.sleep(0.2)
    assert not _group_alive(p.pid), "worker processes left running"
    if sig == signal.SIGKILL:
        kept = out.with_name(f".{out.name}.rows.jsonl").read_text().count("\n")
    else:
        assert p.returncode == 128 + sig, text
        assert "Traceback" not in text and "resume" in text, text
        kept = len(pd.read_csv(out))
    assert 0 < kept < TOTAL
    rc, text = _resume(out)
    assert rc == 0, text
    df = pd.read_csv(out)
    assert len(df) == TOTAL and df["point_id"].is_unique
    assert f"{kept} already there" in text or f"{kept - 1} already there" in text, text
    assert not list(tmp_path.glob(".grid.csv*")), list(tmp_path.iterdir())


def _children(pid: int) -> list[str]:
    ps = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout
    return [line.split()[0] for line in ps.splitlines() if line.split()[1] == str(pid)]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_sweep_without_out_prints_the_rows_done(tmp_path, sig):
    """No --out: a stopped sweep prints the rows done so far as CSV on stdout (what a finished
    one prints), says how many of how many on stderr, exits 128 + signal, and stops its workers."""
    import io

    import pandas as pd

    cmd = _sweep_cmd(tmp_path / "unused.csv")
    cmd = [a.replace("seq=128,256", "seq=128,256,512,1024") for a in cmd[:cmd.index("--out")]]
    cmd += ["--vary", "grad_accum=1,2,4"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "DS_ACCELERATOR": "cpu"}, start_new_session=True,
                         preexec_fn=_default_sigint)
    t0 = time.monotonic()
    while not _children(p.pid):          # the pool is up: the sweep is computing rows
        assert p.poll() is None and time.monotonic() - t0 < 60, p.communicate()
        time.sleep(0.05)
    time.sleep(1.5)
    os.kill(p.pid, sig)
    stdout, stderr = p.communicate(timeout=60)
    time.sleep(0.2)
    assert not _group_alive(p.pid), "worker processes left running"
    assert p.returncode == 128 + sig and "Traceback" not in stderr, stderr
    total = 64 * 4 * 3 * 3
    df = pd.read_csv(io.StringIO(stdout))
    assert 0 < len(df) < total, stderr
    assert df["point_id"].is_unique and not df["step_time_s"].isna().any()
    name = signal.Signals(sig).name
    assert (f"interrupted ({name}): the {len(df)} of {total} rows done are printed above as "
            "CSV" in stderr), stderr
    assert not list(tmp_path.iterdir())        # nothing written without --out


def test_sweep_resume_ignores_torn_rows(tmp_path):
    import pandas as pd

    out = tmp_path / "grid.csv"
    rc, text = _resume(out)
    assert rc == 0, text
    whole = out.read_text()
    out.write_text(whole[: len(whole) - 37])        # cut mid-row, as a full disk would
    rc, text = _resume(out)
    assert rc == 0 and "1 torn row" in text and f"{TOTAL - 1} already there" in text, text
    df = pd.read_csv(out)
    assert len(df) == TOTAL and not df["step_time_s"].isna().any()


def test_two_sweeps_on_one_file(tmp_path):
    import pandas as pd

    out = tmp_path / "grid.csv"
    first = _start(out)
    _wait_for_rows(out, first, n=1)
    os.killpg(first.pid, signal.SIGSTOP)  # still running while the second starts (else a fast
    try:                                  # first sweep may finish and let the second resume)
        rc, text = _resume(out)
    finally:
        os.killpg(first.pid, signal.SIGCONT)
    assert rc == 2 and "another tierlab process" in text and "Traceback" not in text, text
    assert first.wait(timeout=300) == 0, first.communicate()[0]
    assert len(pd.read_csv(out)) == TOTAL
