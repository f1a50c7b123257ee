"""A transformers Llama model from a tierlab `Model` (random init) or from local weights."""
from __future__ import annotations

import contextlib
import logging
import math
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


def _stage(ds_config: Mapping[str, Any]) -> int:
    return int((ds_config.get("zero_optimization") or {}).get("stage", 0))


def build_model(model: Model, *, ds_config: Mapping[str, Any], precision: str,
                model_path: str | None = None, checkpointing: bool = False, seed: int = 0,
                seq_len: int | None = None):
    """A LlamaForCausalLM ready for deepspeed.initialize.

    ZeRO-3 builds under `deepspeed.zero.Init`, so each parameter is partitioned (and offloaded)
    as it is created and a model larger than one GPU never materialises whole. A random init is
    then drawn the same way at every stage (`init_weights`): the same seed gives the same
    weights at ZeRO-0, 1, 2 and 3. `model_path` loads local weights only
    (`local_files_only=True`); under ZeRO-3 through transformers' DeepSpeed integration."""
    import torch

    torch.manual_seed(seed)
    if model_path:
        net = _from_pretrained(model_path, ds_config, precision)
    else:
        net = _random_init(llama_config(model, seq_len=seq_len), ds_config, seed)
    net.config.use_cache = False
    if checkpointing:
        net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return net


def _random_init(config, ds_config: Mapping[str, Any], seed: int):
    """Build without Hugging Face's own init (as transformers does under ZeRO-3), then draw it
    with `init_weights`. Under zero.Init, `post_init` would run on parameters that are already
    partitioned (empty): a tied embedding kept torch's N(0, 1) and a 1024-token vocabulary
    started at loss ~250 instead of ln 1024 = 6.93."""
    import torch
    from transformers import LlamaForCausalLM

    zero3 = _stage(ds_config) == 3
    with contextlib.ExitStack() as stack:
        stack.enter_context(_no_init_weights())
        if zero3:
            import deepspeed

            stack.enter_context(deepspeed.zero.Init(config_dict_or_path=dict(ds_config)))
        net = LlamaForCausalLM(config)
    net.tie_weights()
    torch.manual_seed(seed)
    init_weights(net, zero3=zero3)
    return net


def _no_init_weights():
    """transformers' context that skips torch's and its own init at construction (5.x, 4.x)."""
    try:
        from transformers.initialization import no_init_weights
    except ImportError:
        try:
            from transformers.modeling_utils import no_init_weights
        except ImportError:
            return contextlib.nullcontext()
    return no_init_weights()


def init_weights(net, *, zero3: bool) -> None:
    """Hugging Face's own `_init_weights` for every module, in module order, drawn into
    full-size fp32 tensors on the CPU and copied into the model's parameters (under ZeRO-3
    gathered with `GatheredParameters(modifier_rank=0)`, as transformers'
    `initialize_weights_zero3` does, and re-partitioned on exit). Drawing on the CPU in fp32
    makes the weights independent of the stage, the device and the 16-bit dtype; a tied
    weight is drawn twice, its last module's (lm_head) draw kept, at every stage alike. A
    parameter `_init_weights` leaves untouched is an error, not garbage."""
    import torch

    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    with torch.no_grad():
        for name, module in net.named_modules():
            params = [(k, p) for k, p in module._parameters.items() if p is not None]
            if not params:
                net._init_weights(module)          # buffers only (rotary inv_freq)
                continue
            with _gathered([p for _, p in params], zero3):
                if rank == 0:
                    _init_on_cpu(net, module, params, name)


def _init_on_cpu(net, module, params, where: str) -> None:
    """Swap the module's parameters for NaN-filled CPU fp32 stand-ins, run `_init_weights` on
    them, copy the result back, and put the original parameter objects back in place."""
    import torch

    twins = {k: torch.nn.Parameter(torch.full(tuple(p.shape), math.nan), requires_grad=False)
             for k, p in params}
    try:
        module._parameters.update(twins)
        net._init_weights(module)
    finally:
        module._parameters.update(dict(params))
    for k, p in params:
        if torch.isnan(twins[k]).any():
            raise RuntimeError(f"{where}.{k}: transformers' _init_weights does not initialise a "
                               f"{type(module).__name__}; the runner cannot draw its init")
        p.data.copy_(twins[k].data.to(p.device, p.dtype))


def _gathered(params, zero3: bool):
    if not zero3:
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(params, modifier_rank=0)


def _from_pretrained(model_path: str, ds_config: Mapping[str, Any], precision: str):
    """Local weights at any stage. Under ZeRO-3, transformers builds under zero.Init and loads
    each partition when an `HfDeepSpeedConfig` is alive; the model keeps it alive
    (`_tierlab_hf_ds_config`) as transformers asks. At other stages no ZeRO-3 config may be
    left alive from an earlier build in this process."""
    from transformers import LlamaForCausalLM

    path = Path(model_path).expanduser()
    if not (path / "config.json").is_file():
        raise ConfigError(f"--model-path {path}: no config.json there (local weights only)")
    keep = None
    if _stage(ds_config) == 3:
        try:
            from transformers.integrations import HfDeepSpeedConfig

            keep = HfDeepSpeedConfig(dict(ds_config))
        except ImportError as e:
            raise ConfigError(f"--model-path with ZeRO-3 loads through transformers' DeepSpeed "
                              f"integration, which needs accelerate ({e}): pip install "
                              "accelerate") from None
    else:
        from transformers.integrations import unset_hf_deepspeed_config

        unset_hf_deepspeed_config()
    net = LlamaForCausalLM.from_pretrained(str(path), local_files_only=True,
                                           torch_dtype=_torch_dtype(precision))
    net._tierlab_hf_ds_config = keep
    return net


def count_params(net) -> int:
    """Parameter count, also for ZeRO-3 partitioned parameters (ds_numel)."""
    return sum(getattr(p, "ds_numel", p.numel()) for p in net.parameters())
