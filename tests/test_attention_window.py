"""Sliding-window and chunked attention (issue 30): which layers slide is read from the real
config.json as transformers decides it (profiles/hf_arch.py by hand, profiles/hf_build.py off
transformers' config object, the two held against each other), the score FLOPs take
min(window, s) keys per query (sim/flops.py), the step's FLOPs and time both use them, and a bad
window is one line naming the key, exit 2."""
import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from tests._cli import assert_user_error, run
from tierlab.profiles.hf_arch import ARCHITECTURES
from tierlab.profiles.load import load_model, model_from_hf_config
from tierlab.profiles.schema import Model
from tierlab.scenario import resolve
from tierlab.sim import flops

CONFIGS = Path(__file__).parent / "data" / "hf_configs"
BUILT = CONFIGS / "built"
READ = sorted(p for p in CONFIGS.glob("*.json") if p.name != "sources.json")


def _cfg(path: Path, **over) -> dict:
    data = {k: v for k, v in json.loads(path.read_text()).items() if k != "_tierlab_source"}
    data.update(over)
    for key in [k for k, v in over.items() if v is _DROP]:
        data.pop(key)
    return data


_DROP = object()


def _model(path: Path, seq: int, **over) -> Model:
    return replace(model_from_hf_config(_cfg(path, **over), str(path)), seq_len=seq)


def _full(model: Model) -> Model:
    return replace(model, attention_windows=())


def _write(tmp_path, cfg: dict) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


# ----------------------------------------------------------------------------------------------
# FLOPs by hand, on the real configs


def test_gpt_oss_alternates_128_token_windows_with_full_layers():
    # gpt-oss-20b: 24 layers, layer_types sliding/full alternating, sliding_window 128,
    # 64 heads x head_dim 64. Micro-batch 1, s = 4096:
    # full layer:    2 x 4096 tokens x 4096 keys x 64 heads x (64 + 64) = 2^38 = 274,877,906,944
    # sliding layer: 2 x 4096 tokens x  128 keys x 64 heads x (64 + 64) = 2^33 =   8,589,934,592
    # mean block: (2^38 + 2^33) / 2 = 141,733,920,768 = 0.515625 x full
    model = _model(BUILT / "gpt-oss-20b.json", 4096)
    assert model.attention_windows == (128, 0) * 12
    lf = flops.layer_forward(model, 1)
    assert lf.attention_parts == ((2.0 ** 33, 0.5), (2.0 ** 38, 0.5))
    assert lf.attention == 141_733_920_768
    assert flops.layer_forward(_full(model), 1).attention == 2.0 ** 38


def test_gemma3_slides_five_layers_of_six_with_a_512_window():
    # gemma-3-1b-it: 26 layers, sliding_window_pattern 6 -> layers 5, 11, 17, 23 full (4), the
    # other 22 slide with sliding_window 512; 4 heads x head_dim 256. s = 4096:
    # full 2 x 4096 x 4096 x 4 x 512 = 2^36, sliding 2 x 4096 x 512 x 4 x 512 = 2^33
    # mean (4 x 2^36 + 22 x 2^33) / 26 = 2^33 x 54 / 26
    model = _model(BUILT / "gemma-3-1b-it.json", 4096)
    full = [i for i, w in enumerate(model.attention_windows) if w == 0]
    assert full == [5, 11, 17, 23] and set(model.attention_windows) == {0, 512}
    assert flops.attention_spans(model) == ((512, 22), (4096, 4))
    assert flops.layer_forward(model, 1).attention == pytest.approx(2.0 ** 33 * 54 / 26,
                                                                    rel=1e-15)


def test_gemma2_slides_the_even_layers():
    # gemma-2-9b: 42 layers, even ones slide (4096), 16 heads x 256. s = 8192: a sliding layer
    # attends 4096 keys, half a full one's -> mean block (1 + 1/2) / 2 = 3/4 of full attention
    model = _model(CONFIGS / "gemma-2-9b.json", 8192)
    assert model.attention_windows == (4096, 0) * 21
    full = flops.layer_forward(_full(model), 1).attention
    assert full == 2 * 8192 * 8192 * 16 * 512
    assert flops.layer_forward(model, 1).attention == 0.75 * full


