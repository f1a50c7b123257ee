"""Shared builders for the simulator tests (not a test module): tierlab.scenario.resolve, the
one resolver every verb uses, with the tests' usual batch (micro-batch 4, seq 1024)."""
from dataclasses import replace

from tierlab.scenario import resolve

PRESETS = ("no-offload", "zero2-cpu", "zero3-cpu", "zero3-nvme")


def scenario(preset="zero3-cpu", *, model="tinyllama-1.1b", hardware="workstation-rtx3070",
             micro_batch=4, seq=1024, grad_accum=None, gpus=None, nodes=None, sets=(),
             precision=None, checkpointing=True):
    """(hardware, model, strategy) as the CLI resolves them."""
    sc = resolve(model, hardware, preset, overrides=sets, micro_batch=micro_batch, seq=seq,
                 grad_accum=grad_accum, gpus=gpus, nodes=nodes, precision=precision,
                 checkpointing=checkpointing)
    return sc.hardware, sc.model, sc.strategy


def small_vocab(m):
    return replace(m, vocab=256)
