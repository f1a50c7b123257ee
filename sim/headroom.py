"""Headroom: what a tier keeps free for what the memory plan does not count, so that "fits"
means "fits with room to spare" (`--gpu-headroom`, `--host-headroom`).

A tier fits when its planned peak is at most capacity - headroom. A headroom is a share of the
capacity ("5%") or a size ("4GiB", tierlab.units' one size parser); a bare number other than 0
is refused (is "5" a share or bytes?).

Defaults, and why:
- GPU: 0. What the runtime adds on the GPU beyond the tensors is already in the plan: the CUDA
  context (the hardware profile's `cuda_context`, measured by `calibrate`) and the caching
  allocator's slack (sim/memory.py ALLOCATOR_SLACK, 7% of the tensors), and the `margin:` line
  says when their ranges straddle the capacity (sim/ranges.py). A positive default would turn
  down runs that train: h200-l/a-3b-fastchat-s3-proposed ran at a predicted 7.66 GiB of its
  8.00 GiB cap (95.8%; lab/cases/h200-l), so a GPU default above 4.2% flips a measured run.
- Host: 5%. The plan counts the training processes only (each rank's baseline RSS, the
  software profile's `process_baseline`, plus DeepSpeed's buffers); the kernel, system
  services, a desktop session, DataLoader workers and the page cache the OS will not give back
  are not in it, and the OOM killer acts before 100%. 5% is 3.0 GiB of a 59.6 GiB workstation
  (about a desktop session plus the kernel) and 93 GiB of a DGX A100's 2 TB. The measured runs
  reach at most 63% of their host's RAM, so no measured verdict moves.
- NVMe: none (preflight checks the swap path's free space on the machine itself).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from tierlab.errors import ConfigError
from tierlab.units import fmt_gib, parse_size

_NUMBER = re.compile(r"^\s*[-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?\s*$")
_SHARE = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*%\s*$")


@dataclass(frozen=True, kw_only=True)
class Margin:
    """One tier's headroom: a share of its capacity or a fixed size (not both)."""

    fraction: float = 0.0
    """Share of the capacity kept free, 0 <= fraction < 1."""
    nbytes: float = 0.0
    """Bytes kept free (>= 0)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.fraction) and 0.0 <= self.fraction < 1.0):
            raise ValueError(f"Margin.fraction must be in [0, 1), got {self.fraction!r}")
        if not (math.isfinite(self.nbytes) and self.nbytes >= 0.0):
            raise ValueError(f"Margin.nbytes must be >= 0, got {self.nbytes!r}")
        if self.fraction and self.nbytes:
            raise ValueError("Margin: a share or a size, not both")

    def bytes_of(self, capacity_bytes: float) -> float:
        """The bytes kept free of a tier of this capacity (5% of 59.6 GiB = 2.98 GiB)."""
        return self.nbytes if self.nbytes else self.fraction * capacity_bytes

    def text(self) -> str:
        """'5%', '4.00 GiB' or '0' (how the output names it)."""
        if self.nbytes:
            return fmt_gib(self.nbytes)
        return f"{self.fraction * 100:g}%" if self.fraction else "0"


@dataclass(frozen=True, kw_only=True)
class Headroom:
    """Per tier, what the fit verdict keeps free."""

    gpu: Margin = Margin()
    host: Margin = Margin(fraction=0.05)
    nvme: Margin = Margin()

    def of(self, tier: str) -> Margin:
        return getattr(self, tier)


    def check(self, hardware) -> "Headroom":
        """ConfigError when a size leaves nothing of its tier (--gpu-headroom 16GiB of 8 GiB)."""
        for tier, cap in (("gpu", hardware.gpu.hbm_bytes), ("host", hardware.dram_bytes)):
            if self.of(tier).bytes_of(cap) >= cap:
                raise ConfigError(f"--{tier}-headroom {self.of(tier).text()}: the whole "
                                  f"{fmt_gib(cap)} of {tier} memory (nothing would fit)")
        return self


DEFAULT_HEADROOM = Headroom()
"""GPU 0 (context and allocator slack are modelled), host 5%, NVMe 0: the module docstring."""


def parse_margin(text: Any, option: str) -> Margin:
    """'5%' -> 5% of the capacity; '4GiB' -> 4 GiB; '0' or '0%' -> none. ConfigError naming
    `option` for a negative share, a share of 100% or more, a bare number, or text."""
    if isinstance(text, Margin):
        return text
    given = str(text).strip()
    if given in ("0", "0.0"):
        return Margin()
    m = _SHARE.match(given)
    if m:
        share = float(m.group(1))
        if not (math.isfinite(share) and 0.0 <= share < 100.0):
            raise ConfigError(f"{option} {given!r}: a share must be >= 0% and below 100%")
        return Margin(fraction=share / 100.0)
    hint = f"{option} {given!r}: give a share (5%) or a size with its unit (4GiB)"
    if isinstance(text, (int, float, bool)) or _NUMBER.match(given):
        raise ConfigError(f"{hint}, not a bare number")
    try:
        return Margin(nbytes=parse_size(given, option))
    except ConfigError:
        raise ConfigError(hint) from None


def headroom_of(gpu: Any = None, host: Any = None, base: Headroom = DEFAULT_HEADROOM) -> Headroom:
    """The Headroom of `--gpu-headroom`/`--host-headroom` (None: the default's)."""
    return Headroom(gpu=base.gpu if gpu is None else parse_margin(gpu, "--gpu-headroom"),
                    host=base.host if host is None else parse_margin(host, "--host-headroom"),
                    nvme=base.nvme)
