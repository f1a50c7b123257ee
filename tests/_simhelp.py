"""Shared builders for the simulator tests (not a test module)."""
from dataclasses import replace

from tierlab.profiles.load import load_ds_config, load_hardware, load_model
from tierlab.sim.strategy import Flags, apply_overrides, parse_ds_config

PRESETS = ("no-offload", "zero2-cpu", "zero3-cpu", "zero3-nvme")


def scenario(preset="zero3-cpu", *, model="tinyllama-1.1b", hardware="workstation-rtx3070",
             micro_batch=4, seq=1024, grad_accum=None, gpus=None, nodes=None, sets=(),
             precision="bf16", checkpointing=True):
    hw = load_hardware(hardware, gpus_per_node=gpus, nodes=nodes)
    m = load_model(model, seq_len=seq)
    cfg, _ = load_ds_config(preset)
    cfg = apply_overrides(cfg, list(sets))
    if any(isinstance(cfg.get(k), dict) and cfg[k].get("enabled") is True for k in ("fp16", "bf16")):
        precision = None
    s, _ = parse_ds_config(cfg, Flags(micro_batch=micro_batch, grad_accum=grad_accum,
                                      world_size=hw.world_size, precision=precision,
                                      activation_checkpointing=checkpointing, hidden=m.hidden))
    return hw, m, s


def small_vocab(m):
    return replace(m, vocab=256)
