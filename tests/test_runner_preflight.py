"""Each pre-flight check, with the H200 host's cases (../shared/gpu-host/README.md) as data.
The DeepSpeed behaviour behind each rule is reproduced for real in test_runner_train.py."""
from dataclasses import replace
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from _runnerhelp import TINY, swap_root
from tierlab.cli import main
from tierlab.errors import ConfigError
from tierlab.profiles.load import load_model
from tierlab.runner import preflight as pf
from tierlab.scenario import resolve


def strategy(preset="zero3-nvme", *overrides, model=None):
    return resolve(model or TINY, "workstation-rtx3070", preset, overrides=overrides,
                   micro_batch=1, precision="bf16").strategy


TL = load_model("tinyllama-1.1b")


def checks(problems):
    return [p.check for p in problems]


@pytest.mark.parametrize("count,read,write,ok", [
    (4, True, True, False), (8, True, True, False), (12, True, True, True),   # the H200 host
    (8, True, False, True), (8, False, True, True), (4, False, False, True),
    (3, False, False, False)])
def test_pipelined_optimizer_buffer_rule(count, read, write, ok):
    s = strategy("zero3-nvme", f"zero_optimization.offload_optimizer.buffer_count={count}",
                 f"zero_optimization.offload_optimizer.pipeline_read={str(read).lower()}",
                 f"zero_optimization.offload_optimizer.pipeline_write={str(write).lower()}",
                 model=TL)
    probs = pf.check_optimizer_buffers(TL, s)
    assert (probs == []) is ok
    if not ok:
        assert "buffer_count=" in probs[0].fix


def test_one_sub_group_never_pipelines():
    s = strategy("zero3-nvme", "zero_optimization.offload_optimizer.buffer_count=4",
                 "zero_optimization.offload_optimizer.pipeline_read=true",
                 "zero_optimization.sub_group_size=1e10", model=TL)
    assert pf.check_optimizer_buffers(TL, s) == []


def test_nvme_params_beyond_max_in_cpu_with_default_reuse_distance():
    # the H200 host: "Not enough buffers 0 for swapping 1", also with 16 buffers
    for count in (5, 16):
        s = strategy("zero3-nvme", "zero_optimization.offload_param.device=nvme",
                     "zero_optimization.offload_param.nvme_path=/var/tmp/x",
                     f"zero_optimization.offload_param.buffer_count={count}",
                     "zero_optimization.offload_param.max_in_cpu=1e8", model=TL)
        probs = [p for p in pf.check_param_buffers(TL, s) if p.severity == "error"]
        assert probs and "stage3_max_reuse_distance=0" in probs[0].fix
    # what works instead: reuse distance 0, or every param within max_in_cpu
    fixed = strategy("zero3-nvme", "zero_optimization.offload_param.device=nvme",
                     "zero_optimization.offload_param.nvme_path=/var/tmp/x",
                     "zero_optimization.offload_param.max_in_cpu=1e8",
                     "zero_optimization.stage3_max_reuse_distance=0", model=TL)
    assert pf.check_param_buffers(TL, fixed) == []
    in_cpu = strategy("zero3-nvme", "zero_optimization.offload_param.device=nvme",
                      "zero_optimization.offload_param.nvme_path=/var/tmp/x",
                      "zero_optimization.offload_param.max_in_cpu=2e9", model=TL)
    assert pf.nvme_param_tensors(TL, in_cpu) == [] and pf.check_param_buffers(TL, in_cpu) == []


def test_nvme_param_counting_matches_deepspeed_on_the_tiny_model():
    # DeepSpeed puts embed, lm_head and the MLP matrices (>= 1 MiB in bf16) of the tiny model on
    # NVMe; q/k/v/o (512 KiB) stay in CPU memory (see the probe in test_runner_train.py)
    m = load_model(TINY)
    s = strategy("zero3-nvme", "zero_optimization.offload_param.device=nvme",
                 "zero_optimization.offload_param.nvme_path=/var/tmp/x",
                 "zero_optimization.offload_param.max_in_cpu=1e6")
    names = [n for n, _ in pf.nvme_param_tensors(m, s)]
    assert len(names) == 8 and "lm_head" in names and not any("q_proj" in n for n in names)
    assert pf.retained_nvme_params(m, s) == 8


