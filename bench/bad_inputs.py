"""Issue 16's census of bad and edge inputs: how many end in a traceback, a wrong exit code or
lost data. Prints one line per failing case and the totals; exits 0 (a figure, not a test).

    .venv/bin/python bench/bad_inputs.py            # everything but the slow real-run case
    .venv/bin/python bench/bad_inputs.py --slow     # also real runs: `run --out` onto a
                                                    # measurement, SIGTERM on a run (minutes)

The fuzz suite (tests/test_fuzz_cli.py) holds the same contract as a test; the generated audit
of issue 34 (~1,800 cases, its class table per verb and input kind) is bench/fuzz_audit.py.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIERLAB = [sys.executable, "-m", "tierlab.cli"]
CASE = ROOT / "lab" / "cases" / "h200x2" / "c-tinyllama-noofl"
RAW = ROOT / "lab" / "cases" / "h200x2" / "calibrate-raw.json"
TINY = ROOT / "runner" / "data" / "tiny-llama.yaml"
NO_PSUTIL = ("import sys; sys.modules['psutil'] = None; sys.modules['torch'] = None; "
             "from tierlab.cli import main; main()")

results = {"cases": 0, "traceback": 0, "wrong": 0, "lost": 0}


def tl(*args, env=None, code=None, timeout=60):
    """Run tierlab; a case still running after `timeout` s (it started training where it should
    have refused) is killed with its process group and reported as rc -9."""
    cmd = [sys.executable, "-c", code, *args] if code else [*TIERLAB, *args]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env={**os.environ, "DS_ACCELERATOR": "cpu", **(env or {})},
                         start_new_session=True)
    try:
        return p.wait(timeout=timeout), p.stdout.read()
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        return -9, "TIMEOUT: still running (it did not refuse)"


def case(name, args, expect=(2,), code=None, timeout=60):
    """Run one case: a traceback, or an exit code outside `expect`, is counted."""
    results["cases"] += 1
    rc, out = tl(*args, code=code, timeout=timeout)
    if "Traceback" in out:
        results["traceback"] += 1
        last = [l for l in out.strip().splitlines() if l.strip()][-1:]
        print(f"TRACEBACK  {name}: {last[0][:110] if last else ''}")
    elif rc not in expect:
        results["wrong"] += 1
        print(f"WRONG rc={rc:<3d} {name}: {out.strip().splitlines()[-1][:110] if out.strip() else ''}")
    return rc, out


def lost(name, what):
    results["lost"] += 1
    print(f"LOST       {name}: {what}")


def write(path: Path, data) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


def main(slow: bool) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="tierlab-bad-"))
    ds = json.loads((ROOT / "profiles/configs/zero3-nvme.json").read_text())
    bad_utf8 = write(tmp / "bad-utf8.json", json.dumps(ds).encode().replace(b"AdamW", b"Adam\xff"))
    nan_cfg = write(tmp / "nan.json", json.dumps(ds).replace('"gradient_clipping": 1.0',
                                                             '"gradient_clipping": NaN'))
    inf_cfg = write(tmp / "inf.json", json.dumps(ds).replace('"sub_group_size": 100000000.0',
                                                             '"sub_group_size": 1e400'))
    model_bytes = TINY.read_bytes().replace(b"tiny-llama-test", b"tiny-\xe9-test")
    bad_model = write(tmp / "model.yaml", model_bytes)
    raw = json.loads(RAW.read_text())
    raw_null = write(tmp / "raw-null.json", json.dumps({**raw, "results": None}))
    raw_str = write(tmp / "raw-str.json", json.dumps(raw).replace('"median_s": ', '"median_s": "x'))
    raw_str = write(tmp / "raw-str.json", json.dumps(
        {**raw, "results": {g: [{k: "fast" for k in p} for p in pts]
                            for g, pts in raw["results"].items()}}))
    raw_utf8 = write(tmp / "raw-utf8.json", RAW.read_bytes().replace(b"h200x2-host", b"h\xff"))
    dataset = write(tmp / "data.jsonl", b'{"instruction": "hi \xff", "output": "x"}\n')

    def meas(name, mutate):
        d = tmp / "cases" / name
        shutil.copytree(CASE, d)
        mutate(d)
        return str(d)

    torn_samples = meas("torn-samples", lambda d: (d / "samples.jsonl").write_text(
        (d / "samples.jsonl").read_text() + '{"t": 9.5, "host_rss'))
    bad_head = meas("bad-head", lambda d: (d / "measurement.json").write_text('{"run_id": '))
    str_steps = meas("str-steps", lambda d: (d / "steps.jsonl").write_text(
        (d / "steps.jsonl").read_text().replace('"wall_s": ', '"wall_s": "slow", "x": ')))
    utf8_meas = meas("utf8", lambda d: (d / "measurement.json").write_bytes(
        (d / "measurement.json").read_bytes().replace(b"tinyllama", b"tiny\xfe")))
    list_head = meas("list-head", lambda d: (d / "measurement.json").write_text("[1, 2]"))
    killed = meas("killed", lambda d: (d / "measurement.json").write_text(json.dumps(
        {**json.loads((d / "measurement.json").read_text()), "status": "interrupted",
         "failure_kind": "signal"})))

    unwritable = ["/proc/tierlab-out", "/etc/hostname/sub", str(tmp)]    # proc, under a file, a dir
    for i, where in enumerate(unwritable):
        case(f"simulate --trace {where}", ["simulate", "-c", "zero3-cpu", "--trace",
                                           where + (".json" if i < 2 else "")])
        case(f"plan -o {where}", ["plan", "-o", where + (".json" if i < 2 else "")])
        case(f"plot -o {where}", ["plot", "bottleneck", "-c", "zero3-cpu", "-o",
                                  where + (".png" if i < 2 else "")])
        case(f"sweep --out {where}", ["sweep", "--vary", "micro_batch=1,2", "--no-progress",
                                      "--out", where + (".csv" if i < 2 else "")])
        case(f"validate --out {where}", ["validate", str(CASE), "--out",
                                         where if i != 2 else str(tmp / "bad-utf8.json")])
        case(f"calibrate --from-raw --out {where}",
             ["calibrate", "--from-raw", str(RAW), "--out", where + (".yaml" if i < 2 else "")])
        case(f"compare --out {where}", ["compare", "-m", str(TINY), "--steps", "2",
                                        "--warmup-steps", "1", "--out",
                                        where if i != 2 else bad_utf8])
    stray = [p for p in tmp.iterdir() if p.name.startswith(".") and "tmp" in p.name]
    if stray:
        lost("stray temp files", ", ".join(p.name for p in stray))

    for value in ("NaN", "Infinity", "-Infinity", "1e400", "nan", "inf"):
        case(f"--set gradient_clipping={value}", ["simulate", "--set", f"gradient_clipping={value}",
                                                  "-c", "zero3-cpu"])
        case(f"--set sub_group_size={value}", ["simulate", "-c", "zero3-cpu", "--set",
                                               f"zero_optimization.sub_group_size={value}"])
        case(f"sweep --vary sub_group_size={value}",
             ["sweep", "-c", "zero3-cpu", "--no-progress", "--vary",
              f"zero_optimization.sub_group_size=1e8,{value}"], expect=(0, 2))
    for item in ("bf16=true", "fp16=1", "zero_optimization=5", "aio=[1]", "aio.block_size=0",
                 "aio.queue_depth=0", "aio.intra_op_parallelism=0", "optimizer=3",
                 "zero_optimization.offload_optimizer=true"):
        case(f"--set {item}", ["simulate", "-c", "zero3-nvme", "--set", item])
    # DeepSpeed 0.19.8 reads bf16.enabled "yes" as true (pydantic's lax bool: DeepSpeedBF16Config
    # (enabled="yes").enabled is True), and tierlab reads the config as DeepSpeed does (issue 15)
    case("--set bf16.enabled=yes", ["simulate", "-c", "zero3-nvme", "--set", "bf16.enabled=yes"],
         expect=(0,))
    for cfg, what in ((bad_utf8, "non-UTF-8 ds_config"), (nan_cfg, "NaN ds_config"),
                      (inf_cfg, "1e400 ds_config")):
        case(what, ["simulate", "-c", cfg])
        case(what + " (memory)", ["memory", "-c", cfg])
    case("non-UTF-8 model YAML", ["simulate", "-m", bad_model, "-c", "zero3-cpu"])
    case("from-raw results null", ["calibrate", "--from-raw", raw_null, "--out",
                                   str(tmp / "p1.yaml")])
    case("from-raw strings", ["calibrate", "--from-raw", raw_str, "--out", str(tmp / "p2.yaml")])
    case("from-raw non-UTF-8", ["calibrate", "--from-raw", raw_utf8, "--out",
                                str(tmp / "p3.yaml")])
    for d, what in ((torn_samples, "torn samples.jsonl"), (bad_head, "malformed measurement.json"),
                    (str_steps, "string step values"), (utf8_meas, "non-UTF-8 measurement"),
                    (list_head, "measurement.json a list")):
        case(f"validate {what}", ["validate", d, "-H", "h200x2-host", "--out",
                                  str(tmp / "v")], expect=(0, 2))
        case(f"plot timeline --measurement {what}", ["plot", "timeline", "-c", "zero3-cpu",
                                                     "--measurement", d, "-o",
                                                     str(tmp / "t.png")], expect=(0, 2))
    rc, out = case("validate killed run", ["validate", killed, "-H", "h200x2-host", "--out",
                                           str(tmp / "v2"), "--json"], expect=(0, 2))
    if rc == 0 and '"mismatches": []' in out and '"n": 1' in out:
        results["wrong"] += 1
        print("WRONG      validate counts a killed run as an OOM verdict")
    case("validate --max-error nan", ["validate", str(CASE), "-H", "h200x2-host",
                                      "--max-error", "nan", "--out", str(tmp / "v3")])
    case("run --warmup-steps -1", ["run", "-m", str(TINY), "--warmup-steps", "-1", "--out",
                                   str(tmp / "r0")])
    rc, out = case("run --steps 0", ["run", "-m", str(TINY), "--steps", "0",
                                     "--out", str(tmp / "r0")])
    if "--steps" not in out.replace("--warmup-steps", ""):
        results["wrong"] += 1
        print("WRONG      run --steps 0 does not name --steps")
    case("compare --timeout -5", ["compare", "-m", str(TINY), "--timeout", "-5", "--out",
                                  str(tmp / "c0")])
    case("compare --budget 0", ["compare", "-m", str(TINY), "--budget", "0", "--out",
                                str(tmp / "c0")])
    case("run --dataset non-UTF-8", ["run", "-m", str(TINY), "--dataset", dataset, "--out",
                                     str(tmp / "r1")])
    shm = "/dev/shm/tierlab-bad"
    os.makedirs(shm, exist_ok=True)
    case("preflight --swap-dir tmpfs", ["preflight", "-c", "zero3-nvme", "-m", str(TINY),
                                        "--swap-dir", shm, "--no-memory"])
    shutil.rmtree(shm, ignore_errors=True)
    s2 = write(tmp / "s2.json", json.dumps({"zero_optimization": {
        "stage": 2, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}},
        "train_micro_batch_size_per_gpu": 1}))
    typo = write(tmp / "typo.json", json.dumps({"zero_optimization": {
        "stage": 3, "ofload_param": {"device": "cpu"}}, "train_micro_batch_size_per_gpu": 1}))
    for cfg, what in ((s2, "stage-2 offload_param"), (typo, "misspelled key")):
        rc, out = case(f"preflight {what}", ["preflight", "-c", cfg, "-m", str(TINY), "--no-probe"],
                       expect=(0, 2))
        if "ok: no problems found" in out:
            results["wrong"] += 1
            print(f"WRONG      preflight {what}: says ok")
    for cap in ("8g", "inf", "nan", "-1", "8 XB"):
        rc, out = case(f"--gpu-mem-cap {cap}", ["simulate", "-c", "zero3-cpu", "--gpu-mem-cap", cap],
                       expect=(0,) if cap == "8g" else (2,))
    case("plot -o b.jpeg", ["plot", "bottleneck", "-c", "zero3-cpu", "-o", str(tmp / "b.jpeg")])

    for verb in (["preflight", "-m", str(TINY), "-c", "zero3-cpu", "--no-probe"],
                 ["calibrate", "--from-raw", str(RAW), "--out", str(tmp / "np.yaml")]):
        case(f"no psutil/torch: {verb[0]}", verb, expect=(0, 2), code=NO_PSUTIL)
    for verb in (["calibrate", "--quick", "--out", str(tmp / "q.yaml")],
                 ["compare", "-m", str(TINY), "--out", str(tmp / "c1")],
                 ["run", "-m", str(TINY), "--out", str(tmp / "r2")]):
        rc, out = case(f"no psutil/torch: {verb[0]}", verb, code=NO_PSUTIL)
        if rc == 2 and "tierlab[runner]" not in out:
            results["wrong"] += 1
            print(f"WRONG      no psutil/torch: {verb[0]} does not name the extra")

    hjson_bad = write(tmp / "bad.hjson", "{\n  zero_optimization: {\n    stage: 3\n")
    hjson_big = write(tmp / "big.hjson", "{\n  zero_optimization: {\n    sub_group_size: 1e400\n"
                                         "  }\n}\n")
    for cfg, what in ((hjson_bad, "unclosed hjson ds_config"), (hjson_big, "1e400 hjson ds_config")):
        case(what, ["memory", "-c", cfg])
    compare_cases(tmp)
    sweep_cases(tmp)
    if slow:
        slow_cases(tmp)
    print(f"\n{results['cases']} cases: {results['traceback']} tracebacks, {results['wrong']} wrong "
          f"exit codes or answers, {results['lost']} losses")
    shutil.rmtree(tmp, ignore_errors=True)


def compare_cases(tmp: Path) -> None:
    """`compare --out` onto an earlier comparison must refuse, the earlier files untouched."""
    d = tmp / "cmp"
    kept = [Path(write(d / "compare.csv", "variant,status\nno-offload,ok\n")),
            shutil.copytree(CASE, d / "no-offload") / "measurement.json"]
    before = [p.read_bytes() for p in kept]
    case("compare --out onto a comparison", ["compare", "-m", str(TINY), "--variants",
                                              "no-offload", "--out", str(d)], timeout=120)
    if [p.read_bytes() for p in kept] != before:
        lost("compare --out onto a comparison", "replaced")


def sweep_cases(tmp: Path) -> None:
    import pandas as pd

    grid = ["--vary", "micro_batch=1..48", "--vary", "zero_optimization.sub_group_size=1e8,1e9"]
    base = ["sweep", "-c", "zero3-cpu", "--no-progress", "-j", "2", *grid]
    out = tmp / "two.csv"
    cmd = [*TIERLAB, *base, "--out", str(out)]
    env = {**os.environ, "DS_ACCELERATOR": "cpu"}
    results["cases"] += 1
    grids = (["--vary", "micro_batch=1..24"], ["--vary", "micro_batch=25..48"])
    procs = [subprocess.Popen([*TIERLAB, "sweep", "-c", "zero3-cpu", "--no-progress", "-j", "2",
                               *g, "--vary", "zero_optimization.sub_group_size=1e8,1e9",
                               "--out", str(out)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env) for g in grids]
    outs = [p.communicate()[0] for p in procs]
    codes = [p.returncode for p in procs]
    if any("Traceback" in o for o in outs):
        results["traceback"] += 1
        print("TRACEBACK  two sweeps on one file")
    rows = len(pd.read_csv(out)) if out.exists() else 0
    claimed = 48 * codes.count(0)          # each writer that exits 0 claims its 48 rows
    if rows < claimed:
        lost("two sweeps on one file", f"{rows} rows in the file, {claimed} claimed (exit codes "
                                       f"{codes})")
    tl(*base, "--out", str(out))           # complete it for the torn-row case below
    # resume from a CSV cut mid-row
    results["cases"] += 1
    text = out.read_text()
    torn = tmp / "torn.csv"
    torn.write_text(text[: len(text) - 40])
    rc, o = tl(*base, "--out", str(torn))
    df = pd.read_csv(torn)
    empty = df["step_time_s"].isna() & (df["error"].astype(str).isin(["", "nan"]))
    if "Traceback" in o:
        results["traceback"] += 1
        print("TRACEBACK  resume from a torn CSV")
    if len(df) != 96 or empty.any():
        lost("resume from a torn CSV", f"{len(df)} rows, {int(empty.sum())} with empty results")
    # SIGTERM mid-sweep: rows kept, workers gone, exit 143
    results["cases"] += 1
    term = tmp / "term.csv"
    big = ["sweep", "-c", "zero3-cpu", "--no-progress", "-j", "2", "--vary", "micro_batch=1..64",
           "--vary", "seq=256,512,1024,2048", "--vary", "zero_optimization.sub_group_size=1e7,1e8,"
           "1e9,2e9", "--out", str(term)]
    p = subprocess.Popen([*TIERLAB, *big], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=env, start_new_session=True)
    journal = term.with_name(f".{term.name}.rows.jsonl")
    for _ in range(400):           # until the first rows are done (either version of tierlab)
        time.sleep(0.05)
        if (journal.exists() and journal.stat().st_size) or term.exists():
            break
    p.send_signal(signal.SIGTERM)
    try:
        o = p.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:        # workers still hold its stdout open
        o = "(still running 60 s after SIGTERM)"
    time.sleep(1)
    left = subprocess.run(["pgrep", "-s", str(p.pid)], capture_output=True, text=True).stdout.split()
    if left:
        lost("SIGTERM on sweep", f"{len(left)} worker processes left running")
        for pid in left:
            os.kill(int(pid), signal.SIGKILL)
    if p.returncode != 143 and p.returncode is not None:
        results["wrong"] += 1
        print(f"WRONG rc={p.returncode} SIGTERM on sweep: {o.strip().splitlines()[-1:]}")
    if "Traceback" in o:
        results["traceback"] += 1
        print("TRACEBACK  SIGTERM on sweep")
    if not term.exists():
        lost("SIGTERM on sweep", "no rows kept")
    # SIGTERM mid-sweep without --out: the rows done are printed, exit 143
    results["cases"] += 1
    p = subprocess.Popen([*TIERLAB, *big[:-2]], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env, start_new_session=True)
    time.sleep(8)                  # no file to watch: imports, then rows
    p.send_signal(signal.SIGTERM)
    o, e = p.communicate(timeout=120)
    if "Traceback" in e:
        results["traceback"] += 1
        print("TRACEBACK  SIGTERM on sweep without --out")
    elif p.returncode == 143 and len(o.splitlines()) < 2:
        lost("SIGTERM on sweep without --out", "no rows printed")
    elif p.returncode != 143:
        results["wrong"] += 1
        print(f"WRONG rc={p.returncode} SIGTERM on sweep without --out: {e.strip()[-110:]}")


def slow_cases(tmp: Path) -> None:
    results["cases"] += 1
    d = tmp / "existing"
    shutil.copytree(CASE, d)
    before = (d / "steps.jsonl").read_text()
    rc, out = tl("run", "-m", str(TINY), "-c", "no-offload", "--steps", "2", "--warmup-steps", "1",
                 "--micro-batch", "1", "--out", str(d), timeout=600)
    if not (d / "steps.jsonl").exists() or (d / "steps.jsonl").read_text() != before:
        lost("run --out onto a measurement", "replaced")
    # SIGTERM once a step is measured (real DeepSpeed on CPU): exit 143, steps kept, closed record
    results["cases"] += 1
    d = tmp / "term-run"
    p = subprocess.Popen([*TIERLAB, "run", "-m", str(TINY), "-c", "no-offload", "--steps", "500",
                          "--micro-batch", "1", "--seq", "64", "--no-progress", "--out", str(d)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env={**os.environ, "DS_ACCELERATOR": "cpu"}, start_new_session=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 900 and p.poll() is None and not (
            (d / "steps.jsonl").exists() and (d / "steps.jsonl").read_text().count("\n") >= 1):
        time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    o = p.communicate(timeout=300)[0]
    from tierlab.records.measurement import load_measurement

    m = load_measurement(d) if (d / "measurement.json").exists() else None
    if "Traceback" in o:
        results["traceback"] += 1
        print("TRACEBACK  SIGTERM on run")
    elif m is None or not m.steps or m.status != "interrupted":
        lost("SIGTERM on run", f"status {m and m.status}, {m and len(m.steps)} steps kept")
    elif p.returncode != 143:
        results["wrong"] += 1
        print(f"WRONG rc={p.returncode} SIGTERM on run: {o.strip().splitlines()[-1:]}")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slow", action="store_true",
                    help="also the cases that train for real (DeepSpeed on CPU: minutes)")
    main(ap.parse_args().slow)
