import os
import signal
import socket

from _runnerhelp import swap_root
from tierlab.runner import launch, probes
from tierlab.dsconfig.read import with_swap_dir
from tierlab.runner.ds_config import swap_dirs, swap_paths
from tierlab.records.measurement import Measurement
from tierlab.runner.train import RunInterrupted, SignalGate, classify, exit_code


def test_block_device_diskstats_and_dir_bytes():
    d = swap_root()
    try:
        dev = probes.block_device(d)
        assert dev and probes.disk_bytes(dev) is not None
        (d / "a").write_bytes(b"x" * 5000)
        assert probes.dir_bytes(d) == 5000 and probes.dir_bytes(d / "missing") == 0
        assert probes.fs_type(d) not in (None, "tmpfs")
    finally:
        (d / "a").unlink()
        d.rmdir()


def test_host_facts_and_versions_and_sampler():
    facts = probes.host_facts(["/var/tmp"])
    assert facts["ram_bytes"] > 0 and facts["cpu_cores_logical"] >= 1
    assert facts["disks"]["/var/tmp"]["free_bytes"] > 0
    v = probes.library_versions()
    assert {"python", "torch", "deepspeed", "transformers"} <= set(v)
    s = probes.Sampler(interval_s=0.02).start()
    import time
    time.sleep(0.2)
    samples = s.stop()
    assert samples and samples[0]["host_rss_bytes"] > 0


def test_ensure_dist_env_sets_only_missing():
    env = {"RANK": "3"}
    set_now = launch.ensure_dist_env(env)
    assert env["RANK"] == "3" and "RANK" not in set_now
    assert env["WORLD_SIZE"] == "1" and int(env["MASTER_PORT"]) > 0


def test_deepspeed_command_uses_the_launcher(tmp_path):
    cmd = launch.deepspeed_command("spec.json", 4)
    assert "--num_gpus" in cmd and cmd[cmd.index("--num_gpus") + 1] == "4"
    assert cmd[-4:] == ["--module", "tierlab.runner.train", "--spec", "spec.json"]
    hf = tmp_path / "hostfile"
    hf.write_text("node1 slots=8\nnode2 slots=8\n")
    cmd = launch.deepspeed_command("spec.json", 8, hostfile=str(hf))
    assert "--hostfile" in cmd and "--num_gpus" not in cmd


def test_swap_path_helpers():
    cfg = {"zero_optimization": {"stage": 3,
                                 "offload_param": {"device": "nvme", "nvme_path": "/a"},
                                 "offload_optimizer": {"device": "nvme", "nvme_path": "/b"}}}
    assert swap_paths(cfg) == ["/a", "/b"]
    assert [str(p) for p in swap_dirs(cfg)] == ["/a/zero_stage_3", "/b/zero_stage_3"]
    assert swap_paths(with_swap_dir(cfg, "/c")) == ["/c"]
    cfg["zero_optimization"]["stage"] = 2
    assert swap_paths(cfg) == ["/b"]


def test_classify_faults():
    import torch

    assert classify(RunInterrupted(signal.SIGTERM), 3)[:2] == ("interrupted", "signal")
    assert classify(KeyboardInterrupt(), 0)[0] == "interrupted"
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert classify(oom, 1)[:2] == ("failed", "oom")
    assert classify(RuntimeError("DefaultCPUAllocator: can't allocate memory"), 0)[1] == "oom"
    assert classify(OSError(28, "No space left on device"), 2)[1] == "disk_full"
    try:
        assert False, "Not enough buffers 0 for swapping 1"
    except AssertionError as e:
        status, kind, reason = classify(e, 1)
    assert kind == "assertion" and "Not enough buffers" in reason and "after 1 step" in reason
    # a bare aio assertion on a full disk is a disk_full
    assert classify(AssertionError(), 1, {"/swap": 1000})[1] == "disk_full"
    assert classify(ValueError("x"), 0)[1] == "error"


def test_gc_clock_counts_collections_and_their_time():
    import gc

    clock = probes.GcClock().start()
    try:
        junk = [[i] for i in range(200_000)]     # tracked containers: a full walk takes time
        gc.collect()
        gc.collect(0)
        first = clock.take()
        second = clock.take()
    finally:
        clock.stop()
        del junk
    assert first["gc_collections"][2] >= 1 and first["gc_collections"][0] >= 1
    assert first["gc_s"] > 0
    assert second == {"gc_s": 0.0, "gc_collections": [0, 0, 0]}    # take() resets
    gc.collect()
    assert clock.take()["gc_collections"] == [0, 0, 0]             # stop() unhooks


def test_run_probes_the_host_before_deepspeed_initialize(tmp_path, monkeypatch):
    """After a ZeRO-3 initialize the module-call probe reads 2.5-5x slower (DeepSpeed wraps
    every Linear): `run` must take it first. The engine setup here fails on purpose after the
    order is recorded; the run closes as failed with that reason."""
    from tierlab.profiles.load import load_model
    from tierlab.dsconfig.read import load_ds_config
    from tierlab.runner import train
    from tierlab.sim.strategy import Flags, parse_ds_config

    for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)     # run() sets them; undone after the test
    calls = []

    def setup(spec, local_rank):
        calls.append("initialize")
        raise RuntimeError("stop here")
    model = load_model("tinyllama-1.1b", seq_len=64)
    cfg, _ = load_ds_config("zero3-cpu")
    strategy, _ = parse_ds_config(cfg, Flags(micro_batch=1, precision="bf16", hidden=model.hidden))
    spec = train.spec_from_strategy(model, strategy, out_dir=str(tmp_path / "m"), steps=2,
                                    warmup_steps=1)
    m = train.run(spec, setup=setup, speed=lambda cuda: calls.append("probe") or {})
    assert calls == ["probe", "initialize"]
    assert m.status == "failed" and "stop here" in m.reason


def test_exit_code_is_128_plus_the_signal_that_stopped_the_run():
    def m(status, exc=None):
        reason = classify(exc, 4)[2] if exc is not None else ""
        return Measurement(run_id="x", status=status, reason=reason)
    assert exit_code(m("interrupted", RunInterrupted(signal.SIGTERM))) == 143
    assert exit_code(m("interrupted", RunInterrupted(signal.SIGINT))) == 130
    assert exit_code(m("interrupted", KeyboardInterrupt())) == 130
    assert (exit_code(m("ok")), exit_code(m("failed")), exit_code(m("running"))) == (0, 1, 1)


def test_signal_gate_holds_a_signal_until_released():
    gate = SignalGate()
    try:
        gate.handler(signal.SIGTERM, None)
        raise AssertionError("an open gate raises at once")
    except RunInterrupted as e:
        assert e.signum == signal.SIGTERM
    gate.handler(signal.SIGINT, None)              # raised once: the record is being closed,
    with gate.hold():                              # a second signal is kept, never raised again
        pass
    assert gate.raised and gate.pending == signal.SIGINT
    gate = SignalGate()                            # a fresh run's gate
    written = []
    try:
        with gate.hold():
            gate.handler(signal.SIGINT, None)      # arrives mid-write: waits
            gate.handler(signal.SIGTERM, None)     # the first one is kept
            written.append("step")
        raise AssertionError("a held signal is raised on release")
    except RunInterrupted as e:
        assert e.signum == signal.SIGINT and written == ["step"]
    gate = SignalGate()
    with gate.hold():                              # nothing pending: nothing raised
        written.append("step")
    assert not gate.held and not gate.pending
