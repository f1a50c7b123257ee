"""Issue 34: the generated fuzz suite's cases and its oracle, shared by the test
(tests/test_fuzz_generated.py) and the census (bench/fuzz_audit.py).

`cases()` lists >= 1,000 `Case`s, deterministic (fixed tables and a seeded random.Random; the same
tree gives the same cases in the same order), across every CPU verb and every input kind of the
issue: ds_config, HF config.json, model / system / gpu / cpu / nvme / software profile YAML,
`--set`, `--vary`, `--hw`, number flags, output paths (devices, an output that is an input,
unrelated files, 300-char names, symlinks, FIFOs), measured-run folders, raw calibration records,
sweep results files, hostile files in every input slot, a hostile $TIERLAB_PROFILES, and the
training verbs' refusals before training (run / compare / calibrate).

`run_case(case, folder)` builds the case's files in an empty `folder`, runs the CLI in-process
(click's CliRunner) under a SIGALRM bound, and returns its class:
- ok
- traceback: an exception other than SystemExit escaped, or "Traceback"/"internal:" printed;
- hang: still running after HANG_S;
- silent accept: bad input (`expect="refuse"`) exited 0, a training verb reached training, or a
  valid answer failed its check;
- data loss: a file the case did not name as an output changed or appeared (a stray temp file,
  an input overwritten, a device replaced), or an output left half-written, or written on exit 2;
- unclear error: exit 2 without exactly one `error:` line naming one of the case's culprits
  (the file, key, flag or value);
- wrong refusal: valid input (`expect="ok"`) refused, or an exit code outside the verb's.
"""
from __future__ import annotations

import copy
import json
import os
import random
import re
import signal
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "lab"
TINY = ROOT / "runner" / "data" / "tiny-llama.yaml"
CASE_DIR = LAB / "cases" / "h200x2" / "c-tinyllama-noofl"
RAW = LAB / "cases" / "h200x2" / "calibrate-raw.json"
SYSTEM = ROOT / "profiles" / "hardware" / "systems" / "workstation-rtx3070.yaml"
PART_FILES = {"gpus": ROOT / "profiles/hardware/gpus/rtx-3070.yaml",
              "cpus": ROOT / "profiles/hardware/cpus/ryzen-9-5900x.yaml",
              "nvme": ROOT / "profiles/hardware/nvme/gen4-consumer.yaml"}
SOFTWARE = ROOT / "profiles" / "software" / "deepspeed-0.19.8.yaml"
PRESETS = ["no-offload", "zero2-cpu", "zero3-cpu", "zero3-nvme", "offload-example"]
REAL_CONFIGS = ["hf_tests_zero2.json", "hf_tests_zero3.json", "llamafactory_ds_z3_offload.json",
                "fastchat_deepspeed_config_s3.json", "dse_zero3_nvme_offload_annotated.json"]
HF_CONFIGS = ["llama-3.1-8b.json", "qwen2.5-3b.json", "gpt2.json", "mixtral-8x7b.json",
              "phi-2.json", "falcon-7b-instruct.json"]
HANG_S = 20
SEED = 34_007
ENV = {"TIERLAB_PROFILES": str(LAB / "profiles"), "DS_ACCELERATOR": "cpu", "COLUMNS": "200"}

CLASSES = ("ok", "traceback", "hang", "silent accept", "data loss", "unclear error",
           "wrong refusal")

FIFO, DIR = "<fifo>", "<dir>"
SHM = "/dev/shm/tierlab-fuzz"
"""A swap folder on tmpfs: a run that launches (--skip-preflight) makes it; removed after."""


@dataclass(frozen=True)
class Case:
    id: str
    """'<verb>/<kind>/<n>': stable for a given tree."""
    verb: str
    kind: str
    args: tuple
    """CLI arguments; '{T}' stands for the case's folder."""
    files: tuple = ()
    """(path under {T}, bytes | FIFO | DIR | ('link', target) | ('sparse', size))."""
    expect: str = "either"
    """'ok' (valid: exit 0), 'refuse' (bad: exit 2) or 'either' (the oracle's other classes
    only; used where validity depends on more than the generator knows, said beside it)."""
    culprit: tuple = ()
    """An exit-2 error line must hold one of these ('{T}' substituted); () = any line."""
    outputs: tuple = ()
    """Paths the verb may write ('{T}' substituted): a file, or a folder and all under it."""
    codes: tuple = (0, 2)
    """Exit codes the verb may give (plan: 1 = nothing fits; validate: 1 = over --max-error)."""
    answer: str = ""
    """Name of a cheap answer check on exit 0 (ANSWERS)."""
    env: tuple = ()
    keeps: bool = False
    """Outputs may be written on exit 2 (a sweep keeps the rows it computed), whole."""


# ----------------------------------------------------------------------------------------------
# values

HUGE_INT = "1" + "0" * 400
NUMBERS_BAD = ["0", "-1", "-0.5", "1e30", HUGE_INT, "nan", "inf", "-inf", "abc", "1.5", "",
               "0x10", "1e400"]
"""Flag values a positive count refuses."""
JSON_BAD = ["\"abc\"", "1e30", "-5", HUGE_INT, "true", "NaN", "Infinity", "-Infinity", "[1]",
            "{}", "null", "1e400", "\"\""]
ODD = [None, True, False, 0, -1, 1, 3, 2 ** 70, 1.5, -0.0, "auto", "", "x", "cpu", "nvme", [],
       [1], {}, {"enabled": True}, "1e400", "NaN", 1e300, -1e300]
LAUGHS = "kind: model\na: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh"))
LONG = "n" * 300


def _dump(doc, suffix: str) -> bytes:
    import yaml

    if suffix == ".json":
        return json.dumps(doc, indent=1).encode()
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode()


def _load(path: Path):
    import yaml

    return json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(
        path.read_text())


