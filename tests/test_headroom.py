"""Headroom (sim/headroom.py) and the moments outside the step (sim/memory_moments.py)."""
import json

import pytest
from click.testing import CliRunner

from tierlab.cli import main
from tierlab.errors import ConfigError
from tierlab.scenario import resolve
from tierlab.sim.headroom import DEFAULT_HEADROOM, Margin, parse_margin
from tierlab.units import GiB

TINY = dict(micro_batch=4, seq=1024)     # TinyLlama-1.1B on workstation-rtx3070 (defaults)


def _memory(*args):
    return CliRunner().invoke(main, ["memory", "-c", "zero3-cpu", "--micro-batch", "4",
                                     "--seq", "1024", *args])


def test_parse_margin_share_size_zero():
    assert parse_margin("5%", "--x") == Margin(fraction=0.05)
    assert parse_margin("4GiB", "--x") == Margin(nbytes=4 * GiB)
    assert parse_margin("0", "--x") == Margin() == parse_margin("0%", "--x")
    # 5% of the workstation's 64 GB = 3.2e9 B = 2.98 GiB
    assert parse_margin("5%", "--x").bytes_of(64e9) == pytest.approx(3.2e9)


@pytest.mark.parametrize("text", ["-5%", "100%", "250%", "5", "-3", "abc", "-1GiB", "nan%",
                                  "4 parsecs"])
def test_bad_headroom_is_a_config_error_naming_the_option(text):
    with pytest.raises(ConfigError, match="--host-headroom"):
        parse_margin(text, "--host-headroom")


@pytest.mark.parametrize("args, option", [
    (["--host-headroom", "5"], "--host-headroom"), (["--host-headroom", "-5%"], "--host-headroom"),
    (["--host-headroom", "100%"], "--host-headroom"), (["--gpu-headroom", "abc"], "--gpu-headroom"),
    (["--gpu-headroom", "8GiB"], "--gpu-headroom")])     # the whole 8 GiB card
def test_bad_headroom_exits_2_with_one_line(args, option):
    r = _memory(*args)
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and lines[0].startswith("error:")


def test_default_headroom_host_5_percent_gpu_none():
    plan = resolve("tinyllama-1.1b", "workstation-rtx3070", "zero3-cpu", **TINY).memory()
    host, gpu = plan.tiers["host"], plan.tiers["gpu"]
    assert plan.headroom == DEFAULT_HEADROOM
    # 5% x 64e9 B = 3.2e9 B kept free; GPU: context and allocator slack are in the plan already
    assert host.headroom_bytes == pytest.approx(0.05 * host.capacity_bytes)
    assert host.limit_bytes == pytest.approx(0.95 * host.capacity_bytes)
    assert gpu.headroom_bytes == 0.0 and gpu.limit_bytes == gpu.capacity_bytes


def test_verdict_flips_at_the_headroom():
    # host holds 29.52 GiB of 59.60 GiB: 50% leaves 29.80 GiB (fits), 51% 29.21 GiB (does not)
    fits = resolve("tinyllama-1.1b", "workstation-rtx3070", "zero3-cpu", host_headroom="50%",
                   **TINY).memory()
    over = resolve("tinyllama-1.1b", "workstation-rtx3070", "zero3-cpu", host_headroom="51%",
                   **TINY).memory()
    assert fits.tiers["host"].fits and not over.tiers["host"].fits
    assert not over.fits and over.binding_tier == "host"
    # GPU holds 5.37 GiB of 8 GiB: 2 GiB headroom leaves 6 (fits), 3 GiB leaves 5 (does not)
    for room, ok in (("2GiB", True), ("3GiB", False)):
        sc = resolve("tinyllama-1.1b", "workstation-rtx3070", "zero3-cpu", gpu_headroom=room,
                     **TINY)
        assert sc.memory().tiers["gpu"].fits is ok
        assert sc.simulate().fits is ok          # the simulator's verdict is the same one


def test_text_and_json_say_the_headroom():
    r = _memory("--host-headroom", "10%")
    assert r.exit_code == 0, r.output
    assert "headroom kept free: gpu 0, host 10% (5.96 GiB), nvme 0" in r.output
    data = json.loads(_memory("--host-headroom", "10%", "--json").output)
    assert data["headroom"] == {"gpu": "0", "host": "10%", "nvme": "0"}
    assert data["tiers"]["host"]["headroom_GiB"] == pytest.approx(0.1 * 64e9 / GiB)
    assert set(data["moments"]) == {"checkpoint_save", "model_save_16bit", "model_load",
                                    "checkpoint_load"}
    sim = json.loads(CliRunner().invoke(main, ["simulate", "-c", "zero3-cpu", "--micro-batch",
                                               "4", "--seq", "1024", "--gpu-headroom", "1GiB",
                                               "--json"]).output)
    assert sim["memory_plan"]["headroom"]["gpu"] == "1.00 GiB"