def test_mistral_window_every_layer_and_null_is_full():
    # Mistral-7B-v0.3 sets sliding_window null: full. v0.1's 4096 slides every layer; a file
    # without the key takes MistralConfig's default, 4096. s = 8192: half the keys, half the
    # score FLOPs: 2 x 8192 x 4096 x 32 x 256
    path = CONFIGS / "mistral-7b-v0.3.json"
    assert _model(path, 8192).attention_windows == ()
    v01 = _model(path, 8192, sliding_window=4096)
    assert v01.attention_windows == (4096,) * 32
    assert _model(path, 8192, sliding_window=_DROP).attention_windows == (4096,) * 32
    assert flops.layer_forward(v01, 1).attention == 2 * 8192 * 4096 * 32 * 256
    assert flops.layer_forward(v01, 1).attention == \
        flops.layer_forward(_model(path, 8192), 1).attention / 2


def test_qwen2_slides_only_with_use_sliding_window_above_max_window_layers():
    path = CONFIGS / "qwen2.5-7b.json"       # use_sliding_window false, 28 layers
    assert _model(path, 4096).attention_windows == ()
    # transformers: layer i slides when use_sliding_window and i >= max_window_layers (28 of
    # 28 here: none does)
    assert _model(path, 4096, use_sliding_window=True).attention_windows == ()
    # max_window_layers 20, window 1024: layers 20-27 attend 1024 of 4096 keys ->
    # mean block (20 + 8 / 4) / 28 = 22/28 of full (2 x 4096 x 4096 x 28 heads x 256)
    windowed = _model(path, 4096, use_sliding_window=True, max_window_layers=20,
                      sliding_window=1024)
    assert windowed.attention_windows == (0,) * 20 + (1024,) * 8
    full = 2 * 4096 * 4096 * 28 * 256
    assert flops.layer_forward(windowed, 1).attention == pytest.approx(full * 22 / 28, rel=1e-15)


def test_qwen2_without_sliding_window_equals_full_attention_exactly():
    path = CONFIGS / "qwen2.5-7b.json"
    off = _model(path, 4096, use_sliding_window=False, sliding_window=1024, max_window_layers=0)
    assert off == _model(path, 4096, sliding_window=_DROP)
    assert flops.layer_forward(off, 2) == flops.layer_forward(_full(off), 2)


@pytest.mark.parametrize("path, seq", [(BUILT / "gpt-oss-20b.json", 128),
                                       (BUILT / "gemma-3-1b-it.json", 512),
                                       (CONFIGS / "gemma-2-9b.json", 4096),
                                       (CONFIGS / "starcoder2-7b.json", 4096)])
def test_a_sequence_within_the_window_costs_full_attention_exactly(path, seq):
    model = _model(path, seq)
    assert model.attention_windows
    assert flops.layer_forward(model, 2) == flops.layer_forward(_full(model), 2)
    assert flops.step_flops(model, 2) == flops.step_flops(_full(model), 2)


def test_llama4_chunked_layers_attend_their_chunk():
    # Llama 4 (config class defaults): no_rope_layer_interval 4 -> layers 0-2 of each 4 are
    # chunked (attention_chunk_size 8192), layer 3 full. s = 16384: a chunked layer attends
    # min(8192, s) keys -> mean (3 x 1/2 + 1) / 4 = 5/8 of full
    pytest.importorskip("transformers")
    cfg = dict(model_type="llama4_text", hidden_size=64, intermediate_size=128,
               intermediate_size_mlp=96, num_hidden_layers=4, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16, vocab_size=70000, num_local_experts=4,
               interleave_moe_layer_step=2, max_position_embeddings=32, pad_token_id=0)
    model = replace(model_from_hf_config(cfg, "l4.json"), seq_len=16384)
    assert model.attention_windows == (8192, 8192, 8192, 0)
    full = flops.layer_forward(_full(model), 1).attention
    assert flops.layer_forward(model, 1).attention == 5 / 8 * full