def _leaves(doc, prefix=()):
    """Every key path of a nested dict (lists not entered)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield (*prefix, k)
            yield from _leaves(v, (*prefix, k))


def _set(doc, path, value):
    doc = copy.deepcopy(doc)
    node = doc
    for k in path[:-1]:
        node = node.setdefault(k, {}) if isinstance(node.get(k), dict) or k not in node else node[k]
    node[path[-1]] = value
    return doc


def _delete(doc, path):
    doc = copy.deepcopy(doc)
    node = doc
    for k in path[:-1]:
        node = node[k]
    del node[path[-1]]
    return doc


def damaged(data: bytes, how: str, rnd: random.Random, suffix: str) -> bytes:
    """Whole-file damage: every kind here makes any tierlab input invalid."""
    if how == "truncated":
        return data[:max(1, rnd.randrange(len(data) // 4, 3 * len(data) // 4))]
    if how == "nonutf8":
        i = data.find(b"\n", rnd.randrange(len(data) // 2)) + 1 or 1
        return data[:i] + rnd.choice([b"\xff", b"\xfe\xfe", b"\xc3\x28"]) + data[i:]
    if how == "empty":
        return b""
    if how == "blank":
        return b"  \n\n"
    if how == "list":
        return b"[1, 2, 3]\n"
    if how == "scalar":
        return b"42\n"
    if how == "bigint":
        return b'{"a": 1' + b"0" * 5000 + b"}" if suffix == ".json" else b"a: 1" + b"0" * 5000
    if how == "deep":
        return b"[" * 100_000 + b"]" * 100_000
    if how == "laughs":
        return LAUGHS.encode()
    if how == "cycle":
        return b"a: &a [*a]\n"
    raise ValueError(how)


def _cut(how: str) -> str:
    """The expectation for whole-file damage of a YAML file: a YAML file cut short is often still
    YAML, and may still be a valid profile (`seq_len: 81` of `seq_len: 8192`, the optional keys
    after it gone): 'either' for a cut, 'refuse' for the rest."""
    return "either" if how == "truncated" else "refuse"


WHOLE = ["truncated", "nonutf8", "empty", "blank", "list", "scalar", "bigint", "deep"]
"""Damage that breaks a JSON or YAML file; YAML_ONLY adds the YAML threats."""
YAML_ONLY = ["laughs", "cycle"]


def dup_key(data: bytes, suffix: str, key: str) -> bytes:
    """The file with its first `key` entry written twice (a JSON object or a YAML mapping)."""
    text = data.decode()
    if suffix == ".json":      # the key written once more, first in the top-level object
        i = text.index("{") + 1
        value = json.loads(text)[key]
        return (text[:i] + f" {json.dumps(key)}: {json.dumps(value)}," + text[i:]).encode()
    lines = text.splitlines(keepends=True)
    for n, line in enumerate(lines):
        if line.startswith(f"{key}:"):
            return "".join(lines[:n + 1] + [line] + lines[n + 1:]).encode()
    raise ValueError(key)


# ----------------------------------------------------------------------------------------------
# the generator

class _Gen:
    def __init__(self, seed: int):
        self.rnd = random.Random(seed)
        self.cases: list[Case] = []
        self.counter: dict[tuple, int] = {}

    def add(self, verb: str, kind: str, args, **kw) -> None:
        n = self.counter.get((verb, kind), 0)
        self.counter[(verb, kind)] = n + 1
        self.cases.append(Case(id=f"{verb}/{kind}/{n:03d}", verb=verb, kind=kind,
                               args=tuple(str(a) for a in args), **kw))


def _reader_verbs(slot: str, path: str) -> list[tuple[str, list, tuple]]:
    """(verb, args, outputs) of the verbs that read a `slot` file (-c, -m, -H)."""
    base = {"-c": ["-m", TINY], "-m": [], "-H": ["-m", TINY]}[slot]
    return [("simulate", ["simulate", slot, path, *base], ()),
            ("memory", ["memory", slot, path, *base], ()),
            ("preflight", ["preflight", slot, path, *base, "--no-probe"], ())]


def _slow_readers(slot: str, path: str) -> list[tuple[str, list, tuple]]:
    base = {"-c": ["-m", TINY], "-m": [], "-H": ["-m", TINY]}[slot]
    plan = ["plan", "-c" if slot == "-c" else slot, path, *(base if slot != "-c" else ["-m", TINY]),
            "-H" if slot != "-H" else "--seq", "workstation-rtx3070" if slot != "-H" else "128",
            "--micro-batch", "1", "--no-progress"]
    return [("plan", plan, ()),
            ("sweep", ["sweep", slot, path, *base, "--memory-only", "--no-progress", "-j", "1",
                       "--vary", "micro_batch=1,2"], ()),
            ("plot", ["plot", "memory", slot, path, *base, "-o", "{T}/p.png"], ("{T}/p.png",))]


def gen_ds_config(g: _Gen) -> None:
    from tierlab.bounds import DS_CONFIG

    rnd = g.rnd
    sources = [ROOT / "profiles" / "configs" / f"{p}.json" for p in PRESETS] + \
        [ROOT / "tests" / "data" / "ds_configs" / n for n in REAL_CONFIGS]
    sources = [s for s in sources if s.is_file()]
    for i, src in enumerate(sources):
        data = src.read_bytes()
        preset = src.parent.name == "configs"
        # a preset is valid; a real config may hold a key tierlab refuses ('is not modelled'),
        # so 'either', the refusal naming the file or one of its keys
        named = ("ds.json", *{k for k in re.findall(r'"(\w+)"\s*:', data.decode())})
        for verb, args, outs in _reader_verbs("-c", "{T}/ds.json") + _slow_readers(
                "-c", "{T}/ds.json")[:2 if preset else 0]:
            g.add(verb, "ds_config", args, files=(("ds.json", data),),
                  expect="ok" if preset and verb != "plan" else "either",
                  culprit=named, outputs=outs, codes=(0, 1, 2) if verb == "plan" else (0, 2))
        for how in WHOLE:
            verb, args, outs = rnd.choice(_reader_verbs("-c", "{T}/ds.json"))
            g.add(verb, "ds_config", args, files=(("ds.json", damaged(data, how, rnd, ".json")),),
                  expect="refuse", culprit=("ds.json",))
        try:
            doc = json.loads(data)
        except ValueError:          # an annotated (hjson-style) config: whole-file damage only
            continue
        top = rnd.choice([k for k in doc if isinstance(doc[k], (int, float, str, dict))])
        verb, args, _ = rnd.choice(_reader_verbs("-c", "{T}/ds.json"))
        g.add(verb, "ds_config", args, files=(("ds.json", dup_key(data, ".json", top)),),
              expect="refuse", culprit=("ds.json",))
        for tok, bad in ((": 1.0", ": NaN"), (": 1e8", ": Infinity"), (": 2", ": -Infinity")):
            if tok.encode() in data:
                verb, args, _ = rnd.choice(_reader_verbs("-c", "{T}/ds.json"))
                g.add(verb, "ds_config", args,
                      files=(("ds.json", data.replace(tok.encode(), bad.encode(), 1)),),
                      expect="refuse", culprit=("ds.json",))
    # every bounded key, beyond its bound, in a file
    keys = sorted(DS_CONFIG)
    base = json.loads((ROOT / "profiles" / "configs" / "zero3-nvme.json").read_text())
    for key in keys:
        for value in rnd.sample([-5, 1e30, "abc", True, [1], {}, 10 ** 20, 1.5 if
                                 DS_CONFIG[key].integer else -0.5], 3):
            b = DS_CONFIG[key]
            if isinstance(value, (int, float)) and not isinstance(value, bool) and \
                    b.low <= value <= b.high and not (b.integer and value != int(value)):
                continue
            doc = _set(base, tuple(key.split(".")), value)
            verb, args, _ = rnd.choice(_reader_verbs("-c", "{T}/ds.json"))
            g.add(verb, "ds_config", args, files=(("ds.json", _dump(doc, ".json")),),
                  expect="refuse", culprit=(key.split(".")[-1],))
    # random odd values anywhere (validity unknown to the generator: 'either', culprit named)
    for n in range(40):
        src = rnd.choice(sources[:5])
        doc = json.loads(src.read_text())
        path = rnd.choice(list(_leaves(doc)))
        doc = _set(doc, path, rnd.choice(ODD))
        verb, args, _ = rnd.choice(_reader_verbs("-c", "{T}/ds.json"))
        # the error may name the key or the block it sits in (`offload_param.device=nvme
        # without offload_optimizer`): any component of the edited key path
        g.add(verb, "ds_config", args, files=(("ds.json", _dump(doc, ".json")),),
              culprit=("ds.json", *map(str, path)))
    # hjson (DeepSpeed reads .hjson too)
    g.add("memory", "ds_config", ["memory", "-c", "{T}/bad.hjson", "-m", TINY],
          files=(("bad.hjson", b"{\n  zero_optimization: {\n    stage: 3\n"),), expect="refuse",
          culprit=("bad.hjson",))
    g.add("memory", "ds_config", ["memory", "-c", "{T}/big.hjson", "-m", TINY],
          files=(("big.hjson", b"{\n zero_optimization: {\n  sub_group_size: 1e400\n }\n}\n"),),
          expect="refuse", culprit=("big.hjson", "sub_group_size"))


MODEL_INTS = ["n_layers", "hidden", "ffn", "n_heads", "n_kv_heads", "vocab", "seq_len"]


def gen_model_yaml(g: _Gen) -> None:
    from tierlab.bounds import MODEL

    rnd = g.rnd
    sources = [TINY, ROOT / "profiles/models/llama-3-8b.yaml",
               ROOT / "profiles/models/tinyllama-1.1b.yaml"]
    for src in sources:
        data = src.read_bytes()
        doc = _load(src)
        for verb, args, outs in _reader_verbs("-m", "{T}/m.yaml"):
            json_ = ["--json"] if verb == "simulate" else []
            # preflight's verdict on an 8B model on an 8 GB card is its own (pinned memory)
            g.add(verb, "model_yaml", [*args, *json_], files=(("m.yaml", data),),
                  expect="ok" if verb != "preflight" or src == TINY else "either",
                  answer="simulate_json" if verb == "simulate" else "")
        for how in WHOLE + YAML_ONLY:
            verb, args, _ = rnd.choice(_reader_verbs("-m", "{T}/m.yaml"))
            g.add(verb, "model_yaml", args, files=(("m.yaml", damaged(data, how, rnd, ".yaml")),),
                  expect=_cut(how), culprit=("m.yaml",))
        for key in ("n_layers", "hidden", "name"):
            verb, args, _ = rnd.choice(_reader_verbs("-m", "{T}/m.yaml"))
            g.add(verb, "model_yaml", args, files=(("m.yaml", dup_key(data, ".yaml", key)),),
                  expect="refuse", culprit=("m.yaml",))
        for key in MODEL_INTS:
            b = MODEL[key]
            for value in rnd.sample([-1, 0, 10 ** 11, "x", True, 1.5, [4], None, "1e400",
                                     float("nan")], 4):
                if value == 0 and b.low <= 0:
                    continue
                verb, args, _ = rnd.choice(_reader_verbs("-m", "{T}/m.yaml"))
                raw = _dump(_set(doc, (key,), value), ".yaml")
                if value == "1e400":
                    raw = raw.replace(b"'1e400'", b"1e400")   # YAML's float, not a string
                g.add(verb, "model_yaml", args, files=(("m.yaml", raw),), expect="refuse",
                      culprit=(key,))
        for key in ("n_layers", "hidden", "vocab", "kind", "name"):
            verb, args, _ = rnd.choice(_reader_verbs("-m", "{T}/m.yaml"))
            g.add(verb, "model_yaml", args, files=(("m.yaml", _dump(_delete(doc, (key,)),
                                                                    ".yaml")),),
                  expect="refuse", culprit=(key, "m.yaml"))
        for key in ("hiden", "n_layer", "bogus"):
            verb, args, _ = rnd.choice(_reader_verbs("-m", "{T}/m.yaml"))
            g.add(verb, "model_yaml", args,
                  files=(("m.yaml", _dump({**doc, key: 4}, ".yaml")),), expect="refuse",
                  culprit=(key,))
        # grouped-query attention: the KV heads divide the heads (every published model)
        for heads, kv in ((8, 3), (8, 16)):
            verb, args, _ = rnd.choice(_reader_verbs("-m", "{T}/m.yaml"))
            g.add(verb, "model_yaml", args, files=(("m.yaml", _dump(
                {**doc, "n_heads": heads, "n_kv_heads": kv, "hidden": 512}, ".yaml")),),
                expect="refuse", culprit=("n_kv_heads", "n_heads"))
        for key, value in (("norm", "batchnorm"), ("gated_mlp", "yes please"), ("kind", "gpu")):
            verb, args, _ = rnd.choice(_reader_verbs("-m", "{T}/m.yaml"))
            g.add(verb, "model_yaml", args, files=(("m.yaml", _dump({**doc, key: value},
                                                                    ".yaml")),),
                  expect="refuse", culprit=(key, "m.yaml"))
    for verb, args, outs in _slow_readers("-m", "{T}/m.yaml"):
        g.add(verb, "model_yaml", args, files=(("m.yaml", TINY.read_bytes()),), expect="ok",
              outputs=outs, codes=(0, 1, 2) if verb == "plan" else (0, 2))
        for how in ("truncated", "laughs", "nonutf8"):
            g.add(verb, "model_yaml", args, files=(("m.yaml", damaged(TINY.read_bytes(), how, rnd,
                                                                      ".yaml")),),
                  expect=_cut(how), culprit=("m.yaml",), outputs=outs)


HF_KEYS = ["num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size",
           "intermediate_size", "max_position_embeddings"]


def gen_hf_config(g: _Gen) -> None:
    rnd = g.rnd
    for name in HF_CONFIGS:
        src = ROOT / "tests" / "data" / "hf_configs" / name
        if not src.is_file():
            continue
        data = src.read_bytes()
        doc = json.loads(data)
        for verb in ("memory", "simulate"):
            g.add(verb, "hf_config", [verb, "-m", "{T}/config.json", "-c", "zero3-cpu"],
                  files=(("config.json", data),), expect="ok")
        for how in WHOLE:
            verb = rnd.choice(["memory", "simulate"])
            g.add(verb, "hf_config", [verb, "-m", "{T}/config.json"],
                  files=(("config.json", damaged(data, how, rnd, ".json")),), expect="refuse",
                  culprit=("config.json",))
        present = [k for k in HF_KEYS if k in doc] or [k for k in ("n_layer", "n_embd") if k in doc]
        for key in present:
            # (null is not here: transformers reads a null as the config class's default)
            for value in rnd.sample([-1, 0, 10 ** 12, "x", True, 1.5, [4], "NaN"], 3):
                raw = json.dumps({**doc, key: value}).encode()
                if value == "NaN":
                    raw = raw.replace(b'"NaN"', b"NaN")
                verb = rnd.choice(["memory", "simulate"])
                g.add(verb, "hf_config", [verb, "-m", "{T}/config.json"],
                      files=(("config.json", raw),), expect="refuse", culprit=(key,))
        first = next(iter(doc))
        g.add("memory", "hf_config", ["memory", "-m", "{T}/config.json"],
              files=(("config.json", dup_key(data, ".json", first)),), expect="refuse",
              culprit=("config.json",))
        # an architecture tierlab does not know: refused (or read) with the file named
        g.add("memory", "hf_config", ["memory", "-m", "{T}/config.json"],
              files=(("config.json", json.dumps({**doc, "model_type": "bogus-arch",
                                                 "architectures": ["BogusForCausalLM"]}).encode()),),
              culprit=("config.json", "bogus"))
    g.add("memory", "hf_config", ["memory", "-m", "{T}/config.json"],
          files=(("config.json", b"{}"),), expect="refuse", culprit=("config.json",))


def _system_files(mutated: dict[str, bytes] | None = None) -> tuple:
    """A system profile at {T}/hw/systems/sys.yaml whose parts are {T}/hw/<part>/fz.yaml."""
    import yaml

    doc = yaml.safe_load(SYSTEM.read_text())
    doc.update(gpu="fz", cpu="fz", nvme="fz")
    files = {"hw/systems/sys.yaml": _dump(doc, ".yaml")}
    for part, src in PART_FILES.items():
        files[f"hw/{part}/fz.yaml"] = src.read_bytes()
    files.update(mutated or {})
    return tuple(files.items())


QTY_BAD = ["-1 GB", "0 GB", "1e400 GB", "nan GB", "inf GB", "abc", "64 XB", "1e-300 GB/s",
           "1e30 GB/s", "-5", True, [1], None, "", "8 GB/s/s"]


def gen_hardware(g: _Gen) -> None:
    import yaml

    rnd = g.rnd
    sys_path = "{T}/hw/systems/sys.yaml"
    for verb, args, outs in _reader_verbs("-H", sys_path):
        g.add(verb, "hw_system", args, files=_system_files(), expect="ok")
    doc = yaml.safe_load(_system_files()[0][1])
    # the system's own numbers
    rows = [("dram", "value"), ("gpus_per_node", "value"), ("nvme_drives", "value"),
            ("pcie", "h2d_pinned", "value"), ("pcie", "d2h_pinned", "value"),
            ("pcie", "latency", "value"), ("network", "nic_bandwidth", "value")]
    for row in rows:
        for value in rnd.sample(QTY_BAD, 5):
            if row[0] in ("gpus_per_node", "nvme_drives") and value in ("-5",):
                value = -5
            verb, args, _ = rnd.choice(_reader_verbs("-H", sys_path))
            g.add(verb, "hw_system", args, files=_system_files(
                {"hw/systems/sys.yaml": _dump(_set(doc, row, value), ".yaml")}),
                expect="refuse", culprit=(row[-2] if row[-1] == "value" else row[-1], "sys.yaml"))
    for key in ("gpu", "cpu", "pcie", "dram", "name", "kind"):
        verb, args, _ = rnd.choice(_reader_verbs("-H", sys_path))
        g.add(verb, "hw_system", args, files=_system_files(
            {"hw/systems/sys.yaml": _dump(_delete(doc, (key,)), ".yaml")}),
            expect="refuse", culprit=(key, "sys.yaml"))
    for key, value in (("gpu", "no-such-gpu"), ("cpu", "../../etc/passwd"), ("bogus_key", 1),
                       ("gpus_per_node", 7.5), ("kind", "gpu")):
        verb, args, _ = rnd.choice(_reader_verbs("-H", sys_path))
        g.add(verb, "hw_system", args, files=_system_files(
            {"hw/systems/sys.yaml": _dump({**doc, key: value}, ".yaml")}),
            expect="refuse", culprit=(key, "sys.yaml", str(value)))
    for how in WHOLE + YAML_ONLY:
        verb, args, _ = rnd.choice(_reader_verbs("-H", sys_path))
        g.add(verb, "hw_system", args, files=_system_files(
            {"hw/systems/sys.yaml": damaged(SYSTEM.read_bytes(), how, rnd, ".yaml")}),
            expect=_cut(how), culprit=("sys.yaml",))
    # the parts: gpu, cpu, nvme
    for part, src in PART_FILES.items():
        kind = {"gpus": "hw_gpu", "cpus": "hw_cpu", "nvme": "hw_nvme"}[part]
        pdoc = yaml.safe_load(src.read_text())
        rel = f"hw/{part}/fz.yaml"
        keys = [k for k, v in pdoc.items() if isinstance(v, dict) and "value" in v]
        if part == "gpus":
            keys += ["peak_flops.bf16", "peak_flops.fp32"]
        for key in keys:
            row = (*key.split("."), "value")
            for value in rnd.sample(QTY_BAD, 4):
                verb, args, _ = rnd.choice(_reader_verbs("-H", sys_path))
                g.add(verb, kind, args, files=_system_files(
                    {rel: _dump(_set(pdoc, row, value), ".yaml")}),
                    expect="refuse", culprit=(key.split(".")[-1],))
        for key in keys[:4]:
            # some part keys are optional (a GPU without NVLink may leave nvlink_bandwidth out)
            verb, args, _ = rnd.choice(_reader_verbs("-H", sys_path))
            g.add(verb, kind, args, files=_system_files({rel: _dump(_delete(pdoc, (key.split(
                ".")[0],)), ".yaml")}), culprit=(key.split(".")[0], "fz.yaml"))
        verb, args, _ = rnd.choice(_reader_verbs("-H", sys_path))
        g.add(verb, kind, args, files=_system_files({rel: _dump({**pdoc, "bogus": 1}, ".yaml")}),
              expect="refuse", culprit=("bogus",))
        for how in ("truncated", "nonutf8", "empty", "laughs", "list"):
            verb, args, _ = rnd.choice(_reader_verbs("-H", sys_path))
            g.add(verb, kind, args, files=_system_files({rel: damaged(src.read_bytes(), how, rnd,
                                                                      ".yaml")}),
                  expect=_cut(how), culprit=("fz.yaml",))
        verb, args, _ = rnd.choice(_reader_verbs("-H", sys_path))
        g.add(verb, kind, args, files=_system_files({rel: dup_key(src.read_bytes(), ".yaml",
                                                                  next(iter(pdoc)))}),
              expect="refuse", culprit=("fz.yaml",))
    # a GPU's efficiency curve
    gdoc = yaml.safe_load(PART_FILES["gpus"].read_text())
    for points in ([], [[1e8, 2.0]], [[1e8, -0.1]], [[1e8]], "x", [[1e8, 0.5], [1e7, 0.6]],
                   [[float("nan"), 0.5]], [[1e8, 0]]):
        raw = _dump(_set(gdoc, ("matmul_efficiency", "points"), points), ".yaml")
        g.add("simulate", "hw_gpu", ["simulate", "-H", sys_path, "-m", TINY],
              files=_system_files({"hw/gpus/fz.yaml": raw}),
              expect="refuse" if points != [[1e8, 0.5], [1e7, 0.6]] else "either",
              culprit=("matmul_efficiency", "points", "fz.yaml"))


def gen_software(g: _Gen) -> None:
    import yaml

    rnd = g.rnd
    data = SOFTWARE.read_bytes()
    doc = yaml.safe_load(data)
    args = ["validate", CASE_DIR, "-H", "h200x2-host", "--software", "{T}/sw.yaml", "--out",
            "{T}/v"]
    outs = ("{T}/v",)
    g.add("validate", "software", args, files=(("sw.yaml", data),), expect="ok", outputs=outs,
          codes=(0, 1, 2))
    for how in ("truncated", "nonutf8", "empty", "laughs", "list"):
        g.add("validate", "software", args, files=(("sw.yaml", damaged(data, how, rnd, ".yaml")),),
              expect=_cut(how), culprit=("sw.yaml",), outputs=outs, codes=(0, 1, 2))
    keys = [k for k, v in doc.items() if isinstance(v, dict) and "value" in v]
    for key in rnd.sample(keys, 6):
        value = rnd.choice(["-1 ms", "nan ms", "abc", "1e400 s", "1 GB"])
        g.add("validate", "software", args, files=(("sw.yaml", _dump(
            _set(doc, (key, "value"), value), ".yaml")),), expect="refuse",
            culprit=(key,), outputs=outs, codes=(0, 1, 2))
    g.add("validate", "software", args, files=(("sw.yaml", _dump({**doc, "kind": "model"},
                                                                 ".yaml")),),
          expect="refuse", culprit=("kind", "sw.yaml"), outputs=outs, codes=(0, 1, 2))


SET_KEYS = ["bf16", "fp16", "bf16.enabled", "zero_optimization", "zero_optimization.stage",
            "zero_optimization.sub_group_size", "zero_optimization.offload_param",
            "zero_optimization.offload_param.device", "zero_optimization.offload_optimizer.device",
            "zero_optimization.overlap_comm", "aio", "aio.block_size", "gradient_clipping",
            "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size",
            "optimizer", "optimizer.type", "zero_optimization.offload_param.nvme_path",
            "zero_optimization.stage3_max_live_parameters", "bogus_top_key", "zero_optimization.bogus"]
SET_VALUES = ["0", "-1", "1", "3", "5", "1e8", "1e400", "NaN", "Infinity", "true", "false",
              "null", "\"auto\"", "auto", "cpu", "nvme", "{}", "[]", "[1]", "1.5",
              "{\"enabled\": 1}", HUGE_INT, "", "{\"a\": NaN}", "\"/dev/null\""]


def gen_set(g: _Gen) -> None:
    from tierlab.bounds import DS_CONFIG

    rnd = g.rnd
    verbs = ["simulate", "memory", "preflight"]
    for key in sorted(DS_CONFIG):
        for value in rnd.sample(JSON_BAD, 4):
            verb = rnd.choice(verbs)
            extra = ["--no-probe"] if verb == "preflight" else []
            g.add(verb, "set", [verb, "-m", TINY, "-c", "zero3-nvme", "--set", f"{key}={value}",
                                *extra],
                  expect="refuse", culprit=(key.split(".")[-1],))
    for n in range(80):
        key, value = rnd.choice(SET_KEYS), rnd.choice(SET_VALUES)
        verb = rnd.choice(verbs)
        extra = ["--no-probe"] if verb == "preflight" else []
        # non-finite anywhere is refused; a 400-digit integer only where the key is bounded
        # (an unknown key is warned about and ignored, as DeepSpeed ignores it)
        bad = value in ("1e400", "NaN", "Infinity", "{\"a\": NaN}") or (
            value == HUGE_INT and key in DS_CONFIG)
        g.add(verb, "set", [verb, "-m", TINY, "-c", rnd.choice(PRESETS[:4]), "--set",
                            f"{key}={value}", *extra],
              expect="refuse" if bad else "either", culprit=(key.split(".")[-1], "--set"))
    for item in ("noequals", "=3", "a..b=1", ".=1", "zero_optimization..stage=3"):
        g.add("simulate", "set", ["simulate", "-m", TINY, "--set", item], expect="refuse",
              culprit=("--set", item.split("=")[0] or "="))
    # the --set answer equals the flag's (the same key, one home)
    g.add("simulate", "set", ["simulate", "-m", TINY, "--set", "train_micro_batch_size_per_gpu=2",
                              "--json"], expect="ok", answer="micro_batch_2")


VARY_KEYS = ["micro_batch", "seq", "gpus", "grad_accum", "zero_optimization.sub_group_size",
             "aio.block_size", "nvme.drives", "nvme.read_bandwidth", "cpu.cores", "model.n_layers",
             "precision", "checkpointing", "config", "gpu.hbm", "zero_optimization.stage",
             "bogus.key", "dram", "model.norm", "pcie.latency", "model"]
VARY_VALUES = ["1", "2", "0", "-1", "1e8", "1e400", "NaN", "inf", "x", "true", "1..3", "1..0",
               "3GB/s", "8GiB", "zero3-cpu", "bf16", "1..64:x2", "", "1,,2", "10us", HUGE_INT,
               "1..1000000"]
VARY_BAD = {"1e400", "NaN", "inf", HUGE_INT, "1..0"}


def gen_vary(g: _Gen) -> None:
    rnd = g.rnd
    for n in range(70):
        key = rnd.choice(VARY_KEYS)
        values = rnd.sample(VARY_VALUES, rnd.randint(1, 3))
        bad = key == "bogus.key" or bool(VARY_BAD & set(values))
        # a point the sweep cannot compute is a row with its error (exit 2): rows kept whole
        g.add("sweep", "vary", ["sweep", "-m", TINY, "-c", "zero3-cpu", "--no-progress", "-j", "1",
                                "--memory-only", "--vary", f"{key}={','.join(values)}", "--out",
                                "{T}/rows.csv"],
              expect="refuse" if bad else "either", outputs=("{T}/rows.csv",),
              culprit=(key, key.split(".")[-1], "--vary", *(v for v in values if len(v) > 5)),
              answer="csv_rows",
              keeps=True)
    for item in ("noequals", "=1,2", "micro_batch=", "micro_batch=1..3:x0"):
        g.add("sweep", "vary", ["sweep", "-m", TINY, "--no-progress", "-j", "1", "--memory-only",
                                "--vary", item], expect="refuse",
              culprit=("--vary", item, "vary key"))
    g.add("sweep", "vary", ["sweep", "-m", TINY, "--no-progress", "-j", "1", "--memory-only",
                            "--vary", "micro_batch=1", "--vary", "micro_batch=2"],
          expect="refuse", culprit=("micro_batch",))


HW_KEYS = ["dram", "gpu.hbm", "gpu.hbm_bandwidth", "gpu.peak_flops.bf16", "cpu.cores",
           "cpu.adam_throughput", "nvme.drives", "nvme.read_bandwidth", "nvme.latency",
           "pcie.h2d_pinned", "pcie.latency", "network.nic_bandwidth", "gpu.bogus", "nvme"]
HW_VALUES = ["8GB", "0", "-1GB", "nan", "inf GB", "1e400", "abc", "8", "8 GB/s", "", "1e-300 GB/s",
             "10us", "1e30 GB", "4", "8 TFLOP/s", HUGE_INT]


def gen_hw_flag(g: _Gen) -> None:
    rnd = g.rnd
    for n in range(70):
        key, value = rnd.choice(HW_KEYS), rnd.choice(HW_VALUES)
        verb = rnd.choice(["simulate", "memory", "preflight"])
        extra = ["--no-probe"] if verb == "preflight" else []
        bad = key in ("gpu.bogus", "nvme") or value in ("nan", "inf GB", "1e400", "abc", "",
                                                        "-1GB", HUGE_INT, "1e-300 GB/s")
        g.add(verb, "hw_flag", [verb, "-m", TINY, "-c", "zero3-nvme", "--hw", f"{key}={value}",
                                *extra],
              expect="refuse" if bad else "either", culprit=(key, "--hw"))
    for item in ("noequals", "=8GB", "gpu.hbm=8GB=9"):
        g.add("simulate", "hw_flag", ["simulate", "-m", TINY, "--hw", item], expect="refuse",
              culprit=("--hw", item.split("=")[0] or "="))
    g.add("plan", "hw_flag", ["plan", "-m", TINY, "-H", "workstation-rtx3070", "--hw",
                              "gpu.hbm=nan", "--micro-batch", "1", "--no-progress"],
          expect="refuse", culprit=("gpu.hbm", "--hw"))


def gen_numbers(g: _Gen) -> None:
    rnd = g.rnd
    counts = ["--micro-batch", "--gpus", "--nodes", "--grad-accum", "--seq"]
    for flag in counts:
        for value in NUMBERS_BAD:
            verb = rnd.choice(["simulate", "memory", "preflight"])
            extra = ["--no-probe"] if verb == "preflight" else []
            g.add(verb, "number", [verb, "-m", TINY, flag, value, *extra], expect="refuse",
                  culprit=(flag,))
    for flag, verbs in (("--gpu-mem-cap", ["simulate", "memory", "preflight"]),):
        for value in ["nan", "inf", "-1", "0", "1e400", "8XB", "x", "", "8 GB/s", HUGE_INT + "GB",
                      "-8GiB"]:
            verb = rnd.choice(verbs)
            extra = ["--no-probe"] if verb == "preflight" else []
            g.add(verb, "number", [verb, "-m", TINY, flag, value, *extra], expect="refuse",
                  culprit=(flag,))
        for value in ["6e9", "8"]:       # a byte count needs its unit (GiB or GB)
            g.add("memory", "number", ["memory", "-m", TINY, flag, value], expect="refuse",
                  culprit=(flag,))
        for value in ["8GiB", "8g", "4 GB"]:
            g.add("memory", "number", ["memory", "-m", TINY, flag, value], expect="ok")
    plan = ["plan", "-m", TINY, "-H", "workstation-rtx3070", "--no-progress"]
    for flag, values in (("--max-gpu-mem", ["nan", "-1", "0", "x", "1e400"]),
                         ("--min-tokens-per-s", ["nan", "inf", "-1", "x"]),
                         ("--max-micro-batch", ["0", "-1", "x"]),
                         ("--global-batch", ["0", "-1", "1000000000000", "x"]),
                         ("--jobs", ["0", "-1", "x"])):
        for value in values:
            g.add("plan", "number", [*plan, flag, value], expect="refuse", culprit=(flag, "-j"),
                  codes=(0, 1, 2))
    sweep = ["sweep", "-m", TINY, "--no-progress", "--memory-only", "--vary", "micro_batch=1,2"]
    # a search bound or a worker count beyond need: the search stops where nothing fits, the
    # pool has one worker per candidate at most
    for flag, value in (("--max-micro-batch", HUGE_INT), ("--jobs", "100000")):
        g.add("plan", "number", [*plan, flag, value], codes=(0, 1, 2), culprit=(flag,))
    for flag, values in (("--max-points", ["0", "-1", "x", "1"]), ("--jobs", ["0", "-1", "x"])):
        for value in values:
            g.add("sweep", "number", [*sweep, flag, value], expect="refuse", culprit=(flag, "-j"))
    val = ["validate", CASE_DIR, "-H", "h200x2-host", "--out", "{T}/v"]
    for value in ("nan", "inf", "-1", "x", "1e400"):
        g.add("validate", "number", [*val, "--max-error", value], expect="refuse",
              culprit=("--max-error",), outputs=("{T}/v",), codes=(0, 1, 2))
    for flag, values in (("--steps", ["0", "-1", "x", "nan"]),
                         ("--warmup-steps", ["-1", "x", "100"]),
                         ("--seed", ["x", "1.5"]), ("--micro-batch", ["0", "-1", HUGE_INT]),
                         ("--seq", ["0", "x"]), ("--gpu-mem-cap", ["nan", "-1", "x"])):
        for value in values:
            g.add("run", "number", ["run", "-m", TINY, "-c", "no-offload", "--steps", "2",
                                    "--warmup-steps", "1", flag, value, "--out", "{T}/r"],
                  expect="refuse", culprit=(flag, "--steps"), outputs=("{T}/r",))
    for flag, values in (("--timeout", ["-5", "nan", "0", "x", "inf"]),
                         ("--budget", ["0", "-1", "nan", "x"]), ("--steps", ["0", "x"])):
        for value in values:
            g.add("compare", "number", ["compare", "-m", TINY, "--variants", "no-offload", flag,
                                        value, "--out", "{T}/c"],
                  expect="refuse", culprit=(flag,), outputs=("{T}/c",))


def _out_verbs(target: str, inputs: dict) -> list[tuple[str, list, str]]:
    """(verb, args, suffix) of every file output flag; `inputs` the -c/-m files to use."""
    m, c = inputs["m"], inputs["c"]
    return [
        ("simulate", ["simulate", "-m", m, "-c", c, "--trace", target], ".json"),
        ("plan", ["plan", "-m", m, "-H", "workstation-rtx3070", "--micro-batch", "1",
                  "--no-progress", "-o", target], ".json"),
        ("plan", ["plan", "-m", m, "-H", "workstation-rtx3070", "-c", c, "--micro-batch", "1",
                  "--no-progress", "--write-config", target], ".json"),
        ("plot", ["plot", "memory", "-m", m, "-c", c, "-o", target], ".png"),
        ("sweep", ["sweep", "-m", m, "-c", c, "--no-progress", "-j", "1", "--memory-only",
                   "--vary", "micro_batch=1,2", "--out", target], ".csv"),
        ("sweep", ["sweep", "-m", m, "-c", c, "--no-progress", "-j", "1", "--vary",
                   "micro_batch=1,2", "--plot", target], ".png"),
        ("calibrate", ["calibrate", "--from-raw", "{T}/in/raw.json", "--out", target], ".yaml"),
    ]


def _out_dir_verbs(target: str) -> list[tuple[str, list]]:
    return [("validate", ["validate", CASE_DIR, "-H", "h200x2-host", "--out", target]),
            ("run", ["run", "-m", TINY, "-c", "no-offload", "--steps", "2", "--warmup-steps",
                     "1", "--out", target]),
            ("compare", ["compare", "-m", TINY, "--variants", "no-offload", "--steps", "2",
                         "--warmup-steps", "1", "--out", target])]


def gen_outputs(g: _Gen) -> None:
    m_bytes = TINY.read_bytes()
    c_bytes = (ROOT / "profiles" / "configs" / "zero3-cpu.json").read_bytes()
    inputs = {"m": "{T}/in/m.yaml", "c": "{T}/in/c.json"}
    base_files = (("in/m.yaml", m_bytes), ("in/c.json", c_bytes), ("in/raw.json", RAW.read_bytes()),
                  ("other/keep.txt", b"unrelated, not tierlab's\n"))
    for verb, args0, suffix in _out_verbs("@", inputs):
        codes = (0, 1, 2) if verb == "plan" else (0, 2)

        def add(target, expect, culprit=(), files=(), outputs=(), answer=""):
            args = [target if a == "@" else a for a in args0]
            if verb == "calibrate":      # the part profiles go beside the system profile
                parent = str(Path(target).parent) if target.startswith("{T}") else ""
                outputs = (*outputs, *(f"{parent}/{p}" for p in ("gpus", "cpus", "nvme")
                                       if parent))
            g.add(verb, "output", args, files=base_files + tuple(files), expect=expect,
                  culprit=culprit, outputs=outputs, codes=codes, answer=answer)

        name = f"out{suffix}"
        # a good target: written whole
        add(f"{{T}}/o/{name}", "ok" if verb != "plan" else "either", outputs=(
            "{T}/o",), answer="complete")
        # refused targets
        # a plot path without a suffix gets .svg (documented): /dev/full is /dev/full.svg there
        if suffix != ".png":
            add("/dev/full", "refuse", culprit=("/dev/full",))
        add(f"/proc/tierlab-fuzz{suffix}", "refuse", culprit=("/proc/tierlab-fuzz",))
        add(f"{{T}}/other/keep.txt/x{suffix}", "refuse", culprit=("keep.txt",))
        add(f"{{T}}/{LONG}{suffix}", "refuse", culprit=(LONG[:40],))
        add(f"{{T}}/d{suffix}", "refuse", culprit=(f"d{suffix}",), files=((f"d{suffix}", DIR),))
        add(f"{{T}}/f{suffix}", "refuse", culprit=(f"f{suffix}",), files=((f"f{suffix}", FIFO),))
        add(f"{{T}}/ld{suffix}", "refuse", culprit=(f"ld{suffix}",),
            files=(("other/sub", DIR), (f"ld{suffix}", ("link", "other/sub"))))
        add("", "refuse", culprit=("--",))
        # an output that is one of the verb's inputs
        if verb != "calibrate":
            for inp in ("{T}/in/m.yaml", "{T}/in/c.json"):
                if verb == "plan" and "--write-config" not in args0 and inp.endswith("c.json"):
                    continue
                add(inp, "refuse", culprit=(Path(inp).name,))
        else:
            add("{T}/in/raw.json", "refuse", culprit=("raw.json",))
        # /dev/null: written through (answer thrown away) or refused, never replaced
        if suffix != ".png":
            add("/dev/null", "either", culprit=("/dev/null",))
        # through a symlink to a file elsewhere / a dangling one: a whole file or a refusal
        add(f"{{T}}/l{suffix}", "either", culprit=(f"l{suffix}",),
            files=((f"other/t{suffix}", b"old\n"), (f"l{suffix}", ("link", f"other/t{suffix}"))),
            outputs=(f"{{T}}/l{suffix}", f"{{T}}/other/t{suffix}"))
        add(f"{{T}}/dl{suffix}", "either", culprit=(f"dl{suffix}",),
            files=((f"dl{suffix}", ("link", f"gone/t{suffix}")),),
            outputs=(f"{{T}}/dl{suffix}", f"{{T}}/gone"))
        # an existing file of the same kind: replaced whole (sweep: an unrelated CSV is refused)
        add(f"{{T}}/e{suffix}", "refuse" if verb == "sweep" and suffix == ".csv" else "either",
            culprit=(f"e{suffix}",), files=((f"e{suffix}", b"a,b\n1,2\n"),),
            outputs=(f"{{T}}/e{suffix}",) if verb != "sweep" or suffix != ".csv" else ())
        # a wrong suffix (a profile is YAML whatever its name: calibrate writes it)
        if suffix in (".png", ".csv"):
            add(f"{{T}}/x.jpeg", "refuse", culprit=("x.jpeg", ".jpeg"))
    for verb, args0 in _out_dir_verbs("@"):
        def add(target, expect, culprit=(), files=(), outputs=()):
            args = [target if a == "@" else a for a in args0]
            g.add(verb, "output", args, files=base_files + tuple(files), expect=expect,
                  culprit=culprit, outputs=outputs, codes=(0, 1, 2) if verb == "validate" else
                  (0, 2))

        add("/dev/full", "refuse", culprit=("/dev/full",))
        add("/dev/null", "refuse", culprit=("/dev/null",))
        add("/proc/tierlab-fuzz", "refuse", culprit=("/proc/tierlab-fuzz",))
        add("{T}/other/keep.txt", "refuse", culprit=("keep.txt",))
        add("{T}/other/keep.txt/sub", "refuse", culprit=("keep.txt",))
        add(f"{{T}}/{LONG}", "refuse", culprit=(LONG[:40],))
        add("{T}/f", "refuse", culprit=("f",), files=(("f", FIFO),))
        if verb == "validate":
            add("{T}/v", "ok", outputs=("{T}/v",))
            add(f"{{T}}/{'d' * 200}/{'e' * 200}", "ok", outputs=(f"{{T}}/{'d' * 200}",))


def _meas_files(mutate: Callable[[dict], None] | None = None) -> tuple:
    files = {p.name: p.read_bytes() for p in CASE_DIR.iterdir()
             if p.is_file() and p.suffix in (".json", ".jsonl")}
    if mutate:
        mutate(files)
    return tuple(("run/" + k, v) for k, v in files.items())


def gen_measurements(g: _Gen) -> None:
    rnd = g.rnd
    val = ["validate", "{T}/run", "-H", "h200x2-host", "--out", "{T}/v"]
    plot = ["plot", "timeline", "--measurement", "{T}/run", "-H", "h200x2-host", "-o",
            "{T}/t.png"]
    for args, verb, outs in ((val, "validate", ("{T}/v",)), (plot, "plot", ("{T}/t.png",))):
        g.add(verb, "measurement", args, files=_meas_files(), expect="ok", outputs=outs,
              codes=(0, 1, 2))
    names = ["measurement.json", "steps.jsonl", "summary.json", "samples.jsonl", "spec.json"]
    n = 0
    for name in names:
        for how in ("truncated", "nonutf8", "empty", "list", "dup", "nan", "missing", FIFO, DIR,
                    "mutated", "mutated"):
            if name.endswith(".jsonl") and how in ("dup", "list"):
                continue

            edited: list = []

            def mutate(files, name=name, how=how, seed=rnd.randrange(10 ** 6), edited=edited):
                r = random.Random(seed)
                data = files[name]
                if how == "missing":
                    del files[name]
                elif how in (FIFO, DIR):
                    files[name] = how
                elif how == "dup":
                    files[name] = dup_key(data, ".json", next(iter(json.loads(data))))
                elif how == "nan":
                    files[name] = data.replace(b": 0.", b": NaN, \"x\": 0.", 1) if \
                        name.endswith(".jsonl") else data.replace(b": 2", b": NaN", 1)
                elif how == "mutated" and name.endswith(".jsonl"):
                    lines = data.decode().splitlines()
                    i = r.randrange(len(lines))
                    rec = json.loads(lines[i])
                    key = r.choice(sorted(rec))
                    rec[key] = r.choice(ODD)
                    edited.append(key)
                    lines[i] = json.dumps(rec)
                    files[name] = ("\n".join(lines) + "\n").encode()
                elif how == "mutated":
                    doc = json.loads(data)
                    path = r.choice(list(_leaves(doc)))
                    edited.extend(map(str, path))
                    files[name] = _dump(_set(doc, path, r.choice(ODD)), ".json")
                else:
                    files[name] = damaged(data, how, r, ".json")
            args, verb, outs = (val, "validate", ("{T}/v",)) if n % 3 else (
                plot, "plot", ("{T}/t.png",))
            n += 1
            # a folder damaged in one file may still hold a usable record (a torn samples
            # line is skipped): the oracle's other classes only; a hostile type is refused
            files = _meas_files(mutate)         # (fills `edited`: the key path changed)
            g.add(verb, "measurement", args, files=files,
                  expect="refuse" if how in (FIFO, DIR) and name == "measurement.json" else
                  "either", culprit=(name, "run", *edited), outputs=outs, codes=(0, 1, 2))
    # every step's time bad: nothing to compare against, never a number made up
    for bad in (-1.0, 0.0, "slow", None, 1e300):
        def mutate(files, bad=bad):
            lines = [json.loads(x) for x in files["steps.jsonl"].decode().splitlines()]
            files["steps.jsonl"] = "".join(json.dumps({**r, "wall_s": bad}) + "\n"
                                           for r in lines).encode()
            files.pop("summary.json")
        g.add("validate", "measurement", val, files=_meas_files(mutate), expect="refuse",
              culprit=("steps.jsonl", "wall_s", "run"), outputs=("{T}/v",), codes=(0, 1, 2))


def gen_raw(g: _Gen) -> None:
    rnd = g.rnd
    data = RAW.read_bytes()
    doc = json.loads(data)
    args = ["calibrate", "--from-raw", "{T}/raw.json", "--out", "{T}/p/x.yaml"]
    outs = ("{T}/p",)
    g.add("calibrate", "raw", args, files=(("raw.json", data),), expect="ok", outputs=outs,
          answer="profile_loads")
    for how in WHOLE:
        g.add("calibrate", "raw", args, files=(("raw.json", damaged(data, how, rnd, ".json")),),
              expect="refuse", culprit=("raw.json",), outputs=outs)
    g.add("calibrate", "raw", args, files=(("raw.json", dup_key(data, ".json", "name")),),
          expect="refuse", culprit=("raw.json",), outputs=outs)
    for results in (None, {}, [], "x", {g_: [{k: "fast" for k in p} for p in pts]
                                        for g_, pts in doc["results"].items()}):
        g.add("calibrate", "raw", args, files=(("raw.json", json.dumps(
            {**doc, "results": results}).encode()),), expect="refuse",
            culprit=("raw.json", "results"), outputs=outs)
    groups = sorted(doc["results"])
    for n in range(30):
        grp = rnd.choice(groups)
        pts = doc["results"][grp]
        if not isinstance(pts, list) or not pts:
            continue
        i = rnd.randrange(len(pts))
        key = rnd.choice(sorted(pts[i]))
        value = rnd.choice([-1, 0, "x", None, [], 1e300, -1e300, True])
        new = copy.deepcopy(doc)
        new["results"][grp][i][key] = value
        # one point of many may be dropped or refused, depending on what it feeds: 'either'
        g.add("calibrate", "raw", args, files=(("raw.json", json.dumps(new).encode()),),
              culprit=("raw.json", key, grp), outputs=outs, answer="profile_loads")
    for key in ("name", "base", "host", "date"):
        for value in (None, 5, "", "../../x", LONG):
            g.add("calibrate", "raw", args, files=(("raw.json", json.dumps(
                {**doc, key: value}).encode()),), culprit=("raw.json", key),
                outputs=outs, answer="profile_loads")


def gen_results(g: _Gen) -> None:
    """plot sweep --results: a sweep's own CSV, damaged."""
    rnd = g.rnd
    csv = ("point_id,micro_batch,step_time_s,tokens_per_s,fits,error\n" + "".join(
        f"p{i},{i},{0.1 * i:.3f},{1000 / i:.1f},True,\n" for i in range(1, 6))).encode()
    args = ["plot", "sweep", "--results", "{T}/r.csv", "-o", "{T}/s.png"]
    g.add("plot", "results", args, files=(("r.csv", csv),), expect="either", culprit=("r.csv",),
          outputs=("{T}/s.png",))
    for how in ("truncated", "nonutf8", "empty", "blank", FIFO, DIR):
        data = how if how in (FIFO, DIR) else damaged(csv, how, rnd, ".csv")
        g.add("plot", "results", args, files=(("r.csv", data),), expect="refuse"
              if how not in ("truncated",) else "either", culprit=("r.csv",),
              outputs=("{T}/s.png",))
    for bad in (b"nan", b"-1", b"x", b"inf"):
        g.add("plot", "results", args, files=(("r.csv", csv.replace(b"0.200", bad)),),
              culprit=("r.csv", "step_time_s"), outputs=("{T}/s.png",))


