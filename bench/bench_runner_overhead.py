"""Runner overhead: steady step time of tierlab's training loop (recorder, JSONL append+flush per
step, 10 Hz sampler thread) against a bare DeepSpeed loop, on the same engine in one process,
interleaved in rounds so drift hits both. Prints the ratio (target <= 1.03). No assertions.

    python bench/bench_runner_overhead.py [--model M] [--ds-config C] [--rounds 4] [--steps 10]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tierlab.profiles.load import load_model
from tierlab.dsconfig.read import load_ds_config
from tierlab.runner import probes
from tierlab.runner.launch import ensure_dist_env
from tierlab.records.measurement import Measurement, MeasurementWriter
from tierlab.runner.train import (_Recorder, make_spec_batches, setup_engine, spec_from_strategy,
                                  train_steps)
from tierlab.sim.strategy import Flags, apply_overrides, parse_ds_config

TINY = str(Path(__file__).resolve().parents[1] / "runner" / "data" / "tiny-llama.yaml")


def bare_steps(engine, batches, n: int) -> list[float]:
    """The loop a user would write: forward, backward, step, read the loss."""
    times, t_prev = [], time.perf_counter()
    for _ in range(n):
        ids = next(batches).to(engine.device)
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        engine.step()
        t = time.perf_counter()
        times.append(t - t_prev)
        t_prev = t
        float(loss.detach())
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=TINY)
    ap.add_argument("--ds-config", default="zero3-cpu")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10, help="steps per round and side")
    a = ap.parse_args()

    ensure_dist_env()
    model = load_model(a.model, seq_len=a.seq)
    cfg, _ = load_ds_config(a.ds_config)
    strategy, _ = parse_ds_config(apply_overrides(cfg, a.overrides),
                                  Flags(micro_batch=a.micro_batch, precision=a.precision,
                                        activation_checkpointing=True, hidden=model.hidden))
    out = Path(tempfile.mkdtemp(prefix="tierlab-bench-"))
    spec = spec_from_strategy(model, strategy, out_dir=str(out), steps=a.steps, warmup_steps=0)
    engine, n_params = setup_engine(spec)
    batches = make_spec_batches(spec)
    bare_steps(engine, batches, 3)                              # warm-up (trace, allocator)
    writer = MeasurementWriter(out, Measurement(run_id="bench"))
    sampler = probes.Sampler().start()
    recorder = _Recorder(writer, spec, sampler, None, [])
    bare, runner = [], []
    for _ in range(a.rounds):
        bare += bare_steps(engine, batches, a.steps)
        n0 = len(writer.m.steps)
        train_steps(engine, batches, steps=a.steps, grad_accum=spec.grad_accum, breakdown=False,
                    on_step=recorder)
        runner += [s.wall_s for s in writer.m.steps[n0:]]
    sampler.stop()
    writer.close("ok")
    mb, mr = statistics.median(bare), statistics.median(runner)
    print(f"model {model.name} ({n_params / 1e6:.1f} M params), {a.ds_config}, micro-batch "
          f"{a.micro_batch}, seq {a.seq}, {a.rounds} rounds x {a.steps} steps each side")
    print(f"bare DeepSpeed loop   median {mb * 1e3:8.2f} ms/step (IQR "
          f"{_iqr(bare) * 1e3:.2f} ms)")
    print(f"tierlab runner loop   median {mr * 1e3:8.2f} ms/step (IQR "
          f"{_iqr(runner) * 1e3:.2f} ms)")
    print(f"ratio runner/bare     {mr / mb:.3f}  (target <= 1.03)")


def _iqr(xs):
    q = statistics.quantiles(xs, n=4)
    return q[2] - q[0]


if __name__ == "__main__":
    main()
