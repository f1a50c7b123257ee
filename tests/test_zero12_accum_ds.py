"""DeepSpeed 0.19.8 itself (on CPU), for what sim/workload.py and sim/memory*.py assume about
ZeRO-1/2 gradient accumulation with the optimizer offloaded: ZeRO-2 takes the CPU round trip
(`async_accumulate_grad_in_cpu_via_gpu`) once per parameter and micro-step, boundary included,
and keeps one `accumulated_grads_in_cpu` buffer per parameter; ZeRO-1 never calls it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("deepspeed")

PROBE = textwrap.dedent("""
    import json, os, sys, torch, deepspeed
    stage, gas = int(sys.argv[1]), int(sys.argv[2])
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": gas,
           "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": stage, "contiguous_gradients": True,
                                 "overlap_comm": True, "reduce_bucket_size": 1000,
                                 "offload_optimizer": {"device": "cpu", "pin_memory": False}}}
    eng, *_ = deepspeed.initialize(model=net, config=cfg, model_parameters=net.parameters())
    opt, calls = eng.optimizer, []
    real = opt.async_accumulate_grad_in_cpu_via_gpu
    opt.async_accumulate_grad_in_cpu_via_gpu = lambda p: (calls.append(1), real(p))[1]
    held = []
    for step in range(2):
        for micro in range(gas):
            x = torch.randn(2, 64, dtype=torch.bfloat16)
            eng.backward(eng(x).float().pow(2).mean())
            if micro < gas - 1:
                held.append(sum(p.grad is not None for p in net.parameters()))
            eng.step()
    print("PROBE " + json.dumps({"calls": len(calls), "buffers": len(opt.accumulated_grads_in_cpu),
                                 "grads_held_between_micro_steps": held}))
""")


def _probe(stage: int, gas: int) -> dict:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29600 + 10 * stage + gas),
           "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
    out = subprocess.run([sys.executable, "-c", PROBE, str(stage), str(gas)], env=env,
                         capture_output=True, text=True, timeout=600)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("PROBE ")]
    assert line, out.stdout[-2000:] + out.stderr[-2000:]
    return json.loads(line[0][6:])


@pytest.mark.slow
def test_zero2_round_trips_every_micro_step_and_zero1_never():
    z2 = _probe(2, 2)
    assert z2["calls"] == 4 * 2 * 2          # 4 parameters x 2 micro-steps x 2 steps
    assert z2["buffers"] == 4                # one per parameter (memory_host accumulated_grads)
    z1 = _probe(1, 2)
    assert z1["calls"] == 0 and z1["buffers"] == 0
    # ZeRO-1's gradients are still there after a non-boundary micro-step (sim/memory.py grads)
    assert z1["grads_held_between_micro_steps"] == [4, 4]