HOSTILE = ["fifo", "devzero", "devnull", "folder", "sparse", "symloop", "missing", "long",
           "dangling"]


def _hostile_file(kind: str, name: str) -> tuple[str, tuple]:
    """(path to pass, files) for a hostile `kind` of input file."""
    if kind == "devzero":
        return "/dev/zero", ()
    if kind == "devnull":
        return "/dev/null", ()
    if kind == "missing":
        return f"{{T}}/no/{name}", ()
    if kind == "long":
        return f"{{T}}/{LONG}{Path(name).suffix}", ()
    entry = {"fifo": FIFO, "folder": DIR, "sparse": ("sparse", 200 << 20),
             "symloop": ("link", name), "dangling": ("link", "gone")}[kind]
    return f"{{T}}/{name}", ((name, entry),)


def gen_hostile(g: _Gen) -> None:
    slots = [("simulate", lambda p: ["simulate", "-c", p, "-m", TINY], "ds.json"),
             ("memory", lambda p: ["memory", "-m", p], "m.yaml"),
             ("memory", lambda p: ["memory", "-m", p], "config.json"),
             ("simulate", lambda p: ["simulate", "-H", p, "-m", TINY], "sys.yaml"),
             ("plan", lambda p: ["plan", "-m", TINY, "-H", "workstation-rtx3070", "-c", p,
                                 "--micro-batch", "1", "--no-progress"], "ds.json"),
             ("calibrate", lambda p: ["calibrate", "--from-raw", p, "--out", "{T}/p/x.yaml"],
              "raw.json"),
             ("validate", lambda p: ["validate", CASE_DIR, "-H", "h200x2-host", "--software", p,
                                     "--out", "{T}/v"], "sw.yaml"),
             ("validate", lambda p: ["validate", p, "-H", "h200x2-host", "--out", "{T}/v"],
              "case"),
             ("plot", lambda p: ["plot", "timeline", "--measurement", p, "-H", "h200x2-host", "-o",
                                 "{T}/t.png"], "meas"),
             ("plot", lambda p: ["plot", "sweep", "--results", p, "-o", "{T}/s.png"], "r.csv"),
             ("sweep", lambda p: ["sweep", "-m", p, "--memory-only", "--no-progress", "-j", "1",
                                  "--vary", "micro_batch=1,2"], "m.yaml"),
             ("preflight", lambda p: ["preflight", "-c", p, "-m", TINY, "--no-probe"], "ds.json"),
             ("run", lambda p: ["run", "-m", TINY, "-c", "no-offload", "--dataset", p, "--out",
                                "{T}/r"], "data.jsonl"),
             ("run", lambda p: ["run", "-m", TINY, "-c", p, "--out", "{T}/r"], "ds.json"),
             ("run", lambda p: ["run", "-m", TINY, "-c", "no-offload", "--hostfile", p, "--out",
                                "{T}/r"], "hostfile"),
             ("compare", lambda p: ["compare", "-m", p, "--variants", "no-offload", "--out",
                                    "{T}/c"], "m.yaml")]
    for verb, make, name in slots:
        for kind in HOSTILE:
            if kind in ("folder", "symloop") and name in ("case", "meas"):
                continue        # a folder is what these slots take
            path, files = _hostile_file(kind, name)
            culprit = (Path(path).name[:40],) if kind != "symloop" else (name, "symbolic links")
            g.add(verb, "hostile", make(path), files=files, expect="refuse", culprit=culprit,
                  outputs=("{T}/p", "{T}/v", "{T}/t.png", "{T}/s.png", "{T}/r", "{T}/c"),
                  codes=(0, 1, 2))


