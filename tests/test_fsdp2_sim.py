"""The FSDP2 CPU-offload schedule (sim/fsdp2.py), its memory plan, the Scenario dispatch and the
planner's candidate (planner/fsdp2.py, `plan --fsdp2`)."""
from __future__ import annotations

from dataclasses import replace

import pytest
from click.testing import CliRunner

from tierlab.cli import main
from tierlab.scenario import resolve
from tierlab.sim.devices import pcie_seconds
from tierlab.sim.fsdp2 import (AdamwRate, fsdp2_memory, groups, load_adamw_rate, simulate_fsdp2)


def _sc(**kw):
    return resolve(**{"model": "tinyllama-1.1b", "hardware": "h200-gen5",
                      "ds_config": "no-offload", "micro_batch": 4, "seq": 1024, "gpus": 1,
                      "nodes": 1, **kw})


def test_schedule_moves_every_param_twice_in_and_its_grad_once_out():
    sc = _sc()
    r = simulate_fsdp2(sc.hardware, sc.model, sc.strategy)
    hw, gs = sc.hardware, groups(sc.model)
    assert sum(p for _, p in gs) == sc.model.n_params
    # the root once (never resharded after forward), each layer in forward and again in backward
    h2d = sum(pcie_seconds(hw.pcie, 4.0 * p, "h2d", True, hw.gpus_per_node) * (1 if i == 0 else 2)
              for i, (_, p) in enumerate(gs))
    d2h = sum(pcie_seconds(hw.pcie, 4.0 * p, "d2h", True, hw.gpus_per_node) for _, p in gs)
    assert r.busy_s["pcie_h2d"] == pytest.approx(h2d)
    assert r.busy_s["pcie_d2h"] == pytest.approx(d2h)
    names = [s.name for s in r.spans if s.resource == "pcie_h2d"]
    assert names[:2] == ["H2D root (fwd)", "H2D layers.0 (fwd)"]
    assert names[-1] == "H2D layers.0 (bwd)" and len(names) == 1 + 2 * sc.model.n_layers
    assert sum(r.phases.values()) == pytest.approx(r.step_time_s)
    # the optimizer runs after the last grad D2H: the measured AdamW rate on this CPU
    rate = load_adamw_rate().params_per_s(hw.cpu.cores, hw.cpu.dram_bandwidth_Bps)
    assert r.phases["optimizer_s"] == pytest.approx(sc.model.n_params / rate)
    assert r.step_time_s >= max(r.busy_s.values())
    assert r.tokens_per_s == pytest.approx(4 * 1024 / r.step_time_s)


def test_prefetch_overlaps_copy_in_with_compute():
    sc = _sc()
    r = simulate_fsdp2(sc.hardware, sc.model, sc.strategy)
    serial = r.busy_s["pcie_h2d"] + r.busy_s["pcie_d2h"] + r.busy_s["gpu_compute"] \
        + r.busy_s["cpu_adam"]
    assert r.step_time_s < serial
    assert simulate_fsdp2(sc.hardware, sc.model, sc.strategy).step_time_s == r.step_time_s


def test_memory_host_holds_16_bytes_per_param_gpu_no_full_model():
    sc = _sc()
    mem = fsdp2_memory(sc.hardware, sc.model, sc.strategy)
    n = sc.model.n_params
    assert sum(mem["host_pinned"].values()) == 8.0 * n
    assert sum(mem["host_pageable"].values()) == 8.0 * n
    assert mem["gpu"]["layers_in_flight"] == 2 * 6.0 * sc.model.params_per_layer
    assert "checkpointed_inputs" in mem["gpu"]
    r = simulate_fsdp2(sc.hardware, sc.model, sc.strategy, host_baseline_bytes=1e9)
    assert r.host_bytes == pytest.approx(16.0 * n + 1e9)
    assert r.gpu_peak_bytes < 2.0 * n + sum(mem["gpu"].values())    # never the whole model
    off = fsdp2_memory(sc.hardware, sc.model, replace(sc.strategy,
                                                      activation_checkpointing=False))
    assert off["gpu"]["layer_activations"] > mem["gpu"]["checkpointed_inputs"]


def test_adamw_rate_is_measured_and_capped_by_dram():
    rate = load_adamw_rate()
    assert "measured" in rate.source and rate.dram_bytes_per_param == 84
    assert rate.params_per_s(2, 1e15) == pytest.approx(2 * rate.params_per_s_per_thread)
    assert AdamwRate(params_per_s_per_thread=1e9, dram_bytes_per_param=84,
                     source="x").params_per_s(64, 84e9) == pytest.approx(1e9)


def test_scenario_dispatches_before_the_deepspeed_engine():
    sc = _sc()
    r = sc.simulate(engine="fsdp2-offload")
    assert type(r).__name__ == "Fsdp2Result" and r.fits
    with pytest.raises(ValueError, match="fsdp2"):
        sc.simulate(engine="fsdp2")
    with pytest.raises(ValueError, match="one rank"):
        _sc(gpus=2).simulate(engine="fsdp2-offload")


def test_plan_lists_fsdp2_with_its_launch_line():
    r = CliRunner().invoke(main, ["plan", "-m", "tinyllama-1.1b", "-H", "workstation-rtx4090",
                                  "--fsdp2", "--no-progress"])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("FSDP2 CPU offload"))
    assert "not DeepSpeed" in line and ("fits" in line)
    assert "launch: tierlab run --engine fsdp2-offload" in r.output
    plain = CliRunner().invoke(main, ["plan", "-m", "tinyllama-1.1b", "-H",
                                      "workstation-rtx4090", "--no-progress"])
    assert "FSDP2" not in plain.output


def test_plan_fsdp2_not_modelled_on_several_gpus():
    from tierlab.planner.fsdp2 import fsdp2_candidate
    from tierlab.profiles.load import load_hardware, load_model

    c = fsdp2_candidate(load_hardware("dgx-h100"), load_model("tinyllama-1.1b"), micro_batch=1,
                        checkpointing=True, precision="bf16")
    assert c["verdict"] == "not modelled" and "one GPU" in c["reason"]


def test_plan_fsdp2_with_ds_config_is_one_line_exit_2():
    r = CliRunner().invoke(main, ["plan", "--fsdp2", "--ds-config", "zero3-cpu"])
    assert r.exit_code == 2 and "--fsdp2" in r.output
    assert len(r.output.strip().splitlines()) == 1
