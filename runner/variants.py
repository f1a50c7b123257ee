"""The scenarios and RunSpecs of real runs: `tierlab run`'s one, and `tierlab compare`'s
variants (no offload, ZeRO-2 CPU, ZeRO-3 CPU, ZeRO-3 NVMe, optionally an uncapped baseline).
Nothing here runs or writes anything; runner/compare.py runs what `plan_variants` returns."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from tierlab.errors import ConfigError
from tierlab.profiles.load import PRESET_LADDER
from tierlab.runner import ds_config as dsc
from tierlab.runner.compare import Planned, earlier_outputs
from tierlab.runner.train import RunSpec, check_swap_root, spec_from_strategy
from tierlab.scenario import resolve
from tierlab.units import fmt_gib


@dataclass(frozen=True, kw_only=True)
class RunnerOptions:
    """What a real run takes beyond its scenario (the runner options of `run` and `compare`)."""

    model_path: str | None = None
    """Local Hugging Face model directory to train instead of a random init."""
    steps: int = 10
    """Optimizer steps to train."""
    warmup_steps: int = 2
    """Leading steps dropped from the steady-state statistics."""
    dataset: str | None = None
    """Alpaca-format JSON/JSONL; None: synthetic tokens."""
    tokenizer: str | None = None
    """Local tokenizer directory for `dataset`; None: the built-in byte-level one."""
    swap_dir: str | None = None
    """Every NVMe offload's nvme_path points here."""
    seed: int = 0
    """Seed of the random init and the synthetic data."""


def runner_scenario(scenario: Mapping[str, Any], opts: RunnerOptions, ds_config=None,
                    gpu_mem_cap=None):
    """The tierlab.scenario.Scenario of a real run (`scenario`: resolve's keyword arguments):
    `model_path`'s config.json wins over the model; a run on one machine defaults to one GPU
    and one node (not the profile's counts). Raises ConfigError."""
    model = scenario["model"]
    if opts.model_path:
        cfg_json = Path(opts.model_path).expanduser() / "config.json"
        if not cfg_json.is_file():
            raise ConfigError(f"--model-path {opts.model_path}: no config.json there")
        model = str(cfg_json)
    sc = resolve(**{**scenario, "model": model, "ds_config": ds_config or scenario["ds_config"],
                    "gpus": scenario["gpus"] or 1, "nodes": scenario["nodes"] or 1},
                 gpu_mem_cap=gpu_mem_cap, swap_dir=opts.swap_dir, judge="deepspeed")
    check_dense(sc.model)
    return sc


def check_dense(model) -> None:
    """Refuse (ConfigError) a model the runner's dense Llama (runner/model.py llama_config, and
    LlamaForCausalLM.from_pretrained for local weights) is not: MoE, a mixer, blocks of one part
    or shared blocks, or any attention, norm or bias layout a Llama lacks (unlike_llama); it
    would train another model under its name."""
    if model.moe is not None:
        raise ConfigError(f"model {model.name}: a Mixture-of-Experts model ({model.moe.n_experts} "
                          f"experts, top-{model.moe.experts_per_token}); the runner trains dense "
                          "decoder models only (simulate, memory and plan model MoE)")
    if model.mixer is not None:
        raise ConfigError(f"model {model.name}: {len(model.mixer.layers)} of {model.n_layers} "
                          f"blocks are a {model.mixer.kind} mixer, not attention; the runner "
                          "trains dense attention decoders only (simulate, memory and plan "
                          "model the mixer)")
    odd = [f"{len(model.attention_only_layers)} attention-only"] if model.attention_only_layers \
        else []
    odd += [f"{len(model.mlp_only_layers)} MLP-only"] if model.mlp_only_layers else []
    odd += [f"{len(model.shared.layers)} shared-block"] if model.shared is not None else []
    odd += [f"{len({i for l in model.loops for i in l.layers})} looped"] if model.loops else []
    if odd:
        raise ConfigError(f"model {model.name}: {' and '.join(odd)} blocks of {model.n_layers}; "
                          "the runner trains decoders whose every block is attention + MLP "
                          "(simulate, memory and plan model these blocks)")
    unlike = unlike_llama(model)
    if unlike:
        raise ConfigError(f"model {model.name}: {'; '.join(unlike)}; the runner trains "
                          "transformers' LlamaForCausalLM of the model's sizes, which has none "
                          "of these (simulate, memory and plan model them)")


