"""Pre-flight: name every problem DeepSpeed would hit, in seconds, before minutes are spent.

Each check is a pure function returning a list of `Problem`s; the two probes (`probe_aio`,
`probe_swap_path`) look at the machine and return plain records the checks judge. Each problem is
one line with its fix. The DeepSpeed rules are read off 0.19.8's source (cited per check) and
reproduced on CPU in tests/test_runner_preflight.py.
"""
from __future__ import annotations

import contextlib
import ctypes.util
import importlib.util
import math
import mmap
import os
import re
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, Mapping

from tierlab.errors import ConfigError
from tierlab.profiles.schema import Model
from tierlab.sim.layout import (ParamLayout, nvme_resident_params, param_layout, swap_file_bytes,
                               optimizer_buffers_needed as buffers_needed)
from tierlab.sim.strategy import Strategy
from tierlab.units import GiB

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Problem:
    check: str
    message: str
    fix: str
    severity: Severity = "error"

    def line(self) -> str:
        return f"{self.severity}: [{self.check}] {self.message}; fix: {self.fix}"


def _gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


# ----------------------------------------------------------------------------------------------
# model/strategy arithmetic: read off the one parameter layout (sim/layout.py)

def _layout(model: Model, strategy: Strategy) -> ParamLayout:
    return param_layout(model, strategy, strategy.data_parallel_size)


def params_per_rank(model: Model, strategy: Strategy) -> int:
    """Elements of one rank's parameter (and optimizer) partition."""
    return math.ceil(_layout(model, strategy).partition_numel)


def nvme_param_tensors(model: Model, strategy: Strategy) -> list[tuple[str, float]]:
    """(name, partition elements) of the parameters that live on NVMe during training: swappable
    partitions (>= max(1 MiB, block_size)) of the sub-groups past max_in_cpu (sim/layout.py)."""
    lay = _layout(model, strategy)
    return [(lay.names[i], lay.parts[i]) for i in nvme_resident_params(lay, strategy)]


def retained_nvme_params(model: Model, strategy: Strategy) -> int:
    """NVMe parameters still holding a swap buffer at the end of the forward pass: ZeRO-3 keeps a
    parameter whose next use is within `stage3_max_reuse_distance` elements of module traversal
    (partitioned_param_coordinator.__params_to_release). Forward then backward (reversed), so
    the distance from a forward use to its backward use is ~2x the elements after it."""
    lay = _layout(model, strategy)
    nvme = set(nvme_resident_params(lay, strategy))
    if not nvme:
        return 0
    d = strategy.zero.stage3_max_reuse_distance
    after, kept = 0, 0
    for i in reversed(range(len(lay.numels))):
        if i in nvme and 2 * after < d:
            kept += 1
        after += lay.numels[i]
    return kept


def swap_bytes_needed(model: Model, strategy: Strategy) -> float:
    """Bytes DeepSpeed writes under the nvme_path(s) per rank (sim/layout.py swap_file_bytes):
    optimizer on NVMe, fp32 p, m, v and the fp32 gradient = 16 B per parameter (1.1e9 x 16 B =
    17.6 GB, the 16.4 GiB seen on the H200 host); params on NVMe, every swappable 16-bit
    partition (zero.Init writes them all, max_in_cpu or not)."""
    return float(sum(swap_file_bytes(_layout(model, strategy), strategy).values()))


def pinned_bytes(model: Model, strategy: Strategy) -> int:
    """Page-locked host memory per rank that DeepSpeed allocates for offload: the memory
    planner's 'pinned:' items (torch-pinned blocks at their power-of-two size, aio-locked swap
    buffers exact; sim/memory_host.py)."""
    from tierlab.sim.memory_host import rank_offload_items

    return int(sum(v for k, v in rank_offload_items(model, strategy).items()
                   if k.startswith("pinned:")))


# ----------------------------------------------------------------------------------------------
# checks (pure)

def tier_fix(tier: str, strategy: Strategy) -> str:
    """What to change when `tier` is over capacity, given where the states already are."""
    if tier == "gpu":
        return ("offload more (--ds-config zero3-cpu or zero3-nvme), lower --micro-batch, or "
                "keep --checkpointing on")
    if tier == "nvme":
        return "free disk space or point nvme_path at a larger drive"
    moves = [f"move the {what} to NVMe" for what, device in
             (("optimizer", strategy.optimizer_device), ("parameters", strategy.param_device))
             if device == "cpu" and (what == "optimizer" or strategy.zero.stage == 3)]
    pinned = any(b.pin_memory for b, device in
                 ((strategy.zero.offload_optimizer, strategy.optimizer_device),
                  (strategy.zero.offload_param, strategy.param_device)) if device != "none")
    fixes = ["; ".join(moves) + " (--ds-config zero3-nvme)" if moves else "",
             "set pin_memory false (pinned buffers round up to a power of two)" if pinned else "",
             "use a host with more RAM or fewer GPUs per node"]
    return ", or ".join(f for f in fixes if f)


