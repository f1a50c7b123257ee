"""`plan --ds-config`: start from the user's config (planner/from_config.py). Real simulator, real
public configs (tests/data/ds_configs)."""
import json
from pathlib import Path

import pytest

from _cli import assert_user_error, run
from tierlab.dsconfig.read import load_ds_config
from tierlab.scenario import machine_and_model, resolve
from tierlab.dsconfig import read as ds_read
from tierlab.planner.from_config import plan_from_config, proposed_config

CORPUS = Path(__file__).parent / "data" / "ds_configs"
FASTCHAT_S3 = str(CORPUS / "fastchat_deepspeed_config_s3.json")   # ZeRO-3, params + opt on CPU


@pytest.fixture(scope="module")
def llama7b_on_a100():
    """Llama-2-7B, 8x A100-80GB, FastChat's ZeRO-3 CPU-offload config, micro-batch 4."""
    hw, mdl, _ = machine_and_model("llama-2-7b", "dgx-a100", seq=2048)
    cfg, where = load_ds_config(FASTCHAT_S3)
    return hw, mdl, cfg, plan_from_config(hw, mdl, cfg, where, micro_batch=4)


def test_yours_is_the_config_as_it_is(llama7b_on_a100):
    hw, mdl, cfg, r = llama7b_on_a100
    v = r.baseline.variant
    assert (v.placement.stage, v.placement.param, v.placement.optimizer) == (3, "cpu", "cpu")
    assert (v.micro_batch, v.grad_accum, v.checkpointing) == (4, 1, True)
    direct = resolve(mdl, hw, cfg, micro_batch=4, seq=2048).simulate()
    assert r.baseline.step_time_s == pytest.approx(direct.step_time_s, rel=1e-9)


def test_changes_lead_from_yours_to_the_best(llama7b_on_a100):
    """A 7B model fits 8x 80 GB without offload: the changes switch offload off, each group is
    simulated, and the last group lands on the planner's best (same global batch)."""
    hw, mdl, cfg, r = llama7b_on_a100
    best = r.plan.best
    assert not best.variant.placement.offloads
    keys = {k: (a, b) for k, a, b in r.changes}
    assert keys["zero_optimization.offload_optimizer.device"] == ("cpu", "none")
    assert keys["zero_optimization.offload_param.device"] == ("cpu", "none")
    assert all(k.startswith(("zero_optimization.", "train_", "gradient_", "aio.",
                             "activation checkpointing")) for k in keys), keys
    assert r.steps[-1].candidate.tokens_per_s == pytest.approx(best.tokens_per_s, rel=1e-9)
    assert best.variant.micro_batch * best.variant.grad_accum == 4      # the global batch kept
    assert best.tokens_per_s > r.baseline.tokens_per_s * 1.2


def test_written_config_keeps_auto_and_is_the_best(llama7b_on_a100, tmp_path):
    hw, mdl, cfg, r = llama7b_on_a100
    out, told = proposed_config(cfg, r)
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu",
                "gradient_accumulation_steps"):
        assert out[key] == "auto"
    assert out["fp16"]["enabled"] == "auto"
    assert out["zero_optimization"]["stage3_prefetch_bucket_size"] == 5e8   # untouched
    ds_read.read(out, "proposed")                         # DeepSpeed 0.19.8 accepts it
    b = r.plan.best.variant
    s = resolve(mdl, hw, out, micro_batch=b.micro_batch, grad_accum=b.grad_accum, seq=2048,
                checkpointing=b.checkpointing).strategy
    assert (s.zero.stage, s.param_device, s.optimizer_device) == (
        b.placement.stage, b.placement.param, b.placement.optimizer)
    for key, value in b.knobs:
        node = s.zero if key.startswith("zero_optimization.") else s.aio
        assert getattr(node, key.split(".")[-1]) == value, key
    if b.micro_batch != 4:
        assert f"pass --per_device_train_batch_size {b.micro_batch}" in " ".join(told)


def test_planning_from_the_proposal_keeps_it(llama7b_on_a100, tmp_path):
    """Round trip: the written config, planned again, is already the best."""
    hw, mdl, cfg, r = llama7b_on_a100
    out, _ = proposed_config(cfg, r)
    b = r.plan.best.variant
    again = plan_from_config(hw, mdl, out, "proposed", micro_batch=b.micro_batch,
                             grad_accum=b.grad_accum, checkpointing=b.checkpointing)
    assert not again.steps and any("Keep your config" in n for n in again.notes)


def test_legacy_and_alias_keys_are_rewritten_the_way_deepspeed_reads_them():
    """cpu_offload (deprecated) becomes the offload_optimizer block it stands for when the
    proposal changes it; an alias stays the user's spelling."""
    hw, mdl, _ = machine_and_model("tinyllama-1.1b", "dgx-a100", seq=1024)
    cfg = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
           "bf16": {"enabled": "auto"},
           "zero_optimization": {"stage": 3, "cpu_offload": True, "max_live_parameters": 1e9}}
    r = plan_from_config(hw, mdl, cfg, "legacy.json", micro_batch=2)
    out, _ = proposed_config(cfg, r)
    zero = out["zero_optimization"]
    assert "cpu_offload" not in zero and zero["offload_optimizer"]["device"] == "none"
    assert "stage3_max_live_parameters" not in zero and "max_live_parameters" in zero
    ds_read.read(out, "proposed")


