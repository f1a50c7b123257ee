"""Issue 29: the runner trains what it says. A random init (and local weights) gives the same
model at ZeRO-0/1/2/3, tied or untied embeddings, so step 0's loss sits at a random init's
ln V + hidden x 0.02^2 / 2 at every stage; a run whose own loss looks broken says so in its
summary and in `compare`'s table; `compare` interrupted keeps its finished rows."""
import json
import math
import os
import subprocess
import sys
import textwrap

import pytest

from _runnerhelp import REPO, run_cli, sets
from tierlab.errors import Interrupted
from tierlab.records.measurement import (Measurement, MeasurementWriter, StepRecord,
                                         expected_initial_loss, load_measurement, loss_warnings)
from tierlab.runner import compare

VOCAB, HIDDEN = 1024, 128


def tiny_yaml(path, tied: bool) -> str:
    """A Llama small enough for eight DeepSpeed engines in one process on two CPU cores."""
    path.write_text(textwrap.dedent(f"""\
        kind: model
        name: tiny-{'tied' if tied else 'untied'}
        source: "tierlab test model (tests/test_runner_init.py)"
        n_layers: 2
        hidden: {HIDDEN}
        ffn: 384
        n_heads: 4
        n_kv_heads: 4
        vocab: {VOCAB}
        seq_len: 64
        max_seq_len: 128
        gated_mlp: true
        tie_embeddings: {'true' if tied else 'false'}
        norm: rmsnorm
        """))
    return str(path)


# One process, real DeepSpeed on the CPU: for each (model, stage, weights) the runner's own
# setup_engine and batches, two optimizer steps; prints one JSON line of losses per engine.
ENGINES = textwrap.dedent("""
    import json, sys
    from tierlab.runner.launch import ensure_dist_env
    ensure_dist_env()
    from tierlab.profiles.load import load_model
    from tierlab.runner.model import build_model
    from tierlab.runner.train import RunSpec, make_spec_batches, setup_engine, train_steps
    from dataclasses import asdict
    jobs = json.loads(sys.argv[1])
    for job in jobs:
        model = asdict(load_model(job["model"]))
        ds = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
              "train_batch_size": 2, "bf16": {"enabled": True}, "gradient_clipping": 1.0,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
              "zero_optimization": {"stage": job["stage"]}}
        if job.get("save"):              # local weights: the stage-0 random init, saved
            build_model(load_model(job["model"]), ds_config=ds, precision="bf16",
                        seq_len=64).save_pretrained(job["save"])
            continue
        spec = RunSpec(model=model, ds_config=ds, precision="bf16", micro_batch=2, seq=64,
                       steps=2, out_dir="unused", model_path=job.get("path"), seed=7)
        engine, n = setup_engine(spec)
        losses = []
        train_steps(engine, make_spec_batches(spec), steps=2, grad_accum=1, breakdown=False,
                    on_step=lambda step, wall, loss, phases: losses.append(float(loss)))
        print("RESULT " + json.dumps({**job, "n_params": n, "losses": losses}), flush=True)
""")


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    d = tmp_path_factory.mktemp("init")
    models = {"tied": tiny_yaml(d / "tied.yaml", True), "untied": tiny_yaml(d / "untied.yaml", False)}
    jobs = [{"model": models[t], "tie": t, "stage": s} for t in models for s in (0, 1, 2, 3)]
    for t in models:                     # --model-path: saved weights, loaded at stage 0 and 3
        jobs.append({"model": models[t], "tie": t, "stage": 0, "save": str(d / f"w-{t}")})
        jobs += [{"model": models[t], "tie": t, "stage": s, "path": str(d / f"w-{t}")}
                 for s in (0, 3)]
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    r = subprocess.run([sys.executable, "-c", ENGINES, json.dumps(jobs)], capture_output=True,
                       text=True, timeout=400, env=env, cwd=REPO)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    out = [json.loads(x[7:]) for x in r.stdout.splitlines() if x.startswith("RESULT ")]
    assert len(out) == len(jobs) - 2
    return out


def pick(rows, tie, path=False):
    return {r["stage"]: r for r in rows if r["tie"] == tie and bool(r.get("path")) == path}