def gen_profiles_dir(g: _Gen) -> None:
    """A user's $TIERLAB_PROFILES holding broken part files."""
    rnd = g.rnd
    for part, src in (("gpus", PART_FILES["gpus"]), ("systems", SYSTEM),
                      ("cpus", PART_FILES["cpus"])):
        for how in ("truncated", "nonutf8", "laughs", "empty", FIFO, DIR):
            data = how if how in (FIFO, DIR) else damaged(src.read_bytes(), how, rnd, ".yaml")
            files = ((f"prof/hardware/{part}/broken.yaml", data),)
            env = (("TIERLAB_PROFILES", "{T}/prof"),)
            g.add("profiles", "profiles_dir", ["profiles"], files=files, env=env,
                  culprit=("broken.yaml",))
            g.add("profiles", "profiles_dir", ["profiles", "--json"], files=files, env=env,
                  culprit=("broken.yaml",))
            # the broken file is not the one asked for: the shipped profiles still answer
            g.add("simulate", "profiles_dir", ["simulate", "-m", TINY], files=files, env=env,
                  expect="ok")
            if part == "systems":
                g.add("simulate", "profiles_dir", ["simulate", "-m", TINY, "-H", "broken"],
                      files=files, env=env, expect="refuse", culprit=("broken",))


