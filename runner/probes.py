"""Probes: host facts, library versions, the block device under a path (/proc/diskstats), swap
file bytes, and a ~10 Hz sampler thread (NVML utilisation/memory/PCIe, psutil RSS/CPU).

Every CUDA/NVML call is guarded: on a machine without a GPU the GPU fields are simply absent.
"""
from __future__ import annotations

import gc
import logging
import os
import platform
import shutil
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

SECTOR_BYTES = 512   # /proc/diskstats counts 512-byte sectors whatever the device's block size


# ----------------------------------------------------------------------------------------------
# block devices and swap files

def block_device(path: str | os.PathLike) -> str | None:
    """Name of the block device (as in /proc/diskstats, e.g. 'vda', 'nvme0n1p2') holding `path`,
    or None (tmpfs, overlay without a device, not Linux)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        dev = os.stat(p).st_dev
    except OSError:
        return None
    major, minor = os.major(dev), os.minor(dev)
    sys_link = Path(f"/sys/dev/block/{major}:{minor}")
    if sys_link.exists():
        return sys_link.resolve().name
    for line in _diskstats_lines():          # fall back to matching major:minor
        parts = line.split()
        if len(parts) > 3 and int(parts[0]) == major and int(parts[1]) == minor:
            return parts[2]
    return None


def _diskstats_lines() -> list[str]:
    try:
        return Path("/proc/diskstats").read_text().splitlines()
    except OSError:
        return []


def disk_bytes(device: str | None) -> tuple[int, int] | None:
    """(read bytes, written bytes) of a block device since boot, from /proc/diskstats."""
    if not device:
        return None
    for line in _diskstats_lines():
        parts = line.split()
        if len(parts) > 9 and parts[2] == device:
            # fields: major minor name reads merged sectors_read ms writes merged sectors_written
            return int(parts[5]) * SECTOR_BYTES, int(parts[9]) * SECTOR_BYTES
    return None


def dir_bytes(path: str | os.PathLike) -> int:
    """Apparent size of all files under `path` (0 if missing)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


# ----------------------------------------------------------------------------------------------
# host facts and versions

def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_facts() -> list[dict]:
    """Name, memory, driver, PCIe link of each visible GPU (NVML; empty without one)."""
    nvml = _nvml()
    if nvml is None:
        return []
    out = []
    try:
        driver = nvml.nvmlSystemGetDriverVersion()
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            info = {"index": i, "name": nvml.nvmlDeviceGetName(h), "driver": driver,
                    "memory_bytes": int(nvml.nvmlDeviceGetMemoryInfo(h).total)}
            for key, fn in (("pcie_gen", nvml.nvmlDeviceGetCurrPcieLinkGeneration),
                            ("pcie_width", nvml.nvmlDeviceGetCurrPcieLinkWidth)):
                try:
                    info[key] = int(fn(h))
                except Exception:  # noqa: BLE001 - not every board reports it
                    pass
            out.append(info)
    except Exception as e:  # noqa: BLE001
        log.info("NVML facts unavailable: %s", e)
    return out


def ram_bytes() -> int:
    """Physical RAM of this host: psutil where installed, else sysconf (a core install, without
    the runner extra, has no psutil, and preflight must still work there)."""
    try:
        import psutil
    except ImportError:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(psutil.virtual_memory().total)


def physical_cores() -> int | None:
    """Physical CPU cores (psutil), None where psutil is not installed or cannot tell."""
    try:
        import psutil
    except ImportError:
        return None
    return psutil.cpu_count(logical=False)


