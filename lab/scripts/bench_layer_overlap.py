"""Where does a stage-0 forward go? Per-layer times of the runner's real Hugging Face Llama layers
at the exact shapes of validation runs, with and without activation checkpointing, next to the
whole model (no DeepSpeed: embedding, layers, logits and loss) — on a CUDA host.

    python3 lab/scripts/bench_layer_overlap.py [--out FILE.json]

For each shape it prints the layer forward/backward (plain and checkpointed, per layer) and the
whole model's forward and backward with the runner's checkpointing, so the forward of a run's
breakdown can be split into layers x n_layers and the rest (head, loss, engine). GPU only: exits 2
with one line without CUDA."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from labenv import ROOT  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)
sys.path.insert(0, str(ROOT.parent))

SHAPES = (("tinyllama-1.1b", 4, 1024), ("tinyllama-1.1b", 2, 1024), ("llama-0.5b", 8, 1024),
          ("llama-3b", 2, 2048), ("open-llama-3b", 2, 2048))


def whole_model(name: str, micro_batch: int, seq: int, iters: int = 4) -> dict:
    """Forward (with loss) and backward seconds of the whole HF model, bf16, checkpointed as the
    runner trains, CUDA-event timed (median of `iters` after 2 warm-ups)."""
    import torch

    from transformers import LlamaForCausalLM

    from tierlab.profiles.load import load_model
    from tierlab.runner.model import llama_config

    mdl = load_model(name, seq_len=seq)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):                 # built on the GPU: no minutes of CPU init
        net = LlamaForCausalLM(llama_config(mdl, seq_len=seq))
    torch.set_default_dtype(torch.float32)
    net.config.use_cache = False
    net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    net.train()
    ids = torch.randint(0, mdl.vocab, (micro_batch, seq), device="cuda")
    fwd, bwd = [], []
    for i in range(iters + 2):
        e = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        e[0].record()
        loss = net(input_ids=ids, labels=ids).loss
        e[1].record()
        loss.backward()
        e[2].record()
        e[2].synchronize()
        net.zero_grad(set_to_none=True)
        if i >= 2:
            fwd.append(e[0].elapsed_time(e[1]) / 1e3)
            bwd.append(e[1].elapsed_time(e[2]) / 1e3)
    del net
    torch.cuda.empty_cache()
    return {"fwd_s": sorted(fwd)[len(fwd) // 2], "bwd_s": sorted(bwd)[len(bwd) // 2],
            "n_layers": mdl.n_layers}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="also write every figure as JSON here")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("error: bench_layer_overlap.py needs a CUDA GPU", file=sys.stderr)
        return 2
    from tierlab.runner.calibrate_gpu import layer_point

    t0 = time.perf_counter()
    rows = []
    print(f"{'shape':28s} {'layer fwd':>9s} {'ckpt fwd':>9s} {'layer bwd':>9s} {'ckpt bwd':>9s}"
          f" {'model fwd':>9s} {'model bwd':>9s} {'L x ckpt fwd':>12s}   (ms)")
    for name, mb, seq in SHAPES:
        plain = layer_point(name, mb * seq, "bf16", seq=seq)
        ckpt = layer_point(name, mb * seq, "bf16", seq=seq, checkpointing=True)
        whole = whole_model(name, mb, seq)
        rows.append({"model": name, "micro_batch": mb, "seq": seq, "plain": plain, "ckpt": ckpt,
                     "whole": whole})
        print(f"{name + f' mb{mb} s{seq}':28s} {plain['fwd_s'] * 1e3:9.2f} {ckpt['fwd_s'] * 1e3:9.2f}"
              f" {plain['bwd_s'] * 1e3:9.2f} {ckpt['bwd_s'] * 1e3:9.2f}"
              f" {whole['fwd_s'] * 1e3:9.1f} {whole['bwd_s'] * 1e3:9.1f}"
              f" {whole['n_layers'] * ckpt['fwd_s'] * 1e3:12.1f}", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows},
                                       indent=1))
    print(f"took {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