def gen_pretrain(g: _Gen) -> None:
    """run / compare / calibrate: what they refuse before training or measuring."""
    base = ["run", "-m", TINY, "-c", "zero3-nvme", "--steps", "2", "--warmup-steps", "1",
            "--out", "{T}/r"]
    files = (("afile", b"x\n"), ("fifo", FIFO))
    for swap in (SHM, "{T}/afile", "/proc/tierlab-fuzz", "/dev/null",
                 "{T}/afile/sub", f"{{T}}/{LONG}", "{T}/fifo", ""):
        for verb, args in (("run", base),
                           ("run", [*base, "--skip-preflight"]),
                           ("preflight", ["preflight", "-m", TINY, "-c", "zero3-nvme",
                                          "--no-memory"]),
                           ("compare", ["compare", "-m", TINY, "--variants", "zero3-nvme",
                                        "--out", "{T}/c"])):
            # preflight reports problems and exits 2 with an `error` line per problem; its
            # swap-path check names the path. A tmpfs is a folder one can write: only preflight
            # knows DeepSpeed's O_DIRECT fails there, so --skip-preflight launches, and compare
            # records the variant's failed pre-flight as its row
            tmpfs = swap.startswith("/dev/shm")
            expect = "either" if tmpfs and ("--skip-preflight" in args or verb == "compare") \
                else "refuse"
            g.add(verb, "pretrain", [*args, "--swap-dir", swap], files=files, expect=expect,
                  culprit=(swap.replace("{T}/", "")[:40] or "--swap-dir", "--swap-dir",
                           "swap"), outputs=("{T}/r", "{T}/c"))
    for setting in ("zero_optimization.stage=7", "train_micro_batch_size_per_gpu=0",
                    "zero_optimization.offload_param.device=\"gpu\"", "aio.block_size=-1",
                    "bf16.enabled=NaN"):
        for verb, args in (("run", base), ("compare", ["compare", "-m", TINY, "--variants",
                                                       "no-offload", "--out", "{T}/c"])):
            g.add(verb, "pretrain", [*args, "--set", setting], expect="refuse",
                  culprit=(setting.split("=")[0].split(".")[-1],), outputs=("{T}/r", "{T}/c"))
    for args, culprit in ((["run", "-m", TINY, "--model-path", "{T}/nothing", "--out", "{T}/r"],
                           "nothing"),
                          (["run", "-m", TINY, "--model-path", "{T}/afile", "--out", "{T}/r"],
                           "afile"),
                          (["run", "-m", TINY, "--tokenizer", "{T}/nothing", "--dataset",
                            "{T}/afile", "--out", "{T}/r"], "afile"),
                          (["compare", "-m", TINY, "--variants", "bogus", "--out", "{T}/c"],
                           "--variants"),
                          (["calibrate", "--quick", "--skip", "bogus", "--out", "{T}/q.yaml"],
                           "bogus"),
                          (["calibrate", "--quick", "--sweep", "bogus=1,2", "--out", "{T}/q.yaml"],
                           "bogus"),
                          (["calibrate", "--quick", "--out", "/proc/tierlab-fuzz.yaml"],
                           "/proc/tierlab-fuzz"),
                          (["calibrate", "--quick", "--out", "{T}/afile/x.yaml"], "afile"),
                          (["calibrate", "--quick", "--nvme-path", "{T}/afile", "--out",
                            "{T}/q.yaml"], "afile"),
                          (["calibrate", "--quick", "--nvme-path", "/proc", "--out",
                            "{T}/q.yaml"], "/proc"),
                          (["calibrate", "--quick", "-H", "no-such-system", "--out",
                            "{T}/q.yaml"], "no-such-system"),
                          (["calibrate", "--from-raw", RAW, "--out", "{T}/p/x.yaml", "--raw",
                            RAW], "--raw"),
                          ):
        g.add(args[0], "pretrain", args, files=files, expect="refuse", culprit=(culprit,),
              outputs=("{T}/r", "{T}/c", "{T}/q.yaml", "{T}/p"))


