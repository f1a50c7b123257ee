"""Issue 34, the unseen audit: cases that tests/_fuzzgen.py's generated suite does not make,
judged by the same oracle (`_fuzzgen.run_case`): deep nesting, BOM/UTF-16/NUL bytes, huge files,
HF config variants (MoE, rope_scaling, sliding_window, layer_types, mamba/jamba mixer keys),
wrong-typed nested ds_config blocks (offload_*, aio, bf16/fp16, scheduler, optimizer), the
headroom / precision / plan / sweep / plot / validate options not fuzzed there, $TIERLAB_PROFILES
as a file / empty folder / link loop, sweep resume over a tampered results file, odd result CSVs,
odd measurement folders, and more output targets (read-only folders, a link in the parent).

`cases()` is deterministic: fixed tables only, no randomness.
"""
from __future__ import annotations

import json
from pathlib import Path

import _fuzzgen as fg
from _fuzzgen import DIR, FIFO, TINY, Case

ROOT = fg.ROOT
HF = ROOT / "tests" / "data" / "hf_configs"
CONFIGS = ROOT / "profiles" / "configs"
NVME = json.loads((CONFIGS / "zero3-nvme.json").read_text())
CPU3 = json.loads((CONFIGS / "zero3-cpu.json").read_text())
CASE_DIR = fg.CASE_DIR


class _Gen:
    def __init__(self):
        self.cases: list[Case] = []
        self.counter: dict[tuple, int] = {}

    def add(self, verb: str, kind: str, args, **kw) -> None:
        n = self.counter.get((verb, kind), 0)
        self.counter[(verb, kind)] = n + 1
        self.cases.append(Case(id=f"fresh/{verb}/{kind}/{n:03d}", verb=verb, kind=kind,
                               args=tuple(str(a) for a in args), **kw))


def _j(doc) -> bytes:
    return json.dumps(doc, indent=1).encode()


def _with(doc: dict, path: tuple, value) -> dict:
    return fg._set(doc, path, value)


READERS = (("memory", []), ("simulate", []), ("preflight", ["--no-probe"]))


def _readers(g: _Gen, kind: str, slot: str, name: str, data, **kw) -> None:
    """One case per reader verb (memory, simulate, preflight) of a file in `slot`."""
    base = {"-c": ["-m", TINY], "-m": [], "-H": ["-m", TINY]}[slot]
    for verb, extra in READERS:
        g.add(verb, kind, [verb, slot, "{T}/" + name, *base, *extra], files=((name, data),), **kw)


# ----------------------------------------------------------------------------------------------
# bytes: encodings and structure

