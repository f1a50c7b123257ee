"""The engine's answers on a committed grid of scenarios, bit for bit (issue 32).

tests/data/engine_grid.json holds, for each point of GRID, what the ranged simulation answered
when the grid was written: the steady and first step times, the range's ends and its drivers,
the per-phase, busy and exposed times, the bottleneck, the bytes moved and a digest of every
span. A change that only makes the engine cheaper (fewer SimPy events, a cached workload, a
linear phase sum) must leave every figure equal, not close: floats are compared exactly.

Regenerate (only when a change is meant to move the figures, and say so in the commit):
    .venv/bin/python lab/scripts/engine_grid.py
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tierlab.scenario import resolve

DATA = Path(__file__).parent / "data" / "engine_grid.json"

ZERO1 = ("zero_optimization.stage=1",)
PARAM_NVME = ("zero_optimization.offload_param.device=nvme",
              "zero_optimization.offload_param.nvme_path=/nvme")
PIPELINED = ("zero_optimization.offload_optimizer.pipeline_read=true",
             "zero_optimization.offload_optimizer.pipeline_write=true",
             "zero_optimization.offload_optimizer.buffer_count=12")


def _point(model, hardware, preset, *, sets=(), mb=4, seq=1024, gas=1, gpus=None, nodes=None,
           precision=None, ckpt=True) -> dict:
    return {"model": model, "hardware": hardware, "preset": preset, "sets": list(sets),
            "micro_batch": mb, "seq": seq, "grad_accum": gas, "gpus": gpus, "nodes": nodes,
            "precision": precision, "checkpointing": ckpt}


def _grid() -> list[dict]:
    g = []
    # the built-in scenario: every preset (ZeRO-1 as zero2-cpu at stage 1), 1-8 micro-steps
    for preset, sets in (("no-offload", ()), ("zero2-cpu", ZERO1), ("zero2-cpu", ()),
                         ("zero3-cpu", ()), ("zero3-nvme", ())):
        for gas in (1, 2, 8):
            g.append(_point("tinyllama-1.1b", "workstation-rtx3070", preset, sets=sets, gas=gas))
    # two ranks sharing a host (PCIe root ports, CPU Adam, NVMe)
    for preset, sets in (("no-offload", ()), ("zero2-cpu", ZERO1), ("zero2-cpu", ()),
                         ("zero3-cpu", ()), ("zero3-nvme", ())):
        for gas in (1, 4):
            g.append(_point("tinyllama-1.1b", "a100-pcie-milan", preset, sets=sets, gas=gas,
                            gpus=2, mb=2))
    for preset in ("zero2-cpu", "zero3-cpu", "zero3-nvme"):
        for gpus, gas in ((1, 1), (2, 2)):
            g.append(_point("llama-2-7b", "dgx-a100", preset, gas=gas, gpus=gpus, mb=2, seq=2048))
    for preset in ("no-offload", "zero2-cpu", "zero3-cpu", "zero3-nvme"):
        g.append(_point("llama-0.5b", "workstation-rtx4090", preset, mb=8, seq=2048,
                        precision="fp16", ckpt=False, gas=3))
    g.append(_point("llama-0.5b", "workstation-rtx3090", "zero3-nvme", sets=PIPELINED, gas=2))
    g.append(_point("open-llama-3b", "workstation-rtx3090", "zero3-nvme", sets=PARAM_NVME,
                    mb=2, gas=2))
    g.append(_point("open-llama-3b", "dgx-h100", "zero2-cpu", gas=4, gpus=1, seq=2048))
    # offload-example fixes train_batch_size 8: DeepSpeed refuses mb 4 x gas 2 x 2 GPUs against it
    g.append(_point("llama-3b", "hgx-a100-icelake", "offload-example", gas=2, gpus=2,
                    sets=("train_batch_size=16",)))
    g.append(_point("gpt2-10b", "dgx-2", "zero3-nvme", sets=PARAM_NVME, gpus=2, mb=2))
    g.append(_point("gpt2-10b", "dgx-2", "zero3-cpu", gpus=16, nodes=2, gas=2))
    for gpus, nodes in ((8, 2), (2, 1)):
        g.append(_point("llama-3-8b", "hgx-h100-genoa", "zero3-cpu", gpus=gpus, nodes=nodes,
                        mb=1, seq=4096))
    g.append(_point("llama-3-8b", "h200-gen5", "zero3-nvme", sets=PIPELINED, gpus=8, mb=2,
                    seq=4096))
    # the scenarios: 70B ZeRO-3 offload on a DGX A100, 1T on 512 V100
    g.append(_point("llama-2-70b", "dgx-a100", "zero3-cpu", mb=4, seq=4096))
    g.append(_point("llama-2-70b", "dgx-a100", "zero3-cpu", mb=1, seq=4096, gas=4))
    g.append(_point("dense-1t", "dgx-2", "zero3-nvme", sets=PARAM_NVME, mb=1, seq=None,
                    nodes=32))
    return g


GRID = _grid()


def key(p: dict) -> str:
    """One readable name per point."""
    sets = ",".join(s.rpartition(".")[2] for s in p["sets"])
    return (f"{p['model']}|{p['hardware']}|{p['preset']}{'[' + sets + ']' if sets else ''}"
            f"|mb{p['micro_batch']}|seq{p['seq']}|gas{p['grad_accum']}|gpus{p['gpus']}"
            f"|nodes{p['nodes']}|{p['precision']}|ckpt{int(p['checkpointing'])}")


def _digest(items) -> str:
    return hashlib.sha256(repr(list(items)).encode()).hexdigest()


def compute(p: dict) -> dict:
    """What the grid records for one point (the ranged answer, as `simulate --range` gives)."""
    sc = resolve(p["model"], p["hardware"], p["preset"], overrides=p["sets"],
                 micro_batch=p["micro_batch"], seq=p["seq"], grad_accum=p["grad_accum"],
                 gpus=p["gpus"], nodes=p["nodes"], precision=p["precision"],
                 checkpointing=p["checkpointing"])
    r = sc.simulate(ranges=True)
    rng = r.step_range
    return {"step_time_s": r.step_time_s, "first_step_time_s": r.first_step_time_s,
            "range_s": [rng.low_s, rng.high_s], "range_simulations": rng.simulations,
            "drivers": [d.to_dict() for d in rng.drivers],
            "phases": r.phases, "busy_s": r.busy_s, "exposed_s": r.exposed_s,
            "bottleneck": r.bottleneck, "lower_bound_s": r.lower_bound_s,
            "bytes_moved": r.bytes_moved, "fits": r.fits,
            "spans": len(r.spans),
            "spans_sha256": _digest((s.resource, s.name, s.start_s, s.end_s) for s in r.spans)}


def load() -> dict:
    return json.loads(DATA.read_text())


def test_grid_names_every_point_once():
    names = [key(p) for p in GRID]
    assert len(set(names)) == len(names) >= 40
    assert sorted(load()["points"]) == sorted(names)


@pytest.mark.parametrize("point", GRID, ids=key)
def test_engine_answers_as_recorded(point):
    want = load()["points"][key(point)]
    got = json.loads(json.dumps(compute(point)))      # the JSON round trip is exact for floats
    assert got == want