def gen_plot(g: _Gen) -> None:
    """plot bottleneck / memory: the configs compared, a hostile --compare, odd flags."""
    out = ("{T}/b.png",)
    base = ["plot", "bottleneck", "-m", TINY, "-o", "{T}/b.png"]
    g.add("plot", "plot", base, expect="ok", outputs=out, answer="")
    g.add("plot", "plot", [*base, "--compare", "zero3-nvme"], expect="ok", outputs=out)
    g.add("plot", "plot", [*base, "--compare", "{T}/c.json"], expect="ok", outputs=out,
          files=(("c.json", (ROOT / "profiles/configs/zero2-cpu.json").read_bytes()),))
    for bad, files in (("no-such-preset", ()), ("{T}/c.json", (("c.json", b"{"),)),
                       ("{T}/c.json", (("c.json", FIFO),)), ("{T}/nope.json", ())):
        g.add("plot", "plot", [*base, "--compare", bad], files=files, expect="refuse",
              culprit=(Path(bad).name,), outputs=out)
    for flag, value in (("--gpu-mem-cap", "nan"), ("--micro-batch", "0"), ("--set", "bf16=NaN"),
                        ("--title", "x" * 5000), ("--x", "bogus")):
        g.add("plot", "plot", [*base, flag, value], outputs=out,
              expect="refuse" if flag not in ("--title", "--x") else "either",
              culprit=(flag, value.split("=")[0][:20]))
    g.add("plot", "plot", ["plot", "bogus-kind", "-m", TINY], expect="refuse",
          culprit=("bogus-kind",))
    g.add("plot", "plot", ["plot", "sweep", "-o", "{T}/s.png"], expect="refuse",
          culprit=("--results",), outputs=("{T}/s.png",))


