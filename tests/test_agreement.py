"""One scenario through every verb and the Python API: identical memory, fits and step figures.

Every verb resolves its scenario with tierlab.scenario.resolve and the same software profile, so
`memory`, `simulate`, `sweep` (with and without --memory-only), `preflight`, `plan` and the API
must agree to the last bit on TinyLlama ZeRO-3 CPU (the case where `memory` once said 32.02 GB
of host RAM and `simulate` 31.70 GB: two host baselines).
"""
import io
import json

import pandas as pd
import pytest
from click.testing import CliRunner

import tierlab
from tierlab.cli import main
from tierlab.profiles.load import load_software

GiB = 2**30
SCENARIO = ["-m", "tinyllama-1.1b", "-H", "workstation-rtx3070", "-c", "zero3-cpu",
            "--micro-batch", "4", "--seq", "1024"]
API = dict(model="tinyllama-1.1b", hardware="workstation-rtx3070", ds_config="zero3-cpu",
           micro_batch=4, seq=1024)
TIERS = ("gpu", "host", "nvme")


def cli(*args):
    r = CliRunner().invoke(main, list(args))
    assert r.exit_code == 0, r.output
    return r


def cli_json(*args):
    return json.loads(cli(*args).stdout)


def sweep_row(*extra):
    r = cli("sweep", *SCENARIO, "--vary", "micro_batch=4", "-j", "1", "--no-progress", *extra)
    df = pd.read_csv(io.StringIO(r.stdout))
    assert len(df) == 1 and df["error"].isna().all(), r.stdout
    return df.iloc[0]


def sweep_gib(row) -> dict:
    return {"gpu": row["gpu_bytes"] / GiB,
            "host": (row["host_pinned_bytes"] + row["host_pageable_bytes"]) / GiB,
            "nvme": row["nvme_bytes"] / GiB}


@pytest.fixture(scope="module")
def figures():
    memory = cli_json("memory", *SCENARIO, "--json")
    simulate = cli_json("simulate", *SCENARIO, "--json")
    api = tierlab.simulate(**API)
    return {
        "memory": {t: memory["tiers"][t]["used_GiB"] for t in TIERS},
        "memory_fits": memory["fits"],
        "simulate": simulate["memory_GiB"],
        "simulate_plan": {t: simulate["memory_plan"]["tiers"][t]["used_GiB"] for t in TIERS},
        "simulate_fits": simulate["fits"], "simulate_step": simulate["step_time_s"],
        "api": {t: api.memory.tiers[t].used_bytes / GiB for t in TIERS},
        "api_memory": {t: tierlab.memory(**API).tiers[t].used_bytes / GiB for t in TIERS},
        "api_fits": api.fits, "api_step": api.step_time_s,
        "sweep_memory": sweep_gib(sweep_row("--memory-only")),
        "sweep": sweep_row(),
    }


def test_memory_agrees_across_verbs_and_the_api(figures):
    f = figures
    for other in ("simulate", "simulate_plan", "api", "api_memory", "sweep_memory"):
        for tier in TIERS:
            assert f[other][tier] == pytest.approx(f["memory"][tier], rel=1e-12, abs=1e-12), \
                (other, tier)
    sweep = sweep_gib(f["sweep"])
    assert sweep == pytest.approx(f["memory"], rel=1e-12, abs=1e-12)
    assert f["memory_fits"] == f["simulate_fits"] == f["api_fits"] == bool(f["sweep"]["fits"])


def test_step_time_agrees_between_simulate_sweep_and_the_api(figures):
    f = figures
    assert f["simulate_step"] == f["api_step"] == pytest.approx(f["sweep"]["step_time_s"],
                                                                  rel=1e-12)


def test_host_baseline_is_the_fitted_software_profile():
    plan = tierlab.memory(**API)
    assert plan.tiers["host"].breakdown["pageable:process_baseline"] == \
        load_software().process_baseline_bytes


