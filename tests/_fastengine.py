"""`python tests/_fastengine.py ARGS...`: the real `tierlab` CLI, with only DeepSpeed's engine
stood in for, so a signal test reaches its steps in seconds on a loaded 2-core box (there,
deepspeed.init_distributed and initialize take minutes: they JIT-load the shm comm and Adam ops).

Everything tierlab does is real: option parsing, pre-flight, the RunSpec, `runner.train.run` with
its signal handling, the MeasurementWriter, the probes, the exit code. The stand-in trains the
real tierlab-built Llama (runner/model.py build_model) with plain torch SGD, and each optimizer
step lasts at least TIERLAB_TEST_STEP_S seconds (default 0.3), so a signal lands mid-step.
"""
from __future__ import annotations

import os
import sys
import time
from types import SimpleNamespace


class Engine:
    """What runner/train.py train_steps calls on a DeepSpeed engine: device, (), backward, step."""

    def __init__(self, net, step_s: float):
        import torch

        self.net, self.step_s, self.device = net, step_s, torch.device("cpu")
        self.opt = torch.optim.SGD(net.parameters(), lr=1e-3)

    def __call__(self, input_ids, labels):
        return SimpleNamespace(loss=self.net(input_ids=input_ids, labels=labels).loss)

    def backward(self, loss) -> None:
        loss.backward()

    def step(self) -> None:
        t0 = time.perf_counter()
        self.opt.step()
        self.opt.zero_grad()
        time.sleep(max(0.0, self.step_s - (time.perf_counter() - t0)))


def setup_engine(spec, local_rank: int = 0):
    from tierlab.profiles.schema import Model
    from tierlab.runner.model import build_model, count_params

    net = build_model(Model(**spec.model), ds_config=spec.ds_config, precision="fp32",
                      checkpointing=False, seed=spec.seed, seq_len=spec.seq)
    return Engine(net, float(os.environ.get("TIERLAB_TEST_STEP_S", "0.3"))), count_params(net)


def main() -> None:
    from tierlab.cli import main as cli

    sys.argv[0] = "tierlab"
    cli(obj={"setup_engine": setup_engine})      # the run verb's seam (commands/common.seam)


if __name__ == "__main__":
    main()