WORDS = ["zero_optimization", "stage", "offload_param", "offload_optimizer", "device", "nvme_path",
         "bf16", "enabled", "train_micro_batch_size_per_gpu", "kind", "name", "model", "gpu",
         "n_layers", "hidden", "vocab", "value", "source", "range", "hbm", "cores", "results",
         "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "aio",
         "block_size", "status", "run_id", "steps", "base", "points", "x", ""]


def _tree(rnd: random.Random, depth: int = 0):
    """A random JSON value over tierlab's own key names."""
    r = rnd.random()
    if depth > 3 or r < 0.35:
        return rnd.choice(ODD + ["8 GB", "1 TFLOP/s", "10 us", "model", "gpu", "nvme", 4, 3])
    if r < 0.5:
        return [_tree(rnd, depth + 1) for _ in range(rnd.randint(0, 3))]
    return {rnd.choice(WORDS): _tree(rnd, depth + 1) for _ in range(rnd.randint(0, 5))}


def gen_random_trees(g: _Gen) -> None:
    """Random documents over the real key names in every file slot: nothing is known about their
    validity ('either'); a refusal names the file or one of the keys it holds."""
    rnd = g.rnd
    slots = [("simulate", ["simulate", "-c", "{T}/f.json", "-m", TINY], "f.json"),
             ("memory", ["memory", "-m", "{T}/f.yaml"], "f.yaml"),
             ("memory", ["memory", "-m", "{T}/config.json"], "config.json"),
             ("simulate", ["simulate", "-H", "{T}/f.yaml", "-m", TINY], "f.yaml"),
             ("calibrate", ["calibrate", "--from-raw", "{T}/f.json", "--out", "{T}/p/x.yaml"],
              "f.json"),
             ("validate", ["validate", CASE_DIR, "-H", "h200x2-host", "--software", "{T}/f.yaml",
                           "--out", "{T}/v"], "f.yaml")]
    for n in range(120):
        verb, args, name = slots[n % len(slots)]
        doc = _tree(rnd)
        if n % 3 == 0:      # a mapping at the top, with a kind, as the readers expect
            doc = {"kind": rnd.choice(["model", "system", "gpu", "software"]),
                   **(doc if isinstance(doc, dict) else {"x": doc})}
        data = _dump(doc, Path(name).suffix) if Path(name).suffix == ".json" else \
            json.dumps(doc).encode()            # JSON is YAML: every key quoted
        words = sorted({w for w in WORDS if w and f'"{w}"' in data.decode()})
        g.add(verb, "random_tree", args, files=((name, data),), culprit=(name, *words),
              outputs=("{T}/p", "{T}/v"), codes=(0, 1, 2))


GENERATORS = [gen_ds_config, gen_model_yaml, gen_hf_config, gen_hardware, gen_software, gen_set,
              gen_vary, gen_hw_flag, gen_numbers, gen_outputs, gen_measurements, gen_raw,
              gen_results, gen_hostile, gen_profiles_dir, gen_pretrain, gen_plot,
              gen_random_trees]


def cases(seed: int = SEED) -> list[Case]:
    """Every case, in a fixed order (each generator draws from its own seeded stream)."""
    out: list[Case] = []
    for i, gen in enumerate(GENERATORS):
        g = _Gen(seed * 100 + i)
        gen(g)
        out.extend(g.cases)
    return out


# ----------------------------------------------------------------------------------------------
# the oracle

class Hang(BaseException):
    """Raised by SIGALRM inside a case that runs past HANG_S (a BaseException: no `except
    Exception` in the product swallows it)."""


class Trained(BaseException):
    """Raised by the training seams: a training verb got past its refusals."""


TRAINED: list = []


def _trained(*a, **k):
    """The training seams: note that training was reached (a run records the exception as its
    failure, so the flag, not the exception, says it), then stop."""
    TRAINED.append(1)
    raise Trained()


def _build(folder: Path, files) -> None:
    for rel, data in files:
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if data == FIFO:
            os.mkfifo(path)
        elif data == DIR:
            path.mkdir(exist_ok=True)
        elif isinstance(data, tuple) and data[0] == "link":
            path.symlink_to(data[1])
        elif isinstance(data, tuple) and data[0] == "sparse":
            with open(path, "wb") as f:
                f.truncate(data[1])
        else:
            path.write_bytes(data)


