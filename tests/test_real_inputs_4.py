"""A fourth batch of real inputs nobody here had used (tests/data/hf_configs/real4 and
tests/data/ds_configs/real4, ORIGINS.yaml in each: repository, path, commit and the recorded
verdict), judged as tests/test_real_inputs.py judges real2/real3, with its own helpers:

- every config.json: transformers 5.25.0 builds the text decoder on the meta device
  (tests/test_real_inputs.transformers_verdict); tierlab counts it within COUNT_TOLERANCE, total
  and MoE-active, or refuses it in one line naming the file and saying why, where transformers
  refuses it too (remote code: model_type unknown to transformers, or no model_type at all and
  an auto_map: SmallThinker-21B-A3B);
- every ds_config: DeepSpeed 0.19.8's verdict and effective values
  (tests/test_real_inputs.test_ds_config_as_deepspeed_judges_it on the entry recorded here);
- both kinds through the command line: `tierlab memory` / `tierlab simulate` exit 0, or exit 2
  with one `error:` line naming the file and the key (tests/_cli.py)."""
import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from tests import test_real_inputs as real
from tests._cli import assert_cli_judges, assert_user_error, run, simulated_step_s
from tests._dshelp import open_as_deepspeed
from tests._realcases import loaded_as_recorded

DATA = Path(__file__).parent / "data"
HF = DATA / "hf_configs" / "real4"
DS = DATA / "ds_configs" / "real4"
HF_ORIGINS = yaml.safe_load((HF / "ORIGINS.yaml").read_text())["files"]
DS_ORIGINS = yaml.safe_load((DS / "ORIGINS.yaml").read_text())["files"]
HF_FILES = sorted(HF.glob("*.json"))
DS_FILES = sorted(DS.glob("*.json"))


def _sources(root: Path, skip: str) -> set[tuple[str, str]]:
    """(repository, path) of every file the ORIGINS/sources records under `root` cite, outside
    the folder `skip`."""
    found, stack = set(), []
    for f in [*root.rglob("sources.json"), *root.rglob("ORIGINS.yaml")]:
        if skip not in f.parts:
            stack.append(json.loads(f.read_text()) if f.suffix == ".json"
                         else yaml.safe_load(f.read_text()))
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            repo = node.get("repository") or node.get("repo")
            if isinstance(repo, str) and isinstance(node.get("path"), str):
                found.add((repo, node["path"]))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _contents(root: Path, skip: str) -> set[str]:
    return {json.dumps(open_as_deepspeed(p), sort_keys=True) for p in root.rglob("*.json")
            if skip not in p.parts and p.name != "sources.json"}


@pytest.mark.parametrize("files, origins, root", [(HF_FILES, HF_ORIGINS, DATA / "hf_configs"),
                                                   (DS_FILES, DS_ORIGINS, DATA / "ds_configs")],
                         ids=["config.json", "ds_config"])
def test_every_file_is_new_real_and_cited(files, origins, root):
    assert len(files) >= 20
    assert {p.stem if root.name == "hf_configs" else p.name for p in files} == set(origins)
    for entry in origins.values():
        commit = entry["commit"]
        assert entry["repository"].count("/") == 1 and entry["path"], entry
        assert len(commit) == 40 and all(c in "0123456789abcdef" for c in commit), entry
    seen, cited = _contents(root, "real4"), _sources(root, "real4")
    for path in files:           # no copy of a file tests/data holds, nor of one before it
        text = json.dumps(open_as_deepspeed(path), sort_keys=True)
        assert text not in seen, path.name
        seen.add(text)
        entry = origins[path.stem if root.name == "hf_configs" else path.name]
        where = (entry["repository"], entry["path"])    # a .py holds many configs: content decides
        assert where not in cited or entry["path"].endswith(".py"), (path.name, where)


# ----------------------------------------------------------------------------------------------
# config.json: transformers' verdict


@pytest.mark.parametrize("path", HF_FILES, ids=lambda p: p.stem)
def test_config_json_as_transformers_counts_it(path):
    pytest.importorskip("transformers")
    theirs = real.transformers_verdict(json.loads(path.read_text()))
    model = loaded_as_recorded(path, HF_ORIGINS[path.stem]["verdict"])
    if model is None:                       # tierlab refuses only what transformers refuses
        assert isinstance(theirs, str), theirs
        return
    assert isinstance(theirs, tuple), theirs
    assert real._near(model.n_params, theirs[0]) and real._near(model.active_params, theirs[1]), \
        ((model.n_params, model.active_params), theirs)


@pytest.mark.parametrize("path", HF_FILES, ids=lambda p: p.stem)
def test_config_json_on_the_command_line(path):
    """`tierlab memory -m PATH`: a counted file runs, a refused one is exit 2 in one line naming
    the file and the reason recorded."""
    verdict = HF_ORIGINS[path.stem]["verdict"]
    r = run("memory", "-m", str(path), "-H", "dgx-h100", "-c", "zero3-cpu", "--seq", "2048")
    if verdict == "counted":
        assert r.exit_code == 0 and "fits" in r.output, r.output
    else:
        assert_user_error(r, path.name, verdict[len("refused: "):])


