"""Issue 34: the generated audit, as a test. Nothing crashes, hangs, is silently accepted or is
lost under generated bad inputs, across verbs and input kinds.

Every case runs in-process (click's CliRunner) under a wall-clock alarm, and is one of four
classes it must not fall into:
- traceback: an exception other than SystemExit, or "Traceback" in the output;
- hang: the case runs past HANG_S (SIGALRM raises inside it);
- silent accept: a value beyond its bound, a malformed file or a hostile path exits 0;
- data loss: an input, a device or a file tierlab did not write is changed or replaced.
An exit 2 says what is wrong in exactly one `error:` line. The cases are generated from fixed
tables and a seeded random.Random, so the suite is deterministic; it prints its count per group.
"""
from __future__ import annotations

import json
import os
import random
import signal
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from tierlab.bounds import DS_CONFIG, FLAGS, MODEL
from tierlab.cli import main

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "runner" / "data" / "tiny-llama.yaml"
PRESETS = sorted((ROOT / "profiles" / "configs").glob("*.json"))
HANG_S = 30
COUNTS: dict[str, int] = {}


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def case(group: str, args: list, *, refuse: bool = False, ok=(0, 2)) -> object:
    """Run one case; assert none of the four classes. `refuse`: the input is bad, exit 2."""
    COUNTS[group] = COUNTS.get(group, 0) + 1
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_S)
    try:
        r = CliRunner().invoke(main, [str(a) for a in args])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    text = r.output
    assert not isinstance(r.exception, Hang), f"hang: {args}"
    assert not (r.exception and not isinstance(r.exception, SystemExit)), \
        f"traceback: {args}: {type(r.exception).__name__}: {r.exception}\n{text}"
    assert "Traceback" not in text, f"traceback: {args}\n{text}"
    assert r.exit_code in ((2,) if refuse else ok), f"silent accept / exit: {args}\n{text}"
    if r.exit_code == 2:
        errors = [line for line in text.splitlines() if line.startswith("error")]
        assert len(errors) == 1, f"{args}: {len(errors)} error lines\n{text}"
    return r


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    yield
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line(f"\ntest_fuzz_inputs: {sum(COUNTS.values())} cases: {COUNTS}")


# ----------------------------------------------------------------------------------------------
# bounds: every bounded key and flag, with values beyond the bound or of the wrong type

BAD_NUMBERS = ["\"abc\"", "1e30", "-5", "1" + "0" * 400, "true", "NaN", "[1]", "{}"]


@pytest.mark.parametrize("key", sorted(DS_CONFIG))
def test_ds_config_keys_beyond_bounds(key):
    for verb in ("simulate", "memory"):
        for value in BAD_NUMBERS:
            case("ds-key", [verb, "-m", TINY, "-c", "zero3-cpu", "--set", f"{key}={value}"],
                 refuse=True)


MODEL_BAD = ["-1", "100000000000", "1" + "0" * 400, "x", "true", "1.5"]


@pytest.mark.parametrize("key", sorted(set(MODEL) & {"n_layers", "hidden", "ffn", "n_heads",
                                                     "n_kv_heads", "vocab", "seq_len",
                                                     "max_seq_len"}))
def test_model_fields_beyond_bounds(tmp_path, key):
    base = TINY.read_text()
    for i, value in enumerate(MODEL_BAD):
        lines = [ln for ln in base.splitlines() if not ln.startswith(f"{key}:")]
        path = tmp_path / f"m{i}.yaml"
        path.write_text("\n".join(lines + [f"{key}: {value}"]) + "\n")
        for verb in ("simulate", "memory"):
            case("model-field", [verb, "-m", path, "-c", "zero3-cpu"], refuse=True)


@pytest.mark.parametrize("flag", sorted(set(FLAGS) - {"global_batch"}))
def test_flags_beyond_bounds(flag):
    for value in ["0", "-1", "1000000000000", "abc", "1.5"]:
        for verb in ("simulate", "memory"):
            case("flag", [verb, "-m", TINY, "-c", "zero3-cpu", f"--{flag.replace('_', '-')}",
                          value], refuse=True)


@pytest.mark.parametrize("args", [
    ["plan", "-m", TINY, "-H", "workstation-rtx3070", "--global-batch", "1000000000000"],
    ["plan", "-m", TINY, "-H", "workstation-rtx3070", "--grad-accum", "1000000000"],
    ["plan", "-m", TINY, "-H", "workstation-rtx3070", "--min-tokens-per-s", "inf"],
    ["plan", "-m", TINY, "-H", "workstation-rtx3070", "--min-tokens-per-s", "nan"],
    ["simulate", "-m", TINY, "-c", "zero3-cpu", "--grad-accum", "1000000000"],
    ["simulate", "-m", TINY, "-c", "zero3-cpu", "--gpu-mem-cap", "8"],
    ["sweep", "-m", TINY, "-c", "zero3-cpu", "--no-progress", "-j", "1",
     "--vary", "micro_batch=1..200000"],
    ["sweep", "-m", TINY, "-c", "zero3-cpu", "--no-progress", "-j", "1",
     "--vary", "zero_optimization.sub_group_size=1e26"],
    ["sweep", "-m", TINY, "-c", "zero3-cpu", "--no-progress", "-j", "1",
     "--vary", "micro_batch=1..200", "--vary", "seq=1..100"],
])
def test_issue_examples_refused(args):
    case("issue-example", args, refuse=True)


def test_max_points_overrides_the_limit():
    r = case("issue-example", ["sweep", "-m", TINY, "-c", "zero3-cpu", "--no-progress", "-j",
                               "1", "--memory-only", "--vary", "micro_batch=1..3",
                               "--max-points", "2"], refuse=True)
    assert "3 points" in r.output and "--max-points 2" in r.output


