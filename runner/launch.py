"""Launching: one process in-process (one GPU, or CPU), or several GPUs through DeepSpeed's own
launcher (`deepspeed --num_gpus N [--hostfile H]`) — DeepSpeed's launcher is the distributed
engine; tierlab does not write another."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from tierlab.errors import ConfigError


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_dist_env(environ: dict | None = None) -> dict:
    """Set MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE/LOCAL_RANK for a single in-process rank where
    missing (DeepSpeed's launcher sets them for each of its ranks). Returns what was set."""
    env = os.environ if environ is None else environ
    wanted = {"MASTER_ADDR": "127.0.0.1", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
    set_now = {}
    for key, value in wanted.items():
        if key not in env:
            env[key] = set_now[key] = value
    if "MASTER_PORT" not in env:
        env["MASTER_PORT"] = set_now["MASTER_PORT"] = str(free_port())
    return set_now


def deepspeed_command(spec_path: str | Path, num_gpus: int, hostfile: str | None = None,
                      master_port: int | None = None) -> list[str]:
    """The `deepspeed` launcher command running the runner's worker on every rank."""
    if num_gpus < 1:
        raise ConfigError(f"--gpus must be >= 1, got {num_gpus}")
    exe = shutil.which("deepspeed")
    cmd = [exe] if exe else [sys.executable, "-m", "deepspeed.launcher.runner"]
    if hostfile:
        if not Path(hostfile).is_file():
            raise ConfigError(f"--hostfile {hostfile}: no such file")
        cmd += ["--hostfile", str(hostfile)]
    else:
        cmd += ["--num_gpus", str(num_gpus)]
    cmd += ["--master_port", str(master_port or free_port()),
            "--module", "tierlab.runner.train", "--spec", str(spec_path)]
    return cmd


def launch_deepspeed(spec_path: str | Path, num_gpus: int, hostfile: str | None = None) -> int:
    """Run the worker on N GPUs (or the hostfile's nodes) through DeepSpeed's launcher; returns
    the launcher's exit code. Rank 0 writes the Measurement."""
    return subprocess.call(deepspeed_command(spec_path, num_gpus, hostfile))