def test_param_buffer_size_and_duplicate_prefetch_warning():
    s = strategy("zero3-nvme", "zero_optimization.offload_param.device=nvme",
                 "zero_optimization.offload_param.nvme_path=/var/tmp/x",
                 "zero_optimization.offload_param.buffer_size=1e7",
                 "zero_optimization.offload_param.buffer_count=16",
                 "zero_optimization.offload_param.max_in_cpu=1e8",
                 "zero_optimization.stage3_max_reuse_distance=0", model=TL)
    probs = pf.check_param_buffers(TL, s)
    assert "param-swap-buffers" in checks(probs)     # embed 32000 x 2048 = 65.5M > 1e7
    assert any(p.severity == "warning" and "already assigned" in p.message for p in probs)


def test_ignored_keys_are_deepspeeds():
    """What DeepSpeed 0.19.8 ignores (sim/ds_read.ignored_keys): a typo inside a block it reads
    is an error, another tool's top-level key (LLaMA-Factory's monitor_config) a warning of the
    config's reading only, said once (not again by preflight, in another format)."""
    s = strategy("zero3-nvme", "aio.queue_dept=8", 'monitor_config={"enabled": true}')
    probs = {p.message.split(" ")[0]: p for p in pf.check_ignored_keys(s.raw)}
    assert probs["aio.queue_dept"].severity == "error" and \
        probs["aio.queue_dept"].fix == "use queue_depth"
    assert "monitor_config" not in probs


def test_an_ignored_top_level_key_is_one_warning_in_one_format(tmp_path):
    from _cli import run

    cfg = tmp_path / "ds.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, '
                   '"optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 2}, '
                   '"cuda_visible_devices": 0}')
    r = run("preflight", "-m", "tinyllama-1.1b", "-c", str(cfg), "-H", "h200-gen5")
    said = [ln for ln in r.output.splitlines() if "cuda_visible_devices" in ln]
    assert said == [f"warning: {cfg}: cuda_visible_devices is not a key DeepSpeed 0.19.8 reads; "
                    f"it ignores it"], r.output


def test_ignored_keys_and_arch_list():
    s = strategy("zero3-nvme", "aio.thread_count=8")
    assert [p.message for p in pf.check_ignored_keys(s.raw)] == [
        "aio.thread_count is ignored by DeepSpeed since 0.16.4"]
    with pytest.raises(ConfigError, match=r"zero_optimization\.aio is not a key DeepSpeed"):
        strategy("zero3-nvme", "zero_optimization.aio={}")   # DeepSpeedZeroConfig forbids it
    probs = pf.check_arch_list({"TORCH_CUDA_ARCH_LIST": "9.0a"})
    assert probs and 'TORCH_CUDA_ARCH_LIST="9.0"' in probs[0].fix
    assert pf.check_arch_list({"TORCH_CUDA_ARCH_LIST": "8.0;9.0+PTX"}) == []
    assert pf.check_arch_list({"TORCH_CUDA_ARCH_LIST": "8.6 9.0"}) == []
    assert pf.check_arch_list({}) == []


def test_pinned_memory_against_host_ram():
    s = strategy("zero3-cpu", model=TL)
    # the memory planner's pinned items (what the H200 runs' RSS confirmed): fp32 grads per
    # sub-group 2^32 + 2^29, 16-bit grad flat 2^32, 16-bit params 2^32, zero.Init's cached
    # per-parameter blocks 2.7 GiB = 15.2 GiB; fp32 master and Adam m, v are pageable
    assert 15 * 2**30 < pf.pinned_bytes(TL, s) < 16 * 2**30
    assert pf.check_pinned(TL, s, 125e9) == []
    assert pf.check_pinned(TL, s, 16e9)[0].severity == "error"


def _status(**kw):
    base = dict(path="/x", exists=True, creatable=False, is_dir=True, writable=True,
                o_direct=True, o_direct_error="", free_bytes=100 << 30, fs_type="ext4")
    return pf.SwapPathStatus(**{**base, **kw})


def test_swap_path_checks():
    need = 16 * int(TL.n_params)                    # 17.6 GB for TinyLlama's optimizer
    assert pf.check_swap_path(_status(), need, "offload_optimizer") == []
    assert "free" in pf.check_swap_path(_status(free_bytes=18 << 30), need, "x")[0].message
    assert "O_DIRECT" in pf.check_swap_path(_status(o_direct=False, o_direct_error="EINVAL",
                                                    fs_type="tmpfs"), 1, "x")[0].message
    assert "file" in pf.check_swap_path(_status(is_dir=False), 1, "x")[0].message
    assert "cannot be created" in pf.check_swap_path(_status(exists=False, is_dir=False), 1,
                                                     "x")[0].message
    assert "not writable" in pf.check_swap_path(_status(writable=False), 1, "x")[0].message