def host_facts(swap_paths: list[str] | tuple[str, ...] = ()) -> dict:
    """GPU name/driver, CPU model, cores, RAM, and the disk under each swap path."""
    import psutil

    facts = {"hostname": platform.node(), "os": f"{platform.system()} {platform.release()}",
             "cpu_model": _cpu_model(), "cpu_cores_physical": psutil.cpu_count(logical=False),
             "cpu_cores_logical": psutil.cpu_count(logical=True),
             "ram_bytes": int(psutil.virtual_memory().total), "gpus": gpu_facts(), "disks": {}}
    try:
        facts["cpu_affinity"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    for path in swap_paths:
        existing = Path(path)
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        usage = shutil.disk_usage(existing)
        facts["disks"][str(path)] = {"device": block_device(path), "total_bytes": usage.total,
                                     "free_bytes": usage.free, "fs_type": fs_type(path)}
    return facts


def fs_type(path: str | os.PathLike) -> str | None:
    """Filesystem type of the mount holding `path` (longest matching mount point)."""
    p = str(Path(path).resolve())
    best, kind = "", None
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3:
                mnt = parts[1].replace("\\040", " ")
                if (p == mnt or p.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                    best, kind = mnt, parts[2]
    except OSError:
        return None
    return kind


def library_versions() -> dict:
    """Versions of everything that changes a measurement."""
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for dist in ("torch", "deepspeed", "transformers", "tierlab", "psutil", "nvidia-ml-py"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    try:
        import torch

        out["cuda"] = str(torch.version.cuda)
        if torch.cuda.is_available():
            out["cudnn"] = str(torch.backends.cudnn.version())
    except Exception:  # noqa: BLE001
        pass
    return out


# ----------------------------------------------------------------------------------------------
# the sampler thread

_NVML = None


def _nvml():
    """pynvml, initialised once; None without the library or a driver."""
    global _NVML
    if _NVML is False:
        return None
    if _NVML is None:
        try:
            import pynvml

            pynvml.nvmlInit()
            _NVML = pynvml
        except Exception:  # noqa: BLE001 - no driver, no library
            _NVML = False
            return None
    return _NVML


class Sampler:
    """Samples at `interval_s` in a daemon thread: NVML utilisation, memory used and PCIe TX/RX
    of one GPU; process RSS (+children) and CPU%; bytes of the block device under the swap path.

    NVML's PCIe throughput counter is a 20 ms window reported in KB/s; stored as bytes/s."""

    def __init__(self, interval_s: float = 0.1, gpu_index: int | None = None,
                 swap_device: str | None = None, max_samples: int = 200_000):
        import psutil

        self.interval_s = interval_s
        self.samples: list[dict] = []
        self.max_samples = max_samples
        self._proc = psutil.Process()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._device = swap_device
        self._disk0 = disk_bytes(swap_device)
        self._t0 = time.time()
        self._handle = None
        nvml = _nvml() if gpu_index is not None else None
        if nvml is not None:
            try:
                self._handle = nvml.nvmlDeviceGetHandleByIndex(gpu_index)
            except Exception:  # noqa: BLE001
                self._handle = None

    def start(self) -> "Sampler":
        self._proc.cpu_percent(None)
        self._thread = threading.Thread(target=self._loop, name="tierlab-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[dict]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        return self.samples

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            if len(self.samples) < self.max_samples:
                try:
                    self.samples.append(self.sample())
                except Exception as e:  # noqa: BLE001 - a probe must never kill the run
                    log.debug("sample failed: %s", e)

    def rss_bytes(self) -> int:
        rss = self._proc.memory_info().rss
        try:
            for child in self._proc.children(recursive=True):
                rss += child.memory_info().rss
        except Exception:  # noqa: BLE001
            pass
        return rss

    def sample(self) -> dict:
        import psutil

        s = {"t": round(time.time() - self._t0, 3), "host_rss_bytes": self.rss_bytes(),
             "process_cpu_percent": self._proc.cpu_percent(None),
             "host_cpu_percent": psutil.cpu_percent(None)}
        rw = disk_bytes(self._device)
        if rw and self._disk0:       # since the sampler started
            s["disk_read_bytes"] = rw[0] - self._disk0[0]
            s["disk_written_bytes"] = rw[1] - self._disk0[1]
        if self._handle is not None:
            nvml = _NVML
            util = nvml.nvmlDeviceGetUtilizationRates(self._handle)
            s["gpu_util_percent"] = util.gpu
            s["gpu_mem_util_percent"] = util.memory
            s["gpu_memory_used_bytes"] = int(nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
            s["pcie_tx_Bps"] = 1024 * nvml.nvmlDeviceGetPcieThroughput(
                self._handle, nvml.NVML_PCIE_UTIL_TX_BYTES)
            s["pcie_rx_Bps"] = 1024 * nvml.nvmlDeviceGetPcieThroughput(
                self._handle, nvml.NVML_PCIE_UTIL_RX_BYTES)
        return s


# ----------------------------------------------------------------------------------------------
# Python's garbage collector

class GcClock:
    """Time the training process spends in Python's cyclic garbage collector, by generation,
    through `gc.callbacks` (a full collection walks every tracked object: with DeepSpeed and
    transformers loaded that is millions, and it stalls the Python thread that feeds the GPU).

    `take()` returns what was collected since the previous `take()`: seconds and the number of
    collections of each generation."""

    def __init__(self):
        self._t0 = 0.0
        self.seconds = 0.0
        self.collections = [0, 0, 0]

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        self.seconds += time.perf_counter() - self._t0
        gen = int(info.get("generation", 0))
        if 0 <= gen < len(self.collections):
            self.collections[gen] += 1

    def start(self) -> "GcClock":
        gc.callbacks.append(self._callback)
        return self

    def stop(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def take(self) -> dict:
        seconds, collections = self.seconds, self.collections
        self.seconds, self.collections = 0.0, [0, 0, 0]     # before allocating anything
        return {"gc_s": seconds, "gc_collections": collections}