@pytest.mark.parametrize("name", ["qwen3.5-27b", "mamba-codestral-7b", "olmo2-32b",
                                  "qwen3-moe-tiny"])
def test_new_architectures_simulate_to_a_finite_step(name):
    """A hybrid linear-attention decoder, a pure state-space one, a post-norm QK-norm one and a
    MoE whose heads x head_dim is not its hidden size: `tierlab simulate` gives a step."""
    simulated_step_s(HF / f"{name}.json", "dgx-h100", 4096)


def test_a_remote_code_config_without_model_type_says_trust_remote_code():
    """SmallThinker-21B-A3B's config.json has an auto_map and no model_type: transformers needs
    trust_remote_code to read it; tierlab said only `missing key 'model_type' (... supported:
    llama, ...)`, naming neither the remote code nor the ~200 architectures it builds."""
    path = HF / "smallthinker-21b-a3b-remote.json"
    assert_user_error(run("simulate", "-m", str(path), "-H", "dgx-h100"), path.name,
                      "missing key 'model_type'", "trust_remote_code")


# ----------------------------------------------------------------------------------------------
# ds_config: DeepSpeed's verdict


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="needs deepspeed")
@pytest.mark.parametrize("path", DS_FILES, ids=lambda p: p.stem)
def test_ds_config_as_deepspeed_judges_it(path, monkeypatch):
    """tests/test_real_inputs.py's judgement, on the entry recorded here."""
    monkeypatch.setitem(real.DS_SOURCES, path.name, DS_ORIGINS[path.name])
    real.test_ds_config_as_deepspeed_judges_it(path, monkeypatch)


@pytest.mark.parametrize("path", DS_FILES, ids=lambda p: p.stem)
def test_ds_config_on_the_command_line(path):
    """`tierlab memory -c PATH` (tests/_cli.assert_cli_judges); `cli`: where the command line's
    first check (bounds.check_ds_config: every numeric key out of bounds in one line) refuses
    the file on other keys than the one DeepSpeed names first, what it names."""
    entry = DS_ORIGINS[path.name]
    if "cli" in entry:
        r = run("memory", "-m", "tinyllama-1.1b", "-H", "dgx-a100", "-c", str(path))
        assert_user_error(r, path.name, *entry["cli"])
        return
    assert_cli_judges(path, entry, *entry["tierlab"][len("refused "):].split(" | "))


# Megatron-DeepSpeed's ZeRO-Offload++ (Twin-Flow) template as its launch script fills it:
# examples_deepspeed/offload_pp/ds_pretrain_gpt_350M.sh lines 284-290 @ b7529f3 (GLOBAL_BATCH_SIZE
# 256, BATCH_SIZE 2, LOG_INTERVAL 1, bf16 on, fp16 off; 16 GPUs). offload_optimizer.ratio 0.3:
# DeepSpeed 0.19.8 keeps 70 % of the optimizer states (and their Adam step) on the GPU.
LAUNCH_FILLS = {"CONFIG_BATCH_SIZE": "256", "CONFIG_MBSIZE": "2", "LOG_INTERVAL": "1",
                "CONFIG_FP16_ENABLED": "false", "CONFIG_BF16_ENABLED": "true"}


def _offload_pp_as_launched(tmp_path) -> Path:
    text = (DS / "mds_offload_pp_ds_config_gpt_TEMPLATE.json").read_text()
    for placeholder, value in LAUNCH_FILLS.items():
        text = text.replace(placeholder, value)
    path = tmp_path / "ds_config_gpt_offload_pp.json"
    path.write_text(text)
    return path


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="needs deepspeed")
def test_twin_flow_ratio_as_launched_is_accepted_by_deepspeed_refused_by_simulate(tmp_path,
                                                                                    monkeypatch):
    path = _offload_pp_as_launched(tmp_path)
    theirs = real.deepspeed_verdict(open_as_deepspeed(path), 16, monkeypatch)
    assert theirs.error is None and theirs.values["offload_optimizer"] == "cpu", theirs
    assert_user_error(run("simulate", "-m", "tinyllama-1.1b", "-H", "dgx-a100", "--nodes", "2",
                          "-c", str(path)), path.name, "offload_optimizer.ratio=0.3")


def test_twin_flow_ratio_as_launched_is_refused_by_memory_too(tmp_path):
    path = _offload_pp_as_launched(tmp_path)
    assert_user_error(run("memory", "-m", "tinyllama-1.1b", "-H", "dgx-a100", "--nodes", "2",
                          "-c", str(path)), path.name, "offload_optimizer.ratio")


def test_twin_flow_ratio_as_launched_skips_the_memory_plan_in_preflight(tmp_path):
    """preflight judges a launch DeepSpeed accepts: the plan of another config would be wrong,
    so it says the plan is skipped and why (a warning naming the key), never 'ok'."""
    path = _offload_pp_as_launched(tmp_path)
    r = run("preflight", "--no-probe", "-m", "tinyllama-1.1b", "-H", "dgx-a100", "--nodes", "2",
            "-c", str(path))
    assert "memory plan skipped" in r.output and "offload_optimizer.ratio" in r.output, r.output
    assert "no problems found" not in r.output, r.output