def _encodings(text: bytes) -> dict[str, bytes]:
    return {
        "bom": b"\xef\xbb\xbf" + text,
        "utf16": text.decode().encode("utf-16"),
        "utf32": text.decode().encode("utf-32"),
        "nul_mid": text[:len(text) // 2] + b"\x00" + text[len(text) // 2:],
        "nul_end": text + b"\x00",
        "nul_only": b"\x00" * 64,
        "latin1_key": text.replace(b"{", "{\"caf\xe9\": 1, ".encode("latin-1"), 1)
        if text.lstrip().startswith(b"{") else b"caf\xe9: 1\n" + text,
        "crlf": text.replace(b"\n", b"\r\n"),
        "cr_only": text.replace(b"\n", b"\r"),
        "surrogate": text.replace(b"{", b'{"\\ud800": 1, ', 1)
        if text.lstrip().startswith(b"{") else b'"\\ud800": 1\n' + text,
        "zwsp_key": text.replace(b"{", "{\"zero_optimization\u200b\": {}, ".encode(), 1)
        if text.lstrip().startswith(b"{") else "kind\u200b: x\n".encode() + text,
    }


# ok: the same document, a readable encoding; refuse: bytes that are not the document
ENC_EXPECT = {"bom": "either", "utf16": "either", "utf32": "either", "nul_mid": "refuse",
              "nul_end": "either", "nul_only": "refuse", "latin1_key": "refuse",
              "crlf": "ok", "cr_only": "either", "surrogate": "either", "zwsp_key": "either"}
"""(A key with a zero-width space is a key DeepSpeed does not read: warned, ignored, as
DeepSpeed ignores it.)"""


def _deep(kind: str, n: int) -> bytes:
    if kind == "json_dict":
        return b'{"a": ' * n + b"1" + b"}" * n
    if kind == "json_mixed":
        return b'{"a": [' * n + b"1" + b"]}" * n
    if kind == "yaml_flow":
        return b"{a: " * n + b"1" + b"}" * n
    if kind == "yaml_block":
        return b"".join(b"  " * i + b"a:\n" for i in range(n)) + b"  " * n + b"1\n"
    if kind == "yaml_seq":
        return b"- " * n + b"1\n"
    raise ValueError(kind)


def gen_bytes(g: _Gen) -> None:
    files = {"-c": ("ds.json", (CONFIGS / "zero3-cpu.json").read_bytes()),
             "-m": ("m.yaml", TINY.read_bytes()),
             "-H": ("sys.yaml", fg.SYSTEM.read_bytes())}
    hf = (HF / "llama-3.1-8b.json").read_bytes()
    for slot, (name, data) in files.items():
        for how, bad in _encodings(data).items():
            if slot != "-c" and how in ("surrogate",):
                continue
            verb, extra = READERS[len(how) % 3]
            base = {"-c": ["-m", TINY], "-m": [], "-H": ["-m", TINY]}[slot]
            g.add(verb, "encoding", [verb, slot, "{T}/" + name, *base, *extra],
                  files=((name, bad),), expect=ENC_EXPECT[how], culprit=(name,))
    raw, sw = fg.RAW.read_bytes(), fg.SOFTWARE.read_bytes()
    for how, bad in _encodings(raw).items():
        g.add("calibrate", "encoding", ["calibrate", "--from-raw", "{T}/raw.json", "--out",
                                        "{T}/p/x.yaml"], files=(("raw.json", bad),),
              expect=ENC_EXPECT[how] if how != "zwsp_key" else "either", culprit=("raw.json",),
              outputs=("{T}/p",))
    for how, bad in _encodings(sw).items():
        if how in ("surrogate", "latin1_key", "zwsp_key", "utf32"):
            continue
        g.add("validate", "encoding", ["validate", CASE_DIR, "-H", "h200x2-host", "--software",
                                       "{T}/sw.yaml", "--out", "{T}/v"],
              files=(("sw.yaml", bad),), expect=ENC_EXPECT[how], culprit=("sw.yaml",),
              outputs=("{T}/v",), codes=(0, 1, 2))
    for how, bad in _encodings(hf).items():
        g.add("memory", "encoding", ["memory", "-m", "{T}/config.json"],
              files=(("config.json", bad),), expect=ENC_EXPECT[how], culprit=("config.json",))
    # deep nesting, every reader
    for n in (900, 5000, 200_000):
        for deep in ("json_dict", "json_mixed"):
            g.add("simulate", "deep", ["simulate", "-c", "{T}/ds.json", "-m", TINY],
                  files=(("ds.json", _deep(deep, n)),), expect="refuse", culprit=("ds.json",))
            g.add("memory", "deep", ["memory", "-m", "{T}/config.json"],
                  files=(("config.json", _deep(deep, n)),), expect="refuse",
                  culprit=("config.json",))
            g.add("calibrate", "deep", ["calibrate", "--from-raw", "{T}/raw.json", "--out",
                                        "{T}/p/x.yaml"],
                  files=(("raw.json", _deep(deep, n)),), expect="refuse",
                  culprit=("raw.json",), outputs=("{T}/p",))
        for deep in ("yaml_flow", "yaml_block", "yaml_seq"):
            if deep == "yaml_block" and n > 5000:      # n^2 bytes of indentation
                continue
            g.add("memory", "deep", ["memory", "-m", "{T}/m.yaml"],
                  files=(("m.yaml", _deep(deep, n)),), expect="refuse", culprit=("m.yaml",))
            g.add("simulate", "deep", ["simulate", "-H", "{T}/sys.yaml", "-m", TINY],
                  files=(("sys.yaml", _deep(deep, n)),), expect="refuse", culprit=("sys.yaml",))
    # deep inside a valid document: a nested block that is absurdly deep
    deep_val = json.loads(_deep("json_dict", 500))
    for path in (("zero_optimization", "offload_param"), ("optimizer", "params"), ("aio",),
                 ("scheduler",), ("bogus",)):
        g.add("simulate", "deep", ["simulate", "-c", "{T}/ds.json", "-m", TINY],
              files=(("ds.json", json.dumps(_with(CPU3, path, deep_val)).encode()),),
              culprit=("ds.json", *path))
    # huge files: big but valid-looking, and big garbage
    big_pad = {"_description": "x" * (8 << 20)}
    g.add("memory", "huge", ["memory", "-c", "{T}/ds.json", "-m", TINY],
          files=(("ds.json", json.dumps({**CPU3, **big_pad}).encode()),), culprit=("ds.json",))
    g.add("memory", "huge", ["memory", "-c", "{T}/ds.json", "-m", TINY],
          files=(("ds.json", b" " * (16 << 20) + b"{}"),), culprit=("ds.json",))
    g.add("memory", "huge", ["memory", "-m", "{T}/m.yaml"],
          files=(("m.yaml", TINY.read_bytes() + b"#" * (16 << 20) + b"\n"),), culprit=("m.yaml",))
    g.add("memory", "huge", ["memory", "-m", "{T}/config.json"],
          files=(("config.json", b'{"a": "' + b"x" * (16 << 20) + b'"}'),),
          culprit=("config.json",), expect="refuse")
    g.add("memory", "huge", ["memory", "-m", "{T}/config.json"],
          files=(("config.json", json.dumps({**json.loads(hf), **{f"k{i}": i for i in
                                                               range(200_000)}}).encode()),),
          culprit=("config.json",))
    g.add("calibrate", "huge", ["calibrate", "--from-raw", "{T}/raw.json", "--out",
                                "{T}/p/x.yaml"],
          files=(("raw.json", b"[" + b"0," * (4 << 20) + b"0]"),), expect="refuse",
          culprit=("raw.json",), outputs=("{T}/p",))
    g.add("plot", "huge", ["plot", "sweep", "--results", "{T}/r.csv", "-o", "{T}/s.png"],
          files=(("r.csv", b"a," * (1 << 20) + b"b\n1\n"),), culprit=("r.csv",),
          outputs=("{T}/s.png",))
    # many duplicate-y keys in YAML: a mapping with a key that is itself a mapping / a list
    for bad in (b"? [a, b]\n: 1\nkind: model\n", b"? {a: 1}\n: 1\nkind: model\n",
                b"kind: model\n1: 2\n", b"kind: model\nnull: 2\n", b"kind: model\n.inf: 1\n",
                b"kind: !!python/object/apply:os.system ['true']\n",
                b"kind: model\nname: !!binary aGVsbG8=\n", b"%YAML 1.1\n---\nkind: model\n---\n"
                b"kind: model\n", b"kind: model\nname: !!timestamp 2001-12-14\n",
                b"<<: {kind: model}\nname: x\n", b"kind: [model]\n", b"kind: {model: 1}\n"):
        g.add("memory", "yaml_odd", ["memory", "-m", "{T}/m.yaml"], files=(("m.yaml", bad),),
              expect="refuse", culprit=("m.yaml",))


# ----------------------------------------------------------------------------------------------
# HF config.json variants

def _hf(name: str) -> dict:
    return json.loads((HF / name).read_text())


HF_VARIANTS = [
    # (file, key, values) -- a refusal names the key or the file
    ("mixtral-8x7b.json", "num_local_experts", ["8", 0, -1, 1.5, True, None, [8], 10 ** 9]),
    ("mixtral-8x7b.json", "num_experts_per_tok", ["2", 0, -1, 9, 2.5, True, None, 10 ** 9]),
    ("qwen3-30b-a3b.json", "num_experts", ["128", 0, -2, 1.5, None, [1]]),
    ("qwen3-30b-a3b.json", "moe_intermediate_size", ["768", 0, -1, 1.5, None, {}]),
    ("qwen3-30b-a3b.json", "decoder_sparse_step", [0, -1, "1", 1.5, 1000]),
    ("qwen3-30b-a3b.json", "mlp_only_layers", ["0", [-1], [1000], [1.5], {}, ["x"], None]),
    ("qwen3-30b-a3b.json", "num_experts_per_tok", [200, 0, "8", -8]),
    ("llama-3.1-8b.json", "rope_scaling", ["x", [], 5, {"rope_type": "bogus"},
                                           {"type": "linear"}, {"factor": "x"},
                                           {"rope_type": "llama3", "factor": -1},
                                           {"rope_type": "yarn", "factor": 0}]),
    ("llama-3.1-8b.json", "rope_theta", [0, -1, "x", None]),
    ("llama-3.1-8b.json", "num_key_value_heads", [0, -1, 3, 64, "8", 1.5]),
    ("llama-3.1-8b.json", "head_dim", [0, -1, "x", 1.5, 10 ** 9]),
    ("llama-3.1-8b.json", "tie_word_embeddings", ["yes", 2, None, []]),
    ("llama-3.1-8b.json", "architectures", ["LlamaForCausalLM", [], [1], None, ["X", "Y"]]),
    ("llama-3.1-8b.json", "model_type", [None, 5, "", "../llama", "LLAMA"]),
    ("llama-3.1-8b.json", "torch_dtype", ["int3", 5, None, "float8"]),
    ("gemma-2-2b.json", "sliding_window", [0, -1, "x", 1.5, 10 ** 12, True]),
    ("gemma-2-2b.json", "query_pre_attn_scalar", [0, "x"]),
    ("gemma-3-4b-it.json", "sliding_window_pattern", [0, -1, "x", 1000]),
    ("hybrid/jamba-1.5-mini.json", "attn_layer_period", [0, -1, "8", 1.5, 1000]),
    ("hybrid/jamba-1.5-mini.json", "attn_layer_offset", [-1, 100, "4", 1.5]),
    ("hybrid/jamba-1.5-mini.json", "expert_layer_period", [0, -2, "2"]),
    ("hybrid/jamba-1.5-mini.json", "mamba_d_state", [0, -1, "16", 1.5, None]),
    ("hybrid/jamba-1.5-mini.json", "mamba_expand", [0, -1, "2", None]),
    ("hybrid/jamba-1.5-mini.json", "mamba_dt_rank", [0, -1, "x", 1.5]),
    ("hybrid/jamba-1.5-mini.json", "mamba_d_conv", [0, -1, "4"]),
    ("hybrid/mamba-default.json", "state_size", [0, -1, "16", 1.5, None]),
    ("hybrid/mamba-default.json", "expand", [0, -1, "2"]),
    ("hybrid/mamba-default.json", "time_step_rank", [0, -1, "x"]),
    ("hybrid/mamba2-default.json", "num_heads", [0, -1, "x", 7]),
    ("hybrid/mamba2-default.json", "head_dim", [0, -1, "x"]),
    ("hybrid/mamba2-default.json", "n_groups", [0, -1, "x", 3]),
    ("hybrid/bamba-default-attn.json", "attn_layer_indices", [[-1], [1000], "x", [1.5], {}]),
]


def gen_hf(g: _Gen) -> None:
    for name, key, values in HF_VARIANTS:
        if not (HF / name).is_file():
            continue
        doc = _hf(name)
        for v in values:
            for verb in ("memory",):
                g.add(verb, "hf_variant", [verb, "-m", "{T}/config.json", "-c", "zero3-cpu"],
                      files=(("config.json", json.dumps({**doc, key: v}).encode()),),
                      culprit=(key, "config.json"), answer="")
    # layer_types: wrong length, wrong values, wrong type
    for name in ("gemma-3-4b-it.json", "real2/gpt-oss-120b.json", "qwen3-8b.json"):
        if not (HF / name).is_file():
            continue
        doc = _hf(name)
        n = doc.get("num_hidden_layers") or doc.get("text_config", {}).get("num_hidden_layers", 4)
        for lt in (["full_attention"] * (n - 1), ["full_attention"] * (n + 3),
                   ["bogus"] * n, [1] * n, "full_attention", [], None, [None] * n,
                   ["sliding_attention"] * n):
            g.add("memory", "hf_variant", ["memory", "-m", "{T}/config.json"],
                  files=(("config.json", json.dumps({**doc, "layer_types": lt}).encode()),),
                  culprit=("layer_types", "config.json"))
    # the simulate of a MoE whose expert count divides nothing
    doc = _hf("mixtral-8x7b.json")
    for k, v in (("num_local_experts", 3), ("num_experts_per_tok", 8), ("num_local_experts", 1)):
        g.add("simulate", "hf_variant", ["simulate", "-m", "{T}/config.json", "-c", "zero3-cpu",
                                         "--json"],
              files=(("config.json", json.dumps({**doc, k: v}).encode()),),
              culprit=(k, "config.json"), answer="simulate_json")
    # config nested: text_config wrong-typed (a VLM)
    for name in ("gemma-3-4b-it.json", "real2/llama-3.2-90b-vision-instruct.json"):
        if not (HF / name).is_file():
            continue
        doc = _hf(name)
        for v in ("x", [], None, 5, {}):
            g.add("memory", "hf_variant", ["memory", "-m", "{T}/config.json"],
                  files=(("config.json", json.dumps({**doc, "text_config": v}).encode()),),
                  culprit=("text_config", "config.json"))


# ----------------------------------------------------------------------------------------------
# ds_config nested blocks, wrong types

DS_NESTED = [
    (("zero_optimization", "offload_optimizer"), ["cpu", [], 1, True, None, {"device": 5},
                                                  {"device": ["cpu"]}, {"device": "CPU"},
                                                  {"device": "cpu", "pin_memory": "yes"},
                                                  {"device": "cpu", "buffer_count": -1},
                                                  {"device": "cpu", "ratio": 2.0},
                                                  {"device": "cpu", "ratio": "x"},
                                                  {"device": "nvme"},
                                                  {"device": "nvme", "nvme_path": 5},
                                                  {"device": "nvme", "nvme_path": ""},
                                                  {"device": "nvme", "nvme_path": ["/tmp"]},
                                                  {"device": "cpu", "fast_init": "x"}]),
    (("zero_optimization", "offload_param"), ["nvme", [], 0, {"device": None},
                                              {"device": "nvme", "buffer_size": -1},
                                              {"device": "nvme", "buffer_size": "x"},
                                              {"device": "nvme", "buffer_count": 0},
                                              {"device": "nvme", "max_in_cpu": -5},
                                              {"device": "cpu", "pin_memory": 2}]),
    (("zero_optimization",), ["3", 3, [], True, None, {"stage": "3"}, {"stage": 3.5},
                              {"stage": -1}, {"stage": True}]),
    (("zero_optimization", "overlap_comm"), ["true", 2, [], {}]),
    (("zero_optimization", "contiguous_gradients"), ["no", 5]),
    (("zero_optimization", "reduce_bucket_size"), ["auto", "5e8", -1, 0, True]),
    (("zero_optimization", "stage3_gather_16bit_weights_on_model_save"), ["x", 3]),
    (("zero_optimization", "zero_hpz_partition_size"), [0, -1, "x", 3]),
    (("zero_optimization", "zero_quantized_weights"), ["x", 5]),
    (("aio",), ["x", [], 5, None, True]),
    (("aio", "single_submit"), ["no", 3, None]),
    (("aio", "overlap_events"), ["yes", []]),
    (("aio", "use_gds"), ["x", True]),
    (("aio", "queue_depth"), ["32", 0, -1, 1.5]),
    (("aio", "intra_op_parallelism"), [0, "4", -3]),
    (("bf16",), [True, "true", 1, [], None, {"enabled": "yes"}, {"enabled": 2},
                 {"enabled": True, "immediate_grad_update": "x"}]),
    (("fp16",), [True, {"enabled": True, "loss_scale": -1},
                 {"enabled": True, "loss_scale": "x"},
                 {"enabled": True, "initial_scale_power": -5},
                 {"enabled": True, "initial_scale_power": 1000},
                 {"enabled": True, "loss_scale_window": 0},
                 {"enabled": True, "hysteresis": "x"},
                 {"enabled": True, "min_loss_scale": -1}]),
    (("scheduler",), ["WarmupLR", [], 5, {"type": 5}, {"type": "Bogus"},
                      {"type": "WarmupLR", "params": "x"},
                      {"type": "WarmupLR", "params": {"warmup_num_steps": -1}},
                      {"type": "WarmupLR", "params": {"warmup_num_steps": "x"}},
                      {"type": "WarmupDecayLR", "params": {"total_num_steps": 0}},
                      {"type": "OneCycle", "params": {"cycle_min_lr": "x"}}]),
    (("optimizer",), ["AdamW", [], 5, {"type": None}, {"type": 5}, {"type": "Bogus"},
                      {"type": "AdamW", "params": "x"}, {"type": "AdamW", "params": []},
                      {"type": "AdamW", "params": {"lr": "x"}},
                      {"type": "AdamW", "params": {"lr": -1}},
                      {"type": "AdamW", "params": {"betas": "x"}},
                      {"type": "AdamW", "params": {"betas": [0.9]}},
                      {"type": "AdamW", "params": {"betas": [0.9, 2.0]}},
                      {"type": "AdamW", "params": {"betas": [0.9, "x"]}},
                      {"type": "AdamW", "params": {"eps": -1}},
                      {"type": "AdamW", "params": {"weight_decay": "x"}},
                      {"type": "Lamb"}, {"type": "OneBitAdam"}, {"type": "SGD"},
                      {"type": "adamw"}, {"type": "ADAM"}, {"type": "Muon"}]),
    (("gradient_clipping",), ["x", -1, [], True]),
    (("activation_checkpointing",), ["x", [], {"partition_activations": "x"},
                                     {"cpu_checkpointing": 5},
                                     {"number_checkpoints": -1}]),
    (("communication_data_type",), [5, "int3", []]),
    (("steps_per_print",), [0, -1, "x"]),
    (("wall_clock_breakdown",), ["x", 2]),
    (("zero_allow_untested_optimizer",), ["x", 2]),
    (("prescale_gradients",), ["x"]),
    (("gradient_predivide_factor",), [0, -1, "x"]),
    (("sparse_gradients",), ["x"]),
    (("data_types",), ["x", {"grad_accum_dtype": "int3"}]),
    (("train_batch_size",), [7, 0, "x", 1.5, -1]),
    (("amp",), [{"enabled": True}, "x"]),
    (("tensor_parallel",), [{"autotp_size": 0}, {"autotp_size": "x"}, "x"]),
    (("pipeline",), ["x", {"stages": 0}]),
    (("flops_profiler",), ["x", {"enabled": "x"}]),
    (("checkpoint",), ["x", {"tag_validation": 5}]),
    (("compression_training",), ["x"]),
    (("elasticity",), [{"enabled": True}, "x"]),
]


def gen_ds_nested(g: _Gen) -> None:
    for path, values in DS_NESTED:
        for i, v in enumerate(values):
            base = NVME if path[:2] == ("zero_optimization", "offload_param") or \
                path[0] == "aio" else CPU3
            doc = _with(base, path, v)
            verb, extra = READERS[i % 3]
            g.add(verb, "ds_nested", [verb, "-c", "{T}/ds.json", "-m", TINY, *extra],
                  files=(("ds.json", _j(doc)),),
                  culprit=("ds.json", *path, *(v.keys() if isinstance(v, dict) else ())),
                  codes=(0, 2))


# ----------------------------------------------------------------------------------------------
# flags not fuzzed by the generated suite

HEADROOM_BAD = ["nan", "inf", "-0.1", "1.5", "2", "", "x", "1e400", "8XB", "-8GiB", "nan GB",
                "100%", "0.5.5", "1" + "0" * 400, "0.1", "0.99"]
"""(A share is written with its percent sign, 5%: a bare 0.1 is refused, said so.)"""
HEADROOM_OK = ["0", "5%", "0.5%", "1GiB", "512MB"]


def gen_flags(g: _Gen) -> None:
    for flag in ("--gpu-headroom", "--host-headroom"):
        for i, v in enumerate(HEADROOM_BAD):
            verb = ("memory", "simulate", "preflight", "sweep", "plan")[i % 5]
            args = {"memory": ["memory", "-m", TINY],
                    "simulate": ["simulate", "-m", TINY],
                    "preflight": ["preflight", "-m", TINY, "--no-probe"],
                    "sweep": ["sweep", "-m", TINY, "--memory-only", "--no-progress", "-j", "1",
                              "--vary", "micro_batch=1,2"],
                    "plan": ["plan", "-m", TINY, "-H", "workstation-rtx3070", "--micro-batch",
                             "1", "--no-progress"]}[verb]
            g.add(verb, "headroom", [*args, flag, v], expect="refuse", culprit=(flag,),
                  codes=(0, 1, 2))
        for v in HEADROOM_OK:
            g.add("memory", "headroom", ["memory", "-m", TINY, flag, v], expect="ok")
    # headroom as large as the memory: nothing fits, said, never a negative capacity
    g.add("memory", "headroom", ["memory", "-m", TINY, "--gpu-headroom", "1"], codes=(0, 2),
          culprit=("--gpu-headroom",))
    g.add("memory", "headroom", ["memory", "-m", TINY, "--gpu-headroom", "1000GiB"],
          codes=(0, 2), culprit=("--gpu-headroom",))
    g.add("simulate", "headroom", ["simulate", "-m", TINY, "--gpu-headroom", "1000GiB",
                                   "--strict"], expect="refuse",
          culprit=("--gpu-headroom", "fit", "GiB"))
    # --precision: click's choice; fp16 on a GPU without fp16 is the loader's business
    for v in ("int8", "", "BF16", "bf16 "):
        g.add("simulate", "flag", ["simulate", "-m", TINY, "--precision", v], expect="refuse",
              culprit=("--precision",))
    # names: path traversal, empty, long, unicode, control characters
    for flag in ("-m", "-H", "-c"):
        for v in ("", " ", "../../../../etc/passwd", "..", ".", "/", "-", "x" * 5000, "\u00e9\u4e2d",
                  "a\nb", "a\tb", "~", "$HOME", "*", "zero3-cpu/../zero3-cpu", "/etc",
                  "a" * 255 + ".yaml"):
            g.add("simulate", "name", ["simulate", flag, v, *(["-m", TINY] if flag != "-m"
                                                              else [])],
                  expect="refuse", culprit=(flag, v[:30].split("\n")[0] or "''", repr(v)[1:31],
                                            "profile",
                                            "model", "config", "hardware"))
    # counts at odd magnitudes that a bounded flag must refuse or answer
    for flag, v in (("--seq", "1"), ("--seq", "3"), ("--micro-batch", "100000"),
                    ("--gpus", "100000"), ("--nodes", "100000"), ("--grad-accum", "1000000000"),
                    ("--seq", "10000000"), ("--gpus", "3"), ("--gpus", "9")):
        g.add("simulate", "number_odd", ["simulate", "-m", TINY, "-c", "zero3-cpu", flag, v,
                                         "--json"],
              culprit=(flag, v), answer="simulate_json")
    # --set / --hw: the value grammars
    for item in ("train_micro_batch_size_per_gpu= 2", "train_micro_batch_size_per_gpu=2 ",
                 "train_micro_batch_size_per_gpu=0x2", "train_micro_batch_size_per_gpu=2e0",
                 "train_micro_batch_size_per_gpu=+2", "train_micro_batch_size_per_gpu=1_000",
                 "zero_optimization.stage=3.0", "zero_optimization.stage=\"3\"",
                 "zero_optimization={\"stage\": 3, \"stage\": 2}",
                 "zero_optimization=" + "[" * 5000 + "]" * 5000,
                 "zero_optimization.offload_param.device.x=1",
                 "train_micro_batch_size_per_gpu.x=1", "\u00e9=1", "x" * 3000 + "=1",
                 "bf16.enabled=" + "1" * 5000, "aio.block_size=1048576.5",
                 "optimizer.params.betas=[0.9]", "optimizer.params.lr=-1",
                 "optimizer.type=Bogus"):
        g.add("simulate", "set_odd", ["simulate", "-m", TINY, "-c", "zero3-nvme", "--set", item],
              culprit=("--set", item.split("=")[0][:30], "stage", "betas", "lr", "optimizer"))
    for item in ("gpu.hbm=8 GiB", "gpu.hbm= 8GiB", "gpu.hbm=8gib", "gpu.hbm=8GiBs", "gpu.hbm=0.0GiB",
                 "gpu.hbm=1e-30GiB", "nvme.drives=2.5", "nvme.drives=0", "nvme.drives=-1",
                 "cpu.cores=0", "cpu.cores=1.5", "gpus_per_node=0", "gpus_per_node=3",
                 "nodes=0", "gpu.peak_flops.bf16=0 TFLOP/s", "gpu.peak_flops.int3=1 TFLOP/s",
                 "pcie.h2d_pinned=8 GB", "nvme.latency=8 GB/s", "dram=8 GB/s",
                 "network.nic_bandwidth=0 GB/s", "gpu.hbm=\u00e9GiB", "gpu.hbm=" + "9" * 5000,
                 "gpu=rtx-3070", "gpu.hbm.value=8GiB", "cpu.adam_throughput=-1"):
        g.add("simulate", "hw_odd", ["simulate", "-m", TINY, "-c", "zero3-nvme", "--hw", item],
              culprit=("--hw", item.split("=")[0]))
    # --vary grammars
    for item in ("micro_batch=1..8:x1", "micro_batch=1..8:+0", "micro_batch=1..8:-1",
                 "micro_batch=1..8:x0.5", "micro_batch=8..1:x2", "micro_batch=1..1e9",
                 "micro_batch=1...3", "micro_batch=..3", "micro_batch=1..", "micro_batch=a..b",
                 "micro_batch=1..3:", "micro_batch=1..3:xx", "micro_batch=1..3:x2:x2",
                 "micro_batch=1,1,1", "micro_batch= 1, 2", "micro_batch=1;2",
                 "micro_batch=" + ",".join(["1"] * 5000), "config=zero3-cpu,../../etc/passwd",
                 "config=zero3-cpu,", "model=" + str(TINY) + ",nope", "hardware=nope",
                 "precision=int8", "checkpointing=maybe", "zero_optimization.stage=1..3",
                 "zero_optimization.stage=4", "seq=1..3:x1000000", "gpus=0..2",
                 "nvme.read_bandwidth=1..3", "model.hidden=1..2", "model.n_layers=1..3",
                 "model.bogus=1", "MICRO_BATCH=1", "micro_batch=\u0661"):
        g.add("sweep", "vary_odd", ["sweep", "-m", TINY, "-c", "zero3-cpu", "--memory-only",
                                    "--no-progress", "-j", "1", "--vary", item,
                                    "--out", "{T}/rows.csv"],
              culprit=("--vary", item.split("=")[0], item.split("=")[0].split(".")[-1],
                       *item.split("=", 1)[1].split(",")[:3]),
              outputs=("{T}/rows.csv",), keeps=True)
    # sweep: --x / --by / --plot combinations
    sw = ["sweep", "-m", TINY, "-c", "zero3-cpu", "--no-progress", "-j", "1", "--no-ranges",
          "--vary", "micro_batch=1,2"]
    for extra, expect in ((["--x", "bogus", "--plot", "{T}/s.png"], "refuse"),
                          (["--by", "bogus", "--plot", "{T}/s.png"], "refuse"),
                          (["--x", "micro_batch", "--by", "micro_batch", "--plot", "{T}/s.png"],
                           "either"),
                          (["--x", "", "--plot", "{T}/s.png"], "refuse"),
                          (["--x", "micro_batch"], "either"),
                          (["--plot", "{T}/s.png", "--out", "{T}/s.png"], "refuse"),
                          (["--plot", "{T}/s.csv", "--out", "{T}/s.csv"], "refuse"),
                          (["--out", "{T}/r.parquet.csv"], "either"),
                          (["--out", "{T}/r.txt"], "refuse"), (["--out", "{T}/r"], "refuse"),
                          (["--out", "{T}/r.CSV"], "either"), (["--json", "--out", "{T}/r.csv"],
                                                              "either")):
        g.add("sweep", "sweep_flags", [*sw, *extra], expect=expect,
              culprit=("--x", "--by", "--plot", "--out", "bogus", "r.txt", "s.png", "s.csv",
                       "r", ".txt", "suffix"),
              outputs=("{T}/s.png", "{T}/s.csv", "{T}/r.csv", "{T}/r.parquet.csv", "{T}/r.CSV",
                       "{T}/r.txt", "{T}/r"))
    # plan: --nvme-path, --config-for, --global-batch / --grad-accum combos
    pl = ["plan", "-m", TINY, "-H", "workstation-rtx3070", "--micro-batch", "1", "--no-progress"]
    for extra, expect in ((["--nvme-path", ""], "refuse"), (["--nvme-path", "rel/dir"], "either"),
                          (["--nvme-path", "a\nb"], "refuse"), (["--nvme-path", "x" * 5000],
                                                                "refuse"),
                          (["--nvme-path", "/proc"], "either"),
                          (["--config-for", "bogus"], "refuse"),
                          (["--global-batch", "3", "--gpus", "2"], "either"),
                          (["--global-batch", "4", "--grad-accum", "3"], "either"),
                          (["--grad-accum", "0"], "refuse"), (["--grad-accum", "-1"], "refuse"),
                          (["--min-tokens-per-s", "1e308"], "either"),
                          (["--min-tokens-per-s", "0"], "either"),
                          (["--max-gpu-mem", "1B"], "either"),
                          (["--max-gpu-mem", "1e308GiB"], "either"),
                          (["--write-config", "{T}/w.json"], "refuse"),
                          (["--seq", "0"], "refuse"), (["--nodes", "0"], "refuse"),
                          (["--precision", "fp16"], "either")):
        g.add("plan", "plan_flags", [*pl, *extra], expect=expect, codes=(0, 1, 2),
              culprit=(*(e for e in extra if e.startswith("-")), "nvme", "--ds-config",
                       "--write-config", "global"),
              outputs=("{T}/w.json",))
    # calibrate --from-raw: --name / --hardware odd
    raw = fg.RAW.read_bytes()
    for name in ("../x", "a/b", "", ".", "..", "x" * 300, "\u00e9", "a\nb", "-x", ".hidden"):
        g.add("calibrate", "cal_name", ["calibrate", "--from-raw", "{T}/raw.json", "--out",
                                        "{T}/p/x.yaml", "--name", name],
              files=(("raw.json", raw),), outputs=("{T}/p",),
              culprit=("--name", name[:30].split("\n")[0] or "''"))
    for hw in ("nope", "", "../../etc/passwd", "{T}/sys.yaml"):
        g.add("calibrate", "cal_name", ["calibrate", "--from-raw", "{T}/raw.json", "--out",
                                        "{T}/p/x.yaml", "-H", hw],
              files=(("raw.json", raw), ("sys.yaml", b"kind: system\n")), outputs=("{T}/p",),
              culprit=("-H", "--hardware", hw[-20:] or "''", "sys.yaml"))
    # validate flags
    val = ["validate", CASE_DIR, "-H", "h200x2-host", "--out", "{T}/v"]
    for extra, expect in ((["--train", "bogus"], "either"), (["--class", "bogus"], "refuse"),
                          (["--loco", "--class", "bogus"], "refuse"),
                          (["--pool", "bogus"], "refuse"), (["--max-error", "0"], "either"),
                          (["--max-error", "1e308"], "either"), (["--max-error", "-0"], "either"),
                          (["--software", ""], "refuse"), (["--software", "../../x"], "refuse"),
                          (["-H", ""], "refuse"), (["-H", "../../../etc/passwd"], "refuse"),
                          (["--example", "--loco"], "either")):
        g.add("validate", "val_flags", [*val, *extra], expect=expect, codes=(0, 1, 2),
              culprit=(*(e for e in extra if e.startswith("-")), "bogus", "class", "pool",
                       "software", "hardware", "train", *extra[1:]),
              outputs=("{T}/v",), keeps=True)      # exit 1 (over --max-error) keeps the report


# ----------------------------------------------------------------------------------------------
# $TIERLAB_PROFILES

def gen_env(g: _Gen) -> None:
    cases = [
        ("file", (("prof", b"not a folder\n"),), "{T}/prof"),
        ("empty_dir", (("prof", DIR),), "{T}/prof"),
        ("missing", (), "{T}/nope"),
        ("loop", (("prof", ("link", "prof")),), "{T}/prof"),
        ("loop_inner", (("prof/hardware/systems/loop", ("link", "loop")),), "{T}/prof"),
        ("dir_loop", (("prof/hardware", DIR), ("prof/hardware/systems", ("link", "."))),
         "{T}/prof"),
        ("empty", (), ""),
        ("colon", (("prof", DIR),), "{T}/prof::{T}/nope:"),
        ("fifo", (("prof", FIFO),), "{T}/prof"),
        ("devnull", (), "/dev/null"),
        ("relative", (("prof", DIR),), "prof-relative-that-is-not-there"),
        ("long", (), "{T}/" + "x" * 5000),
        ("broken_many", tuple((f"prof/hardware/systems/b{i}.yaml", b"{" * i) for i in range(1, 6))
         + (("prof/models/bad.yaml", b"kind: model\nn_layers: -1\n"),
            ("prof/configs/bad.json", b"{"),
            ("prof/hardware/systems/dup.yaml", b"kind: system\nname: workstation-rtx3070\n"),
            ("prof/hardware/gpus/link.yaml", ("link", "/dev/zero")),
            ("prof/hardware/systems/fifo.yaml", FIFO)), "{T}/prof"),
        ("shadow", (("prof/hardware/systems/workstation-rtx3070.yaml", b"kind: system\n"),),
         "{T}/prof"),
        ("shadow_model", (("prof/models/tinyllama-1.1b.yaml", b"kind: model\nname: x\n"),),
         "{T}/prof"),
        ("shadow_config", (("prof/configs/zero3-cpu.json", b"{\"zero_optimization\": 5}"),),
         "{T}/prof"),
    ]
    for name, files, value in cases:
        env = (("TIERLAB_PROFILES", value),)
        g.add("profiles", "env", ["profiles"], files=files, env=env,
              culprit=("TIERLAB_PROFILES", "prof", "b1.yaml", "bad", "nope", "x" * 20))
        g.add("profiles", "env", ["profiles", "--json"], files=files, env=env,
              culprit=("TIERLAB_PROFILES", "prof", "b1.yaml", "bad", "nope", "x" * 20))
        g.add("simulate", "env", ["simulate", "-m", TINY], files=files, env=env,
              culprit=("TIERLAB_PROFILES", "prof", "workstation-rtx3070", "nope", "x" * 20))
        g.add("memory", "env", ["memory", "-m", "tinyllama-1.1b", "-c", "zero3-cpu"], files=files,
              env=env, culprit=("TIERLAB_PROFILES", "prof", "tinyllama", "zero3-cpu", "nope",
                                "x" * 20))
        g.add("simulate", "env", ["simulate", "-m", TINY, "-H", "b1"], files=files, env=env,
              expect="refuse", culprit=("b1", "x" * 20))


# ----------------------------------------------------------------------------------------------
# sweep resume over a tampered results file; plot of odd CSVs

def _sweep_csv() -> bytes:
    """A real sweep's results file (made once, by the sweep itself)."""
    import tempfile

    from click.testing import CliRunner

    from tierlab.cli import main

    global _CSV
    if _CSV is None:
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "rows.csv"
            r = CliRunner().invoke(main, ["sweep", "-m", str(TINY), "-c", "zero3-cpu",
                                          "--memory-only", "--no-progress", "-j", "1", "--vary",
                                          "micro_batch=1,2,3", "--out", str(out)],
                                   env=dict(fg.ENV))
            assert r.exit_code == 0, r.output
            _CSV = out.read_bytes()
    return _CSV


_CSV: bytes | None = None


def gen_resume(g: _Gen) -> None:
    csv = _sweep_csv()
    lines = csv.decode().splitlines(keepends=True)
    header, rows = lines[0], lines[1:]
    tampered = {
        "same": csv,
        "torn_last": csv[:-7],
        "no_newline": csv.rstrip(b"\n"),
        "header_only": header.encode(),
        "extra_col": (header.rstrip("\n") + ",extra\n" + "".join(
            r.rstrip("\n") + ",1\n" for r in rows)).encode(),
        "missing_col": ("\n".join(",".join(l.rstrip("\n").split(",")[1:]) for l in lines)
                        + "\n").encode(),
        "renamed_col": csv.replace(b"micro_batch", b"micro_batsh", 1),
        "dup_rows": (header + "".join(rows) + "".join(rows)).encode(),
        "garbage_row": (header + "".join(rows) + "x,y,z\n").encode(),
        "nan_row": (header + rows[0].replace("1", "nan", 1) + "".join(rows[1:])).encode(),
        "nul": csv.replace(b",", b",\x00", 3),
        "bom": b"\xef\xbb\xbf" + csv,
        "crlf": csv.replace(b"\n", b"\r\n"),
        "nonutf8": csv + b"\xff\xfe\n",
        "quoted_newline": (header + '"a\nb"' + rows[0][rows[0].index(","):]).encode(),
        "huge_field": (header + "x" * (1 << 20) + "\n").encode(),
        "other_sweep": b"point_id,seq,fits,error\np0,128,True,\n",
        "empty": b"",
        "fifo": FIFO,
        "dir": DIR,
        "link_elsewhere": ("link", "other/rows.csv"),
    }
    for how, data in tampered.items():
        files = [("rows.csv", data)]
        if how == "link_elsewhere":
            files.append(("other/rows.csv", csv))
        g.add("sweep", "resume", ["sweep", "-m", TINY, "-c", "zero3-cpu", "--memory-only",
                                  "--no-progress", "-j", "1", "--vary", "micro_batch=1,2,3,4",
                                  "--out", "{T}/rows.csv"],
              files=tuple(files), culprit=("rows.csv",),
              expect="refuse" if how in ("fifo", "dir", "nonutf8", "nul", "other_sweep",
                                         "renamed_col") else "either",
              outputs=("{T}/rows.csv",) if how not in ("fifo", "dir", "other_sweep") else
              ("{T}/rows.csv", "{T}/other/rows.csv") if how == "link_elsewhere" else (),
              answer="csv_rows" if how in ("same", "torn_last", "no_newline", "header_only")
              else "")
    # a changed grid over the same file: other keys
    g.add("sweep", "resume", ["sweep", "-m", TINY, "-c", "zero3-cpu", "--memory-only",
                              "--no-progress", "-j", "1", "--vary", "seq=128,256",
                              "--out", "{T}/rows.csv"],
          files=(("rows.csv", csv),), culprit=("rows.csv", "seq", "micro_batch"),
          outputs=("{T}/rows.csv",))
    g.add("sweep", "resume", ["sweep", "-m", TINY, "-c", "zero2-cpu", "--memory-only",
                              "--no-progress", "-j", "1", "--vary", "micro_batch=1,2,3",
                              "--out", "{T}/rows.csv"],
          files=(("rows.csv", csv),), culprit=("rows.csv", "config", "zero2"),
          outputs=("{T}/rows.csv",))
    # plot sweep over the same odd files
    for how, data in tampered.items():
        if how == "link_elsewhere":
            continue
        g.add("plot", "results_odd", ["plot", "sweep", "--results", "{T}/rows.csv", "-o",
                                      "{T}/s.png"],
              files=(("rows.csv", data),), culprit=("rows.csv", "micro_batch", "step_time"),
              outputs=("{T}/s.png",))
    for how, data in tampered.items():
        if how in ("fifo", "dir", "link_elsewhere", "huge_field"):
            continue
        for x in ("micro_batch", "bogus", ""):
            g.add("plot", "results_odd", ["plot", "sweep", "--results", "{T}/rows.csv", "--x", x,
                                          "-o", "{T}/s.png"],
                  files=(("rows.csv", data),), culprit=("rows.csv", "--x", x or "''",
                                                        "step_time"),
                  outputs=("{T}/s.png",))
            break
    # CSVs by hand
    hand = {
        "one_col": b"micro_batch\n1\n2\n",
        "strings": b"point_id,micro_batch,step_time_s,tokens_per_s,fits,error\n"
                   b"p1,a,b,c,d,e\n",
        "all_error": b"point_id,micro_batch,step_time_s,tokens_per_s,fits,error\n"
                     b"p1,1,,,False,boom\n",
        "neg": b"point_id,micro_batch,step_time_s,tokens_per_s,fits,error\np1,1,-1,-5,True,\n",
        "inf": b"point_id,micro_batch,step_time_s,tokens_per_s,fits,error\np1,1,inf,inf,True,\n",
        "ragged": b"point_id,micro_batch,step_time_s\np1,1\np2,2,3,4,5\n",
        "dup_header": b"micro_batch,micro_batch,step_time_s\n1,1,0.1\n",
        "unicode": "point_id,\u00e9\u4e2d,step_time_s,tokens_per_s,fits,error\np1,1,0.1,1,True,\n"
                   .encode(),
        "formula": b"point_id,micro_batch,step_time_s,tokens_per_s,fits,error\n"
                   b"=cmd|' /C calc'!A0,1,0.1,1,True,\n",
        "huge_numbers": b"point_id,micro_batch,step_time_s,tokens_per_s,fits,error\np1,1,1e308,1e308,"
                        b"True,\np2,2,1e-308,1e-308,True,\n",
        "sep_semicolon": b"point_id;micro_batch;step_time_s\np1;1;0.1\n",
        "tsv": b"point_id\tmicro_batch\tstep_time_s\np1\t1\t0.1\n",
        "many_rows": b"point_id,micro_batch,step_time_s,tokens_per_s,fits,error\n" + b"".join(
            b"p%d,%d,0.1,1,True,\n" % (i, i) for i in range(20000)),
    }
    for how, data in hand.items():
        for extra in ([], ["--by", "error"]):
            g.add("plot", "results_odd", ["plot", "sweep", "--results", "{T}/r.csv", *extra, "-o",
                                          "{T}/s.png"],
                  files=(("r.csv", data),), culprit=("r.csv", "step_time", "micro_batch", "--by",
                                                     "error", "column"),
                  outputs=("{T}/s.png",))
    g.add("plot", "results_odd", ["plot", "sweep", "--results", "{T}/r.parquet", "-o",
                                  "{T}/s.png"],
          files=(("r.parquet", b"PAR1garbagePAR1"),), expect="refuse",
          culprit=("r.parquet",), outputs=("{T}/s.png",))
    g.add("plot", "results_odd", ["plot", "sweep", "--results", "{T}/r.txt", "-o", "{T}/s.png"],
          files=(("r.txt", csv),), culprit=("r.txt", ".txt"), outputs=("{T}/s.png",))


# ----------------------------------------------------------------------------------------------
# measurement folders

def _meas(mutate=None, extra=()) -> tuple:
    files = {p.name: p.read_bytes() for p in CASE_DIR.iterdir()
             if p.is_file() and p.suffix in (".json", ".jsonl", ".yaml")}
    if mutate:
        mutate(files)
    return tuple(("run/" + k, v) for k, v in files.items()) + tuple(extra)


def gen_measure(g: _Gen) -> None:
    val = ["validate", "{T}/run", "-H", "h200x2-host", "--out", "{T}/v"]
    tl = ["plot", "timeline", "--measurement", "{T}/run", "-H", "h200x2-host", "-o", "{T}/t.png"]
    meas = json.loads((CASE_DIR / "measurement.json").read_text())
    variants: dict[str, tuple] = {
        "empty_dir": (("run", DIR),),
        "only_steps": tuple(f for f in _meas() if f[0].endswith("steps.jsonl")),
        "link_meas": _meas(lambda f: f.pop("measurement.json"), (
            ("elsewhere/measurement.json", (CASE_DIR / "measurement.json").read_bytes()),
            ("run/measurement.json", ("link", "../elsewhere/measurement.json")))),
        "link_dev_zero": _meas(lambda f: f.pop("steps.jsonl"), (
            ("run/steps.jsonl", ("link", "/dev/zero")),)),
        "link_loop": _meas(lambda f: f.pop("summary.json"), (
            ("run/summary.json", ("link", "summary.json")),)) if (
            CASE_DIR / "summary.json").exists() else _meas(),
        "sub_loop": _meas(extra=(("run/sub", ("link", ".")),)),
        "nested_runs": tuple(("run/a/" + k[4:], v) for k, v in _meas()) + tuple(
            ("run/b/" + k[4:], v) for k, v in _meas()),
        "nested_deep": tuple(("run/" + "d/" * 40 + k[4:], v) for k, v in _meas()),
        "bom_meas": _meas(lambda f: f.update({"measurement.json": b"\xef\xbb\xbf" +
                                              f["measurement.json"]})),
        "nul_steps": _meas(lambda f: f.update({"steps.jsonl": f["steps.jsonl"].replace(
            b"\n", b"\n\x00", 2)})),
        "crlf_steps": _meas(lambda f: f.update({"steps.jsonl": f["steps.jsonl"].replace(
            b"\n", b"\r\n")})),
        "huge_line": _meas(lambda f: f.update({"steps.jsonl": f["steps.jsonl"] + b'{"x": "' +
                                               b"y" * (8 << 20) + b'"}\n'})),
        "deep_meas": _meas(lambda f: f.update({"measurement.json": _deep("json_dict", 100000)})),
        "deep_line": _meas(lambda f: f.update({"steps.jsonl": f["steps.jsonl"] +
                                               _deep("json_dict", 100000) + b"\n"})),
        "status_failed": _meas(lambda f: f.update({"measurement.json": _j(
            {**meas, "status": "failed", "reason": "boom"})})),
        "status_odd": _meas(lambda f: f.update({"measurement.json": _j({**meas, "status": 5})})),
        "config_str": _meas(lambda f: f.update({"measurement.json": _j({**meas, "config": "x"})})),
        "config_list": _meas(lambda f: f.update({"measurement.json": _j({**meas,
                                                                        "config": []})})),
        "ds_config_bad": _meas(lambda f: f.update({"measurement.json": _j(
            {**meas, "ds_config": {"zero_optimization": {"stage": 9}}})})) if "ds_config" in meas
        else _meas(),
        "validate_yaml_bad": _meas(extra=(("run/validate.yaml", b"hardware: ../../../etc\n"),)),
        "validate_yaml_list": _meas(extra=(("run/validate.yaml", b"- 1\n"),)),
        "validate_yaml_dir": _meas(extra=(("run/validate.yaml", DIR),)),
        "validate_yaml_deep": _meas(extra=(("run/validate.yaml", _deep("yaml_flow", 5000)),)),
        "unreadable_name": _meas(extra=(("run/\u00e9\u4e2d.json", b"{}"),)),
    }
    for key in list(meas)[:12]:
        for v in ("x", None, [], {}, -1, 1e308):
            variants[f"meas_{key}_{v!r}"[:60]] = _meas(
                lambda f, key=key, v=v: f.update({"measurement.json": _j({**meas, key: v})}))
    loss = ["plot", "loss", "--measurement", "{T}/run", "-o", "{T}/l.png"]

    def steps_with(value):
        def mutate(f):
            rows = [json.loads(x) for x in f["steps.jsonl"].decode().splitlines() if x.strip()]
            f["steps.jsonl"] = "".join(json.dumps({**r, "loss": value}) + "\n"
                                       for r in rows).encode()
        return mutate
    for v in (None, "x", float("nan"), float("inf"), -1e308, 1e308, [], {}, True, 10 ** 400):
        variants[f"loss_{v!r}"[:40]] = _meas(steps_with(v))
    for name, files in variants.items():
        for args, verb, outs in ((val, "validate", ("{T}/v",)), (tl, "plot", ("{T}/t.png",)),
                                 (loss, "plot", ("{T}/l.png",))):
            if verb == "validate" and name.startswith("loss_"):
                continue
            g.add(verb, "meas_odd", args, files=files, outputs=outs, codes=(0, 1, 2),
                  culprit=("run", "measurement", "steps", "summary", "validate.yaml",
                           *name.split("_")[1:2]))


# ----------------------------------------------------------------------------------------------
# outputs: more targets

def gen_outputs(g: _Gen) -> None:
    base = (("in/keep.txt", b"keep\n"), ("ro", DIR))
    targets = [
        ("{T}/ro/x", "ro_dir"),                         # made read-only below (chmod)
        ("{T}/link_dir/x", "parent_link"),
        ("{T}/./in/../o/x", "dots"),
        ("{T}/o/" + "\u00e9\u4e2d", "unicode"),
        ("{T}/o/x\ny", "newline"),
        ("{T}/o/ x ", "spaces"),
        ("{T}/o/-x", "dash"),
        ("{T}/o/" + "d/" * 100 + "x", "deep"),
        ("{T}/o/.x", "hidden"),
    ]
    verbs = [
        ("simulate", ["simulate", "-m", TINY, "--trace", "@.json"]),
        ("plot", ["plot", "memory", "-m", TINY, "-o", "@.png"]),
        ("sweep", ["sweep", "-m", TINY, "--memory-only", "--no-progress", "-j", "1", "--vary",
                   "micro_batch=1,2", "--out", "@.csv"]),
        ("plan", ["plan", "-m", TINY, "-H", "workstation-rtx3070", "--micro-batch", "1",
                  "--no-progress", "-o", "@.json"]),
        ("calibrate", ["calibrate", "--from-raw", fg.RAW, "--out", "@.yaml"]),
        ("validate", ["validate", CASE_DIR, "-H", "h200x2-host", "--out", "@"]),
    ]
    for target, how in targets:
        for verb, args in verbs:
            files = base
            if how == "parent_link":
                files = (*base, ("elsewhere", DIR), ("link_dir", ("link", "elsewhere")))
            ok_outputs = ("{T}/o", "{T}/ro", "{T}/link_dir", "{T}/elsewhere", "{T}/in/x",
                          "{T}/gpus", "{T}/cpus", "{T}/nvme")
            g.add(verb, "output_more", [str(a).replace("@", target) for a in args],
                  files=files, outputs=ok_outputs, codes=(0, 1, 2),
                  expect="either",
                  culprit=("ro", "in", "x", "link_dir", "elsewhere", "o/", "--out", "--trace",
                           "-o", "symbolic", "newline", "\\n"),
                  env=(("TIERLAB_FUZZ_CHMOD", "ro"),) if how == "ro_dir" else ())
    # an output equal to an input given by name resolution (-m file, --trace same)
    g.add("simulate", "output_more", ["simulate", "-m", "{T}/m.yaml", "--trace", "{T}/m.yaml"],
          files=(("m.yaml", TINY.read_bytes()),), expect="refuse", culprit=("m.yaml",))
    g.add("simulate", "output_more", ["simulate", "-m", "{T}/m.yaml", "--trace", "{T}/l.json"],
          files=(("m.yaml", TINY.read_bytes()), ("l.json", ("link", "m.yaml"))),
          expect="refuse", culprit=("l.json", "m.yaml"))
    g.add("simulate", "output_more", ["simulate", "-m", "{T}/m.yaml", "--trace", "{T}/h.json"],
          files=(("m.yaml", TINY.read_bytes()), ("h.json", ("hardlink", "m.yaml"))),
          culprit=("h.json", "m.yaml"), outputs=("{T}/h.json",))   # m.yaml must stay whole
    g.add("sweep", "output_more", ["sweep", "-m", "{T}/m.yaml", "--memory-only", "--no-progress",
                                   "-j", "1", "--vary", "micro_batch=1,2", "--out", "{T}/m.yaml"],
          files=(("m.yaml", TINY.read_bytes()),), expect="refuse", culprit=("m.yaml",))
    g.add("plot", "output_more", ["plot", "sweep", "--results", "{T}/r.csv", "-o", "{T}/r.csv"],
          files=(("r.csv", _sweep_csv()),), expect="refuse", culprit=("r.csv",))
    g.add("plot", "output_more", ["plot", "sweep", "--results", "{T}/r.csv", "-o", "{T}/r"],
          files=(("r.csv", _sweep_csv()), ("r.svg", b"<svg>mine</svg>\n")),
          culprit=("r", "r.svg"), outputs=("{T}/r.svg", "{T}/r"))
    g.add("validate", "output_more", ["validate", "{T}/run", "-H", "h200x2-host", "--out",
                                      "{T}/run"],
          files=_meas(), expect="refuse", culprit=("run",), codes=(0, 1, 2))
    g.add("validate", "output_more", ["validate", "{T}/run", "-H", "h200x2-host", "--out",
                                      "{T}/run/v"],
          files=_meas(), culprit=("run",), codes=(0, 1, 2), outputs=("{T}/run/v",))
    g.add("calibrate", "output_more", ["calibrate", "--from-raw", "{T}/raw.json", "--out",
                                       "{T}/p/x.yaml", "--raw", "{T}/raw.json"],
          files=(("raw.json", fg.RAW.read_bytes()),), expect="refuse",
          culprit=("raw.json", "--raw"), outputs=("{T}/p",))
    # an output folder (validate) holding someone else's files
    g.add("validate", "output_more", ["validate", CASE_DIR, "-H", "h200x2-host", "--out",
                                      "{T}/v"],
          files=(("v/mine.txt", b"keep\n"), ("v/summary.json", b"{\"mine\": 1}\n")),
          culprit=("v",), codes=(0, 1, 2), outputs=("{T}/v/validate.csv", "{T}/v/summary.json", "{T}/v/split.json",
                                                      "{T}/v/coverage.json", "{T}/v/scatter.png",
                                                      "{T}/v/phases.png"))


def gen_more(g: _Gen) -> None:
    """Model YAML optional keys, "auto" where DeepSpeed's HF integration does not fill it, HF
    counts written as floats."""
    import yaml

    tiny = yaml.safe_load(TINY.read_text())
    for key, values in (("attention_windows", [-1, "x", [64], [64, 64, 64], [[64], [64]],
                                               [64, -5], [1.5, 64], 10 ** 12, True, {}, None]),
                        ("max_seq_len", [64, -1, "x", 1.5]), ("attn_head_dim", [-1, 7, "x", 1.5]),
                        ("qkv_bias", ["x", 5, []]), ("learned_pos_emb", ["x", 5]),
                        ("tie_embeddings", ["yes", 2]), ("norm", [["rmsnorm"], 5, ""]),
                        ("gated_mlp", [2, None]), ("source", [5, [], None, "x" * 100_000]),
                        ("name", ["", "a/b", "../x", 5, "x" * 5000, "\u00e9"])):
        for v in values:
            g.add("memory", "model_more", ["memory", "-m", "{T}/m.yaml"],
                  files=(("m.yaml", yaml.safe_dump({**tiny, key: v}).encode()),),
                  culprit=(key, "m.yaml"))
    for path, v in ((("zero_optimization", "stage"), "auto"),
                    (("zero_optimization", "sub_group_size"), "auto"),
                    (("zero_optimization", "offload_param", "device"), "auto"),
                    (("zero_optimization", "offload_optimizer"), "auto"),
                    (("aio", "block_size"), "auto"), (("optimizer", "type"), "auto"),
                    (("zero_optimization", "stage3_max_live_parameters"), "auto"),
                    (("gradient_clipping",), "auto"), (("bf16",), "auto"),
                    (("optimizer", "params", "lr"), "auto"),
                    (("optimizer", "params", "betas"), "auto")):
        for verb, extra in READERS:
            g.add(verb, "auto_odd", [verb, "-c", "{T}/ds.json", "-m", TINY, *extra],
                  files=(("ds.json", _j(_with(NVME, path, v))),), culprit=("ds.json", *path))
    doc = _hf("llama-3.1-8b.json")
    for key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size"):
        for v in (float(doc[key]), doc[key] + 0.5, str(doc[key]), -doc[key]):
            g.add("memory", "hf_float", ["memory", "-m", "{T}/config.json"],
                  files=(("config.json", json.dumps({**doc, key: v}).encode()),),
                  expect="either" if v == float(doc[key]) else "refuse",
                  culprit=(key, "config.json"))


GENERATORS = [gen_more, gen_bytes, gen_hf, gen_ds_nested, gen_flags, gen_env, gen_resume, gen_measure,
              gen_outputs]


def cases() -> list[Case]:
    out: list[Case] = []
    for gen in GENERATORS:
        g = _Gen()
        gen(g)
        out.extend(g.cases)
    return out


def run_case(case: Case, folder: Path, hang_s: float = fg.HANG_S):
    """`_fuzzgen.run_case` with this file's extra file kinds (a hard link; a folder made
    read-only before the run, TIERLAB_FUZZ_CHMOD)."""
    import os

    files = []
    folder.mkdir(parents=True, exist_ok=True)
    for rel, data in case.files:
        if isinstance(data, tuple) and data[0] == "hardlink":
            continue
        files.append((rel, data))
    fg._build(folder, tuple(files))
    for rel, data in case.files:
        if isinstance(data, tuple) and data[0] == "hardlink":
            os.link(folder / data[1], folder / rel)
    ro = dict(case.env).get("TIERLAB_FUZZ_CHMOD")
    if ro:
        os.chmod(folder / ro, 0o555)
    from dataclasses import replace

    try:
        return fg.run_case(replace(case, files=()), folder, hang_s=hang_s)
    finally:
        if ro:
            os.chmod(folder / ro, 0o755)


KNOWN = {
    # case id -> what is wrong and where the fix belongs (not in this helper's files)
}
HANG_KNOWN_S = 4
"""A known hang is still a hang after this long (the case is xfail: no need to wait 20 s)."""