def memory_unmodelled(strategy: Strategy) -> Problem | None:
    """A warning in place of the memory plan where the config holds a key whose memory effect
    tierlab does not model (sim/workload.check_memory_supported): DeepSpeed may run it, but the
    plan would be of another config."""
    from tierlab.sim.workload import check_memory_supported

    try:
        check_memory_supported(strategy)
    except ConfigError as e:
        return Problem("memory", f"memory plan skipped: {e}",
                       "judge its memory on the machine (tierlab run), or plan the config "
                       "without that key", "warning")
    return None


def check_memory(plan, strategy: Strategy) -> list[Problem]:
    """The memory planner's verdict, one problem per tier that does not fit."""
    if plan.fits:
        return []
    room = {name: getattr(t, "headroom_bytes", 0.0) for name, t in plan.tiers.items()}
    return [Problem("memory", f"{tier} needs {_gib(t.used_bytes)} of "
                    f"{_gib(t.capacity_bytes - room[tier])}{' usable' if room[tier] else ''} "
                    f"(binding tier: {plan.binding_tier})", tier_fix(tier, strategy))
            for tier, t in plan.tiers.items() if not t.fits]


MOMENT_FIXES = {
    "checkpoint_save": "offload the optimizer (its state is then written from the host), or a "
                       "host with more RAM",
    "model_save_16bit": "set zero_optimization.stage3_gather_16bit_weights_on_model_save false "
                        "and consolidate offline with zero_to_fp32.py",
    "model_load": "ZeRO-3 with the HF integration (only rank 0 reads the weights), or fewer "
                  "ranks per node",
    "checkpoint_load": "resume on a host with more RAM, or the optimizer on NVMe (its files are "
                       "copied, not loaded)"}


def check_moments(plan) -> list[Problem]:
    """A warning per moment outside the step whose host peak does not fit (sim/memory_moments.py):
    training runs, then dies at a save or a resume (none when the step itself does not fit)."""
    if not plan.fits:
        return []
    return [Problem("memory-moment", m.line(), MOMENT_FIXES[m.name], "warning")
            for m in getattr(plan, "moments", ()) if not m.fits]


@dataclass(frozen=True)
class AioStatus:
    libaio: bool
    """libaio's shared library is installed."""
    headers: bool
    """libaio.h is there (DeepSpeed JIT-compiles async_io against it)."""
    built: bool
    """async_io is prebuilt or already JIT-compiled (loads in a second)."""
    loadable: bool | None
    """It loaded (None: not tried because it would JIT-compile first)."""
    detail: str = ""


def check_aio(strategy: Strategy, aio: AioStatus | None) -> list[Problem]:
    if "nvme" not in (strategy.param_device, strategy.optimizer_device) or aio is None:
        return []
    if not aio.libaio or not aio.headers:
        return [Problem("aio", "libaio is missing (DeepSpeed's async_io needs libaio.so and "
                        "libaio.h)", "apt-get install libaio-dev (or set CPATH/LIBRARY_PATH to a "
                        "local libaio, as .gpuhost/install.sh does)")]
    if aio.loadable is False:
        return [Problem("aio", f"DeepSpeed's async_io does not load: {aio.detail}",
                        "run `ds_report`; rebuild with DS_BUILD_AIO=1 or clear "
                        "~/.cache/torch_extensions/*/async_io")]
    if not aio.built:
        return [Problem("aio", "async_io is not built yet; the first run JIT-compiles it "
                        "(about a minute)", "expect the delay, or pre-build with "
                        "`python -c 'from deepspeed.ops.op_builder import AsyncIOBuilder; "
                        "AsyncIOBuilder().load()'`", "warning")]
    return []


@dataclass(frozen=True)
class SwapPathStatus:
    path: str
    exists: bool
    creatable: bool
    """Missing but its nearest existing parent is a writable directory (DeepSpeed makedirs)."""
    is_dir: bool
    writable: bool
    o_direct: bool
    o_direct_error: str
    free_bytes: int | None
    fs_type: str | None


