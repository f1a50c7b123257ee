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
import re
import stat
import tempfile
from pathlib import Path
from typing import Any, Iterator

from tierlab.errors import ConfigError

MAX_INPUT_BYTES = 1 << 30
"""Largest file tierlab reads (1 GiB): profiles and configs are kB, measurements MB."""
MAX_DATA_BYTES = 64 << 20
"""Largest JSON/YAML document (64 MiB): the largest tierlab reads (a raw calibration record)
is below 1 MiB; a larger one is not an input but a mistake, and parsing it takes minutes."""
YAML_ALIAS_BUDGET = 100
"""Most alias uses (`*name`) a YAML input may hold; a "billion laughs" file nests thousands."""
YAML_NODE_BUDGET = 1_000_000
"""Most nodes a YAML document may expand to once its aliases are followed."""


def _why(e: OSError) -> str:
    return e.strerror or type(e).__name__


# ----------------------------------------------------------------------------------------------
# input

@contextlib.contextmanager
def open_checked(path: str | Path, max_bytes: int = MAX_INPUT_BYTES) -> Iterator[Any]:
    """A regular file open for binary reading, after read_bytes' checks (missing, a folder, a
    special file, over `max_bytes`: a ConfigError); for a reader that streams it."""
    path = Path(path)
    try:
        if path.is_dir():
            raise ConfigError(f"{path}: is a folder, not a file")
        if not path.exists():
            raise ConfigError(f"{path}: no such file")
        special = _special(path.stat().st_mode)
        if special:
            raise ConfigError(f"{path}: is {special}, not a regular file")
        # O_NONBLOCK: a FIFO swapped in after the check never blocks the open
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {_why(e)}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        special = _special(st.st_mode)
        if special:
            raise ConfigError(f"{path}: is {special}, not a regular file")
        if st.st_size > max_bytes:
            raise ConfigError(f"{path}: {st.st_size / 2**20:,.1f} MiB is too large to be a "
                              f"tierlab input (at most {max_bytes / 2**20:,.0f} MiB)")
        yield f


def read_bytes(path: str | Path, max_bytes: int = MAX_INPUT_BYTES) -> bytes:
    """A file's bytes; missing, a folder, a special file (FIFO, device, socket: reading one can
    wait forever), unreadable or over `max_bytes`: a ConfigError."""
    try:
        with open_checked(path, max_bytes) as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {_why(e)}") from None
    if len(data) > max_bytes:
        raise ConfigError(f"{path}: more than {max_bytes / 2**20:,.0f} MiB: too large to be "
                          "a tierlab input")
    return data


def _special(mode: int) -> str:
    """'a FIFO', 'a device', 'a socket' for a special file's st_mode, '' for a regular one."""
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return ""


def decode(data: bytes, where: str) -> str:
    """UTF-8 (a BOM is allowed) -> str; other bytes name the offset."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ConfigError(f"{where}: not UTF-8 text (byte 0x{data[e.start]:02x} on line {line}); "
                          "save it as UTF-8") from None


def read_text(path: str | Path, max_bytes: int = MAX_INPUT_BYTES, what: str = "") -> str:
    """A UTF-8 text file (read_bytes' checks); `what`: the flag that named it, in the error."""
    try:
        return decode(read_bytes(path, max_bytes), str(path))
    except ConfigError as e:
        if not what:
            raise
        raise ConfigError(f"{what} {e}") from None


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


def _no_duplicates(where: str):
    """A json object_pairs_hook that refuses a duplicate key (DeepSpeed 0.19.8 refuses them
    too), naming it."""
    def hook(pairs):
        out = {}
        for key, value in pairs:
            if key in out:
                raise ConfigError(f"{where}: duplicate key {key!r} (the last one would win "
                                  "silently; DeepSpeed 0.19.8 refuses duplicate keys)")
            out[key] = value
        return out
    return hook


def loads_json(text: str, where: str, *, finite: bool = True) -> Any:
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates(where))
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where}: malformed JSON at line {e.lineno} column {e.colno}: "
                          f"{e.msg}") from None
    except RecursionError:
        raise ConfigError(f"{where}: JSON nested too deeply") from None
    except ConfigError:
        raise
    except ValueError as e:       # an integer of more than 4300 digits
        raise ConfigError(f"{where}: malformed JSON: {e}") from None
    return check_finite(data, where) if finite else data