def snapshot(folder: Path) -> dict[str, tuple]:
    """{relative path: (type, content or target)} of everything under `folder` (links not
    followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(folder))
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", None)
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", p.read_bytes() if st.st_size < 1 << 24 else st.st_size)
            else:
                out[rel] = ("special", stat.S_IFMT(st.st_mode))
    return out


DEVICES = ("/dev/null", "/dev/full", "/dev/zero")


def _devices() -> dict:
    return {d: (os.stat(d).st_ino, os.stat(d).st_mode) for d in DEVICES}


def complete(path: Path) -> str:
    """'' if `path` (a file) is a whole output of its kind, else why not."""
    data = path.read_bytes()
    if not data:
        return "empty"
    try:
        if path.suffix == ".json":
            json.loads(data)
        elif path.suffix in (".yaml", ".yml"):
            import yaml

            yaml.safe_load(data)
        elif path.suffix == ".csv":
            lines = data.decode().splitlines()
            widths = {len(l.split(",")) for l in lines if '"' not in l}
            if not data.endswith(b"\n") or len(widths) > 1:
                return "torn CSV"
        elif path.suffix == ".png":
            if not (data.startswith(b"\x89PNG") and data.rstrip(b"\x00").endswith(b"\xaeB`\x82")):
                return "torn PNG"
        elif path.suffix == ".jsonl":
            for line in data.decode().splitlines():
                json.loads(line)
    except (ValueError, UnicodeDecodeError) as e:
        return f"not whole: {str(e)[:60]}"
    return ""


@dataclass
class Outcome:
    cls: str
    detail: str = ""
    seconds: float = 0.0
    output: str = ""


def _sub(text: str, folder: Path) -> str:
    return text.replace("{T}", str(folder))


def _losses(case: Case, folder: Path, before: dict, after: dict, code: int,
            devices: dict) -> list[str]:
    outputs = [Path(_sub(o, folder)) for o in case.outputs]
    rels = []
    for o in outputs:
        try:
            rels.append(str(o.relative_to(folder)))
        except ValueError:
            pass

    def is_output(rel: str) -> bool:
        return any(rel == o or rel.startswith(o + "/") for o in rels)

    out = []
    for rel, entry in before.items():
        if after.get(rel) != entry and not (code == 0 and is_output(rel)):
            out.append(f"{rel} changed" if rel in after else f"{rel} removed")
    for rel in after:
        if rel in before:
            continue
        if not is_output(rel):
            out.append(f"stray {rel}")
        elif code != 0 and after[rel][0] == "file" and not case.keeps:
            out.append(f"{rel} written on exit {code}")
    for rel, entry in after.items():
        if entry[0] == "file" and is_output(rel) and after.get(rel) != before.get(rel):
            why = complete(folder / rel)
            if why:
                out.append(f"{rel}: {why}")
    if _devices() != devices:
        out.append("a device node was replaced")
    return out


def _answer(case: Case, stdout: str, folder: Path) -> str:
    """'' if the answer passes its check, else why not."""
    fn = ANSWERS.get(case.answer)
    return fn(stdout, folder) if fn else ""


def _simulate_json(stdout: str, folder: Path) -> str:
    import math

    d = json.loads(stdout)
    t = d["step_time_s"]
    return "" if isinstance(t, float) and math.isfinite(t) and t > 0 else f"step_time_s {t}"


def _micro_batch_2(stdout: str, folder: Path) -> str:
    d = json.loads(stdout)
    mb = d["scenario"].get("micro_batch") if isinstance(d.get("scenario"), dict) else None
    return "" if mb == 2 else f"micro_batch {mb}, not 2"


def _csv_rows(stdout: str, folder: Path) -> str:
    p = folder / "rows.csv"
    if not p.exists():
        return "no rows file"
    return complete(p)


def _complete_outputs(stdout: str, folder: Path) -> str:
    files = [p for p in (folder / "o").rglob("*") if p.is_file()] if (folder / "o").exists() \
        else []
    if not files:
        return "exit 0 but nothing written"
    return "; ".join(f"{p.name}: {w}" for p in files if (w := complete(p)))


def _profile_loads(stdout: str, folder: Path) -> str:
    from tierlab.errors import ConfigError
    from tierlab.profiles.load import load_hardware

    try:
        hw = load_hardware(str(folder / "p" / "x.yaml"))
    except ConfigError as e:
        return f"the written profile does not load: {e}"
    return "" if hw.gpu.hbm_bytes > 0 else "no GPU memory"


ANSWERS = {"simulate_json": _simulate_json, "micro_batch_2": _micro_batch_2,
           "csv_rows": _csv_rows, "complete": _complete_outputs,
           "profile_loads": _profile_loads}


def _alarm(signum, frame):
    raise Hang()


_WARMED: list[bool] = []


def _warm() -> None:
    """Import torch and DeepSpeed, and JIT-build DeepSpeed's ops, before the alarm is set: their
    first import (seconds; tens of seconds on a cold disk) and first build (minutes, and again
    after another checkout's venv built them) are the machine's, not the case's. An alarm
    inside a build would kill it and could leave its lock, on which every later load waits."""
    import importlib

    if _WARMED:
        return
    _WARMED.append(True)
    for name in ("torch", "deepspeed", "transformers", "psutil"):
        try:
            importlib.import_module(name)
        except Exception:       # not installed (a core install): the verb says so itself
            pass
    try:
        from tierlab.runner import jit_ops

        jit_ops.build_missing(jit_ops.builders(["deepspeed_shm_comm", "cpu_adam", "async_io"]))
    except Exception as e:      # no DeepSpeed, no libaio, a stale lock: the cases say so
        print(f"fuzz: ops not prebuilt ({type(e).__name__}: {e})", file=sys.stderr)


def run_case(case: Case, folder: Path, hang_s: float = HANG_S) -> Outcome:
    """Build, run and classify one case in the empty folder `folder`."""
    from click.testing import CliRunner

    from tierlab.cli import main

    folder.mkdir(parents=True, exist_ok=True)
    if case.verb in ("run", "compare", "preflight", "calibrate"):
        _warm()
    _build(folder, case.files)
    before, devices = snapshot(folder), _devices()
    shm_before = os.path.exists(SHM)
    args = [_sub(a, folder) for a in case.args]
    env = {**ENV, **{k: _sub(v, folder) for k, v in case.env}}
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, hang_s)
    t0 = time.monotonic()
    result, hung, trained = None, False, False
    TRAINED.clear()
    try:
        result = CliRunner().invoke(main, args, env=env,
                                    obj={"setup_engine": _trained, "train": _trained})
    except Hang:
        hung = True
    except Trained:
        trained = True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    seconds = time.monotonic() - t0
    if SHM in case.args and not shm_before and os.path.isdir(SHM):
        import shutil

        shutil.rmtree(SHM, ignore_errors=True)
    if hung:
        return Outcome("hang", f"still running after {hang_s:g} s", seconds)
    if trained or TRAINED:
        if case.expect == "refuse":
            return Outcome("silent accept", "reached training", seconds)
        return Outcome("ok", "reached training (allowed)", seconds)
    text = result.output
    exc = result.exception
    if isinstance(exc, (Hang, Trained)):
        return Outcome("hang" if isinstance(exc, Hang) else "silent accept",
                       type(exc).__name__, seconds, text)
    if exc is not None and not isinstance(exc, SystemExit):
        return Outcome("traceback", f"{type(exc).__name__}: {str(exc)[:160]}", seconds, text)
    if "Traceback" in text or "internal:" in text:
        return Outcome("traceback", text.strip().splitlines()[-1][:160], seconds, text)
    code = result.exit_code
    losses = _losses(case, folder, before, snapshot(folder), code, devices)
    if losses:
        return Outcome("data loss", "; ".join(losses)[:300], seconds, text)
    if code not in case.codes:
        return Outcome("wrong refusal" if case.expect != "refuse" else "silent accept",
                       f"exit {code}: {_last(text)}", seconds, text)
    if code == 2:
        if case.expect == "ok":
            return Outcome("wrong refusal", _last(text), seconds, text)
        errors = [line for line in text.splitlines() if line.startswith("error")]
        # a pre-flight report is one `error: [check] ...` line per problem found (then, from
        # run/compare, `error: pre-flight failed`): several lines, one of them naming the culprit
        report = case.verb == "preflight" or (errors and "pre-flight failed" in errors[-1])
        if len(errors) != 1 and not report:
            return Outcome("unclear error", f"{len(errors)} error lines: {_last(text)}", seconds,
                           text)
        if not errors:
            return Outcome("unclear error", f"exit 2 without an error line: {_last(text)}",
                           seconds, text)
        culprits = [_sub(c, folder) for c in case.culprit if c]
        joined = " ".join(errors)
        # a pre-flight verdict on input the generator does not call bad (`[memory] gpu needs
        # 1.55 GiB of 0.00 GiB` after --hw gpu.hbm=4: a plain number is bytes) names its check
        # and tier, which is its culprit
        verdicts = report and case.expect != "refuse" and all(
            e.startswith("error: [") or "pre-flight failed" in e for e in errors)
        if culprits and not verdicts and not any(c in joined for c in culprits):
            return Outcome("unclear error", f"names none of {culprits}: {errors[0][:200]}",
                           seconds, text)
        return Outcome("ok", "", seconds, text)
    if case.expect == "refuse":
        return Outcome("silent accept", f"exit {code}: {_last(text)}", seconds, text)
    if code == 0 and case.answer:
        try:
            why = _answer(case, result.stdout, folder)
        except (ValueError, KeyError, TypeError) as e:
            why = f"answer unreadable: {type(e).__name__}: {e}"
        if why:
            return Outcome("silent accept", f"answer: {why}", seconds, text)
    return Outcome("ok", "", seconds, text)


def _last(text: str) -> str:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1][:200] if lines else ""