def test_preflight_judges_the_same_plan():
    """Preflight's verdict and figure are memory's: fits -> ok; under a 4 GiB cap both say the
    GPU does not fit, with the same GiB."""
    r = CliRunner().invoke(main, ["preflight", *SCENARIO, "--no-probe"])
    assert r.exit_code == 0 and "ok" in r.stdout, r.output
    capped = cli_json("memory", *SCENARIO, "--gpu-mem-cap", "4GiB", "--json")
    assert not capped["fits"] and not capped["tiers"]["gpu"]["fits"]
    r = CliRunner().invoke(main, ["preflight", *SCENARIO, "--no-probe", "--gpu-mem-cap", "4GiB"])
    assert r.exit_code == 2, r.output
    used = capped["tiers"]["gpu"]["used_GiB"]
    assert f"gpu needs {used:.2f} GiB of 4.00 GiB" in r.output


def test_preflight_no_probe_judges_the_named_hardware():
    """-H NAME --no-probe: the host tier is the profile's RAM, as `memory` and `simulate` say."""
    args = ["-m", "llama-2-7b", "-H", "dgx-2", "-c", "zero3-cpu", "--micro-batch", "1",
            "--seq", "1024"]
    mem = cli_json("memory", *args, "--json")
    r = CliRunner().invoke(main, ["preflight", *args, "--no-probe"])
    assert (r.exit_code == 0) == mem["fits"], r.output


def test_plan_winner_agrees_with_memory_and_simulate(tmp_path):
    """The planner's best config, written out and fed back to `memory` and `simulate`, gives the
    step time, tokens/s and memory the planner reported for it."""
    out = tmp_path / "best.json"
    plan = cli_json("plan", "-m", "tinyllama-1.1b", "-H", "workstation-rtx3070", "--seq", "1024",
                    "--micro-batch", "4", "--json", "-o", str(out))
    best = plan["best"]
    # the written file is the HF Trainer's ("auto" batch sizes): pass the batch it prints
    args = ["-m", "tinyllama-1.1b", "-H", "workstation-rtx3070", "-c", str(out), "--seq", "1024",
            "--micro-batch", str(best["micro_batch"]), "--grad-accum", str(best["grad_accum"])]
    assert plan["trainer_args"][:4] == ["--per_device_train_batch_size", str(best["micro_batch"]),
                                        "--gradient_accumulation_steps", str(best["grad_accum"])]
    if not best["activation_checkpointing"]:
        args.append("--no-checkpointing")
    mem = cli_json("memory", *args, "--json")
    sim = cli_json("simulate", *args, "--json")
    for tier in TIERS:
        assert best["memory"]["tiers"][tier]["used_GiB"] == pytest.approx(
            mem["tiers"][tier]["used_GiB"], rel=1e-12, abs=1e-12), tier
        assert sim["memory_GiB"][tier] == pytest.approx(mem["tiers"][tier]["used_GiB"],
                                                        rel=1e-12, abs=1e-12), tier
    assert best["fits"] == mem["fits"] == sim["fits"]
    assert best["step_time_s"] == pytest.approx(sim["step_time_s"], rel=1e-12)
    assert best["tokens_per_s"] == pytest.approx(sim["tokens_per_s"], rel=1e-12)


def test_one_precision_default():
    """bf16 where the GPU has it, fp16 on a V100 — the same in every verb and the API."""
    assert tierlab.scenario(**API).strategy.precision == "bf16"
    v100 = tierlab.scenario("tinyllama-1.1b", "dgx-2", "zero3-cpu", micro_batch=1, seq=1024)
    assert v100.strategy.precision == "fp16"
    mem = cli_json("memory", "-m", "tinyllama-1.1b", "-H", "dgx-2", "-c", "zero3-cpu",
                   "--micro-batch", "1", "--seq", "1024", "--json")
    assert mem["precision"] == "fp16"


def test_seq_default_is_capped_with_a_note():
    r = CliRunner().invoke(main, ["memory", "-m", "llama-3-8b", "-H", "dgx-a100", "-c",
                                  "zero3-cpu", "--micro-batch", "1"])
    assert r.exit_code == 0, r.output
    assert "note: --seq not given: simulating 4,096 tokens per sequence" in r.stderr
    assert ", seq 4096," in r.stdout
    assert tierlab.scenario("llama-3-8b", "dgx-a100").model.seq_len == 4096
    assert tierlab.scenario("llama-3-8b", "dgx-a100", seq=8192).model.seq_len == 8192