@pytest.mark.slow
@pytest.mark.parametrize("tie", ["tied", "untied"])
def test_random_init_loss_is_ln_vocab_at_every_stage(engines, tie):
    by_stage = pick(engines, tie)
    assert sorted(by_stage) == [0, 1, 2, 3]
    want = expected_initial_loss(VOCAB, HIDDEN)      # ln 1024 + 128 x 0.02^2 / 2 = 6.957
    for stage, r in by_stage.items():
        first = r["losses"][0]
        assert abs(first - math.log(VOCAB)) < 0.5, (stage, first)     # the bar
        assert abs(first - want) < 0.1, (stage, first)
    # the same seed draws the same weights at every stage: step 0 agrees to bf16 noise
    # (the broken ZeRO-3 init gave 247 tied; torch's default init ~0.2 above untied)
    firsts = [r["losses"][0] for r in by_stage.values()]
    assert max(firsts) - min(firsts) < 0.01, firsts
    seconds = [r["losses"][1] for r in by_stage.values()]
    assert max(seconds) - min(seconds) < 0.02, seconds
    assert len({r["n_params"] for r in by_stage.values()}) == 1


@pytest.mark.slow
def test_tied_models_share_the_embedding_at_every_stage(engines):
    tied, untied = pick(engines, "tied"), pick(engines, "untied")
    # 1024 x 128 = 131072 parameters fewer with the lm_head tied to the embedding
    assert {r["n_params"] for r in untied.values()} == {tied[0]["n_params"] + VOCAB * HIDDEN}


@pytest.mark.slow
@pytest.mark.parametrize("tie", ["tied", "untied"])
def test_model_path_loads_the_same_weights_at_stage_0_and_3(engines, tie):
    loaded, drawn = pick(engines, tie, path=True), pick(engines, tie)
    assert sorted(loaded) == [0, 3]
    for stage, r in loaded.items():
        # the saved stage-0 init (seed 0) is not the seed-7 random init of the other runs
        assert abs(r["losses"][0] - drawn[0]["losses"][0]) > 1e-4
        assert abs(r["losses"][0] - expected_initial_loss(VOCAB, HIDDEN)) < 0.1
    assert abs(loaded[0]["losses"][0] - loaded[3]["losses"][0]) < 0.01


@pytest.mark.slow
def test_tierlab_run_zero3_tied_tiny_llama_checks_its_own_loss(tmp_path):
    """The issue's bar: `tierlab run` ZeRO-3 on a tied tiny Llama (no offload: no CPU Adam
    build in this test; the offload presets train the same init, test_runner_train.py)."""
    out = tmp_path / "m"
    r = run_cli("run", "-m", tiny_yaml(tmp_path / "tied.yaml", True), "-c", "no-offload",
                "--micro-batch", "2", "--seq", "64", "--steps", "2", "--warmup-steps", "1",
                "-q", "--no-progress", "--out", str(out), *sets("zero_optimization.stage=3"))
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    m = load_measurement(out)
    assert abs(m.steps[0].loss - math.log(VOCAB)) < 1.5
    assert m.summary["warnings"] == []


# ---- the loss check (no DeepSpeed) ------------------------------------------------------------

def steps(*losses):
    return [StepRecord(step=i, wall_s=1.0, timing="wall", loss=x, tokens=128)
            for i, x in enumerate(losses)]


MODEL = {"vocab": 32000, "hidden": 2048}


@pytest.mark.lab
def test_expected_initial_loss_is_tinyllamas_measured_one():
    # TinyLlama-1.1B measured 10.785 at stages 0, 2 and 3 (lab/exercise-h200-a)
    assert expected_initial_loss(32000, 2048) == pytest.approx(10.785, abs=0.01)
    assert expected_initial_loss(128256, 3072) == pytest.approx(12.371, abs=0.01)   # Llama-3B


def test_loss_check_flags_a_broken_init_and_a_non_finite_loss():
    assert loss_warnings(MODEL, {}, steps(10.79, 10.6)) == []
    broken = loss_warnings(MODEL, {}, steps(2533.0, 2530.0))
    assert len(broken) == 1 and "step-0 loss 2533.00" in broken[0] and "10.78" in broken[0]
    assert loss_warnings(MODEL, {}, steps(12.3))                   # 1.52 above: flagged
    assert not loss_warnings(MODEL, {}, steps(12.2))               # 1.42 above: not
    nan = loss_warnings(MODEL, {}, steps(10.79, math.nan, math.inf))
    assert nan == ["non-finite loss at step 1 (2 of 3 steps)"]
    # local weights may start anywhere: only non-finite losses count
    assert loss_warnings(MODEL, {"model_path": "/w"}, steps(2.1)) == []
    assert loss_warnings(MODEL, {"model_path": "/w"}, steps(math.nan))
    assert loss_warnings(MODEL, {}, []) == []


