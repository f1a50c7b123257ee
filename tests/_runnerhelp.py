"""Shared bits of the runner tests: the tiny model, a real-disk swap directory, the CLI command."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TINY = str(REPO / "runner" / "data" / "tiny-llama.yaml")
SAMPLE = str(REPO / "runner" / "data" / "alpaca_sample.jsonl")


def swap_root() -> Path:
    """A directory on a real disk (not tmpfs): $TIERLAB_TEST_SWAP, else /var/tmp."""
    from tierlab.runner.probes import fs_type

    base = Path(os.environ.get("TIERLAB_TEST_SWAP", "/var/tmp"))
    if fs_type(base) in ("tmpfs", "ramfs"):
        pytest.skip(f"{base} is {fs_type(base)}; set TIERLAB_TEST_SWAP to a disk directory")
    d = base / f"tierlab-test-{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True)
    return d


# ZeRO-3 with parameters and optimizer on NVMe through libaio; several optimizer sub-groups;
# parameters beyond max_in_cpu really on disk, made to work with stage3_max_reuse_distance=0
NVME_SETS = ["zero_optimization.offload_param.device=nvme",
             "zero_optimization.offload_param.max_in_cpu=1e6",
             "zero_optimization.stage3_max_reuse_distance=0",
             "zero_optimization.sub_group_size=2e6"]


def tierlab(*args: str, **kw) -> list[str]:
    return [sys.executable, "-m", "tierlab.cli", *args]


def run_cli(*args: str, timeout: float = 240, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    return subprocess.run(tierlab(*args), capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=REPO, **kw)


def sets(*items: str) -> list[str]:
    out = []
    for item in items:
        out += ["--set", item]
    return out


def mini_llama(name: str) -> str:
    """A 0.1 M-parameter Llama profile (YAML text) named `name`: a real model the runner trains
    in seconds on the CPU (the signal and fault tests write it to a file)."""
    return f"""kind: model
name: {name}
source: "tierlab runner test model: 0.1 M parameters"
n_layers: 1
hidden: 64
ffn: 128
n_heads: 2
n_kv_heads: 2
vocab: 256
seq_len: 32
max_seq_len: 64
gated_mlp: true
tie_embeddings: false
norm: rmsnorm
"""