def check_swap_path(st: SwapPathStatus, need_bytes: int, what: str) -> list[Problem]:
    key = f"zero_optimization.{what}.nvme_path"
    if st.exists and not st.is_dir:
        return [Problem("swap-path", f"{key} {st.path} is a file, not a directory",
                        f"--set {key}=<a directory on a local NVMe/ext4/xfs disk>")]
    if not st.exists and not st.creatable:
        return [Problem("swap-path", f"{key} {st.path} does not exist and cannot be created",
                        f"mkdir -p {st.path} (on a local disk) or --set {key}=<existing dir>")]
    if not st.writable:
        return [Problem("swap-path", f"{key} {st.path} is not writable",
                        f"chmod/chown it or --set {key}=<writable dir>")]
    from tierlab.runner.microbench import TMPFS      # the set `calibrate --nvme-path` refuses

    if st.fs_type in TMPFS:
        return [Problem("swap-path", f"{key} {st.path} is on {st.fs_type} (RAM, not a drive: "
                        "the swap files would take host memory, and O_DIRECT is refused there "
                        "before Linux 6.6)", f"--set {key}=<dir on a local NVMe/ext4/xfs disk>")]
    out = []
    if not st.o_direct:
        out.append(Problem("swap-path", f"{key} {st.path} ({st.fs_type}) refuses O_DIRECT "
                           f"({st.o_direct_error}); DeepSpeed's aio opens swap files O_DIRECT",
                           f"--set {key}=<dir on ext4/xfs, not tmpfs/overlay/NFS>, e.g. /var/tmp"))
    need = int(need_bytes * 1.1)
    if st.free_bytes is not None and st.free_bytes < need:
        out.append(Problem("swap-path", f"{key} {st.path} has {_gib(st.free_bytes)} free, the "
                           f"swap files need {_gib(need_bytes)} (+10%)",
                           f"free {_gib(need - st.free_bytes)} or --set {key}=<larger disk>"))
    return out


def check_pinned(model: Model, strategy: Strategy, host_ram_bytes: float,
                 ranks_per_node: int = 1) -> list[Problem]:
    """Pinned (page-locked) memory of all ranks of a node against its RAM (an OOM kill or
    cudaHostAlloc failure otherwise)."""
    pinned = pinned_bytes(model, strategy) * ranks_per_node
    if pinned <= 0.8 * host_ram_bytes:
        return []
    sev: Severity = "error" if pinned > 0.95 * host_ram_bytes else "warning"
    return [Problem("pinned-memory", f"offload pins {_gib(pinned)} of {_gib(host_ram_bytes)} host "
                    f"RAM ({ranks_per_node} rank(s))", "lower offload_optimizer.buffer_count or "
                    "sub_group_size, offload_param.max_in_cpu/buffer_count, or set pin_memory "
                    "false", sev)]


def optimizer_buffers_needed(model: Model, strategy: Strategy) -> int:
    """Swap buffers the optimizer swapper needs for `model`'s sub-groups (sim/layout.py
    optimizer_buffers_needed, the one rule)."""
    return buffers_needed(strategy, len(_layout(model, strategy).groups))


def check_optimizer_buffers(model: Model, strategy: Strategy) -> list[Problem]:
    if strategy.optimizer_device != "nvme":
        return []
    oo, need = strategy.zero.offload_optimizer, optimizer_buffers_needed(model, strategy)
    if oo.buffer_count >= need:
        return []
    mode = "pipeline_read+pipeline_write" if oo.pipeline_read and oo.pipeline_write else (
        "pipeline_read" if oo.pipeline_read else "pipeline_write" if oo.pipeline_write else
        "unpipelined")
    return [Problem("optimizer-swap-buffers", f"offload_optimizer.buffer_count {oo.buffer_count} "
                    f"< {need} needed ({mode}: 4 per sub-group in flight); DeepSpeed fails with "
                    "'PipelinedOptimizerSwapper ran out of swap buffers'",
                    f"--set zero_optimization.offload_optimizer.buffer_count={need}")]


