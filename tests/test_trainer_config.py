"""`plan -o` writes a config the Hugging Face Trainer takes whatever the user's TrainingArguments
(planner/trainer.py): transformers' own HfTrainerDeepSpeedConfig fills it and finds no mismatch;
the simulator reads the same file back; the launch line names the nodes."""
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tierlab.planner.search import plan
from tierlab.planner.trainer import TRAINER_FILLED, launch_line, trainer_native
from tierlab.profiles.load import load_hardware, load_model
from tierlab.scenario import resolve

from _cli import run

WS = "workstation-rtx3070"
ARGS = ("-m", "tinyllama-1.1b", "--seq", "1024", "--global-batch", "16", "--max-gpu-mem",
        "7GiB", "--checkpointing", "--no-progress")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan") / "ds_config.json"
    r = run("plan", *ARGS, "-o", str(out))
    assert r.exit_code == 0, r.output
    return out, r.output


def _dotted(cfg, key):
    for part in key.split("."):
        cfg = cfg[part]
    return cfg


def test_the_written_file_pins_nothing_the_trainer_fills(written):
    cfg = json.loads(written[0].read_text())
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu",
                "gradient_accumulation_steps", "gradient_clipping", "optimizer.params.lr",
                "optimizer.params.betas", "optimizer.params.eps",
                "optimizer.params.weight_decay", "fp16.enabled", "bf16.enabled"):
        assert _dotted(cfg, key) == "auto", key
    assert cfg["zero_optimization"]["offload_optimizer"]["device"] == "cpu"   # the plan's choice
    assert cfg["optimizer"]["type"] == "AdamW"   # DeepSpeed's optimizer (CPU Adam when offloaded)


def test_the_launch_line_passes_what_was_simulated(written):
    out, text = written
    line = next(l.strip() for l in text.splitlines() if l.strip().startswith("deepspeed "))
    assert line.startswith(f"deepspeed --num_gpus 1 train.py --deepspeed {out} ")
    words = line.split()
    mb = int(words[words.index("--per_device_train_batch_size") + 1])
    gas = int(words[words.index("--gradient_accumulation_steps") + 1])
    assert mb * gas == 16 and "--bf16" in words and "--gradient_checkpointing" in words


def test_hf_trainer_accepts_it_with_a_learning_rate_of_its_own(written, tmp_path):
    transformers = pytest.importorskip("transformers", reason="transformers not installed")
    pytest.importorskip("deepspeed", reason="deepspeed not installed")
    pytest.importorskip("accelerate", reason="accelerate not installed")
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), learning_rate=3e-4, adam_beta1=0.85, adam_beta2=0.97,
        adam_epsilon=1e-6, weight_decay=0.1, max_grad_norm=0.5, per_device_train_batch_size=2,
        gradient_accumulation_steps=8, report_to=[], use_cpu=True)
    ds = HfTrainerDeepSpeedConfig(str(written[0]))
    ds.trainer_config_process(args)
    model = SimpleNamespace(config=SimpleNamespace(hidden_size=2048))
    ds.trainer_config_finalize(args, model, num_training_steps=100)   # raises on a mismatch
    assert ds.mismatches == []
    cfg = ds.config
    assert cfg["optimizer"]["params"]["lr"] == 3e-4
    assert cfg["optimizer"]["params"]["betas"] == [0.85, 0.97]
    assert cfg["gradient_clipping"] == 0.5
    assert cfg["train_micro_batch_size_per_gpu"] == 2 and cfg["train_batch_size"] == 16


def test_a_pinned_value_would_have_been_refused(tmp_path):
    """The control: the same check refuses the planner's explicit config (it pins lr)."""
    transformers = pytest.importorskip("transformers", reason="transformers not installed")
    pytest.importorskip("deepspeed", reason="deepspeed not installed")
    pytest.importorskip("accelerate", reason="accelerate not installed")
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    r = plan(load_hardware(WS), load_model("tinyllama-1.1b", seq_len=1024), global_batch=16,
             micro_batch=2, checkpointing=True, max_gpu_mem_bytes=7 * 2**30)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), learning_rate=3e-4,
                                          per_device_train_batch_size=2,
                                          gradient_accumulation_steps=8, report_to=[],
                                          use_cpu=True)
    ds = HfTrainerDeepSpeedConfig(dict(r.ds_config))
    ds.trainer_config_process(args)
    with pytest.raises(ValueError, match="mismatch"):
        ds.trainer_config_finalize(args, SimpleNamespace(config=SimpleNamespace(
            hidden_size=2048)), num_training_steps=100)
    native = HfTrainerDeepSpeedConfig(r.trainer_config)
    native.trainer_config_process(args)
    assert not native.mismatches


