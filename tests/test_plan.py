"""planner/search.py: the practical answers, ranking with reasons, the emitted ds_config, the CLI."""
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from tierlab.cli import main
from tierlab.errors import ConfigError
from tierlab.profiles.load import load_hardware, load_model
from tierlab.sim.memory import plan_memory
from tierlab.planner.search import format_plan, plan, tokens_per_s_range
from tierlab.scenario import resolve

sys.path.insert(0, str(Path(__file__).parent))
import fakesim  # noqa: E402

WS = "workstation-rtx3070"


def tiny(seq=1024):
    return load_model("tinyllama-1.1b", seq_len=seq)


@pytest.fixture(scope="module")
def tiny_on_workstation():
    return plan(load_hardware(WS), tiny(), global_batch=16)


def test_tinyllama_on_8gb_needs_offload_and_emits_a_runnable_ds_config(tiny_on_workstation):
    r = tiny_on_workstation
    assert r.best is not None and r.best.variant.placement.offloads
    assert r.best.verdict == "best" and r.best.fits
    assert any(n.startswith("Needs offload: without it, gpu needs") for n in r.notes)
    cfg = r.ds_config
    v = r.best.variant
    assert cfg["train_micro_batch_size_per_gpu"] == v.micro_batch
    assert cfg["gradient_accumulation_steps"] == v.grad_accum
    assert cfg["train_batch_size"] == 16 == v.micro_batch * v.grad_accum
    assert cfg["zero_optimization"]["stage"] == v.placement.stage
    assert cfg["zero_optimization"]["offload_optimizer"]["device"] == v.placement.optimizer
    json.dumps(cfg)                                             # plain JSON
    # the emitted config parses back to a strategy that fits, with the same placement
    hw, m = load_hardware(WS), tiny()
    s = resolve(m, hw, cfg, seq=m.seq_len, checkpointing=v.checkpointing).strategy
    assert s.optimizer_device == v.placement.optimizer and plan_memory(hw, m, s).fits


def test_every_alternative_says_why_it_lost(tiny_on_workstation):
    r = tiny_on_workstation
    assert r.alternatives[0] is r.best
    for c in r.alternatives[1:]:
        assert c.verdict in ("slower", "tie", "doesn't fit", "offload not needed", "too slow",
                             "error")
        assert c.reason
        if c.verdict == "doesn't fit":
            assert c.reason.split()[0] in ("gpu", "host", "nvme") and " > " in c.reason
        if c.verdict in ("slower", "tie"):
            assert "binds" in c.reason and c.tokens_per_s <= r.best.tokens_per_s
        if c.verdict == "tie":     # its 80% range of tokens/s reaches into the best's
            assert tokens_per_s_range(c)[1] >= tokens_per_s_range(r.best)[0]
            assert any(c.label in n for n in r.notes if "tie with the best" in n)
        elif c.verdict == "slower":
            assert tokens_per_s_range(c)[1] < tokens_per_s_range(r.best)[0]
    speeds = [c.tokens_per_s for c in r.alternatives if c.verdict in ("best", "slower", "tie")]
    assert speeds == sorted(speeds, reverse=True)
    text = format_plan(r)
    assert "best:" in text and "doesn't fit:" in text


def test_fits_without_offload_means_dont_offload():
    r = plan(load_hardware("dgx-a100"), tiny(), global_batch=64)
    assert not r.best.variant.placement.offloads
    assert any("don't offload" in n for n in r.notes)


def test_host_ram_too_small_for_cpu_offload_goes_to_nvme():
    r = plan(load_hardware(WS), load_model("llama-2-7b", seq_len=1024))
    assert r.best is not None and r.best.variant.placement.optimizer == "nvme"
    assert r.best.ds_config["zero_optimization"]["offload_optimizer"]["nvme_path"]
    assert any("too small for CPU offload" in n and "NVMe" in n for n in r.notes)
    cpu = [c for c in r.alternatives if c.variant.placement.param == "cpu"
           and c.variant.placement.optimizer == "cpu"]
    assert cpu and cpu[0].verdict == "doesn't fit" and cpu[0].reason.startswith("host")


def test_no_nvme_and_too_little_ram_says_it_cannot_be_done():
    hw = replace(load_hardware(WS), nvme=None, nvme_drives=0)
    r = plan(hw, load_model("llama-2-7b", seq_len=1024))
    assert r.best is None and r.ds_config is None
    assert any("can't be done here" in n for n in r.notes)


def test_nvme_drive_scaling_for_70b():
    r = plan(load_hardware("h200-gen5"), load_model("llama-2-70b"), global_batch=64)
    assert r.best is not None
    drives = [row["nvme_drives"] for row in r.nvme_scaling]
    assert drives == [1, 2, 4, 8, 16]
    times = [row["step_time_s"] for row in r.nvme_scaling]
    assert times == sorted(times, reverse=True)           # more drives never slower
    assert any("NVMe" in n and "drives" in n for n in r.notes)


def test_min_tokens_per_s_and_max_gpu_mem():
    r = plan(load_hardware(WS), tiny(), min_tokens_per_s=1e9)
    assert r.best is None and any("No configuration reaches" in n for n in r.notes)
    assert all(c.verdict in ("too slow", "doesn't fit", "error") for c in r.alternatives)
    r = plan(load_hardware("dgx-a100"), tiny(), max_gpu_mem_bytes=8e9)
    assert r.best.memory.tiers["gpu"].used_bytes <= 8e9
    assert r.best.memory.tiers["gpu"].capacity_bytes == 8e9


