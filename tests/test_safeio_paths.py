"""Issue 34: names from inputs never become paths unsanitised, runs swap only into folders of
their own, a stale JIT-build lock is found, and probes never write through a planted symlink."""
from __future__ import annotations

import os
import time

import pytest

from tierlab.errors import ConfigError
from tierlab.runner.preflight import _o_direct_roundtrip, check_build_locks, stale_build_locks
from tierlab.runner.train import own_swap, remove_swap
from tierlab.safeio import loads_yaml, read_data, safe_name


@pytest.mark.parametrize("name, want", [("../../../../tmp/x", "tmp_x"), ("tiny-llama", "tiny-llama"),
                                        ("a\x00b\nc", "a_b_c"), ("..", "unnamed"),
                                        ("meta-llama/Llama-2-7b", "meta-llama_Llama-2-7b")])
def test_safe_name(name, want):
    assert safe_name(name) == want and "/" not in safe_name(name)
    assert len(safe_name("x" * 300)) == 80


def _nvme_cfg(path):
    return {"zero_optimization": {"stage": 3,
                                  "offload_param": {"device": "nvme", "nvme_path": str(path)},
                                  "offload_optimizer": {"device": "nvme", "nvme_path": str(path)}}}


def test_own_swap_is_unique_and_removes_only_its_own(tmp_path):
    theirs = tmp_path / "zero_stage_3" / "other-run.swp"
    theirs.parent.mkdir()
    theirs.write_text("live swap of another run")
    cfg, own = own_swap(_nvme_cfg(tmp_path))
    cfg2, own2 = own_swap(_nvme_cfg(tmp_path))
    assert len(own) == 1 and own != own2 and own[0].parent == tmp_path
    zero = cfg["zero_optimization"]
    assert zero["offload_param"]["nvme_path"] == zero["offload_optimizer"]["nvme_path"] == str(own[0])
    (own[0] / "zero_stage_3").mkdir()
    assert remove_swap(own) == [str(own[0])]
    assert theirs.exists() and own2[0].exists() and not own[0].exists()


def test_swap_dir_that_is_a_file_refused(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        own_swap(_nvme_cfg(f))


def test_stale_build_lock(tmp_path):
    lock = tmp_path / "py311_cpu" / "async_io" / "lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    assert stale_build_locks(tmp_path) == []          # fresh: a build may be starting
    os.utime(lock, (time.time() - 3600,) * 2)
    assert stale_build_locks(tmp_path) == [lock]
    (p,) = check_build_locks([lock])
    assert p.severity == "error" and f"rm {lock}" in p.line() and "async_io" in p.line()


def test_o_direct_probe_never_follows_a_planted_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    probe = tmp_path / ".probe"
    probe.symlink_to(victim)
    ok, err = _o_direct_roundtrip(probe, 4096)
    assert not ok and victim.read_text() == "keep" and probe.is_symlink()


def test_yaml_budget_and_duplicates(tmp_path):
    with pytest.raises(ConfigError, match="duplicate key 'name'"):
        loads_yaml("name: a\nname: b\n", "m.yaml")
    assert loads_yaml("b: &b {x: 1}\nc:\n  <<: *b\n  x: 2\n", "m.yaml")["c"] == {"x": 2}
    laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdef", "bcdefg"))
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match="billion laughs"):
        loads_yaml(laughs, "m.yaml")
    assert time.monotonic() - t0 < 5
    fifo = tmp_path / "f.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="FIFO"):
        read_data(fifo)
