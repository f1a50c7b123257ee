"""Real DeepSpeed on CPU: a tiny Llama, ZeRO-3 with parameters and optimizer swapped to a disk
path through libaio. One shared run per fixture; never two trainings at once."""
import json
import math
import shutil
import signal
import subprocess
from pathlib import Path
import time

import pytest

from _runnerhelp import NVME_SETS, SAMPLE, TINY, run_cli, sets, swap_root, tierlab
from tierlab.records.measurement import load_measurement

pytestmark = pytest.mark.slow

BASE = ["-m", TINY, "--micro-batch", "2", "--seq", "128", "-q"]


@pytest.fixture(scope="module")
def swap():
    d = swap_root()
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def nvme_run(tmp_path_factory, swap):
    out = tmp_path_factory.mktemp("nvme") / "m"
    r = run_cli("run", *BASE, "-c", "zero3-nvme", *sets(*NVME_SETS), "--swap-dir", str(swap),
                "--steps", "3", "--warmup-steps", "1", "--dataset", SAMPLE, "--out", str(out))
    return r, out, swap


def test_nvme_run_ok_with_finite_loss(nvme_run):
    r, out, _ = nvme_run
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    m = load_measurement(out)
    assert m.status == "ok" and m.reason == ""
    assert len(m.steps) == 3 and all(math.isfinite(s.loss) for s in m.steps)
    assert "steady step time" in r.stdout


def test_swap_files_written_read_back_and_removed(nvme_run):
    _, out, swap = nvme_run
    m = load_measurement(out)
    # 15.2M params: optimizer fp32 p, m, v, g = 16 B/param = 243 MB, + bf16 params on NVMe
    assert all(s.swap_bytes > 200e6 for s in m.steps)
    s = m.summary
    # every steady step reads and writes the optimizer state through O_DIRECT (diskstats)
    assert s["disk_read_bytes_per_step"] > 200e6 and s["disk_written_bytes_per_step"] > 200e6
    # the run swapped into a folder of its own inside --swap-dir, and removed only that
    removed = m.run["swap_removed"]
    assert m.run["swap_device"] and len(removed) == 1
    assert Path(removed[0]).parent == swap and Path(removed[0]).name.startswith("tierlab-run-")
    assert not Path(removed[0]).exists() and not (swap / "zero_stage_3").exists()


def test_measurement_is_complete(nvme_run):
    _, out, swap = nvme_run
    m = load_measurement(out)
    zero = m.ds_config["zero_optimization"]
    assert zero["offload_param"]["device"] == "nvme" and zero["stage3_max_reuse_distance"] == 0
    assert zero["offload_optimizer"]["nvme_path"] == str(swap)
    assert m.ds_config["aio"]["intra_op_parallelism"] == 4          # every key explicit
    assert {"torch", "deepspeed", "transformers"} <= set(m.versions)
    assert m.host["cpu_model"] and m.host["ram_bytes"] > 0 and str(swap) in m.host["disks"]
    assert 0 < m.host["module_call_s"] < 1e-2 and "before deepspeed.initialize" in m.host["module_call_source"]
    assert m.run["n_params"] == 15206912 and m.run["dataset"] == SAMPLE
    assert m.summary["step_time_s"]["n"] == 2 and m.summary["timing"] == "wall"
    assert m.summary["tokens_per_s"] > 0 and m.samples
    # every step says how long Python's collector ran in it (a tiny model: at least one gen-0 run)
    assert all(s.gc_s is not None and len(s.gc_collections) == 3 for s in m.steps)
    assert sum(s.gc_collections[0] + s.gc_collections[1] for s in m.steps) >= 1
    assert m.finished_unix > m.started_unix
    for name in ("measurement.json", "steps.jsonl", "samples.jsonl", "summary.json"):
        assert (out / name).is_file()


