"""Every answer says where its inputs come from (profiles/ranges.trust_of): measured on which
machine, fitted, datasheet or estimate; one `inputs:` line in the text of simulate, memory and
plan, a `trust` object in their --json; and the node count where a scenario is named."""
import json
from pathlib import Path

import pytest

from tierlab.profiles.load import load_hardware
from tierlab.profiles.ranges import source_kind, trust_of, trust_phrase
from tierlab.sim.host_costs import software_for

from _cli import run

REPO = Path(__file__).resolve().parents[1]
H200 = str(REPO / "lab/profiles/hardware/systems/h200x2-host.yaml")
TINY = ("-m", "tinyllama-1.1b", "--seq", "1024", "--micro-batch", "4", "-q")


def test_refitted_terms_are_fitted_not_datasheet():
    assert source_kind("refitted 2026-12-01 with the fetch waits modelled") == "fitted"
    assert source_kind("fitted 2026-11-30 on train_cases") == "fitted"


def test_a_stock_profile_is_never_calibrated():
    hw = load_hardware("dgx-a100")
    t = trust_of(hw, software_for(hw), ["gpu_compute", "cpu_adam", "nvme_read"])
    assert list(t) == ["gpu_compute", "cpu_adam", "nvme_read"]
    assert t["gpu_compute"]["kind"] == "estimate"          # the assumed GEMM efficiency curve
    assert t["cpu_adam"]["kind"] == "estimate" and not t["cpu_adam"]["calibrated"]
    assert t["nvme_read"]["kind"] == "datasheet"
    assert trust_phrase(t["nvme_read"]) == "datasheet, never calibrated"


def test_a_calibrated_profile_names_its_machine_and_date():
    hw = load_hardware(H200)
    t = trust_of(hw, software_for(hw), memory=True)
    e = t["cpu_adam"]
    assert e["kind"] == "measured" and e["calibrated"] and e["measured_on"] == "h200x2-host"
    assert e["date"] and trust_phrase(e) == f"measured {e['date']} on h200x2-host"
    # the software profile is fitted on the project's hosts: never a calibration of this one
    assert t["cpu_host"]["kind"] == "fitted" and not t["cpu_host"]["calibrated"]
    assert t["host process baseline"]["kind"] == "fitted"


def test_a_group_is_as_sure_as_its_least_certain_input():
    hw = load_hardware("dgx-a100")
    e = trust_of(hw, None, ["pcie_h2d"])["pcie_h2d"]
    assert e["inputs"] == {"pcie.h2d_pinned_Bps": "datasheet", "pcie.h2d_pageable_Bps": "estimate"}
    assert e["kind"] == "estimate"


def test_simulate_states_its_inputs_in_text_and_json():
    r = run("simulate", *TINY, "-c", "zero3-cpu")
    assert r.exit_code == 0, r.output
    line = r.output.strip().splitlines()[-1]
    assert line.startswith("inputs: ") and "GPU compute" in line and "CPU Adam" in line
    assert "estimate, never calibrated" in line
    assert "NVMe" not in line                   # no NVMe offload: not an input of this answer
    d = json.loads(run("simulate", *TINY, "-c", "zero3-cpu", "--json").output)
    assert d["trust"]["cpu_adam"]["kind"] == "estimate"
    assert "nvme_read" not in d["trust"]
    r = run("simulate", *TINY, "-c", "zero3-cpu", "-H", H200)
    assert "measured" in r.output.splitlines()[-1] and "on h200x2-host" in r.output


def test_the_builtin_comparison_states_its_inputs():
    r = run("simulate")
    assert r.exit_code == 0, r.output
    assert r.output.strip().splitlines()[-1].startswith("inputs: ")
    assert "NVMe write" in r.output.splitlines()[-1]           # zero3-nvme is in the table
    d = json.loads(run("simulate", "--json").output)
    assert all("trust" in row for row in d)


def test_memory_states_its_overheads_sources():
    r = run("memory", *TINY, "-c", "zero3-cpu")
    assert r.exit_code == 0, r.output
    assert r.output.strip().splitlines()[-1] == (
        "inputs: GPU memory overhead: estimate, never calibrated; host process baseline: fitted")
    d = json.loads(run("memory", *TINY, "-c", "zero3-cpu", "--json").output)
    assert d["trust"]["GPU memory overhead"]["inputs"] == {"gpu.cuda_context_bytes": "estimate"}
    assert (d["nodes"], d["gpus_per_node"]) == (1, 1)


def test_plan_states_its_inputs():
    args = ("-m", "tinyllama-1.1b", "--seq", "1024", "--global-batch", "16", "--max-gpu-mem",
            "7GiB", "--checkpointing", "--no-progress")
    r = run("plan", *args)
    assert r.exit_code == 0, r.output
    line = next(l for l in r.output.splitlines() if l.startswith("inputs: "))
    assert "GPU compute" in line and "GPU memory overhead" in line
    d = json.loads(run("plan", *args, "--json").output)
    assert d["trust"]["gpu_compute"]["kind"] == "estimate"


@pytest.mark.parametrize("verb", ["simulate", "memory"])
def test_the_scenario_line_names_the_nodes(verb):
    r = run(verb, "-m", "llama-2-7b", "-H", "dgx-a100", "--nodes", "2", "-c", "zero3-cpu",
            "--seq", "1024", "--micro-batch", "1", "-q")
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0].startswith("Llama-2-7B on dgx-a100 (2 nodes x 8 GPU), ")


def test_plan_over_two_nodes_keeps_them_in_header_and_launch(tmp_path):
    out = tmp_path / "c.json"
    r = run("plan", "-m", "tinyllama-1.1b", "-H", "dgx-a100", "--nodes", "2", "--seq", "1024",
            "--micro-batch", "4", "--checkpointing", "--no-progress", "-o", str(out))
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0].startswith("plan: TinyLlama-1.1B on dgx-a100 (2 nodes x 8 "
                                               "GPUs, ")
    assert f"deepspeed --hostfile HOSTFILE --num_nodes 2 --num_gpus 8 train.py --deepspeed " \
           f"{out} --per_device_train_batch_size 4" in r.output
