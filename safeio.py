"""The one input and output layer (issue 16): bad input is one ConfigError line, and nothing that
tierlab writes is ever half written or lost.

Input: every file tierlab reads goes through `read_text` (UTF-8, size-capped, OSError -> one line),
`read_data` (JSON or YAML; NaN, Infinity and 1e400 refused with the key path named) or
`read_jsonl` (a line cut by a kill is skipped and counted, never fatal).

Output: `check_writable` before long work (a destination that cannot be written is refused before
minutes of simulation, training or measuring), then `atomic_target` / `write_text`: a temp file
in the same folder, flushed, then `os.replace`, so a reader sees the old file or the new one,
never half of one. `exclusive` holds an flock on a sidecar lock file, so two writers of one
results file refuse instead of overwriting each other.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from tierlab.errors import ConfigError

MAX_INPUT_BYTES = 1 << 30
"""Largest file tierlab reads (1 GiB): profiles and configs are kB, measurements MB."""


def _why(e: OSError) -> str:
    return e.strerror or type(e).__name__


# ----------------------------------------------------------------------------------------------
# input

def read_bytes(path: str | Path) -> bytes:
    """A file's bytes; missing, a folder, unreadable or over MAX_INPUT_BYTES: a ConfigError."""
    path = Path(path)
    try:
        if path.is_dir():
            raise ConfigError(f"{path}: is a folder, not a file")
        if not path.exists():
            raise ConfigError(f"{path}: no such file")
        size = path.stat().st_size
        if size > MAX_INPUT_BYTES:
            raise ConfigError(f"{path}: {size / 2**30:.1f} GiB is too large to be a tierlab input")
        return path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {_why(e)}") from None


def decode(data: bytes, where: str) -> str:
    """UTF-8 (a BOM is allowed) -> str; other bytes name the offset."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ConfigError(f"{where}: not UTF-8 text (byte 0x{data[e.start]:02x} on line {line}); "
                          "save it as UTF-8") from None


def read_text(path: str | Path) -> str:
    return decode(read_bytes(path), str(path))


def first_non_finite(obj: Any, path: str = "") -> tuple[str, float] | None:
    """(dotted key, value) of the first NaN/inf float in nested dicts and lists, else None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return path or "value", obj
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = ((f"[{i}]", v) for i, v in enumerate(obj))
    else:
        return None
    for key, value in items:
        key = str(key)
        sub = f"{path}{key}" if key.startswith("[") else f"{path}.{key}" if path else key
        found = first_non_finite(value, sub)
        if found:
            return found
    return None


def check_finite(obj: Any, where: str) -> Any:
    """`obj` unchanged; a NaN/Infinity/overflowing number anywhere in it is a ConfigError."""
    found = first_non_finite(obj)
    if found:
        raise ConfigError(f"{where}: {found[0]} = {found[1]} is not a finite number")
    return obj


def loads_json(text: str, where: str, *, finite: bool = True) -> Any:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where}: malformed JSON at line {e.lineno} column {e.colno}: "
                          f"{e.msg}") from None
    except RecursionError:
        raise ConfigError(f"{where}: JSON nested too deeply") from None
    return check_finite(data, where) if finite else data


def loads_yaml(text: str, where: str, *, finite: bool = True) -> Any:
    import yaml

    try:
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{where}: malformed YAML{at}: {getattr(e, 'problem', None) or e}") \
            from None
    except (ValueError, TypeError, RecursionError) as e:    # e.g. an impossible timestamp
        raise ConfigError(f"{where}: malformed YAML: {e}") from None
    return check_finite(data, where) if finite else data


def read_data(path: str | Path, *, finite: bool = True) -> Any:
    """A YAML or JSON file (by suffix: .json is JSON, anything else YAML) -> Python data."""
    path = Path(path)
    text = read_text(path)
    if path.suffix == ".json":
        return loads_json(text, str(path), finite=finite)
    return loads_yaml(text, str(path), finite=finite)


def read_jsonl(path: str | Path) -> tuple[list[Any], list[int]]:
    """(records, numbers of the lines skipped): a line cut by a kill, or any line that is not
    JSON, is skipped and reported, never fatal. NaN is kept (a diverged loss is a fact)."""
    path = Path(path)
    records, torn = [], []
    for n, line in enumerate(read_text(path).splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except (json.JSONDecodeError, RecursionError):
                torn.append(n)
    return records, torn


# ----------------------------------------------------------------------------------------------
# output

def _nearest_existing(path: Path) -> Path:
    for p in (path, *path.parents):
        if os.path.lexists(p):
            return p
    return Path(".")


def check_writable(path: str | Path, what: str = "--out", *, folder: bool = False) -> Path:
    """Refuse now, before any long work, a destination that cannot be written: `path` must not
    be a folder (a file when `folder`), and the nearest existing folder on its way must accept a
    new file (probed by creating and removing one: permission bits lie for root and for
    read-only mounts)."""
    if not str(path).strip():
        raise ConfigError(f"{what}: empty path")
    path = Path(path).expanduser()
    if path.exists():
        if folder and not path.is_dir():
            raise ConfigError(f"{what} {path}: is a file, expected a folder")
        if not folder and path.is_dir():
            raise ConfigError(f"{what} {path}: is a folder, expected a file name")
    base = _nearest_existing(path if folder else path.parent)
    if not base.is_dir():
        raise ConfigError(f"{what} {path}: {base} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".tierlab-probe-", dir=base)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ConfigError(f"{what} {path}: cannot write in {base}: {_why(e)}") from None
    return path


@contextlib.contextmanager
def atomic_target(path: str | Path, what: str = "output") -> Iterator[Path]:
    """Yield a temp path beside `path` (same suffix) for a writer such as savefig or to_parquet;
    on success it is fsynced and renamed onto `path`, on failure removed."""
    path = Path(path).expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}",
                                    dir=path.parent)
        os.close(fd)
    except OSError as e:
        raise ConfigError(f"{what} {path}: cannot write: {_why(e)}") from None
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as e:
        raise ConfigError(f"{what} {path}: cannot write: {_why(e)}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | Path, text: str, what: str = "output") -> None:
    """Write UTF-8 text atomically (temp file + rename): never a half-written file."""
    with atomic_target(path, what) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | Path, obj: Any, what: str = "output") -> None:
    write_text(path, json.dumps(obj, indent=2, default=str) + "\n", what)


def free_folder(base: str | Path) -> Path:
    """`base`, or `base-2`, `base-3`, ... whichever does not exist yet (default run folders
    never collide, even two in the same second)."""
    base = Path(base)
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


@contextlib.contextmanager
def exclusive(path: str | Path, what: str = "--out") -> Iterator[None]:
    """Hold an exclusive flock on `.NAME.lock` beside `path` for the block. Another tierlab
    process holding it: a ConfigError naming it (refuse, never wait forever or interleave)."""
    path = Path(path).expanduser()
    lock = path.with_name(f".{path.name}.lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
                os.close(fd)
                if e.errno in (errno.EAGAIN, errno.EACCES):
                    raise ConfigError(f"{what} {path}: another tierlab process (pid {holder}) is "
                                      "writing it; wait for it to finish, then run again to "
                                      "resume, or choose another file") from None
                raise
            # the holder before us may have removed the lock file: lock the file that is there
            if os.path.exists(lock) and os.stat(lock).st_ino == os.fstat(fd).st_ino:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
    except OSError as e:
        raise ConfigError(f"{what} {path}: cannot lock {lock}: {_why(e)}") from None
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)
