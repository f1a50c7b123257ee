"""The model_types whose transformers 5.25.0 default config cannot be built (ministral,
hunyuan_v1_moe, dots1, lfm2_moe, qwen4_exp, qwen4_exp_text, cohere_compass_text), each with the
default field that made the build fail filled with a plausible value
(tests/data/hf_configs/filled; ORIGINS.yaml names, per file, the keys filled, the transformers
line that failed and where the value comes from): transformers builds each causal LM on the
meta device, tierlab counts it as transformers does (total, and active for MoE types) and
simulates it, or refuses it in one line recorded as the file's verdict (xfail, strict)."""
import json
from pathlib import Path

import pytest
import yaml

from tests._cli import simulated_step_s
from tests._realcases import loaded_as_recorded
from tierlab.errors import ConfigError
from tierlab.profiles.hf_build import COUNT_TOLERANCE
from tierlab.profiles.load import load_model

transformers = pytest.importorskip("transformers")

FILLED = Path(__file__).parent / "data" / "hf_configs" / "filled"
ORIGINS = yaml.safe_load((FILLED / "ORIGINS.yaml").read_text())["files"]
FILES = sorted(FILLED.glob("*.json"))
TYPES = {"ministral", "hunyuan_v1_moe", "dots1", "lfm2_moe", "qwen4_exp", "qwen4_exp_text",
         "cohere_compass_text"}
MOE = {"hunyuan_v1_moe", "dots1", "lfm2_moe", "qwen4_exp", "qwen4_exp_text"}


def tierlab_case(path: Path):
    """A pytest param of `path`: xfail (strict) with tierlab's recorded refusal where
    ORIGINS.yaml records one."""
    verdict = ORIGINS[path.stem]["verdict"]
    marks = [pytest.mark.xfail(strict=True, reason=verdict[len("refused: "):],
                               raises=(ConfigError, AssertionError))] \
        if verdict.startswith("refused: ") else []
    return pytest.param(path, id=path.stem, marks=marks)


CASES = [tierlab_case(p) for p in FILES]


def config_of(data: dict):
    from transformers import AutoConfig

    cfg = {k: v for k, v in data.items() if k not in ("model_type", "auto_map", "architectures")}
    return AutoConfig.for_model(data["model_type"], **cfg)


def transformers_counts(data: dict) -> tuple[int, int]:
    """(total, active) of the causal LM transformers builds on the meta device from the
    config's decoder (a composite config's text config, as profiles/hf_config.py text_config
    takes it); active as tests/test_real_configs_3.py computes it: each `experts` module's
    parameters top-k of n (n, k from the decoder config, through its attribute_map)."""
    import torch
    from transformers import AutoModelForCausalLM

    text = config_of(data).get_text_config(decoder=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(text)
    total = sum(p.numel() for p in model.parameters())
    n = getattr(text, "num_local_experts", None) or getattr(text, "num_experts", None)
    k = getattr(text, "num_experts_per_tok", None)
    idle = sum(sum(p.numel() for p in m.parameters()) * (n - k) // n
               for name, m in model.named_modules() if name.endswith(".experts")) if n else 0
    return total, total - idle


def test_every_type_has_a_file_and_an_origin():
    assert {p.stem for p in FILES} == TYPES == set(ORIGINS)
    for entry in ORIGINS.values():
        assert entry["filled"] and entry["failed"] and entry["source"], entry
        assert entry["verdict"] == "counted" or entry["verdict"].startswith("refused: ")


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_only_the_filled_keys_differ_from_transformers_default(path):
    data = json.loads(path.read_text())
    assert data["model_type"] == path.stem
    default = json.loads(json.dumps(config_of({"model_type": path.stem}).to_dict()))  # as written
    differ = {k for k in set(data) | set(default) if data.get(k) != default.get(k)}
    assert differ == set(ORIGINS[path.stem]["filled"]), differ


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_transformers_builds_the_causal_lm(path):
    total, active = transformers_counts(json.loads(path.read_text()))
    assert total > 0
    assert (active < total) == (path.stem in MOE and path.stem != "hunyuan_v1_moe"), \
        (total, active)             # hunyuan_v1_moe's default: num_experts 1, top-1


@pytest.mark.parametrize("path", CASES)
def test_tierlab_counts_as_transformers(path):
    model = load_model(str(path))
    total, active = transformers_counts(json.loads(path.read_text()))
    assert abs(model.n_params - total) <= COUNT_TOLERANCE * total, (model.n_params, total)
    if path.stem in MOE:
        assert abs(model.active_params - active) <= COUNT_TOLERANCE * active, \
            (model.active_params, active)


@pytest.mark.parametrize("path", CASES)
def test_tierlab_simulates_it(path):
    simulated_step_s(path, "h200-gen5", 4096)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_tierlab_loads_or_refuses_as_recorded(path):
    """A load where ORIGINS.yaml says `counted`; else one line naming the file and holding the
    recorded refusal (what the xfail cases above fail on)."""
    loaded_as_recorded(path, ORIGINS[path.stem]["verdict"])