# ----------------------------------------------------------------------------------------------
# the step: FLOPs (TFLOP/s) and time both use the windows


def test_step_flops_and_time_use_the_windows():
    model = _model(BUILT / "gpt-oss-20b.json", 4096)
    lf, full = flops.layer_forward(model, 1), flops.layer_forward(_full(model), 1)
    # checkpointing: 4 forwards of each of the 24 blocks
    saved = 4 * 24 * (full.attention - lf.attention)
    assert flops.step_flops(_full(model), 1) - flops.step_flops(model, 1) == saved
    windowed = resolve(model, "dgx-h100", "zero3-cpu", micro_batch=1).simulate()
    dense = resolve(_full(model), "dgx-h100", "zero3-cpu", micro_batch=1).simulate()
    assert windowed.busy_s["gpu_compute"] < dense.busy_s["gpu_compute"]
    assert windowed.tflops_per_gpu == pytest.approx(
        flops.step_flops(model, 1) / windowed.step_time_s / 1e12, rel=1e-12)


def test_attention_parts_are_timed_at_their_own_size():
    model = _model(BUILT / "gpt-oss-20b.json", 4096)
    hw = resolve(model, "dgx-h100", "zero3-cpu", micro_batch=1).hardware
    lf = flops.layer_forward(model, 1)
    t = flops.layer_forward_seconds(hw.gpu, "bf16", lf)
    gemms = sum(n * flops.gemm_seconds(hw.gpu, "bf16", f) for f, n in zip(lf.gemms, lf.counts))
    attn = sum(n * flops.gemm_seconds(hw.gpu, "bf16", f) for f, n in lf.attention_parts)
    assert t == pytest.approx(gemms + attn + lf.hbm_bytes / hw.gpu.hbm_bandwidth_Bps, rel=1e-12)


# ----------------------------------------------------------------------------------------------
# the hand readers decide as transformers does


def _variants() -> list[tuple[str, dict]]:
    out = [(p.stem, _cfg(p)) for p in READ]
    out += [("qwen2.5-7b+swa", _cfg(CONFIGS / "qwen2.5-7b.json", use_sliding_window=True,
                                    max_window_layers=20, sliding_window=1024)),
            ("qwen3-8b+swa", _cfg(CONFIGS / "qwen3-8b.json", use_sliding_window=True,
                                  max_window_layers=30, sliding_window=2048)),
            ("qwen1.5-moe+swa", _cfg(CONFIGS / "qwen1.5-moe-a2.7b.json",
                                     use_sliding_window=True)),
            ("qwen3-30b-a3b+swa", _cfg(CONFIGS / "qwen3-30b-a3b.json", use_sliding_window=True,
                                       sliding_window=4096)),
            ("mistral-v0.1", _cfg(CONFIGS / "mistral-7b-v0.3.json", sliding_window=4096)),
            ("mistral-no-key", _cfg(CONFIGS / "mistral-7b-v0.3.json", sliding_window=_DROP)),
            ("mixtral+swa", _cfg(CONFIGS / "mixtral-8x7b.json", sliding_window=4096)),
            ("gemma-2-2b-types", _cfg(CONFIGS / "gemma-2-2b.json",
                                      layer_types=["full_attention"] * 20
                                      + ["sliding_attention"] * 6)),
            ("gemma-2-2b-no-key", _cfg(CONFIGS / "gemma-2-2b.json", sliding_window=_DROP))]
    return out


@pytest.mark.parametrize("name, cfg", _variants(), ids=lambda v: v if isinstance(v, str) else "")
def test_hand_readers_slide_the_layers_transformers_slides(name, cfg):
    """Each hand reader's windows equal those hf_config.attention_windows reads off transformers'
    own config object (its __post_init__ layer_types, its sliding_window)."""
    pytest.importorskip("transformers")
    from tierlab.profiles import hf_config

    assert cfg["model_type"] in ARCHITECTURES
    ours = model_from_hf_config(cfg, f"{name}.json").attention_windows
    theirs = hf_config.attention_windows(hf_config.text_config(cfg, name), name)
    assert ours == theirs


