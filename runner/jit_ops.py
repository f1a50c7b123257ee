"""DeepSpeed's C++ ops that a run JIT-builds on first use (torch.utils.cpp_extension.load under
DeepSpeed's op builders): an op not built yet on this machine is built before
deepspeed.initialize, said on stderr before ("building ... about N min") and after ("built ...
in X s"), since the first build of async_io or cpu_adam takes minutes and DeepSpeed prints
nothing meanwhile. An op already built is left to DeepSpeed to load."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

BUILDERS = {"deepspeed_shm_comm": "ShareMemCommBuilder", "cpu_adam": "CPUAdamBuilder",
            "fused_adam": "FusedAdamBuilder", "async_io": "AsyncIOBuilder"}
"""Op name (its folder under torch's extension dir) -> DeepSpeed's builder class name."""

BUILD_MINUTES = {"deepspeed_shm_comm": 1, "cpu_adam": 1, "fused_adam": 2, "async_io": 2}
"""About how long a first build takes. Measured (ninja logs of ~/.cache/torch_extensions on a
loaded 2-core CPU box, DeepSpeed 0.19.8): async_io 133 s, fused_adam 39 s, cpu_adam 34 s,
deepspeed_shm_comm 27 s; fused_adam's CUDA build (nvcc) is the slower one on a GPU host."""


def op_built(folder: Path, name: str) -> bool:
    """Op `name` is JIT-built in `folder` (torch's build folder of that op): its `name.so` is
    there, not older than the folder's build.ninja (written before every build; ninja rebuilds
    outputs older than it), and no build holds the folder's lock (one under way or killed)."""
    so, ninja = folder / f"{name}.so", folder / "build.ninja"
    if not so.is_file() or (folder / "lock").exists():
        return False
    return not ninja.is_file() or so.stat().st_mtime >= ninja.stat().st_mtime


def ops_needed(ds_config: Mapping[str, Any]) -> list[str]:
    """The ops deepspeed.initialize loads for `ds_config`: the shared-memory comm op
    (init_distributed on the CPU accelerator; DeepSpeed skips it where incompatible), CPU Adam
    for an optimizer offloaded to cpu/nvme else fused Adam (DeepSpeed's Adam/AdamW), and
    async_io for any NVMe offload."""
    zero = ds_config.get("zero_optimization") or {}
    devices = {(zero.get(k) or {}).get("device") for k in ("offload_param", "offload_optimizer")}
    optimizer = str((ds_config.get("optimizer") or {}).get("type", "")).lower()
    out = ["deepspeed_shm_comm"]
    if optimizer in ("adam", "adamw"):
        offloaded = (zero.get("offload_optimizer") or {}).get("device") in ("cpu", "nvme")
        out.append("cpu_adam" if offloaded else "fused_adam")
    if "nvme" in devices:
        out.append("async_io")
    return out


def builders(names: Iterable[str]) -> list:
    """The accelerator's builder of each op that it has and that is compatible here (the
    others are DeepSpeed's to skip or refuse, as without tierlab)."""
    from deepspeed.accelerator import get_accelerator

    out = []
    for name in names:
        b = get_accelerator().create_op_builder(BUILDERS[name])
        if b is not None and b.is_compatible(False):
            out.append(b)
    return out


def cached(builder) -> bool:
    """The op is installed prebuilt with DeepSpeed, or JIT-built in torch's extension dir."""
    from deepspeed.git_version_info import installed_ops
    from torch.utils.cpp_extension import _get_build_directory

    if installed_ops.get(builder.name, False):
        return True
    return op_built(Path(_get_build_directory(builder.name, verbose=False)), builder.name)


def say_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def build_missing(ops: Iterable, say: Callable[[str], None] = say_stderr,
                  is_cached: Callable[[Any], bool] = cached,
                  clock: Callable[[], float] = time.perf_counter,
                  check_lock: Callable[[str], None] | None = None) -> dict[str, float]:
    """Load (so build) each op builder in `ops` that `is_cached` says is not built yet, saying
    it before and after; returns {op name: build seconds}. A failed build raises, as it would
    inside deepspeed.initialize; so does a stale build lock of the op (`check_lock`, default
    preflight.refuse_stale_lock: the load would wait on it forever)."""
    if check_lock is None:
        from tierlab.runner.preflight import refuse_stale_lock as check_lock
    took = {}
    for op in ops:
        if is_cached(op):
            continue
        check_lock(op.name)
        say(f"building DeepSpeed's {op.name} op (first use on this machine; about "
            f"{BUILD_MINUTES.get(op.name, 2)} min) ...")
        t0 = clock()
        op.load(verbose=False)
        took[op.name] = clock() - t0
        say(f"built {op.name} in {took[op.name]:.0f} s")
    return took
