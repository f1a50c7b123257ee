"""PyTorch FSDP2 with CPUOffloadPolicy: its schedule and memory, one rank, world size 1
(`tierlab run --engine fsdp2-offload` trains it for real: runner/fsdp2.py).

What torch 2.13 does (torch/distributed/fsdp/_fully_shard/), and the op this module charges:
- Groups: one FSDPParamGroup per `fully_shard` call: each decoder layer, and the root (embedding,
  final norm, lm_head). `_fsdp_param.py` FSDPParam: under CPUOffloadPolicy the fp32 shard lives
  on the CPU, pinned (`_init_sharded_param`: `.pin_memory()`).
- Unshard (`_fsdp_param_group.py` `unshard` -> `_fsdp_collectives.py` `foreach_all_gather`):
  `_fsdp_param.py` `all_gather_inputs` copies the CPU shard `.to(device, non_blocking=True)` and
  casts it to param_dtype: one pinned H2D of 4 B/param per group use (`pcie_h2d`).
- Implicit prefetch: the CPU thread runs ahead, so group i+1's copy-in overlaps group i's compute;
  the all-gather state keeps at most two groups unsharded (`_fsdp_state.py` pre-forward waits the
  previous all-gather): a look-ahead of one group.
- reshard_after_forward=True frees each layer after its forward (`post_forward` -> `reshard`), so
  backward unshards it again (a second H2D per layer); the root is never resharded after forward
  (`_fsdp_state.py` `_lazy_init`: the root's post_forward_mesh_info is None).
- Activation checkpointing recomputes each block's forward inside its backward.
- Post-backward (`_fsdp_param_group.py` `post_backward` -> `foreach_reduce`): reduce-scatter in
  reduce_dtype (fp32; a copy at world size 1), then the fp32 grad shard `.to(cpu)` on the
  post-reduce stream (`grad_offload_event`, waited in `finalize_backward`): 4 B/param D2H
  (`pcie_d2h`).
- Optimizer: clip_grad_norm_ + torch.optim.AdamW on the CPU shards (`cpu_adam`), single-tensor
  on CPU params (torch/optim/adam.py); its rate is measured (profiles/fsdp2/torch-adamw-cpu.yaml).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import simpy

from tierlab.profiles.schema import Hardware, Model
from tierlab.sim.devices import Device, Span, pcie_seconds
from tierlab.sim.flops import block_seconds, gemm_seconds, layer_forward, logits_forward
from tierlab.sim.memory import activation_bytes, logits_loss_bytes
from tierlab.sim.strategy import Strategy

ENGINES: tuple[str, ...] = ("deepspeed", "fsdp2", "fsdp2-offload")
"""Who trains (`tierlab run --engine`): DeepSpeed with the ds_config, or PyTorch FSDP2 without
or with CPUOffloadPolicy(pin_memory=True). The simulator models "deepspeed" (sim/engine.py) and
"fsdp2-offload" (this module)."""
SIMULATED_ENGINES = ("deepspeed", "fsdp2-offload")


def check_engine(engine: str) -> None:
    """ValueError unless the simulator has a schedule for `engine`."""
    if engine not in SIMULATED_ENGINES:
        raise ValueError(f"engine {engine!r}: the simulator models "
                         f"{' and '.join(SIMULATED_ENGINES)} (of {', '.join(ENGINES)})")


ADAMW_FILE = Path(__file__).resolve().parents[1] / "profiles" / "fsdp2" / "torch-adamw-cpu.yaml"
"""The measured stock rate of torch's CPU AdamW (+ clip), with its source."""


@dataclass(frozen=True, kw_only=True)
class AdamwRate:
    """torch.optim.AdamW (+ clip_grad_norm_) on fp32 CPU tensors, as measured."""

    params_per_s_per_thread: float
    dram_bytes_per_param: float
    source: str

    def params_per_s(self, cores: int, dram_bandwidth_Bps: float) -> float:
        """Measured per-thread rate x the node's cores, capped by DRAM bandwidth / the bytes
        AdamW + clip move per param (84 B: the data file counts them)."""
        return min(self.params_per_s_per_thread * cores,
                   dram_bandwidth_Bps / self.dram_bytes_per_param)