def test_sigint_closes_the_record_and_keeps_steps(tmp_path, swap):
    out = tmp_path / "m"
    proc = subprocess.Popen(tierlab("run", *BASE, "-c", "zero3-nvme", *sets(*NVME_SETS),
                                    "--swap-dir", str(swap), "--steps", "500",
                                    "--out", str(out)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, reached = time.time() + 600, False   # a loaded 2-core CI box can be slow to start
    while time.time() < deadline and proc.poll() is None and not reached:
        f = out / "steps.jsonl"
        reached = f.exists() and len(f.read_text().splitlines()) >= 2
        time.sleep(0.2)
    if not reached:
        proc.kill()
    assert reached, "the run did not finish 2 steps within 600 s: " + proc.communicate()[1][-2000:]
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    m = load_measurement(out)
    assert m.status == "interrupted" and m.failure_kind == "signal" and "SIGINT" in m.reason
    assert len(m.steps) >= 2 and m.summary["steps_total"] == len(m.steps)
    assert not (swap / "zero_stage_3").exists()


def test_bad_swap_path_is_caught_before_launch(tmp_path):
    bad = tmp_path / "a-file"
    bad.write_text("not a directory")
    r = run_cli("run", *BASE, "-c", "zero3-nvme", "--swap-dir", str(bad), "--steps", "2", "--warmup-steps", "1",
                "--out", str(tmp_path / "m1"))
    assert r.returncode == 2 and "[swap-path]" in r.stderr and "fix:" in r.stderr
    assert not (tmp_path / "m1").exists()                        # nothing launched
    r = run_cli("run", *BASE, "-c", "zero3-nvme", "--swap-dir", str(bad), "--steps", "2", "--warmup-steps", "1",
                "--skip-preflight", "--out", str(tmp_path / "m2"))
    # without pre-flight a file given as --swap-dir is still refused (issue 34), in one line
    assert r.returncode == 2 and "--swap-dir" in r.stderr and "is a file" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "m2").exists()


def test_host_case_pipelined_swapper_out_of_buffers(tmp_path, swap):
    """The H200 host: pipeline_read+write with buffer_count 8 fails ('ran out of swap
    buffers'), 12 works. Here: step 0 trains (states are created lazily), step 1 asserts."""
    out = tmp_path / "m"
    r = run_cli("run", *BASE, "-c", "zero3-nvme", "--swap-dir", str(swap), "--steps", "3",
                "--warmup-steps", "1", "--skip-preflight", "--out", str(out),
                *sets("zero_optimization.sub_group_size=2e6",
                      "zero_optimization.offload_optimizer.buffer_count=8",
                      "zero_optimization.offload_optimizer.pipeline_read=true",
                      "zero_optimization.offload_optimizer.pipeline_write=true"))
    m = load_measurement(out)
    assert r.returncode == 1 and m.status == "failed" and m.failure_kind == "assertion"
    assert "ran out of swap buffers" in m.reason
    assert len(m.steps) == 1                           # the step that finished is kept
    assert not (swap / "zero_stage_3").exists()


def test_host_case_nvme_params_default_reuse_distance(tmp_path, swap):
    """The H200 host: offload_param nvme beyond max_in_cpu -> 'Not enough buffers 0 for
    swapping 1'. The cause is stage3_max_reuse_distance (1e9): once the trace is complete
    (step 1) parameters reused within it keep their swap buffers. The nvme_run fixture is the
    same config with the distance at 0 — and it trains."""
    out = tmp_path / "m"
    r = run_cli("run", *BASE, "-c", "zero3-nvme", "--swap-dir", str(swap), "--steps", "3",
                "--warmup-steps", "1", "--skip-preflight", "--out", str(out),
                *sets(*[s for s in NVME_SETS if "reuse" not in s]))
    m = load_measurement(out)
    assert r.returncode == 1 and m.failure_kind == "assertion"
    assert "Not enough buffers 0 for swapping 1" in m.reason and len(m.steps) == 1
    # and the pre-flight names it with the fix
    r = run_cli("preflight", "-m", TINY, "-c", "zero3-nvme", "--swap-dir", str(swap),
                *sets(*[s for s in NVME_SETS if "reuse" not in s]))
    assert r.returncode == 2 and "stage3_max_reuse_distance=0" in r.stderr


def test_compare_two_variants_writes_table_csv_png(tmp_path):
    out = tmp_path / "cmp"
    r = run_cli("compare", *BASE[:-1], "--variants", "no-offload", "--variants", "zero3-cpu",
                "--steps", "3", "--warmup-steps", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads((out / "compare.json").read_text())
    assert [x["variant"] for x in rows] == ["no-offload", "zero3-cpu"]
    assert all(x["status"] == "ok" and x["step_time_s"] > 0 for x in rows)
    assert (out / "compare.csv").read_text().startswith("variant,status")
    assert (out / "compare.png").stat().st_size > 1000
    assert "no-offload" in r.stdout and "zero3-cpu" in r.stdout
    # the same model, data and seed: the first loss does not depend on where things live
    l0 = [load_measurement(out / v).steps[0].loss for v in ("no-offload", "zero3-cpu")]
    assert abs(l0[0] - l0[1]) < 0.05