def check_param_buffers(model: Model, strategy: Strategy) -> list[Problem]:
    """NVMe parameters: every partition must fit one buffer (partitioned_param_swapper.get_buffer
    asserts numel <= buffer_size), and the pool must cover the parameters ZeRO-3 keeps between
    uses (default stage3_max_reuse_distance 1e9 keeps most of them: 'Not enough buffers 0 for
    swapping 1', also with 16 buffers on the H200 host)."""
    if strategy.param_device != "nvme":
        return []
    op, z, out = strategy.zero.offload_param, strategy.zero, []
    biggest = math.ceil(max(_layout(model, strategy).parts))
    if biggest > op.buffer_size:
        out.append(Problem("param-swap-buffers", f"offload_param.buffer_size {op.buffer_size:.3g} "
                           f"< the largest parameter partition {biggest:.3g} elements",
                           f"--set zero_optimization.offload_param.buffer_size={biggest}"))
    nvme = nvme_param_tensors(model, strategy)
    if not nvme:
        return out
    kept = retained_nvme_params(model, strategy)
    if kept + 1 > op.buffer_count:
        out.append(Problem(
            "nvme-params", f"{len(nvme)} parameters live on NVMe (beyond max_in_cpu "
            f"{op.max_in_cpu:.3g}) and stage3_max_reuse_distance {z.stage3_max_reuse_distance:.3g}"
            f" keeps {kept} of them in swap buffers, more than buffer_count {op.buffer_count} "
            "allows ('Not enough buffers 0 for swapping 1')",
            "--set zero_optimization.stage3_max_reuse_distance=0 (or max_in_cpu >= "
            f"{params_per_rank(model, strategy):.3g} to keep params in pinned CPU memory)"))
    if z.stage3_prefetch_bucket_size > 0 and op.buffer_count > 8:
        out.append(Problem(
            "nvme-params", f"offload_param.buffer_count {op.buffer_count} with NVMe prefetch on: "
            "DeepSpeed's NVMe prefetcher does not de-duplicate the trace, and with many free "
            "buffers it queues a parameter used twice in a row (lm_head at the forward/backward "
            "turn) twice: 'param N already assigned swap buffer id K'",
            "keep buffer_count <= 8 (default 5) or --set "
            "zero_optimization.stage3_prefetch_bucket_size=0 (synchronous NVMe reads)", "warning"))
    return out


def check_ignored_keys(raw: Mapping) -> list[Problem]:
    """Keys DeepSpeed 0.19.8 ignores inside a block it reads (dsconfig/read.ignored_keys: a
    setting that does nothing, aio.thread_count, a typo): errors, a launch with one is refused.
    Every ignored key, a top-level one too (often another tool's: LLaMA-Factory's
    monitor_config), is already a warning of the config's reading, printed once by every verb;
    preflight does not say it again."""
    from tierlab.dsconfig.read import ignored_keys

    return [Problem("ignored-key", f"{i.key} {i.why}",
                    i.fix or (f"use {i.closest}" if i.closest else "remove it"), "error")
            for i in ignored_keys(raw) if i.in_block]


_ARCH = re.compile(r"^\d+\.\d+(\+PTX)?$")


def check_arch_list(env: Mapping[str, str]) -> list[Problem]:
    """DeepSpeed's JIT builder sorts TORCH_CUDA_ARCH_LIST by int() of each dotted part
    (op_builder/builder.py compute_capability_args): '9.0a' -> "invalid literal for int() with
    base 10: '0a'"."""
    value = env.get("TORCH_CUDA_ARCH_LIST")
    if not value:
        return []
    bad = [cc for cc in re.split(r"[;\s]+", value.strip()) if cc and not _ARCH.match(cc)]
    if not bad:
        return []
    fixed = ";".join(re.sub(r"[a-zA-Z]+$", "", cc.split("+")[0]) + ("+PTX" if "+PTX" in cc else "")
                     for cc in re.split(r"[;\s]+", value.strip()) if cc)
    return [Problem("cuda-arch", f"TORCH_CUDA_ARCH_LIST={value!r}: DeepSpeed's JIT builder cannot "
                    f"parse {bad[0]!r} (ValueError: invalid literal for int())",
                    f"export TORCH_CUDA_ARCH_LIST=\"{fixed}\"")]


# ----------------------------------------------------------------------------------------------
# probes (look at the machine; no other side effects)

