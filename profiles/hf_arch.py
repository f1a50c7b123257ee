"""Hugging Face `config.json` -> `Model` fields, one small reader per architecture (`model_type`).

Each reader maps the keys transformers' own config class reads onto Model's generic fields
(profiles/schema.py; the tensors they imply are listed in profiles/layout.py). A missing
optional key takes the default of the transformers config class (transformers 5.x
`configuration_<arch>.py`); a missing dimension key, a wrong type or an unknown `model_type` is a
ConfigError naming it — never a silent dense guess. A model_type without a reader is built
by transformers and read off its modules (profiles/hf_build.py). `meta_param_count` builds the model with
transformers on the meta device (no weights, no network) for the tests to compare against.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from tierlab import bounds
from tierlab.errors import ConfigError
from tierlab.profiles.hf_config import (decoder_config, named_causal_lm, notes,
                                        transformers_version, windows_of_types)


class _Cfg:
    """Typed access to one config.json mapping; errors name the file and the key."""

    def __init__(self, data: Mapping, where: str):
        self.data, self.where = data, where

    def _get(self, keys: tuple[str, ...]):
        for key in keys:
            if self.data.get(key) is not None:
                return key, self.data[key]
        return keys[0], None

    def int(self, *keys: str, default: int | None = None) -> int:
        key, value = self._get(keys)
        if value is None:
            if default is None:
                if key in self.data:
                    raise ConfigError(f"{self.where}: key {key!r} is null; it needs an integer")
                raise ConfigError(f"{self.where}: missing key {key!r}")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{self.where}: {key} must be an integer, got {value!r}")
        return value

    def bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ConfigError(f"{self.where}: {key} must be true or false, got {value!r}")
        return value

    def ints(self, key: str) -> tuple[int, ...]:
        value = self.data.get(key) or []
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int)
                                              for v in value):
            raise ConfigError(f"{self.where}: {key} must be a list of integers, got {value!r}")
        return tuple(value)

    def refuse(self, key: str, value: Any, why: str) -> None:
        if self.data.get(key, None) == value:
            raise ConfigError(f"{self.where}: {key}: {value!r} is not modelled ({why})")


def _decoder(c: _Cfg, tie: bool, **over) -> dict:
    """Llama-style keys: hidden_size, num_hidden_layers, num_attention_heads, ..."""
    heads = c.int("num_attention_heads")
    fields = dict(n_layers=c.int("num_hidden_layers"), hidden=c.int("hidden_size"),
                  ffn=c.int("intermediate_size"), n_heads=heads,
                  n_kv_heads=c.int("num_key_value_heads", default=heads), vocab=c.int("vocab_size"),
                  max_seq_len=c.int("max_position_embeddings", default=2048),
                  attn_head_dim=c.int("head_dim", default=0),
                  tie_embeddings=c.bool("tie_word_embeddings", tie))
    fields.update(over)
    return fields


# ----------------------------------------------------------------------------------------------
# attention windows (Model.attention_windows): which layers slide, as transformers 5.x decides it


def _window(c: _Cfg, key: str, absent: int | None) -> int | None:
    """A window or chunk key in tokens: null = none, absent = the config class's default
    `absent`; else a whole number within bounds.ATTENTION_WINDOW (one line naming the key)."""
    if key not in c.data:
        return absent
    value = c.data[key]
    if value is None:
        return None
    return int(bounds.check(value, bounds.ATTENTION_WINDOW, f"{c.where}: {key}"))


def _n_layers(c: _Cfg) -> int:
    """num_hidden_layers within its bound, before a list of one window per layer is built."""
    return int(bounds.check(c.int("num_hidden_layers"), bounds.MODEL["n_layers"],
                            f"{c.where}: num_hidden_layers"))


def _every_layer(c: _Cfg, window: int | None) -> tuple[int, ...]:
    """The same window in every block: the modeling file picks `create_sliding_window_causal_mask`
    for all layers when `config.sliding_window` is set (modeling_mistral.py, _mixtral, _phi3,
    _starcoder2, _qwen3_moe: `mask_function = create_causal_mask if self.config.sliding_window
    is None else create_sliding_window_causal_mask`); () = full attention."""
    return (window,) * _n_layers(c) if window else ()


def _typed_layers(c: _Cfg, default: list[str], windows: Mapping[str, int | None]) -> tuple[int, ...]:
    """Windows per block from `layer_types` (the file's, else the config class's `default`):
    the modeling file gives a `sliding_attention` layer `config.sliding_window` and its mask
    (modeling_gemma2.py, _qwen2, _gpt_oss: `causal_mask_mapping[config.layer_types[i]]`)."""
    types = c.data.get("layer_types")
    if types is None:
        types = default
    elif not isinstance(types, list) or len(types) != _n_layers(c) or \
            any(not isinstance(t, str) for t in types):
        raise ConfigError(f"{c.where}: layer_types must list one type per layer "
                          f"(num_hidden_layers), got {types!r}")
    return windows_of_types(types, windows.get, c.where)


def _qwen_windows(c: _Cfg) -> tuple[int, ...]:
    """configuration_qwen2.py / _qwen3.py `__post_init__`: sliding_window only with
    use_sliding_window; then layer i slides when i >= max_window_layers."""
    window = _window(c, "sliding_window", 4096) if c.bool("use_sliding_window", False) else None
    first = c.int("max_window_layers", default=28)
    return _typed_layers(c, ["sliding_attention" if window is not None and i >= first
                             else "full_attention" for i in range(_n_layers(c))],
                         {"sliding_window": window})


def _qwen2_moe_windows(c: _Cfg) -> tuple[int, ...]:
    """configuration_qwen2_moe.py `__post_init__`: with use_sliding_window, the even-indexed
    layers below max_window_layers slide ((i + 1) % 2 and i < max_window_layers)."""
    on = c.bool("use_sliding_window", False)
    window = _window(c, "sliding_window", 4096) if on else None
    first = c.int("max_window_layers", default=28)
    return _typed_layers(c, ["sliding_attention" if on and (i + 1) % 2 and i < first
                             else "full_attention" for i in range(_n_layers(c))],
                         {"sliding_window": window})


def _gemma2_windows(c: _Cfg) -> tuple[int, ...]:
    """configuration_gemma2.py `__post_init__`: the even-indexed layers slide ((i + 1) % 2)."""
    return _typed_layers(c, ["sliding_attention" if (i + 1) % 2 else "full_attention"
                             for i in range(_n_layers(c))],
                         {"sliding_window": _window(c, "sliding_window", 4096)})


def _no_attention_bias(c: _Cfg) -> None:
    c.refuse("attention_bias", True, "biases on attention only")


def _llama(c: _Cfg) -> dict:
    attn, mlp = c.bool("attention_bias", False), c.bool("mlp_bias", False)
    if attn != mlp:
        raise ConfigError(f"{c.where}: attention_bias: {attn} with mlp_bias: {mlp} is not "
                          "modelled (biases on every linear layer or none)")
    return _decoder(c, False, bias=attn)


def _mistral(c: _Cfg) -> dict:
    """Mistral: `sliding_window` (the config class's default 4096; null = full) in every layer;
    a `layer_types` key is ignored (MistralConfig warns: use Ministral)."""
    return _decoder(c, False,
                    attention_windows=_every_layer(c, _window(c, "sliding_window", 4096)))


def _mixtral(c: _Cfg) -> dict:
    from tierlab.profiles.schema import MoE
    moe = MoE(n_experts=c.int("num_local_experts", default=8),
              experts_per_token=c.int("num_experts_per_tok", default=2),
              expert_ffn=c.int("intermediate_size"))
    return _decoder(c, False, moe=moe,
                    attention_windows=_every_layer(c, _window(c, "sliding_window", None)))


def _qwen2(c: _Cfg) -> dict:
    return _decoder(c, False, qkv_bias=True, attention_windows=_qwen_windows(c))


def _qwen3(c: _Cfg) -> dict:
    _no_attention_bias(c)
    return _decoder(c, False, qk_norm="head", attention_windows=_qwen_windows(c))


def _qwen_moe_dense_layers(c: _Cfg, n_layers: int, n_experts: int) -> tuple[int, ...]:
    """modeling_qwen2_moe.py: a layer is MoE unless listed in mlp_only_layers, or
    (layer + 1) % decoder_sparse_step != 0."""
    step, only = c.int("decoder_sparse_step", default=1), c.ints("mlp_only_layers")
    if step < 1:    # modeling_qwen2_moe.py takes (layer + 1) % step: 0 is no layout at all
        raise ConfigError(f"{c.where}: decoder_sparse_step must be >= 1, got {step}")
    return tuple(i for i in range(n_layers)
                 if i in only or not (n_experts > 0 and (i + 1) % step == 0))


def _qwen_moe(c: _Cfg, shared: bool) -> dict:
    from tierlab.profiles.schema import MoE
    # configuration_qwen3_moe.py attribute_map: num_experts is num_local_experts (transformers 5)
    n_layers, n_experts = _n_layers(c), c.int("num_experts", "num_local_experts")
    moe = MoE(n_experts=n_experts, experts_per_token=c.int("num_experts_per_tok"),
              expert_ffn=c.int("moe_intermediate_size"),
              shared_ffn=c.int("shared_expert_intermediate_size") if shared else 0,
              shared_gate=shared, dense_layers=_qwen_moe_dense_layers(c, n_layers, n_experts))
    if shared:
        return _decoder(c, False, qkv_bias=True, moe=moe, attention_windows=_qwen2_moe_windows(c))
    _no_attention_bias(c)
    # configuration_qwen3_moe.py: no layer_types; a set sliding_window slides every layer
    window = _window(c, "sliding_window", 4096) if c.bool("use_sliding_window", False) else None
    return _decoder(c, False, qk_norm="head", moe=moe, attention_windows=_every_layer(c, window))


def _gemma(c: _Cfg) -> dict:
    return _decoder(c, True, attn_head_dim=c.int("head_dim", default=256))


def _gemma2(c: _Cfg) -> dict:
    return _decoder(c, True, attn_head_dim=c.int("head_dim", default=256), block_norms=4,
                    attention_windows=_gemma2_windows(c))


def _olmo(c: _Cfg) -> dict:
    _no_attention_bias(c)
    return _decoder(c, False, norm="nonparametric")


def _olmo2(c: _Cfg) -> dict:
    _no_attention_bias(c)
    return _decoder(c, False, qk_norm="full")


def _phi(c: _Cfg) -> dict:
    """Phi-1/1.5/2: parallel block with one LayerNorm, biases everywhere, biased LM head."""
    return _decoder(c, False, norm="layernorm", gated_mlp=False, bias=True, block_norms=1,
                    head_bias=True, qk_norm="head" if c.bool("qk_layernorm", False) else "none")


def _phi3(c: _Cfg) -> dict:
    """Phi-3/3.5/4 (model_type phi3): fused qkv_proj and gate_up_proj."""
    return _decoder(c, False, fused_qkv=True, fused_gate_up=True,
                    attention_windows=_every_layer(c, _window(c, "sliding_window", None)))


def _gpt2(c: _Cfg, kv_heads: int | None = None) -> dict:
    h, heads = c.int("n_embd"), c.int("n_head")
    return dict(n_layers=c.int("n_layer"), hidden=h, ffn=c.int("n_inner", default=4 * h),
                n_heads=heads, n_kv_heads=kv_heads or heads, vocab=c.int("vocab_size"),
                max_seq_len=c.int("n_positions", default=1024),
                tie_embeddings=c.bool("tie_word_embeddings", True), gated_mlp=False,
                norm="layernorm", bias=True, learned_pos_emb=True, fused_qkv=True)


def _gpt_bigcode(c: _Cfg) -> dict:
    return _gpt2(c, kv_heads=1 if c.bool("multi_query", True) else None)


def _gpt_neox(c: _Cfg) -> dict:
    c.refuse("attention_bias", False, "GPT-NeoX without attention biases")
    return _decoder(c, False, n_kv_heads=c.int("num_attention_heads"), norm="layernorm",
                    gated_mlp=False, bias=True, fused_qkv=True)


def _starcoder2(c: _Cfg) -> dict:
    return _decoder(c, True, norm="layernorm", gated_mlp=False, bias=c.bool("use_bias", True),
                    attention_windows=_every_layer(c, _window(c, "sliding_window", None)))


def _falcon(c: _Cfg) -> dict:
    """modeling_falcon.py: new_decoder_architecture -> num_kv_heads groups, else multi_query ->
    1 kv head; a parallel block has 1 LayerNorm (2 with num_ln_in_parallel_attn == 2, the new
    architecture's default), a sequential one 2."""
    h, heads = c.int("hidden_size", "n_embed"), c.int("num_attention_heads", "n_head")
    new = c.bool("new_decoder_architecture", False)
    if new:
        kv = c.int("num_kv_heads", default=heads)
    else:
        kv = 1 if c.bool("multi_query", True) else heads
    n_ln = c.int("num_ln_in_parallel_attn", default=2 if new else 1)
    norms = 2 if (not c.bool("parallel_attn", True) or n_ln == 2) else 1
    return dict(n_layers=c.int("num_hidden_layers", "n_layer"), hidden=h,
                ffn=c.int("ffn_hidden_size", default=4 * h), n_heads=heads, n_kv_heads=kv,
                vocab=c.int("vocab_size"), max_seq_len=c.int("max_position_embeddings", default=2048),
                tie_embeddings=c.bool("tie_word_embeddings", True), gated_mlp=False,
                norm="layernorm", bias=c.bool("bias", False), fused_qkv=True, block_norms=norms)


def _opt(c: _Cfg) -> dict:
    h = c.int("hidden_size")
    if c.int("word_embed_proj_dim", default=h) != h:
        raise ConfigError(f"{c.where}: word_embed_proj_dim != hidden_size (OPT-350m's project_in/"
                          "out) is not modelled")
    c.refuse("do_layer_norm_before", False, "OPT-350m's post-norm without a final LayerNorm")
    c.refuse("layer_norm_elementwise_affine", False, "LayerNorm without parameters")
    pos = c.int("max_position_embeddings", default=2048)
    return dict(n_layers=c.int("num_hidden_layers"), hidden=h, ffn=c.int("ffn_dim"),
                n_heads=c.int("num_attention_heads"), n_kv_heads=c.int("num_attention_heads"),
                vocab=c.int("vocab_size"), max_seq_len=pos, pos_emb_rows=pos + 2,
                tie_embeddings=c.bool("tie_word_embeddings", True), gated_mlp=False,
                norm="layernorm", bias=c.bool("enable_bias", True), learned_pos_emb=True)


def _bloom(c: _Cfg) -> dict:
    h, heads = c.int("hidden_size", "n_embed"), c.int("n_head", "num_attention_heads")
    return dict(n_layers=c.int("n_layer", "num_hidden_layers"), hidden=h, ffn=4 * h,
                n_heads=heads, n_kv_heads=heads, vocab=c.int("vocab_size"),
                max_seq_len=c.int("seq_length", default=2048),
                tie_embeddings=c.bool("tie_word_embeddings", True), gated_mlp=False,
                norm="layernorm", bias=True, fused_qkv=True, embed_norm=True)


def _deepseek(c: _Cfg) -> dict:
    """DeepSeek-V2/V3: MLA attention; MoE from layer first_k_dense_replace on, every
    moe_layer_freq-th layer; the shared experts are one MLP n_shared_experts x wide."""
    from tierlab.profiles.schema import MLA, MoE
    _no_attention_bias(c)
    c.refuse("mlp_bias", True, "MLP biases in DeepSeek")
    n_layers = _n_layers(c)                                     # bounded before the layer walk
    first, freq = c.int("first_k_dense_replace", default=0), c.int("moe_layer_freq", default=1)
    if freq < 1:
        raise ConfigError(f"{c.where}: moe_layer_freq must be >= 1, got {freq}")
    expert_ffn = c.int("moe_intermediate_size")
    mla = MLA(q_lora_rank=c.int("q_lora_rank", default=0), kv_lora_rank=c.int("kv_lora_rank"),
              qk_nope_head_dim=c.int("qk_nope_head_dim"), qk_rope_head_dim=c.int("qk_rope_head_dim"),
              v_head_dim=c.int("v_head_dim"))
    moe = MoE(n_experts=c.int("n_routed_experts"), experts_per_token=c.int("num_experts_per_tok"),
              expert_ffn=expert_ffn, shared_ffn=c.int("n_shared_experts", default=0) * expert_ffn,
              dense_layers=tuple(i for i in range(n_layers) if i < first or i % freq))
    heads = c.int("num_attention_heads")
    return _decoder(c, False, n_kv_heads=heads, attn_head_dim=mla.v_head_dim, mla=mla, moe=moe)


ARCHITECTURES: dict[str, tuple[str, Callable[[_Cfg], dict]]] = {
    "llama": ("Llama 1/2/3/3.1/3.2", _llama),
    "mistral": ("Mistral", _mistral),
    "mixtral": ("Mixtral (MoE)", _mixtral),
    "qwen2": ("Qwen2 / Qwen2.5", _qwen2),
    "qwen3": ("Qwen3", _qwen3),
    "qwen2_moe": ("Qwen1.5-MoE / Qwen2-MoE", lambda c: _qwen_moe(c, shared=True)),
    "qwen3_moe": ("Qwen3-MoE", lambda c: _qwen_moe(c, shared=False)),
    "gemma": ("Gemma", _gemma),
    "gemma2": ("Gemma-2", _gemma2),
    "phi": ("Phi-1/1.5/2", _phi),
    "phi3": ("Phi-3/3.5/4", _phi3),
    "gpt2": ("GPT-2", _gpt2),
    "gpt_bigcode": ("GPTBigCode / StarCoder / SantaCoder", _gpt_bigcode),
    "gpt_neox": ("GPT-NeoX / Pythia", _gpt_neox),
    "starcoder2": ("StarCoder2", _starcoder2),
    "falcon": ("Falcon", _falcon),
    "opt": ("OPT", _opt),
    "bloom": ("BLOOM", _bloom),
    "olmo": ("OLMo", _olmo),
    "olmo2": ("OLMo-2", _olmo2),
    "deepseek_v2": ("DeepSeek-V2 (MLA + MoE)", _deepseek),
    "deepseek_v3": ("DeepSeek-V3 / R1 (MLA + MoE)", _deepseek),
}
"""model_type -> (family, reader). The one list of supported architectures (docs/models.md)."""


FLOAT_TAGS = {"Infinity": float("inf"), "-Infinity": float("-inf"), "NaN": float("nan")}
"""transformers 5.x writes a float JSON cannot hold as `{"__float__": "Infinity"}` (its
configuration_utils.py `_encode_special_floats`, e.g. Mamba-2's `time_step_limit` [0.0, inf] in
any config save_pretrained wrote) and reads it back with `_decode_special_floats`."""


def decode_special_floats(obj: Any) -> Any:
    """`obj` with transformers' tagged floats read back as floats (as from_pretrained reads a
    config.json); anything else as it is. Walked with a stack, not recursion: a config nested
    as deep as the JSON reader allows is refused by the readers after this, in one line."""
    def tag(v):
        return isinstance(v, Mapping) and set(v) == {"__float__"} and v["__float__"] in FLOAT_TAGS

    if tag(obj):
        return FLOAT_TAGS[obj["__float__"]]
    if not isinstance(obj, (Mapping, list)):
        return obj
    root = dict(obj) if isinstance(obj, Mapping) else list(obj)
    stack = [root]
    while stack:
        node = stack.pop()
        for k, v in (node.items() if isinstance(node, dict) else enumerate(node)):
            if tag(v):
                node[k] = FLOAT_TAGS[v["__float__"]]
            elif isinstance(v, (Mapping, list)):
                node[k] = dict(v) if isinstance(v, Mapping) else list(v)
                stack.append(node[k])
    return root


def model_fields(data: Any, where: str) -> dict:
    """Model keyword arguments (without name, seq_len, source) from a config.json mapping."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a JSON object")
    kind = data.get("model_type")
    if kind is None and "auto_map" in data:     # a remote-code config (SmallThinker): say so
        raise ConfigError(f"{where}: missing key 'model_type': its auto_map asks for "
                          "trust_remote_code, which tierlab never runs; tierlab reads only "
                          "architectures transformers builds itself")
    if kind is None:
        raise ConfigError(f"{where}: missing key 'model_type' (the architecture; supported: "
                          f"{', '.join(ARCHITECTURES)})")
    _refuse_expert_parallel(data, where)
    if kind not in ARCHITECTURES:
        return _built_fields(data, where, kind)
    return ARCHITECTURES[kind][1](_Cfg(data, where))


def _built_fields(data: Mapping, where: str, kind: Any) -> dict:
    """A model_type without a reader: built by transformers when installed (profiles/hf_build.py)."""
    from tierlab.profiles import hf_build

    version = transformers_version() if isinstance(kind, str) else None
    if version is None:
        hint = "; install tierlab[runner] (transformers) to read it" if isinstance(kind, str) else ""
        raise ConfigError(f"{where}: model_type {kind!r} is not a supported architecture; "
                          f"supported: {', '.join(ARCHITECTURES)}{hint}")
    return hf_build.fields_of(data, where)


def family(data: Mapping, where: str) -> str:
    """The family named in a Model's `source`: the reader's, or for a model built by
    transformers its config class and what the simulation leaves out (hf_config.notes)."""
    kind = data["model_type"]
    if kind in ARCHITECTURES:
        return ARCHITECTURES[kind][0]
    return "; ".join((f"{kind}, built by transformers {transformers_version()} on the "
                      "meta device", *notes(data, where)))


def _refuse_expert_parallel(data: Mapping, where: str) -> None:
    """DeepSeek configs carry `ep_size`; > 1 asks for expert parallelism, which is not modelled."""
    ep = data.get("ep_size", 1)
    if ep not in (None, 1):
        raise ConfigError(f"{where}: ep_size: {ep!r} asks for expert parallelism, which tierlab "
                          "does not model (every rank holds every expert's ZeRO partition)")


def meta_param_count(data: Mapping) -> int | None:
    """transformers' own parameter count of the config (of its text decoder, for a multimodal
    one), built on the meta device (no weights, no network); None when transformers or torch is
    not importable."""
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError:
        return None
    cfg = dict(data)
    kind = cfg.pop("model_type")
    for key in ("auto_map", "quantization_config", "_name_or_path", "architectures"):
        cfg.pop(key, None)
    config = decoder_config(AutoConfig.for_model(kind, **cfg))
    with torch.device("meta"):
        try:
            model = AutoModelForCausalLM.from_config(config)
        except ValueError:  # Musicgen: the mapping's class of `kind` takes the decoder config
            model = named_causal_lm(kind, config)
            if model is None:
                raise
    return sum(p.numel() for p in model.parameters())
