"""profiles/load.py: quantities, strict keys, lookup by name, one-line errors."""
import json

import pytest

from tierlab.dsconfig.read import HJSON_ONLY, load_ds_config
from tierlab.errors import ConfigError
from tierlab.profiles import load
from tierlab.units import parse_quantity


@pytest.mark.parametrize("text,dim,expected", [
    ("80 GB", "bytes", 80e9), ("8 GiB", "bytes", 8 * 2**30), ("2039 GB/s", "bytes/s", 2.039e12),
    ("312 TFLOP/s", "flop/s", 312e12), ("10 us", "seconds", 1e-5), ("1.6 Gparams/s", "params/s", 1.6e9),
    (16, "count", 16.0), ("1.5 TB", "bytes", 1.5e12), ("128 KiB", "bytes", 131072),
])
def test_parse_quantity(text, dim, expected):
    assert parse_quantity(text, dim, "x") == pytest.approx(expected)


@pytest.mark.parametrize("text,dim", [("80 GB/s", "bytes"), ("80", "bytes"), ("fast", "bytes"),
                                      ("3 GB", "count"), ("10 parsecs", "seconds"), (True, "count")])
def test_parse_quantity_rejects(text, dim):
    with pytest.raises(ConfigError, match="x"):
        parse_quantity(text, dim, "x")


def test_workstation_loads_in_si_units():
    hw = load.load_hardware("workstation-rtx3070")
    assert hw.gpu.hbm_bytes == 8 * 2**30
    assert hw.dram_bytes == 64e9
    assert hw.pcie.h2d_pinned_Bps == 24e9
    assert hw.sources and all(hw.gpu.sources.values())
    assert hw.world_size == 1


def test_resize_and_bad_sizes():
    hw = load.load_hardware("workstation-rtx3070", gpus_per_node=4, nodes=2)
    assert hw.world_size == 8
    with pytest.raises(ConfigError, match="--gpus must be >= 1"):
        load.load_hardware("workstation-rtx3070", gpus_per_node=0)


def test_unknown_names_suggest_closest():
    with pytest.raises(ConfigError, match="closest: tinyllama-1.1b"):
        load.load_model("tinylama-1.1b")
    with pytest.raises(ConfigError, match="unknown system"):
        load.load_hardware("no-such-box-at-all")


def _gpu_yaml(tmp_path, **changes):
    src = (load.HARDWARE_DIR / "gpus" / "rtx-3070.yaml").read_text()
    for old, new in changes.items():
        src = src.replace(old, new)
    path = tmp_path / "g.yaml"
    path.write_text(src)
    return path


def test_unknown_and_missing_keys_are_named(tmp_path, monkeypatch):
    import yaml

    data = yaml.safe_load((load.HARDWARE_DIR / "gpus" / "rtx-3070.yaml").read_text())
    data["turbo"] = {"value": "1 GB", "source": "x"}
    p = tmp_path / "gpu.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"gpu.yaml: unknown key 'turbo'"):
        load._wrap(load._gpu, yaml.safe_load(p.read_text()), str(p))
    del data["turbo"], data["hbm"]
    with pytest.raises(ConfigError, match=r"missing key 'hbm'"):
        load._gpu(data, str(p))


def test_number_without_source_rejected():
    with pytest.raises(ConfigError, match="expected {value: ..., source: ...}"):
        load._cpu({"kind": "cpu", "name": "x", "sockets": 1}, "cpu.yaml")


def test_negative_size_rejected():
    import yaml

    data = yaml.safe_load((load.HARDWARE_DIR / "nvme" / "gen4-consumer.yaml").read_text())
    data["capacity"]["value"] = "-2 TB"
    with pytest.raises(ConfigError, match="capacity_bytes must be > 0"):
        load._wrap(load._nvme, data, "nvme.yaml")