def _moments(config, *sets, gpus=None):
    sc = resolve("tinyllama-1.1b", "workstation-rtx3070", config, overrides=list(sets),
                 gpus=gpus, **TINY)
    plan = sc.memory()
    return plan, {m.name: m for m in plan.moments}, sc


def test_zero3_16bit_save_gathers_the_whole_model_on_rank0():
    plan, m, sc = _moments("zero3-cpu",
                           "zero_optimization.stage3_gather_16bit_weights_on_model_save=true")
    n = sc.model.n_params                       # 1.1e9 x 2 B = 2.05 GiB on rank 0's host
    s16 = m["model_save_16bit"]
    assert s16.breakdown["consolidated_16bit_model_rank0"] == 2.0 * n
    assert s16.used_bytes == pytest.approx(plan.tiers["host"].used_bytes + 2.0 * n)
    _, off, _ = _moments("zero3-cpu")           # false (the default): nothing is written
    assert off["model_save_16bit"].used_bytes == plan.tiers["host"].used_bytes
    assert "zero_to_fp32" in off["model_save_16bit"].note


def test_resume_loads_the_shard_beside_the_training_buffers():
    plan, m, sc = _moments("zero3-cpu")
    lay_part = sc.model.n_params                # 1 GPU: the partition is the whole model
    # fp32 master + m + v = 12 B x 1.1e9 = 12.3 GiB on top of the step's 29.52 GiB
    extra = m["checkpoint_load"].used_bytes - plan.tiers["host"].used_bytes
    assert extra == pytest.approx(12.0 * lay_part, rel=1e-3)


def test_model_load_every_rank_below_zero3_rank0_alone_under_it():
    _, z2, sc = _moments("zero2-cpu", gpus=1)
    n, b = sc.model.n_params, 2
    assert z2["model_load"].breakdown["full_model_per_rank"] == b * n
    # ZeRO-3 + HF integration: rank 0 reads the state dict, each rank keeps its CPU partition
    _, z3, _ = _moments("zero3-cpu", gpus=1)
    assert z3["model_load"].breakdown["state_dict_rank0"] == b * n


def test_checkpoint_save_stages_gpu_resident_optimizer_state():
    # ZeRO-2 without offload on 1 GPU: the flat fp32 partition (4 B x 1.1e9 = 4.1 GiB) goes
    # through host memory when torch.save writes it; an offloaded optimizer adds nothing
    _, gpu_opt, sc = _moments("no-offload", "zero_optimization.stage=2")
    assert gpu_opt["checkpoint_save"].breakdown["staged_rank0"] == pytest.approx(
        4.0 * sc.model.n_params, rel=1e-3)
    _, cpu_opt, _ = _moments("zero2-cpu")
    staged = cpu_opt["checkpoint_save"].breakdown.get("staged_rank0", 0.0)
    assert staged < 0.1 * sc.model.n_params * 4      # only the largest 16-bit parameter


def test_a_moment_that_does_not_fit_is_a_preflight_warning():
    r = CliRunner().invoke(main, ["preflight", "-c", "zero3-cpu", "--micro-batch", "4",
                                  "--seq", "1024", "--no-probe", "--host-headroom", "50%"])
    assert "warning: [memory-moment] checkpoint load (resume)" in r.output
    assert r.exit_code == 0                   # the step fits: a warning, not an error


def test_python_api_takes_the_headroom():
    import tierlab

    plan = tierlab.memory("tinyllama-1.1b", "workstation-rtx3070", "zero3-cpu", micro_batch=4,
                          seq=1024, host_headroom="51%")
    assert not plan.fits and plan.binding_tier == "host"      # 29.52 GiB > 29.21 GiB usable
    r = tierlab.simulate("tinyllama-1.1b", "workstation-rtx3070", "zero3-cpu", micro_batch=4,
                         seq=1024, gpu_headroom="3GiB", ranges=False)
    assert not r.fits and r.binding_tier == "gpu"             # 5.37 GiB > 5.00 GiB usable