def probe_aio(load: bool = True) -> AioStatus:
    """libaio present; DeepSpeed's async_io prebuilt/JIT-built; load it only when built."""
    lib = ctypes.util.find_library("aio") is not None
    headers = any(Path(d, "libaio.h").is_file() for d in
                  ["/usr/include", "/usr/local/include",
                   *os.environ.get("CPATH", "").split(":")] if d)
    try:
        from deepspeed.ops.op_builder import AsyncIOBuilder
    except Exception as e:  # noqa: BLE001
        return AioStatus(lib, headers, False, False, f"deepspeed not importable: {e}")
    b = AsyncIOBuilder()
    built = importlib.util.find_spec(b.absolute_name()) is not None
    if not built:
        from torch.utils.cpp_extension import _get_build_directory

        d = Path(_get_build_directory(b.name, verbose=False))
        built = any(d.glob(f"{b.name}*.so"))
    loadable = None
    if built and load and lib:
        try:
            b.load(verbose=False)
            loadable = True
        except Exception as e:  # noqa: BLE001
            return AioStatus(lib, headers, built, False, f"{type(e).__name__}: {e}")
    return AioStatus(lib, headers, built, loadable)


LOCK_GRACE_S = 120.0
"""A JIT-build lock younger than this is taken as a build still starting (torch's FileBaton
file holds no pid to ask)."""