def test_every_windowed_test_config_is_covered():
    """The corpus holds windowed and full configs of the hand readers and the built ones."""
    windowed = {p.stem for p in READ if load_model(str(p)).attention_windows}
    assert {"gemma-2-2b", "gemma-2-9b", "starcoder2-7b", "phi-3.5-mini"} <= windowed
    assert not windowed & {"mistral-7b-v0.3", "qwen2.5-7b", "llama-3.1-8b", "mixtral-8x7b"}


# ----------------------------------------------------------------------------------------------
# bad windows: one line naming the key, exit 2


@pytest.mark.parametrize("value, fragment", [
    (0, "sliding_window: must be >= 1, got 0"),
    (-4096, "sliding_window: must be >= 1, got -4096"),
    (1e30, "sliding_window: 1e+30 is beyond the bound 1e+08"),
    (10 ** 12, "sliding_window: 1e+12 is beyond the bound 1e+08"),
    ("4096", "sliding_window: expected a number, got '4096'"),
    (True, "sliding_window: expected a number, got True"),
])
@pytest.mark.parametrize("base", ["mistral-7b-v0.3.json", "gemma-2-9b.json", "starcoder2-7b.json"])
def test_bad_window_of_a_hand_reader_is_one_line(tmp_path, base, value, fragment):
    path = _write(tmp_path, _cfg(CONFIGS / base, sliding_window=value))
    assert_user_error(run("simulate", "-m", path, "-H", "dgx-a100"), path, fragment)


@pytest.mark.parametrize("value, fragment", [
    (0, "sliding_window: must be >= 1, got 0"),
    (-1, "sliding_window: must be >= 1, got -1"),
    (1e30, "sliding_window"),               # transformers' strict config: expected int
    (10 ** 12, "sliding_window: 1e+12 is beyond the bound 1e+08"),
    ("128", "sliding_window"),
])
def test_bad_window_of_a_built_config_is_one_line(tmp_path, value, fragment):
    pytest.importorskip("transformers")
    path = _write(tmp_path, _cfg(BUILT / "gpt-oss-20b.json", sliding_window=value))
    assert_user_error(run("simulate", "-m", path, "-H", "dgx-a100"), path, fragment)


def test_qwen2_window_is_judged_only_when_used(tmp_path):
    base = CONFIGS / "qwen2.5-7b.json"
    ok = _write(tmp_path, _cfg(base, sliding_window=0))         # use_sliding_window false
    assert run("memory", "-m", ok, "-H", "dgx-a100").exit_code == 0
    bad = _write(tmp_path, _cfg(base, sliding_window=0, use_sliding_window=True))
    assert_user_error(run("memory", "-m", bad, "-H", "dgx-a100"), "sliding_window: must be >= 1")


@pytest.mark.parametrize("types, fragment", [
    (["linear_attention"] * 26, "layer_types: 'linear_attention' is not modelled"),
    (["full_attention"] * 3, "layer_types must list one type per layer"),
    ("sliding_attention", "layer_types must list one type per layer"),
])
def test_bad_layer_types_are_one_line(tmp_path, types, fragment):
    path = _write(tmp_path, _cfg(CONFIGS / "gemma-2-2b.json", layer_types=types))
    assert_user_error(run("memory", "-m", path, "-H", "dgx-a100"), fragment)


def test_a_sliding_layer_without_a_window_is_refused(tmp_path):
    path = _write(tmp_path, _cfg(CONFIGS / "gemma-2-2b.json", sliding_window=None))
    assert_user_error(run("memory", "-m", path, "-H", "dgx-a100"),
                      "layer_types lists 'sliding_attention' layers but sliding_window is not set")


# ----------------------------------------------------------------------------------------------
# profiles and the Model


def _profile(tmp_path, windows) -> str:
    """The shipped Mistral profile with `attention_windows: <windows>` (YAML text, or JSON of a
    value)."""
    text = (CONFIGS.parents[2] / "profiles" / "models" / "mistral-7b-v0.3.yaml").read_text()
    path = tmp_path / "m.yaml"
    value = windows if isinstance(windows, str) else json.dumps(windows)
    path.write_text(text + f"attention_windows: {value}\n")
    return str(path)