def load_adamw_rate(path: Path = ADAMW_FILE) -> AdamwRate:
    """The AdamwRate of a data file (every key named; unknown ones refused)."""
    import yaml

    data = yaml.safe_load(Path(path).read_text())
    keys = {"kind", "params_per_s_per_thread", "threads", "source", "dram_bytes_per_param",
            "dram_source"}
    if set(data) != keys:
        raise ValueError(f"{path}: keys {sorted(set(data) ^ keys)} missing or unknown")
    return AdamwRate(params_per_s_per_thread=float(data["params_per_s_per_thread"]),
                     dram_bytes_per_param=float(data["dram_bytes_per_param"]),
                     source=data["source"])


@dataclass(frozen=True, kw_only=True)
class Fsdp2Result:
    """One steady FSDP2 CPU-offload step of one rank."""

    step_time_s: float
    phases: Mapping[str, float]
    """forward_s, backward_s (to the last grad D2H), optimizer_s."""
    busy_s: Mapping[str, float]
    memory: Mapping[str, Mapping[str, float]]
    """fsdp2_memory: {'gpu': items, 'host_pinned': items, 'host_pageable': items} in bytes."""
    gpu_peak_bytes: float
    host_bytes: float
    fits: bool
    tokens_per_s: float
    spans: tuple[Span, ...] = field(default=(), repr=False)


def groups(model: Model) -> list[tuple[str, int]]:
    """(name, params) of each FSDP2 group in forward order: the root, then each layer."""
    return [("root", model.embedding_params)] + [
        (f"layers.{i}", model.layer_params(i)) for i in range(model.n_layers)]


def fsdp2_memory(hw: Hardware, model: Model, strategy: Strategy) -> dict[str, dict[str, float]]:
    """Bytes by item and tier. GPU: the root unsharded all step (16-bit), two layers unsharded
    in flight (16-bit + the fp32 copy-in it was cast from), one layer's 16-bit + fp32 grads
    before the reduce-scatter, activations and the logits/loss peak as DeepSpeed's plan counts
    them (sim/memory.activation_bytes, logits_loss_bytes: the same HF model), the CUDA context.
    Host: fp32 params and grads pinned (CPUOffloadPolicy pin_memory), AdamW m and v pageable."""
    n, layer, b = model.n_params, model.params_per_layer, strategy.bytes_per_param
    gpu = {"root_params": float(b * model.embedding_params),
           "layers_in_flight": 2.0 * (b + 4) * layer,
           "layer_grads": float((b + 4) * layer), **activation_bytes(model, strategy),
           "logits_loss": logits_loss_bytes(model, strategy),
           "cuda_context": float(hw.gpu.cuda_context_bytes)}
    return {"gpu": gpu, "host_pinned": {"params_fp32": 4.0 * n, "grads_fp32": 4.0 * n},
            "host_pageable": {"adamw_m_v": 8.0 * n}}