# ----------------------------------------------------------------------------------------------
# readers: hostile files in every input slot

LAUGHS = "kind: model\na: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh"))


def _hostile(tmp: Path, kind: str, suffix: str) -> Path:
    path = tmp / f"{kind}{suffix}"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        return Path("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    else:
        path.write_bytes({
            "empty": b"", "blank": b"  \n\n",
            "dup": (b'{"a": 1, "a": 2}' if suffix == ".json" else b"kind: model\nname: a\nname: b\n"),
            "laughs": LAUGHS.encode(), "cycle": b"a: &a [*a]\n",
            "bigint": b'{"a": 1' + b"0" * 5000 + b"}", "nonutf8": b"kind: \xff\xfe model\n",
            "list": b"[1, 2, 3]\n", "scalar": b"42\n"}[kind])
    return path


HOSTILE = ["fifo", "device", "folder", "empty", "blank", "dup", "laughs", "cycle", "bigint",
           "nonutf8", "list", "scalar"]


@pytest.mark.parametrize("kind", HOSTILE)
def test_hostile_input_files(tmp_path, kind):
    for slot, suffix in (("-c", ".json"), ("-m", ".yaml"), ("-m", ".json"), ("-H", ".yaml")):
        if slot == "-c" and kind in ("laughs", "cycle"):
            continue      # YAML threats; hjson reads that text as a config of unknown keys
        folder = tmp_path / f"{slot[1]}{suffix[1:]}"
        folder.mkdir()
        path = _hostile(folder, kind, suffix)
        args = {"-c": ["-m", TINY], "-m": ["-c", "zero3-cpu"], "-H": ["-m", TINY]}[slot]
        for verb in ("simulate", "memory"):
            case("reader", [verb, slot, path, *args], refuse=True)


# ----------------------------------------------------------------------------------------------
# outputs: nothing lost, no device replaced, no input overwritten

def _out_args(verb: str, out) -> list:
    return {"trace": ["simulate", "-m", TINY, "-c", "zero3-cpu", "--trace", out],
            "plot": ["plot", "memory", "-m", TINY, "-c", "zero3-cpu", "-o", out],
            "sweep": ["sweep", "-m", TINY, "-c", "zero3-cpu", "--no-progress", "-j", "1",
                      "--memory-only", "--vary", "micro_batch=1,2", "--out", out]}[verb]


@pytest.mark.parametrize("verb", ["trace", "sweep"])
def test_full_disk_is_an_error_and_devices_stay(verb):
    before = os.stat("/dev/full")
    case("output", _out_args(verb, "/dev/full"), refuse=True)
    after = os.stat("/dev/full")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino


def test_dev_null_written_through_not_replaced():
    before = os.stat("/dev/null")
    case("output", _out_args("trace", "/dev/null"), ok=(0,))
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino


def test_fifo_without_reader_refused(tmp_path):
    fifo = tmp_path / "t.json"
    os.mkfifo(fifo)
    case("output", _out_args("trace", fifo), refuse=True)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_output_that_is_an_input_refused(tmp_path):
    mine = tmp_path / "mine.json"
    mine.write_bytes((ROOT / "profiles" / "configs" / "zero3-cpu.json").read_bytes())
    model = tmp_path / "m.yaml"
    model.write_bytes(TINY.read_bytes())
    keep = {p: p.read_bytes() for p in (mine, model)}
    for target in (mine, model):
        case("output", ["simulate", "-c", mine, "-m", model, "--trace", target], refuse=True)
        case("output", ["plan", "-m", model, "-H", "workstation-rtx3070", "-c", mine,
                        "--write-config", target], refuse=True)
    assert {p: p.read_bytes() for p in keep} == keep


def test_sweep_over_unrelated_csv_and_planted_lock(tmp_path):
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    case("output", _out_args("sweep", other), refuse=True)
    assert other.read_text() == "a,b\n1,2\n"
    victim = tmp_path / "victim"
    (tmp_path / ".r.csv.lock").symlink_to(victim)
    case("output", _out_args("sweep", tmp_path / "r.csv"), refuse=True)
    assert not victim.exists() and (tmp_path / ".r.csv.lock").is_symlink()


# ----------------------------------------------------------------------------------------------
# random: mutated presets, model files and --set values (the contract only)

ODD = [None, True, 0, -1, 2**70, 1.5, "auto", "", "x", [], {}, 1e300, "1e400"]


def _mutate(doc, rnd: random.Random):
    """1-3 edits: a key at any depth set to an odd value."""
    def paths(node, prefix=()):
        for k, v in node.items():
            yield (*prefix, k)
            if isinstance(v, dict):
                yield from paths(v, (*prefix, k))
    for _ in range(rnd.randint(1, 3)):
        path = rnd.choice(list(paths(doc)))
        node = doc
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = rnd.choice(ODD)
    return doc


@pytest.mark.parametrize("chunk", range(6))
def test_random_mutations(tmp_path, chunk):
    import yaml

    rnd = random.Random(34_000 + chunk)
    for i in range(60):
        if i % 2:
            doc = _mutate(json.loads(rnd.choice(PRESETS).read_text()), rnd)
            path = tmp_path / f"c{i}.json"
            path.write_text(json.dumps(doc))
            args = ["memory", "-c", path, "-m", TINY]
        else:
            doc = _mutate(yaml.safe_load(TINY.read_text()), rnd)
            path = tmp_path / f"m{i}.yaml"
            path.write_text(yaml.safe_dump(doc))
            args = ["memory", "-m", path, "-c", "zero3-cpu"]
        case("random", args)
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]
