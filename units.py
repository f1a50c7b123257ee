"""Memory in one unit: GiB (2^30 bytes, as torch and nvidia-smi report), on screen and in JSON.

Inside, every size is bytes (`*_bytes`); what a user reads is GiB, and a JSON key that holds GiB
ends in `_GiB`. Transfer rates stay GB/s (10^9 bytes/s, as datasheets quote them).
"""
from __future__ import annotations

GiB = float(2**30)


def gib(nbytes: float | None) -> float | None:
    """Bytes -> GiB (None stays None)."""
    return None if nbytes is None else nbytes / GiB


def fmt_gib(nbytes: float | None, digits: int = 2) -> str:
    """'29.52 GiB' ('-' for None)."""
    return "-" if nbytes is None else f"{nbytes / GiB:,.{digits}f} GiB"


def gib_dict(items, digits: int | None = None) -> dict:
    """{name: bytes} -> {name: GiB}."""
    return {k: (round(v / GiB, digits) if digits is not None else v / GiB) for k, v in items.items()}