def test_the_simulator_reads_the_written_file(written):
    cfg = json.loads(written[0].read_text())
    m = load_model("tinyllama-1.1b", seq_len=1024)
    sc = resolve(m, load_hardware(WS), cfg, micro_batch=2, grad_accum=8, seq=1024)
    s = sc.strategy
    assert (s.zero.stage, s.optimizer_device) == (3, "cpu")
    assert s.train_batch_size == 16 and s.precision == "bf16"
    r = run("simulate", "-m", "tinyllama-1.1b", "-c", str(written[0]), "--micro-batch", "2",
            "--grad-accum", "8", "--seq", "1024", "-q")
    assert r.exit_code == 0, r.output


def test_trainer_native_keeps_the_planners_choices_and_scheduler_autos():
    cfg = {"train_batch_size": 16, "gradient_clipping": 1.0, "bf16": {"enabled": True},
           "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 1e-4,
                                                        "warmup_num_steps": 10}},
           "zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8}}
    out = trainer_native(cfg)
    assert out["scheduler"]["params"] == {"warmup_max_lr": "auto", "warmup_num_steps": "auto"}
    assert out["fp16"] == {"enabled": "auto"} and out["bf16"] == {"enabled": "auto"}
    assert out["zero_optimization"] == cfg["zero_optimization"]
    assert "optimizer" not in out           # nothing invented
    assert cfg["bf16"] == {"enabled": True}     # the input is not changed
    assert all(k.count(".") <= 2 for k in TRAINER_FILLED)


def test_config_for_deepspeed_writes_every_value(tmp_path):
    out = tmp_path / "explicit.json"
    r = run("plan", *ARGS, "-o", str(out), "--config-for", "deepspeed")
    assert r.exit_code == 0, r.output
    cfg = json.loads(out.read_text())
    assert isinstance(cfg["train_micro_batch_size_per_gpu"], int)
    assert isinstance(cfg["optimizer"]["params"]["lr"], float)
    assert "every value explicit" in r.output


def test_multi_node_launch_line():
    assert launch_line("c.json", 8, 2, ["--bf16"]) == (
        "deepspeed --hostfile HOSTFILE --num_nodes 2 --num_gpus 8 train.py --deepspeed c.json "
        "--bf16")
    assert launch_line("c.json", 8, 1) == "deepspeed --num_gpus 8 train.py --deepspeed c.json"


def test_write_config_from_a_preset_keeps_no_number_of_ours(tmp_path):
    """plan -c PRESET --write-config: the preset's lr/betas/clipping become "auto"; a user's own
    file keeps what the user wrote (never pinned by tierlab, never unpinned either)."""
    out = tmp_path / "proposed.json"
    r = run("plan", "-m", "tinyllama-1.1b", "--seq", "1024", "-c", "zero2-cpu", "--micro-batch",
            "2", "--grad-accum", "8", "--checkpointing", "--max-gpu-mem", "7GiB",
            "--no-progress", "--write-config", str(out))
    assert r.exit_code == 0, r.output
    cfg = json.loads(out.read_text())
    assert cfg["optimizer"]["params"]["lr"] == "auto" and cfg["gradient_clipping"] == "auto"
    assert 'written "auto": your TrainingArguments fill them' in r.output
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({**json.loads(
        (Path(__file__).parents[1] / "profiles/configs/zero2-cpu.json").read_text()),
        "_description": "mine"}))
    out2 = tmp_path / "proposed2.json"
    r = run("plan", "-m", "tinyllama-1.1b", "--seq", "1024", "-c", str(mine), "--micro-batch",
            "2", "--grad-accum", "8", "--checkpointing", "--max-gpu-mem", "7GiB",
            "--no-progress", "--write-config", str(out2))
    assert r.exit_code == 0, r.output
    assert json.loads(out2.read_text())["optimizer"]["params"]["lr"] == 1e-4
