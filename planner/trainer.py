"""The planner's config as the Hugging Face Trainer takes it (and so axolotl and LLaMA-Factory,
which hand it to the Trainer): "auto" wherever the Trainer fills a value from its arguments, the
arguments to pass, and the launch line.

transformers' HfTrainerDeepSpeedConfig (integrations/deepspeed.py, trainer_config_process and
trainer_config_finalize) fills every "auto" below from TrainingArguments and raises
"Please correct the following DeepSpeed config values that mismatch TrainingArguments" for any of
them written as a number that differs: a written file that pins `lr` is refused as soon as the
user's learning rate is not the planner's. So the written file pins none of them; what the
simulation assumed for the batch, precision and checkpointing is printed as trainer arguments.
"""
from __future__ import annotations

import copy
from typing import Any, Mapping

from tierlab.scenario import get_dotted, set_dotted

TRAINER_FILLED = ("train_batch_size", "train_micro_batch_size_per_gpu",
                  "gradient_accumulation_steps", "gradient_clipping",
                  "optimizer.params.lr", "optimizer.params.betas", "optimizer.params.eps",
                  "optimizer.params.weight_decay",
                  "scheduler.params.warmup_min_lr", "scheduler.params.warmup_max_lr",
                  "scheduler.params.warmup_num_steps", "scheduler.params.total_num_steps")
"""The keys HfTrainerDeepSpeedConfig fills from TrainingArguments (fill_match / fill_only), in
transformers 4.x and 5.x alike; fp16.enabled and bf16.enabled too (trainer_native)."""
PRECISION_FLAGS = {"bf16": "--bf16", "fp16": "--fp16", "fp32": None}
"""TrainingArguments flag that sets fp16/bf16.enabled "auto" for each precision."""


def _present(cfg: Mapping, key: str) -> bool:
    return get_dotted(cfg, key, _MISSING) is not _MISSING


_MISSING = object()


BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


def trainer_native(ds_config: Mapping[str, Any], batch: bool = True) -> dict:
    """`ds_config` with "auto" at every key the HF Trainer fills that it sets (the batch sizes
    always unless not `batch`, gradient_clipping always, the optimizer's and scheduler's
    hyper-parameters), and both fp16.enabled and bf16.enabled "auto" (the Trainer's --bf16/--fp16
    decide). Every other key (ZeRO stage, offload, buckets, aio) stays as the planner chose it."""
    out = copy.deepcopy(dict(ds_config))
    for key in TRAINER_FILLED:
        if key in BATCH_KEYS and not batch:
            continue
        if _present(out, key) or key in (*BATCH_KEYS, "gradient_clipping"):
            set_dotted(out, key, "auto")
    for block in ("bf16", "fp16"):
        out[block] = {**(out.get(block) if isinstance(out.get(block), dict) else {}),
                      "enabled": "auto"}
    return out


def trainer_args(micro_batch: int, grad_accum: int, precision: str,
                 checkpointing: bool) -> list[str]:
    """The TrainingArguments (as command-line flags) that fill the written file's "auto" with
    what was simulated. The learning rate and the rest are yours: the file does not pin them."""
    args = ["--per_device_train_batch_size", str(micro_batch),
            "--gradient_accumulation_steps", str(grad_accum)]
    if PRECISION_FLAGS[precision]:
        args.append(PRECISION_FLAGS[precision])
    if checkpointing:
        args.append("--gradient_checkpointing")
    return args


def launch_line(path: str, gpus_per_node: int, nodes: int, args: list[str] = ()) -> str:
    """`deepspeed --num_gpus 8 train.py --deepspeed FILE ...`; over several nodes with the
    launcher's --hostfile and --num_nodes (HOSTFILE: one `host slots=N` line per node)."""
    where = (f"--hostfile HOSTFILE --num_nodes {nodes} " if nodes > 1 else "")
    return " ".join([f"deepspeed {where}--num_gpus {gpus_per_node} train.py --deepspeed {path}",
                     *args])


def written_lines(result, path: str, config_for: str) -> list[str]:
    """What `plan -o` says: where it wrote (for the Trainer or plain DeepSpeed) and the launch
    line, with the Trainer arguments that fill the file's "auto" as simulated."""
    if config_for == "trainer":
        return [f'wrote {path} for the HF Trainer ("auto" where it fills a value); launch:',
                f"  {result.launch(path)}"]
    return [f"wrote {path} (every value explicit); launch:",
            f"  {launch_line(path, result.gpus_per_node, result.nodes)}"]
