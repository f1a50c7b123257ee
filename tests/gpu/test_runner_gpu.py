"""The runner on a real GPU: a tiny Llama with ZeRO-3 CPU offload, memory peaks and the cap.
Skipped without CUDA."""
import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                  reason="needs CUDA")]


def test_tiny_run_on_gpu_records_memory_peaks(tmp_path):
    import sys
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    from _runnerhelp import TINY, run_cli
    from tierlab.records.measurement import load_measurement

    out = tmp_path / "m"
    r = run_cli("run", "-m", TINY, "-c", "zero3-cpu", "--micro-batch", "2", "--seq", "128",
                "--steps", "3", "--warmup-steps", "1", "--gpu-mem-cap", "4GiB", "--breakdown",
                "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    m = load_measurement(out)
    assert m.status == "ok" and m.run["gpu_mem_cap_applied"] is True
    assert all(s.gpu_max_allocated_bytes > 0 for s in m.steps)
    assert all(s.forward_s > 0 and s.timing == "synchronised" for s in m.steps)
    assert m.host["gpus"] and m.samples and "gpu_util_percent" in m.samples[-1]


def test_gpu_mem_cap_turns_oom_into_a_row(tmp_path):
    import sys
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    from _runnerhelp import TINY, run_cli
    from tierlab.records.measurement import load_measurement

    out = tmp_path / "m"
    r = run_cli("run", "-m", TINY, "-c", "no-offload", "--micro-batch", "64", "--seq", "256",
                "--steps", "2", "--warmup-steps", "1", "--gpu-mem-cap", "64MiB",
                "--skip-preflight", "--out", str(out))
    m = load_measurement(out)
    assert r.returncode == 1 and m.status == "failed" and m.failure_kind == "oom"