def _faster_offload(factor):
    """Every config takes 1 s per step, except that offloading ones take 1/factor s."""
    def sim(hw, model, strategy, *, strict=False):
        res = fakesim.simulate(hw, model, strategy)
        offloads = strategy.optimizer_device != "none" or strategy.param_device != "none"
        step = 1.0 / factor if offloads else 1.0
        return replace(res, step_time_s=step, tokens_per_s=1000.0 / step)
    return sim


@pytest.mark.parametrize("factor,offload_wins", [(1.05, False), (3.0, True)])
def test_no_offload_preferred_within_margin(factor, offload_wins):
    r = plan(load_hardware("dgx-a100"), tiny(), micro_batch=4, checkpointing=True,
             simulator=_faster_offload(factor))
    assert r.best.variant.placement.offloads == offload_wins
    if not offload_wins:
        assert any(c.verdict == "offload not needed" for c in r.alternatives)


def test_bad_batch():
    with pytest.raises(ConfigError, match="not divisible"):
        plan(load_hardware("dgx-a100"), tiny(), global_batch=12)


# ----------------------------------------------------------------------------------------------
# CLI

def run(*args):
    return CliRunner().invoke(main, list(args))


def test_cli_plan_writes_ds_config(tmp_path):
    out = tmp_path / "ds_config.json"
    r = run("plan", "-m", "tinyllama-1.1b", "-H", WS, "--seq", "1024", "--global-batch", "8",
            "--out", str(out))
    assert r.exit_code == 0, r.output
    assert "best:" in r.output and f"wrote {out}" in r.output
    cfg = json.loads(out.read_text())
    # for the HF Trainer: the batch is "auto" in the file, the launch line passes the global 8
    assert cfg["train_batch_size"] == "auto" and "zero_optimization" in cfg and "aio" in cfg
    words = r.output.split()
    assert int(words[words.index("--per_device_train_batch_size") + 1]) * int(
        words[words.index("--gradient_accumulation_steps") + 1]) == 8
    r = run("plan", "-m", "tinyllama-1.1b", "-H", WS, "--seq", "1024", "--micro-batch", "2",
            "--json")
    d = json.loads(r.output)
    assert d["best"]["micro_batch"] == 2 and d["ds_config"] and d["alternatives"]
    assert d["ds_config"]["train_micro_batch_size_per_gpu"] == 2      # explicit, for the API
    assert d["trainer_config"]["train_micro_batch_size_per_gpu"] == "auto"
    assert d["trainer_args"][:2] == ["--per_device_train_batch_size", "2"]
    assert (d["nodes"], d["gpus_per_node"]) == (1, 1)


def test_cli_plan_nothing_fits_exits_1():
    r = run("plan", "-m", "tinyllama-1.1b", "-H", WS, "--seq", "1024", "--micro-batch", "1",
            "--checkpointing", "--min-tokens-per-s", "1e9")
    assert r.exit_code == 1, r.output
    assert "No configuration reaches 1,000,000,000 tokens/s" in r.output


@pytest.mark.parametrize("args,fragment", [
    (["--global-batch", "3", "-H", "dgx-a100"], "not divisible"),
    (["--micro-batch", "0"], "--micro-batch must be >= 1"),
    (["--global-batch", "8", "--grad-accum", "2"], "not both"),
    (["--max-gpu-mem", "lots"], "--max-gpu-mem 'lots' needs a unit"),
    (["-m", "nope"], "unknown model 'nope'"),
])
def test_cli_plan_bad_input(args, fragment):
    r = run("plan", *args)
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines()[-1].startswith("error:") and fragment in r.output


def test_a_configuration_that_cannot_be_evaluated_is_an_error_never_a_verdict(tmp_path):
    """A broken install (the wheel once missed the profiles its software profile read) made every
    candidate fail; the planner called that "Nothing fits ... can't be done here" and exited 1.
    Now it is an error naming the candidate and the reason (the CLI: one line, exit 2)."""
    from tierlab.sim.engine import simulate

    def broken(hardware, model, strategy, **kw):
        if strategy.zero.stage == 3:
            raise ConfigError("profiles/software/x.yaml: unknown CPU profile 'h200-g'")
        return simulate(hardware, model, strategy, **kw)

    with pytest.raises(ConfigError, match=r"plan: \d+ of \d+ configurations could not be "
                                          r"evaluated.*unknown CPU profile 'h200-g'"):
        plan(load_hardware(WS), load_model("llama-2-7b"), simulator=broken)


@pytest.mark.parametrize("path, match", [
    ("", "--nvme-path: empty path"), ("  ", "--nvme-path: empty path"),
    ("/local\nnvme", "--nvme-path: '/local\\nnvme' has a control character"),
    ("/x/" + "a" * 5000, "beyond Linux's PATH_MAX"), ("/x/" + "a" * 300, "beyond Linux's NAME_MAX")])
def test_an_nvme_path_no_filesystem_takes_is_one_line_exit_2(path, match, tmp_path):
    out = tmp_path / "ds.json"
    r = CliRunner().invoke(main, ["plan", "-m", "tinyllama-1.1b", "-H", WS, "--nvme-path", path,
                                  "-o", str(out), "--no-progress"])
    assert r.exit_code == 2 and match in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and not out.exists()