def simulate_fsdp2(hw: Hardware, model: Model, strategy: Strategy, *,
                   adamw: AdamwRate | None = None, host_baseline_bytes: float = 0.0
                   ) -> Fsdp2Result:
    """The steady step of FSDP2 CPU offload at world size 1 (the module docstring's schedule);
    from `strategy` only the micro-batch, gradient accumulation (1 only), precision and
    activation checkpointing are read: FSDP2 has no ZeRO keys."""
    if model.loops:
        raise ValueError(f"simulate_fsdp2: {model.name} runs blocks in loops (Model.loops); "
                         "the FSDP2 schedule runs each layer group once (the deepspeed engine "
                         "models the loops)")
    if strategy.data_parallel_size != 1 or strategy.gradient_accumulation_steps != 1:
        raise ValueError("simulate_fsdp2: one rank and no gradient accumulation only "
                         f"(got {strategy.data_parallel_size} ranks, "
                         f"{strategy.gradient_accumulation_steps} micro-steps)")
    micro_batch, precision = strategy.train_micro_batch_size_per_gpu, strategy.precision
    checkpointing = strategy.activation_checkpointing
    adamw = adamw or load_adamw_rate()
    env = simpy.Environment()
    dev = {name: Device(env, name) for name in ("gpu_compute", "pcie_h2d", "pcie_d2h",
                                                  "cpu_adam")}
    lf = layer_forward(model, micro_batch)
    fwd_s, bwd_s = block_seconds(hw.gpu, precision, lf)
    head_s = gemm_seconds(hw.gpu, precision, logits_forward(model, micro_batch))
    gs = groups(model)
    h2d = [pcie_seconds(hw.pcie, 4.0 * p, "h2d", True, hw.gpus_per_node) for _, p in gs]
    d2h = [pcie_seconds(hw.pcie, 4.0 * p, "d2h", True, hw.gpus_per_node) for _, p in gs]
    marks: dict[str, float] = {}
    env.process(_step(env, dev, gs, h2d, d2h, fwd_s, bwd_s, head_s, checkpointing, marks))
    env.run()
    rate = adamw.params_per_s(hw.cpu.cores, hw.cpu.dram_bandwidth_Bps)
    opt_s = model.n_params / rate
    env.process(dev["cpu_adam"].run("clip + AdamW", opt_s))
    env.run()
    step = env.now
    mem = fsdp2_memory(hw, model, strategy)
    gpu_peak = sum(mem["gpu"].values())
    host = sum(mem["host_pinned"].values()) + sum(mem["host_pageable"].values()) \
        + host_baseline_bytes
    spans = tuple(sorted((s for d in dev.values() for s in d.spans), key=lambda s: s.start_s))
    return Fsdp2Result(
        step_time_s=step, phases={"forward_s": marks["forward_end"],
                                  "backward_s": marks["backward_end"] - marks["forward_end"],
                                  "optimizer_s": step - marks["backward_end"]},
        busy_s={k: d.busy_s for k, d in dev.items()}, memory=mem, gpu_peak_bytes=gpu_peak,
        host_bytes=host, fits=gpu_peak <= hw.gpu.hbm_bytes and host <= hw.dram_bytes,
        tokens_per_s=micro_batch * model.seq_len / step, spans=spans)


def _step(env, dev, gs, h2d, d2h, fwd_s, bwd_s, head_s, checkpointing, marks):
    """Forward then backward: each group's copy-in on pcie_h2d, one group ahead of compute;
    each layer's grad D2H after its backward; the step's backward ends at the last D2H."""
    def copy_in(i, tag):
        return env.process(dev["pcie_h2d"].run(f"H2D {gs[i][0]} ({tag})", h2d[i]))

    # forward: root (embedding) first, layers 0..L-1, then the head's logits on the root
    order = list(range(len(gs)))
    ready = {order[0]: copy_in(order[0], "fwd")}
    for k, i in enumerate(order):
        if k + 1 < len(order):                     # implicit prefetch: one group ahead
            ready[order[k + 1]] = copy_in(order[k + 1], "fwd")
        yield ready[i]
        if i > 0:
            yield from dev["gpu_compute"].run(f"forward {gs[i][0]}", fwd_s)
    yield from dev["gpu_compute"].run("forward lm_head + loss", head_s)
    marks["forward_end"] = env.now
    # backward: the root stays unsharded; layers L-1..0 are unsharded again (resharded after
    # forward), each one ahead, and their fp32 grads go to the CPU after their backward
    yield from dev["gpu_compute"].run("backward lm_head + loss", 2 * head_s)
    layers = list(range(len(gs) - 1, 0, -1))
    ready = {layers[0]: copy_in(layers[0], "bwd")}
    offloads = []
    for k, i in enumerate(layers):
        if k + 1 < len(layers):
            ready[layers[k + 1]] = copy_in(layers[k + 1], "bwd")
        yield ready[i]
        yield from dev["gpu_compute"].run(f"backward {gs[i][0]}",
                                          bwd_s + (fwd_s if checkpointing else 0.0))
        offloads.append(env.process(dev["pcie_d2h"].run(f"D2H grad {gs[i][0]}", d2h[i])))
    offloads.append(env.process(dev["pcie_d2h"].run("D2H grad root", d2h[0])))
    yield simpy.AllOf(env, offloads)              # finalize_backward waits every grad_offload
    marks["backward_end"] = env.now