def test_summary_records_the_warning_and_compare_shows_it(tmp_path):
    m = Measurement(run_id="r", model=MODEL, run={})
    w = MeasurementWriter(tmp_path / "m", m)
    for rec in steps(2533.0, 2531.0, 2530.0):
        w.append(rec)
    w.close("ok", warmup_steps=1)
    back = load_measurement(tmp_path / "m")
    assert len(back.summary["warnings"]) == 1
    assert json.loads((tmp_path / "m" / "summary.json").read_text())["warnings"]
    row = compare.row("zero3-cpu", back)
    assert row["warnings"] == back.summary["warnings"]
    table = compare.format_table([row, compare.row("fine", Measurement(run_id="f", status="ok"))])
    assert "ok!" in table.splitlines()[1]
    assert table.splitlines()[-1].startswith("! zero3-cpu: step-0 loss 2533.00")
    assert "step-0 loss 2533.00" in compare.rows_to_csv([row])


def test_compare_checks_runs_recorded_before_the_check(tmp_path):
    """A committed run without `warnings` in its summary is checked from its steps."""
    m = Measurement(run_id="old", status="ok", model=MODEL, run={}, steps=steps(750.0),
                    summary={"step_time_s": {"median": 1.0}})
    assert compare.row("old", m)["warnings"] and not compare.row(
        "ok", Measurement(run_id="o", status="ok", model=MODEL, steps=steps(10.8)))["warnings"]


def test_an_interrupted_comparison_keeps_its_finished_rows(tmp_path):
    from test_runner_compare import ok, planned

    ok.limits = []
    stopped = Measurement(run_id="z3", status="interrupted", reason="received SIGINT after 2 steps",
                          model=MODEL, steps=steps(10.8, 10.7))

    def variant(spec, limit):
        if spec.label == "zero3-cpu":
            raise Interrupted(2, partial=stopped)      # what run_variant raises on Ctrl-C
        return ok(spec, limit)

    with pytest.raises(Interrupted) as e:
        compare.run_comparison(planned(tmp_path, "no-offload", "zero3-cpu", "zero3-nvme"),
                               preflight=False, train=variant)
    rows = e.value.partial
    assert [(r["variant"], r["status"]) for r in rows] == [
        ("no-offload", "ok"), ("zero3-cpu", "interrupted"), ("zero3-nvme", "skipped")]
    assert rows[2]["reason"] == "interrupted (SIGINT)" and e.value.signum == 2


@pytest.mark.lab
def test_docs_exercise_table_is_the_committed_runs(capsys):
    """lab/notes/exercise.md quotes bench/exercise_table.py's output from lab/cases exactly."""
    import exercise_table as mod        # bench/ (tests/conftest.py puts it on sys.path)

    assert mod.main([]) == 0
    table = capsys.readouterr().out.rstrip("\n")
    doc = (REPO / "lab" / "notes" / "exercise.md").read_text()
    quoted = doc.split("<!-- exercise-table -->\n")[1].split("\n<!-- /exercise-table -->")[0]
    assert quoted == table
    assert "| zero2-cpu | OOM (predicted: OOM (gpu))" in table      # Llama-3B: ZeRO-2 is not enough


@pytest.mark.lab
def test_readme_exercise_table_is_the_committed_runs(capsys):
    """README.md's exercise table (TinyLlama's rows, measured (predicted)) quotes the same
    figures as bench/exercise_table.py prints from lab/cases, cell for cell."""
    import exercise_table as mod

    assert mod.main([]) == 0
    tiny = capsys.readouterr().out.split("Llama-3B")[0]
    readme = (REPO / "README.md").read_text().split("## The exercise")[1].split("\n## ")[0]
    rows = [line for line in readme.splitlines() if line.startswith("| ") and "(" in line
            and "OOM" not in line]
    assert len(rows) == 4, rows
    for row in rows:
        cells = " | ".join(c.strip() for c in row.strip("|").split("|")[1:])
        assert f"| {cells} |" in tiny, (row, tiny)