def unlike_llama(model) -> list[str]:
    """What an attention + MLP model holds that LlamaForCausalLM of its sizes (llama_config:
    full causal attention of hidden / n_heads per head, biases on every projection or none,
    two RMSNorms per block) would not."""
    head_dim = model.attn_head_dim or model.hidden // model.n_heads
    found = [
        (model.mla is not None, "multi-head latent attention (MLA)"),
        (model.attention_tensors is not None, "attention projections of their own shapes"),
        (bool(model.layer_attention), "attention whose shape differs between layers"),
        (model.qk_norm != "none", f"q/k norms ({model.qk_norm})"),
        (model.attn_output_gate, "a gated attention output"),
        (any(model.attention_windows), "sliding-window or chunked attention"),
        (head_dim * model.n_heads != model.hidden,
         f"{model.n_heads} heads of {head_dim} on a hidden size of {model.hidden}"),
        (model.qkv_bias and not model.bias, "biases on q/k/v alone"),
        (model.block_norms != 2 or model.embed_norm or model.head_bias,
         "norms or biases outside a Llama block's two RMSNorms"),
        (model.per_layer_inputs is not None,
         "per-layer inputs (a second embedding table; a gate, projection and norm per block)"),
    ]
    return [what for hit, what in found if hit]


def runner_spec(sc, opts: RunnerOptions, out_dir, label: str, **extra) -> RunSpec:
    """The RunSpec of a scenario with the runner options; a swap root that another user could
    have planted is refused now (ConfigError), before anything runs (runner.train check_swap_root)."""
    spec = spec_from_strategy(sc.model, sc.strategy, out_dir=str(out_dir), steps=opts.steps,
                              warmup_steps=opts.warmup_steps, model_path=opts.model_path,
                              dataset=opts.dataset, tokenizer=opts.tokenizer,
                              gpu_mem_cap_bytes=sc.gpu_mem_cap_bytes, seed=opts.seed,
                              label=label, **extra)
    for path in dsc.swap_paths(spec.ds_config):
        check_swap_root(path)
    return spec


def plan_variants(scenario: Mapping[str, Any], opts: RunnerOptions, out_dir: str | Path, *,
                  variants: Sequence[str] = (), gpu_mem_cap=None, uncapped_baseline: bool = False,
                  overwrite: bool = False) -> list[Planned]:
    """The comparison's variants in the order they run, each with its scenario (its preset, the
    `--set` overrides applied to all) and RunSpec under `out_dir`/LABEL; the uncapped
    no-offload baseline first. Refuses (ConfigError) an `out_dir` holding an earlier comparison
    that this one would replace, unless `overwrite`."""
    todo = [(v, gpu_mem_cap) for v in (variants or PRESET_LADDER)]
    if uncapped_baseline:
        todo.insert(0, ("no-offload", None))
    labels = [f"{v}-uncapped" if gpu_mem_cap is not None and cap is None else v
              for v, cap in todo]
    there = earlier_outputs(out_dir, labels)
    if there and not overwrite:
        raise ConfigError(f"--out {out_dir}: holds a comparison already ({', '.join(there)}); "
                          "choose another folder or pass --overwrite to replace it")
    planned = []
    for (variant, cap), label in zip(todo, labels):
        sc = runner_scenario(scenario, opts, variant, gpu_mem_cap=cap)
        planned.append(Planned(label, sc, runner_spec(sc, opts, Path(out_dir) / label, label)))
    return planned


def comparison_title(planned: Sequence[Planned], capped: bool) -> str:
    """The comparison figure's title: model, micro-batch, seq and the GPU cap if one was set."""
    sc = planned[-1].scenario
    return (f"{sc.model.name}, micro-batch {sc.strategy.train_micro_batch_size_per_gpu}, "
            f"seq {sc.model.seq_len}" + (f", GPU cap {fmt_gib(sc.gpu_mem_cap_bytes, 0)}"
                                         if capped else ""))