def _yaml_loader():
    """libyaml's CSafeLoader where installed (else the pure-Python SafeLoader), refusing a
    duplicate key in a mapping (PyYAML keeps the last one silently)."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc, valid-type]
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen = set()
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=False)
                    try:
                        duplicate = key in seen
                        seen.add(key)
                    except TypeError:          # an unhashable key: PyYAML refuses it below
                        continue
                    if duplicate:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {key!r}", key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

    return Loader


def _check_aliases(root, where: str) -> None:
    """Refuse a node graph whose aliases exceed YAML_ALIAS_BUDGET, that expands beyond
    YAML_NODE_BUDGET nodes, or that refers to itself (before anything is built from it)."""
    sizes: dict[int, int] = {}
    aliases = 0
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = node.value if isinstance(node.value, list) else []
        children = [c for pair in children for c in (pair if isinstance(pair, tuple) else (pair,))]
        if done:
            sizes[key] = min(1 + sum(sizes[id(c)] for c in children), YAML_NODE_BUDGET + 1)
            continue
        if key in sizes:
            if sizes[key] < 0:
                raise ConfigError(f"{where}: a YAML alias refers to the node that holds it")
            aliases += 1
            if aliases > YAML_ALIAS_BUDGET:
                raise ConfigError(f"{where}: more than {YAML_ALIAS_BUDGET} YAML aliases (*name); "
                                  "a profile needs none (a 'billion laughs' file?)")
            continue
        sizes[key] = -1
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(children))
    if sizes[id(root)] > YAML_NODE_BUDGET:
        raise ConfigError(f"{where}: the YAML expands to more than {YAML_NODE_BUDGET:,} values "
                          "once its aliases are followed (a 'billion laughs' file?)")


def loads_yaml(text: str, where: str, *, finite: bool = True) -> Any:
    import yaml

    loader = _yaml_loader()(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_aliases(node, where)
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{where}: malformed YAML{at}: {getattr(e, 'problem', None) or e}") \
            from None
    except ConfigError:
        raise
    except (ValueError, TypeError, RecursionError) as e:    # e.g. an impossible timestamp
        raise ConfigError(f"{where}: malformed YAML: {e}") from None
    finally:
        loader.dispose()
    return check_finite(data, where) if finite else data


def read_data(path: str | Path, *, finite: bool = True) -> Any:
    """A YAML or JSON file (by suffix: .json is JSON, anything else YAML) -> Python data."""
    path = Path(path)
    text = decode(read_bytes(path, MAX_DATA_BYTES), str(path))
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
    if not folder and _special_target(path, what):
        return path
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


def _special_target(path: Path, what: str) -> bool:
    """True if `path` is an existing special file (/dev/null, a FIFO) that a writer can open:
    tierlab writes through it, never replaces it. One it cannot open now (a FIFO with no
    reader, a device refusing writes) is a ConfigError."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    if not _special(mode):
        return False
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as e:
        raise ConfigError(f"{what} {path}: is {_special(mode)} that cannot be written now: "
                          f"{_why(e)}") from None
    return True


def _write_through(tmp: Path, path: Path, what: str) -> None:
    """Copy the finished temp file into the special file `path` (e.g. /dev/null)."""
    try:
        with open(tmp, "rb") as src, open(path, "wb", buffering=0) as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
    except OSError as e:
        raise ConfigError(f"{what} {path}: cannot write: {_why(e)}") from None


def check_not_input(out: str | Path | None, inputs, what: str = "--out") -> None:
    """Refuse an output that is one of the `inputs` (files or folders; names that are not
    paths, such as a preset name, are skipped) or lies inside an input folder: writing it would
    destroy what it was computed from."""
    if out is None or not str(out).strip():
        return
    target = _resolved(out, what)
    for given in inputs:
        if given is None or not str(given).strip() or not os.path.lexists(given):
            continue
        source = _resolved(given, "input")
        if target == source or (source.is_dir() and source in target.parents):
            raise ConfigError(f"{what} {out}: is also an input ({given}); writing it would "
                              "overwrite what it is computed from: choose another path")


def _resolved(path: str | Path, what: str) -> Path:
    """`path` made absolute with its links followed; a link loop (pathlib: RuntimeError) or a
    name the system refuses is a ConfigError naming it."""
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError) as e:
        why = _why(e) if isinstance(e, OSError) else "a loop of symbolic links"
        raise ConfigError(f"{what} {path}: {why}") from None


@contextlib.contextmanager
def atomic_target(path: str | Path, what: str = "output") -> Iterator[Path]:
    """Yield a temp path beside `path` (same suffix) for a writer such as savefig or to_parquet;
    on success it is fsynced and renamed onto `path`, on failure removed. A special file
    (/dev/null, a FIFO) is written through, never replaced: the temp file is then in the
    system's temp folder and copied into it."""
    path = Path(path).expanduser()
    special = _special_target(path, what)
    try:
        if not special:
            path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}",
                                    dir=None if special else path.parent)
        os.close(fd)
    except OSError as e:
        raise ConfigError(f"{what} {path}: cannot write: {_why(e)}") from None
    tmp = Path(name)
    try:
        yield tmp
        if special:
            _write_through(tmp, path, what)
            return
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


NAME_CHARS = re.compile(r"[^A-Za-z0-9._+-]+")
MAX_NAME_CHARS = 80


def safe_name(text: Any, default: str = "unnamed") -> str:
    """A name read from an input (a model YAML's `name`) made safe as one path component: no
    '/', '..', control characters or spaces (each run becomes '_'), no leading dot, at most
    MAX_NAME_CHARS characters; '../../tmp/x' -> 'tmp_x'."""
    name = NAME_CHARS.sub("_", str(text)).strip("._-")[:MAX_NAME_CHARS].strip("._-")
    return name or default


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
            # O_NOFOLLOW: a symlink planted at the lock's name is refused (ELOOP), never
            # written through
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise ConfigError(f"{what} {path}: {lock} is not a regular file; remove it")
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
        with contextlib.suppress(OSError):      # only the lock file this process holds
            if os.lstat(lock).st_ino == os.fstat(fd).st_ino:
                os.unlink(lock)
        os.close(fd)