def test_probe_swap_path_writes_an_o_direct_block(tmp_path):
    d = swap_root()
    st = pf.probe_swap_path(str(d))
    assert st.exists and st.writable and st.o_direct and st.free_bytes > 0
    assert list(d.iterdir()) == []                   # the test block is gone
    d.rmdir()
    f = tmp_path / "file"
    f.write_text("x")
    st = pf.probe_swap_path(str(f / "sub"))
    assert not st.creatable and pf.check_swap_path(st, 1, "offload_param")


def test_aio_checks():
    s = strategy("zero3-nvme")
    assert pf.check_aio(s, pf.AioStatus(False, False, False, None))[0].check == "aio"
    assert pf.check_aio(s, pf.AioStatus(True, True, True, False, "undefined symbol"))
    assert pf.check_aio(s, pf.AioStatus(True, True, False, None))[0].severity == "warning"
    assert pf.check_aio(s, pf.AioStatus(True, True, True, True)) == []
    assert pf.check_aio(strategy("zero3-cpu"), None) == []
    real = pf.probe_aio()                          # this machine: libaio-dev installed
    assert real.libaio and real.headers


def test_memory_verdict_from_a_plan():
    tier = lambda used, cap: SimpleNamespace(used_bytes=used, capacity_bytes=cap,
                                             fits=used <= cap)
    plan = SimpleNamespace(fits=False, binding_tier="gpu",
                           tiers={"gpu": tier(20 << 30, 8 << 30), "host": tier(1, 2),
                                  "nvme": tier(0, 1)})
    s = strategy("zero3-cpu")
    probs = pf.check_memory(plan, s)
    assert checks(probs) == ["memory"] and "gpu needs 20.00 GiB of 8.00 GiB" in probs[0].message
    assert pf.check_memory(SimpleNamespace(fits=True), s) == []


def test_cli_preflight_exit_codes(monkeypatch):
    r = CliRunner().invoke(main, ["preflight", "-m", TINY, "-c", "zero3-cpu", "--no-probe"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["preflight", "-m", TINY, "-c", "zero3-nvme", "--no-probe",
                                  "--set", "zero_optimization.offload_optimizer.pipeline_read=true",
                                  "--set", "zero_optimization.offload_optimizer.pipeline_write=true",
                                  "--set", "zero_optimization.sub_group_size=2e6",
                                  "--set", "aio.thread_count=4"])
    assert r.exit_code == 2
    lines = [x for x in r.output.splitlines() if x.startswith("error:")]
    assert len(lines) == 2 and all("fix:" in x for x in lines)
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    r = CliRunner().invoke(main, ["preflight", "-m", TINY, "-c", "zero3-cpu", "--no-probe"])
    assert r.exit_code == 2 and "cuda-arch" in r.output


def test_a_refused_swap_path_is_said_before_async_io_is_probed(tmp_path, monkeypatch):
    """A tmpfs nvme_path is refused without loading async_io (whose load may JIT-build it for
    minutes): with no op built under $TORCH_EXTENSIONS_DIR, the aio check would warn 'not built
    yet' had it run."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    s = strategy("zero3-nvme", "zero_optimization.offload_param.nvme_path=/dev/shm/tierlab-t",
                 "zero_optimization.offload_optimizer.nvme_path=/dev/shm/tierlab-t")
    got = checks(pf.run_preflight(SimpleNamespace(dram_bytes=64e9, gpus_per_node=1), load_model(TINY), s,
                                  check_memory_plan=False, local_ram=False))
    assert "swap-path" in got and "aio" not in got
    s = strategy("zero3-nvme", f"zero_optimization.offload_param.nvme_path={tmp_path}",
                 f"zero_optimization.offload_optimizer.nvme_path={tmp_path}")
    got = checks(pf.run_preflight(SimpleNamespace(dram_bytes=64e9, gpus_per_node=1), load_model(TINY), s,
                                  check_memory_plan=False, local_ram=False))
    assert "aio" in got and "swap-path" not in got
