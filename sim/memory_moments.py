"""The moments runs die at outside the training step: checkpoint save, 16-bit model save, model
load and checkpoint load (resume). Host RAM of the node that holds global rank 0, the one that
peaks (rank 0 writes the model files and, under ZeRO-3, reads the weights).

Each moment is the host RAM resident then, from DeepSpeed 0.19.8's and transformers 5's code:
- checkpoint save, runtime/engine.py `save_checkpoint` -> `_save_checkpoint` (data-parallel rank 0
  writes the model-states file: `module_state_dict`, plus the optimizer's state at stage 0) and
  `_save_zero_checkpoint` (every rank writes its shard: `optimizer.state_dict()`, flat fp32
  master + Adam m, v). torch.save copies each GPU storage to the host one at a time before writing
  it (torch/serialization.py `_save`: `storage.cpu()` per storage), so a GPU-resident state adds
  its largest storage; an offloaded one is written from where it lies (nothing added). NVMe
  optimizer state is released between steps (swap_tensor/optimizer_utils.py `release_memory`:
  `.data = torch.Tensor()`) and `save_checkpoint` copies its swap files with `shutil.copytree`
  (disk to disk). The training buffers are still allocated: the step's host items stay.
- 16-bit model save, engine.py `save_16bit_model` (what the HF Trainer's `save_model` calls with
  ZeRO-3): with `stage3_gather_16bit_weights_on_model_save` true,
  `_zero3_consolidated_16bit_state_dict` gathers module by module and keeps every parameter on
  rank 0's host (`param.detach().cpu()`, a tied weight once): 2 B x params. False: nothing is
  written (the consolidated model comes later from zero_to_fp32.py, offline). Stages 0-2:
  `module_state_dict` on the GPU, staged one tensor at a time (the largest parameter).
- model load, before `deepspeed.initialize`: transformers modeling_utils.py `_load_pretrained_model`
  under ZeRO-3 (`is_deepspeed_zero3_enabled`, the HF integration's zero.Init): rank 0 loads every
  checkpoint file with `map_location="cpu"`, the others on "meta" (the whole model once, in its
  dtype), each rank's zero.Init partitions land on the host when parameters are offloaded.
  Stages 0-2: each rank materialises the whole model on the CPU (then `deepspeed.initialize` moves
  it to the GPU). Only the processes' baseline otherwise: DeepSpeed's buffers do not exist yet.
- checkpoint load (resume), engine.py `load_checkpoint` -> `_load_checkpoint` (every rank loads the
  model-states file through state_dict_factory.py SDLoader, `map_location=lambda storage, loc:
  storage`: on the CPU; the whole 16-bit model at stages 0-2, placeholders at ZeRO-3) then
  `_load_zero_checkpoint` -> `_get_all_zero_checkpoint_state_dicts` (its own shard,
  `map_location='cpu'`, unless `elastic_checkpoint`: 12 B x partition). The first is released
  before the second is read; the engine's buffers exist: the step's host items stay.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from tierlab.profiles.schema import Hardware, Model
from tierlab.sim.layout import n_params, param_layout
from tierlab.sim.strategy import Strategy
from tierlab.units import fmt_gib, gib, gib_dict

LABELS = {"checkpoint_save": "checkpoint save", "model_save_16bit": "16-bit model save",
          "model_load": "model load", "checkpoint_load": "checkpoint load (resume)"}
"""The moments, in the order a run meets them at its end and next start."""


@dataclass(frozen=True, kw_only=True)
class Moment:
    """Host RAM of rank 0's node at one moment outside the step."""

    name: str
    """A key of LABELS."""
    used_bytes: float
    capacity_bytes: float
    headroom_bytes: float = 0.0
    breakdown: Mapping[str, float] = field(default_factory=dict)
    """Item -> bytes (the step's host items kept are summed as 'training_host_items')."""
    note: str = ""

    @property
    def label(self) -> str:
        return LABELS[self.name]

    @property
    def fits(self) -> bool:
        return self.used_bytes <= self.capacity_bytes - self.headroom_bytes

    def line(self) -> str:
        """'checkpoint save: host peak 1,842.56 GiB of 1,769.52 GiB usable (NO); ...'."""
        usable = self.capacity_bytes - self.headroom_bytes
        extra = {k: v for k, v in self.breakdown.items() if k != "training_host_items" and v}
        what = ", ".join(f"{k} {fmt_gib(v)}" for k, v in extra.items())
        return (f"{self.label}: host peak {fmt_gib(self.used_bytes)} of {fmt_gib(usable)} "
                f"usable -> {'fits' if self.fits else 'does NOT fit'}"
                + (f" ({what})" if what else "") + (f"; {self.note}" if self.note else ""))

    def to_dict(self) -> dict:
        return {"host_peak_GiB": gib(self.used_bytes), "usable_GiB":
                gib(self.capacity_bytes - self.headroom_bytes), "fits": self.fits,
                "breakdown_GiB": gib_dict(self.breakdown), "note": self.note}