def test_a_profile_sets_one_window_or_one_per_block(tmp_path):
    assert load_model(_profile(tmp_path, 4096)).attention_windows == (4096,) * 32
    assert load_model(_profile(tmp_path, [128, 0] * 16)).attention_windows == (128, 0) * 16
    assert load_model(_profile(tmp_path, 0)).attention_windows == ()
    assert load_model("mistral-7b-v0.3").attention_windows == ()       # shipped: full


@pytest.mark.parametrize("windows, fragment", [
    ([4096] * 3, "attention_windows: lists 3 blocks, n_layers is 32"),
    (-1, "attention_windows: must be >= 1, got -1"),
    ("1.0e+30", "attention_windows: 1e+30 is beyond the bound"),
    ("wide", "attention_windows: expected a number, got 'wide'"),
    ("'4096'", "attention_windows: expected a number, got '4096'"),
    ([4096] * 31 + [False], "attention_windows: expected a number, got False"),
])
def test_bad_profile_windows_are_one_line(tmp_path, windows, fragment):
    path = _profile(tmp_path, windows)
    assert_user_error(run("simulate", "-m", path, "-H", "dgx-a100"), path, fragment)


def test_model_checks_its_windows_and_reads_them_back_from_json():
    model = _model(BUILT / "gpt-oss-20b.json", 4096)
    back = Model(**json.loads(json.dumps(asdict(replace(model, moe=None)))))
    assert back.attention_windows == model.attention_windows and hash(back)
    with pytest.raises(ValueError, match="attention_windows lists 3 blocks, the model has 24"):
        replace(model, attention_windows=(128, 0, 128))
    with pytest.raises(ValueError, match="attention_windows: -1 is not 0"):
        replace(model, attention_windows=(-1,) * 24)


def test_a_window_per_layer_is_not_built_for_a_billion_layers(tmp_path):
    """The layer count is judged before one window per layer is listed (1e9 layers: 8 GB)."""
    path = _write(tmp_path, _cfg(CONFIGS / "mistral-7b-v0.3.json", sliding_window=4096,
                                 num_hidden_layers=10 ** 9))
    assert_user_error(run("memory", "-m", path, "-H", "dgx-a100"),
                      "num_hidden_layers: 1e+09 is beyond the bound 10000")
    profile = tmp_path / "p.yaml"
    profile.write_text(Path(_profile(tmp_path, 4096)).read_text()
                       .replace("n_layers: 32", "n_layers: 1000000000"))
    assert_user_error(run("memory", "-m", str(profile), "-H", "dgx-a100"),
                      "n_layers: 1e+09 is beyond the bound 10000")


# --- MoE layer walks are bounded and their steps checked (profiles/hf_arch.py) -----------------
def _moe_variant(path: str, **changes) -> dict:
    import json as _json
    data = _json.loads((Path(__file__).parent / "data" / "hf_configs" / path).read_text())
    return {**data, **changes}


@pytest.mark.parametrize("path,changes,message", [
    ("qwen1.5-moe-a2.7b.json", {"num_hidden_layers": 10**9}, "num_hidden_layers: 1e+09 is beyond"),
    ("qwen1.5-moe-a2.7b.json", {"decoder_sparse_step": 0}, "decoder_sparse_step must be >= 1"),
    ("deepseek-v2.5.json", {"num_hidden_layers": 10**9}, "num_hidden_layers: 1e+09 is beyond"),
    ("deepseek-v2.5.json", {"moe_layer_freq": 0}, "moe_layer_freq must be >= 1"),
])
def test_moe_layer_walks_refuse_before_walking(tmp_path, path, changes, message):
    """A 1e9-layer MoE config hung in the dense-layer walk (built before any bound) and a zero
    step divided by zero; both are one line naming the key now."""
    import json as _json
    f = tmp_path / "config.json"
    f.write_text(_json.dumps(_moe_variant(path, **changes)))
    assert_user_error(run("memory", "-m", str(f), "-H", "dgx-h100"), message, "config.json")