def test_malformed_files(tmp_path):
    bad_json = tmp_path / "c.json"
    bad_json.write_text('{"zero_optimization": {"stage": 3,}')   # unclosed
    with pytest.raises(ConfigError, match=r"c.json: malformed JSON at line 1"):
        load_ds_config(str(bad_json))
    # DeepSpeed reads a config path with hjson: a trailing comma, a comment and a BOM are fine
    ok = tmp_path / "ok.json"
    ok.write_text('\ufeff{"zero_optimization": {"stage": 3,},  // ZeRO-3\n}', encoding="utf-8")
    cfg = load_ds_config(str(ok))[0]
    assert "json.load" in cfg.pop(HJSON_ONLY)     # the note parse_ds_config turns into a warning
    assert cfg == {"zero_optimization": {"stage": 3}}
    bad_yaml = tmp_path / "m.yaml"
    bad_yaml.write_text("kind: model\nname: [unclosed\n")
    with pytest.raises(ConfigError, match=r"m.yaml: malformed YAML"):
        load.load_model(str(bad_yaml))
    with pytest.raises(ConfigError, match="no such file"):
        load_ds_config(str(tmp_path / "missing.json"))


def test_hf_config_json(tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632,
           "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4,
           "vocab_size": 32000, "max_position_embeddings": 2048, "tie_word_embeddings": False}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = load.load_model(str(p), seq_len=512)
    assert m.n_params == 1_100_048_384 and m.seq_len == 512
    del cfg["hidden_size"]
    p.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="missing key 'hidden_size'"):
        load.load_model(str(p))


def test_hf_gpt2_config(tmp_path):
    cfg = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257,
           "n_positions": 1024}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert abs(load.load_model(str(p)).n_params - 124_439_808) < 1e5   # GPT-2 small


def test_counts_must_be_whole_and_booleans_typed(tmp_path):
    import yaml

    data = yaml.safe_load((load.HARDWARE_DIR / "cpus" / "ryzen-9-5900x.yaml").read_text())
    data["cores"]["value"] = 12.5
    with pytest.raises(ConfigError, match="cores must be a whole number"):
        load._cpu(data, "cpu.yaml")
    m = yaml.safe_load((load.MODELS_DIR / "tinyllama-1.1b.yaml").read_text())
    m["gated_mlp"] = "false"
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(m))
    with pytest.raises(ConfigError, match="gated_mlp must be true or false"):
        load.load_model(str(p))


def test_a_directory_named_like_a_profile_does_not_shadow_it(tmp_path, monkeypatch):
    (tmp_path / "tinyllama-1.1b").mkdir()
    monkeypatch.chdir(tmp_path)
    assert load.load_model("tinyllama-1.1b").n_layers == 22


def test_a_system_finds_parts_beside_it(tmp_path):
    """A profile tree written elsewhere (as `tierlab calibrate --out DIR/systems/x.yaml` does):
    the system's parts resolve from DIR/gpus/ etc. first, then from the shipped profiles."""
    src = load.HARDWARE_DIR
    (tmp_path / "systems").mkdir()
    (tmp_path / "gpus").mkdir()
    gpu = (src / "gpus" / "rtx-3070.yaml").read_text().replace("name: RTX 3070 8GB", "name: My GPU")
    (tmp_path / "gpus" / "my-gpu.yaml").write_text(gpu)
    system = (src / "systems" / "workstation-rtx3070.yaml").read_text().replace(
        "gpu: rtx-3070", "gpu: my-gpu")
    (tmp_path / "systems" / "box.yaml").write_text(system)
    hw = load.load_hardware(str(tmp_path / "systems" / "box.yaml"))
    assert hw.gpu.name == "My GPU" and hw.cpu.cores == 12      # local GPU, shipped CPU


# A host-cost term kept for hosts that did not measure it is a plain value: its median over the
# hosts is computed when the profile is written (lab/scripts/host_medians.py), never by reading test
# machines' profiles at load time (ARCHITECTURE.md rule 19: the wheel has none of them).
def test_a_load_time_median_of_is_refused_with_the_key_named():
    r = load._Reader({"zero12_step_per_param": {"median_of": ["h200-l"], "source": "s"}}, "p.yaml")
    with pytest.raises(ConfigError, match=r"p.yaml: zero12_step_per_param: expected \{value: "):
        r.number("zero12_step_per_param", "seconds")
