"""A transformers Llama model from a tierlab `Model` (random init) or from local weights."""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any, Mapping

from tierlab.errors import ConfigError
from tierlab.profiles.schema import Model

log = logging.getLogger(__name__)


def llama_config(model: Model, *, seq_len: int | None = None):
    """tierlab Model -> transformers.LlamaConfig (the runner trains Llama-family models only)."""
    from transformers import LlamaConfig

    if not model.gated_mlp or model.norm != "rmsnorm" or model.learned_pos_emb:
        raise ConfigError(f"model {model.name}: the runner trains Llama-family models (gated MLP, "
                          "RMSNorm, RoPE); this one is GPT-style")
    max_pos = max(model.max_seq_len or model.seq_len, seq_len or model.seq_len)
    return LlamaConfig(vocab_size=model.vocab, hidden_size=model.hidden,
                       intermediate_size=model.ffn, num_hidden_layers=model.n_layers,
                       num_attention_heads=model.n_heads, num_key_value_heads=model.n_kv_heads,
                       max_position_embeddings=max_pos, tie_word_embeddings=model.tie_embeddings,
                       attention_bias=model.bias, mlp_bias=model.bias, use_cache=False)


def _torch_dtype(precision: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[precision]


def build_model(model: Model, *, ds_config: Mapping[str, Any], precision: str,
                model_path: str | None = None, checkpointing: bool = False, seed: int = 0,
                seq_len: int | None = None):
    """A LlamaForCausalLM ready for deepspeed.initialize.

    ZeRO-3 builds under `deepspeed.zero.Init`, so each parameter is partitioned (and offloaded)
    as it is created and a model larger than one GPU never materialises whole. `model_path` loads
    local weights only (`local_files_only=True`)."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    stage = int((ds_config.get("zero_optimization") or {}).get("stage", 0))
    ctx = contextlib.nullcontext()
    if stage == 3:
        import deepspeed

        ctx = deepspeed.zero.Init(config_dict_or_path=dict(ds_config))
    if model_path:
        path = Path(model_path).expanduser()
        if not (path / "config.json").is_file():
            raise ConfigError(f"--model-path {path}: no config.json there (local weights only)")
        if stage == 3:
            from transformers.integrations import HfDeepSpeedConfig

            _keep = HfDeepSpeedConfig(dict(ds_config))   # noqa: F841 - zero.Init inside HF
            net = LlamaForCausalLM.from_pretrained(str(path), local_files_only=True,
                                                   torch_dtype=_torch_dtype(precision))
        else:
            net = LlamaForCausalLM.from_pretrained(str(path), local_files_only=True,
                                                   torch_dtype=_torch_dtype(precision))
    else:
        with ctx:
            net = LlamaForCausalLM(llama_config(model, seq_len=seq_len))
    net.config.use_cache = False
    if checkpointing:
        net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return net


def count_params(net) -> int:
    """Parameter count, also for ZeRO-3 partitioned parameters (ds_numel)."""
    return sum(getattr(p, "ds_numel", p.numel()) for p in net.parameters())