def test_cli_plan_from_config(tmp_path):
    out = tmp_path / "proposed.json"
    r = run("plan", "-m", "llama-2-7b", "-H", "dgx-a100", "--seq", "2048", "-c", FASTCHAT_S3,
            "--micro-batch", "4", "--write-config", str(out))
    assert r.exit_code == 0, r.output
    assert "what to change (dotted DeepSpeed keys, yours -> proposed)" in r.output
    assert "zero_optimization.offload_param.device: cpu -> none" in r.output
    assert r.output.splitlines()[1].startswith("yours:    ZeRO-3, params + optimizer on CPU")
    written = json.loads(out.read_text())
    assert written["train_micro_batch_size_per_gpu"] == "auto"
    assert written["zero_optimization"]["offload_param"]["device"] == "none"
    r = run("plan", "-m", "llama-2-7b", "-H", "dgx-a100", "--seq", "2048", "-c", FASTCHAT_S3,
            "--micro-batch", "4", "--json")
    doc = json.loads(r.output)
    assert doc["yours"]["offload_param"] == "cpu" and doc["changes"][0]["keys"]


def test_cli_plan_from_config_bad_input(tmp_path):
    out = tmp_path / "proposed.json"
    assert_user_error(run("plan", "--write-config", str(out)), "--write-config needs --ds-config")
    bad = CORPUS / "hf_tests_zero3.json"          # reduce_bucket_size 0: DeepSpeed refuses it
    assert_user_error(run("plan", "-c", str(bad), "--write-config", str(out)),
                      "zero_optimization.reduce_bucket_size", "must be > 0")
    assert not out.exists()


def test_a_block_deepspeed_ignores_at_your_stage_is_not_carried_into_the_proposal():
    """Stage 2 ignores offload_param: yours keeps it as written, and a stage-3 proposal says
    what it means for it (not the stale 'cpu' DeepSpeed would then apply)."""
    hw, mdl, _ = machine_and_model("llama-2-7b", "dgx-a100", seq=2048)
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
           "bf16": {"enabled": True},
           "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},
                                 "offload_param": {"device": "cpu"}}}
    r = plan_from_config(hw, mdl, cfg, "mine.json", checkpointing=True)
    b = r.plan.best.variant
    out, _ = proposed_config(cfg, r)
    s = resolve(mdl, hw, out, micro_batch=b.micro_batch, grad_accum=b.grad_accum, seq=2048,
                checkpointing=True).strategy
    assert (s.zero.stage, s.param_device, s.optimizer_device) == (
        b.placement.stage, b.placement.param, b.placement.optimizer)


def test_bucket_auto_stays_where_hf_fills_the_proposed_value():
    """From stage 2 to stage 3, "auto" stage3_* buckets become what HF fills at stage 3: the
    written file keeps "auto" (a number only where the proposal differs from HF's fill)."""
    hw, mdl, _ = machine_and_model("llama-2-7b", "dgx-a100", seq=2048)
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
           "bf16": {"enabled": True},
           "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},
                                 "reduce_bucket_size": "auto",
                                 "stage3_prefetch_bucket_size": "auto",
                                 "stage3_param_persistence_threshold": "auto"}}
    r = plan_from_config(hw, mdl, cfg, "mine.json", checkpointing=True)
    out, _ = proposed_config(cfg, r)
    zero, changed = out["zero_optimization"], dict((k, b) for k, _, b in r.changes)
    for key in ("reduce_bucket_size", "stage3_prefetch_bucket_size",
                "stage3_param_persistence_threshold"):
        filled = {"reduce_bucket_size": 4096 * 4096,
                  "stage3_prefetch_bucket_size": int(0.9 * 4096 * 4096),
                  "stage3_param_persistence_threshold": 40960}[key]
        new = changed.get(f"zero_optimization.{key}", filled)
        assert zero[key] == ("auto" if new == filled else new), key
    assert "overlap_comm" not in zero     # unset: DeepSpeed's default follows the stage


def test_yours_and_the_proposal_carry_their_80_percent_ranges(llama7b_on_a100):
    """`plan --ds-config` states how sure it is of both ends of the advice: the JSON has
    step_time_range_s and tokens_per_s_range for yours and the best, the text shows them."""
    from tierlab.planner.from_config import format_from_config

    *_, r = llama7b_on_a100
    d = r.to_dict()
    for c in (d["yours"], d["plan"]["best"]):
        lo, hi = c["step_time_range_s"]
        assert lo < c["step_time_s"] < hi
        tlo, thi = c["tokens_per_s_range"]
        assert tlo < c["tokens_per_s"] < thi
        assert tlo == pytest.approx(c["tokens_per_s"] * c["step_time_s"] / hi)
    text = format_from_config(r)
    yours = next(line for line in text.splitlines() if line.startswith("yours:"))
    lo, hi = d["yours"]["step_time_range_s"]
    assert f"s/step ({lo:.2f}-{hi:.2f})" in yours


@pytest.mark.lab
def test_a_config_without_optimizer_block_trains_deepspeeds_adamw():
    """FastChat's and LLaMA-Factory's configs leave the optimizer to the HF Trainer; DeepSpeed
    alone would assert (ZeRO-2) or build an inference engine (ZeRO-3). tierlab simulates and
    runs DeepSpeed's AdamW and says so."""
    from tierlab.runner.ds_config import runner_ds_config
    from tierlab.sim.strategy import NO_OPTIMIZER_BLOCK

    cfg, where = load_ds_config(FASTCHAT_S3)
    assert "optimizer" not in cfg
    sc = resolve("tinyllama-1.1b", "h200-host", cfg, micro_batch=4, seq=1024, where=where)
    assert sc.strategy.raw["optimizer"] == NO_OPTIMIZER_BLOCK
    assert runner_ds_config(sc.strategy)["optimizer"]["type"] == "AdamW"
    assert any("no optimizer block" in w and "AdamW" in w for w in sc.warnings)
    with_block = resolve("tinyllama-1.1b", "h200-host", "zero3-cpu", micro_batch=4, seq=1024)
    assert not any("no optimizer block" in w for w in with_block.warnings)