def torch_extensions_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where torch JIT-builds ops: $TORCH_EXTENSIONS_DIR, else ~/.cache/torch_extensions."""
    env = os.environ if env is None else env
    return Path(env.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions")


def _build_activity() -> tuple[list[Path], str]:
    """(every process's working folder, all command lines joined): what a live build shows."""
    cwds, cmds = [], []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cwds.append(Path(os.readlink(proc / "cwd")))
        with contextlib.suppress(OSError):
            cmds.append((proc / "cmdline").read_bytes().replace(b"\0", b" ")
                        .decode(errors="replace"))
    return cwds, "\n".join(cmds)


def stale_build_locks(root: Path | None = None, grace_s: float = LOCK_GRACE_S) -> list[Path]:
    """`ROOT/<py_cu_tag>/<op>/lock` files (torch's FileBaton of a JIT op build; `ROOT/<op>/lock`
    under $TORCH_EXTENSIONS_DIR, which torch uses without the tag) that no live process holds:
    older than `grace_s`, and no process works in or names the op's build folder. A build
    killed mid-way leaves one, and every later load of the op waits on it forever."""
    root = torch_extensions_dir() if root is None else root
    locks = [p for p in [*root.glob("*/lock"), *root.glob("*/*/lock")]
             if p.is_file() and not p.is_symlink()
             and time.time() - p.stat().st_mtime > grace_s]
    if not locks:
        return []
    cwds, cmds = _build_activity()
    return [lock for lock in locks
            if str(lock.parent) not in cmds
            and not any(c == lock.parent or lock.parent in c.parents for c in cwds)]


def check_build_locks(locks: list[Path]) -> list[Problem]:
    return [Problem("jit-lock", f"{lock}: a JIT build lock of DeepSpeed's {lock.parent.name} op "
                    "with no live builder (a killed build); loading the op would wait on it "
                    "forever", f"rm {lock}") for lock in locks]


def refuse_stale_lock(op: str, root: Path | None = None) -> None:
    """Raise a ConfigError naming `op`'s stale JIT-build lock, if it has one: call before
    loading the op, whose load would otherwise wait on the lock forever."""
    from tierlab.errors import ConfigError

    for lock in stale_build_locks(root):
        if lock.parent.name == op:
            raise ConfigError(check_build_locks([lock])[0].line())


def _nearest_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def probe_swap_path(path: str, block_bytes: int = 1 << 20) -> SwapPathStatus:
    """Exists / creatable / writable, and write + read one O_DIRECT block in it (or in its
    nearest existing parent, on the same filesystem), then remove the test file."""
    from tierlab.runner.probes import fs_type

    p = Path(path).expanduser()
    exists, is_dir = p.exists(), p.is_dir()
    base = p if is_dir else _nearest_existing(p.parent if not exists else p)
    creatable = (not exists) and base.is_dir() and os.access(base, os.W_OK)
    writable = (is_dir and os.access(p, os.W_OK)) or creatable
    free = shutil.disk_usage(base).free if base.exists() else None
    ok, err = False, "not tested"
    if writable and base.is_dir():
        name = f".tierlab-odirect-{os.getpid()}-{os.urandom(4).hex()}"
        ok, err = _o_direct_roundtrip(base / name, block_bytes)
    return SwapPathStatus(str(p), exists, creatable, is_dir, bool(writable), ok, err, free,
                          fs_type(base))


def _o_direct_roundtrip(test_file: Path, nbytes: int) -> tuple[bool, str]:
    buf = mmap.mmap(-1, nbytes)        # page-aligned, as O_DIRECT requires
    buf.write(b"\xa5" * nbytes)
    created = False
    try:
        # O_EXCL | O_NOFOLLOW: a file or symlink planted at the name is never written through
        fd = os.open(test_file, os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_WRONLY
                     | getattr(os, "O_DIRECT", 0), 0o600)
        created = True
        try:
            os.write(fd, buf)
        finally:
            os.close(fd)
        fd = os.open(test_file, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
        try:
            back = mmap.mmap(-1, nbytes)
            n = os.readv(fd, [back])
        finally:
            os.close(fd)
        if n != nbytes or back[:16] != b"\xa5" * 16:
            return False, f"read back {n} of {nbytes} bytes"
        return True, ""
    except OSError as e:
        return False, f"{e.strerror or e} (errno {e.errno})"
    finally:
        if created:           # only the file this probe made, never one planted there
            with contextlib.suppress(OSError):
                test_file.unlink()


# ----------------------------------------------------------------------------------------------
# all together

def effective_hardware(hardware, *, gpu_mem_cap_bytes: float | None = None,
                       host_ram_bytes: float | None = None):
    """The profile with the emulated card size (--gpu-mem-cap) and this host's real RAM."""
    if gpu_mem_cap_bytes:
        hardware = replace(hardware, gpu=replace(hardware.gpu, hbm_bytes=float(gpu_mem_cap_bytes)))
    if host_ram_bytes:
        hardware = replace(hardware, dram_bytes=float(host_ram_bytes))
    return hardware


def run_preflight(hardware, model: Model, strategy: Strategy, *, env: Mapping[str, str] | None = None,
                  host_ram_bytes: float | None = None, gpu_mem_cap_bytes: float | None = None,
                  check_memory_plan: bool = True, probe: bool = True, local_ram: bool = True,
                  software=None, headroom=None) -> list[Problem]:
    """Every check for one launch. `probe=False` skips the machine probes (aio, swap path).
    Host RAM: `host_ram_bytes`, else this machine's when `local_ram` (and probing), else the
    profile's. `software`: as the simulator's (default: the shipped one, sim/host_costs);
    `headroom`: what each tier keeps free (sim/headroom.py; None: the default)."""
    from tierlab.runner.probes import ram_bytes
    from tierlab.sim.memory import plan_memory

    env = os.environ if env is None else env
    ram = host_ram_bytes or (ram_bytes() if probe and local_ram else hardware.dram_bytes)
    problems: list[Problem] = []
    unmodelled = memory_unmodelled(strategy) if check_memory_plan else None
    if unmodelled:
        problems.append(unmodelled)
    elif check_memory_plan:
        hw = effective_hardware(hardware, gpu_mem_cap_bytes=gpu_mem_cap_bytes, host_ram_bytes=ram)
        plan = plan_memory(hw, model, strategy, software=software, headroom=headroom)
        problems += check_memory(plan, strategy) + check_moments(plan)
    problems += check_ignored_keys(strategy.raw)
    problems += check_arch_list(env)
    problems += check_pinned(model, strategy, ram, hardware.gpus_per_node)
    problems += check_optimizer_buffers(model, strategy)
    problems += check_param_buffers(model, strategy)
    stale = stale_build_locks() if probe else []
    problems += check_build_locks(stale)
    if probe and "nvme" in (strategy.param_device, strategy.optimizer_device):
        paths = _check_swap_paths(model, strategy)
        refused = any(p.severity == "error" for p in paths)
        # a refused swap path (tmpfs, unwritable) is said before DeepSpeed's async_io is loaded
        # (the load may JIT-build it: minutes)
        problems += [] if stale or refused else check_aio(strategy, probe_aio())
        problems += paths
    return problems


def _check_swap_paths(model: Model, strategy: Strategy) -> list[Problem]:
    """Each distinct nvme_path against the swap bytes of everything written there (all ranks of
    the node write under the same path)."""
    z, out = strategy.zero, []
    files = swap_file_bytes(_layout(model, strategy), strategy)
    need: dict[str, list] = {}
    for what, path, keys in (("offload_optimizer", z.offload_optimizer.nvme_path,
                              ("optimizer_p_m_v_fp32", "grads_fp32")),
                             ("offload_param", z.offload_param.nvme_path, ("params_16bit",))):
        nbytes = sum(files.get(k, 0.0) for k in keys)
        if nbytes:
            need.setdefault(path, [what, 0.0])[1] += nbytes
    for path, (what, nbytes) in need.items():
        out += check_swap_path(probe_swap_path(path), nbytes * strategy.data_parallel_size, what)
    return out