def save_items(hw: Hardware, model: Model, strategy: Strategy) -> tuple[dict[str, float], str]:
    """Host bytes `save_checkpoint` adds on rank 0's node, by item, and a note.
    E.g. TinyLlama ZeRO-2 without offload on 1 GPU: the flat fp32 partition, 1.1e9 x 4 B = 4.1 GiB."""
    z, n, ranks = strategy.zero, n_params(model), hw.gpus_per_node
    lay = param_layout(model, strategy, strategy.data_parallel_size)
    if z.stage == 0:
        # rank 0's model-states file holds FP16_Optimizer's flat fp32 master and m, v too: the
        # largest storage staged is one flat fp32 tensor of the whole model (4 B x n)
        return {"staged_fp32_flat": 4.0 * n}, ""
    note, shard = "", 0.0
    if strategy.optimizer_device == "none":
        # every rank stages its largest optimizer storage: stage 1/2 the flat fp32 partition,
        # ZeRO-3 one sub-group's fp32 flat (m and v are the same size, written after it)
        flat = lay.partition_numel if z.stage < 3 else min(z.sub_group_size, lay.partition_numel)
        shard = 4.0 * flat
    elif strategy.optimizer_device == "nvme":
        note = "the NVMe optimizer files are copied disk to disk (shutil.copytree)"
    # the model-states file (rank 0): stages 1/2 the 16-bit module, staged tensor by tensor;
    # ZeRO-3's module state is placeholders. The shard is written after it: the larger counts
    module = float(strategy.bytes_per_param * max(lay.numels)) if z.stage < 3 else 0.0
    return {"staged_rank0": max(module, shard), "staged_other_ranks": shard * (ranks - 1)}, note


def save_16bit_items(hw: Hardware, model: Model, strategy: Strategy
                     ) -> tuple[dict[str, float], str]:
    """Host bytes `save_16bit_model` adds on rank 0's node. Llama-2-70B ZeRO-3 with
    stage3_gather_16bit_weights_on_model_save: 68.98e9 x 2 B = 128.5 GiB on rank 0."""
    z, b = strategy.zero, strategy.bytes_per_param
    if z.stage == 3:
        if not z.stage3_gather_16bit_weights_on_model_save:
            return {}, ("stage3_gather_16bit_weights_on_model_save is false: no 16-bit model is "
                        "written (zero_to_fp32.py consolidates offline)")
        return {"consolidated_16bit_model_rank0": float(b * n_params(model))}, ""
    lay = param_layout(model, strategy, strategy.data_parallel_size)
    return {"staged_largest_param": float(b * max(lay.numels))}, ""


def load_items(hw: Hardware, model: Model, strategy: Strategy) -> dict[str, float]:
    """Host bytes of the weights `from_pretrained` holds on rank 0's node (before
    deepspeed.initialize). TinyLlama ZeRO-2 on 8 GPUs: 8 ranks x 1.1e9 x 2 B = 16.4 GiB; under
    ZeRO-3 rank 0 alone: 2.05 GiB, plus each rank's offloaded zero.Init partition."""
    b, n, ranks = strategy.bytes_per_param, n_params(model), hw.gpus_per_node
    if strategy.zero.stage < 3:
        return {"full_model_per_rank": float(b * n * ranks)}
    lay = param_layout(model, strategy, strategy.data_parallel_size)
    part = float(b * lay.partition_numel * ranks) if strategy.param_device != "none" else 0.0
    return {"state_dict_rank0": float(b * n), "zero_init_partitions": part}


def resume_items(hw: Hardware, model: Model, strategy: Strategy) -> dict[str, float]:
    """Host bytes `load_checkpoint` adds on rank 0's node: the larger of the model-states file
    (stages 0-2: the 16-bit module, + the optimizer at stage 0) and the ZeRO shard (fp32 master
    + m + v = 12 B per element of the partition; none for an NVMe optimizer), on every rank.
    TinyLlama ZeRO-3 CPU, 1 GPU: 1.1e9 x 12 B = 12.3 GiB."""
    z, b, n, ranks = strategy.zero, strategy.bytes_per_param, n_params(model), hw.gpus_per_node
    lay = param_layout(model, strategy, strategy.data_parallel_size)
    states = float(b * n) if z.stage < 3 else 0.0
    if z.stage == 0:
        states += 12.0 * n
    shard = 0.0 if (z.stage == 0 or strategy.optimizer_device == "nvme") \
        else 12.0 * lay.partition_numel
    if z.stage in (1, 2) and (strategy.raw.get("zero_optimization") or {}).get(
            "elastic_checkpoint") is True:
        shard *= strategy.data_parallel_size        # every rank reads every shard
    return {"loaded_per_rank": max(states, shard) * ranks}


def moments(hw: Hardware, model: Model, strategy: Strategy, training_host: float,
            baseline_per_rank: float, headroom_bytes: float) -> tuple[Moment, ...]:
    """The four moments of rank 0's node: `training_host` (the step's host peak, kept during a
    save or a resume), `baseline_per_rank` (a process before DeepSpeed allocates)."""
    cap = hw.dram_bytes
    kept = {"training_host_items": training_host}
    save, note = save_items(hw, model, strategy)
    s16, note16 = save_16bit_items(hw, model, strategy)
    load = {"process_baseline": baseline_per_rank * hw.gpus_per_node,
            **load_items(hw, model, strategy)}
    resume = resume_items(hw, model, strategy)
    out = []
    for name, items, why in (("checkpoint_save", {**kept, **save}, note),
                             ("model_save_16bit", {**kept, **s16}, note16),
                             ("model_load", load, ""), ("checkpoint_load", {**kept, **resume}, "")):
        items = {k: v for k, v in items.items() if v}
        out.append(Moment(name=name, used_bytes=sum(items.values()), capacity_bytes=cap,
                          headroom_bytes=headroom_bytes, breakdown=items, note=why))
    return tuple(out)
