"""Hugging Face `config.json` -> `Model` fields for an architecture without a hand reader.

transformers builds the model from its own config class on the meta device (no weights, no
network, no remote code) and the fields are read off the real modules: the decoder layers, the
input embedding (vocab x hidden), the attention projections (heads from the config object,
checked against the shapes), the MLP or the experts (gated or not, widths, router, shared
expert), the norms and the biases. Then tierlab's own count of the derived Model
(profiles/layout.py) must equal transformers' within COUNT_TOLERANCE, total and active; if not,
a one-line ConfigError names the file, the model_type, both counts and what is not modelled.
transformers and torch are optional (tierlab[runner]): imported inside the functions.
"""
from __future__ import annotations

import re
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping

from tierlab import bounds
from tierlab.errors import ConfigError
from tierlab.profiles.hf_mixer import mixer_tensors
from tierlab.profiles.schema import AttentionTensors, PerLayerInputs, Shared

COUNT_TOLERANCE = 5e-3
"""tierlab's count of a built architecture may differ from transformers' by 0.5 % (issue 30):
what tierlab does not model (attention sinks, router biases) stays below it."""

DROPPED_KEYS = ("auto_map", "quantization_config", "_name_or_path", "architectures")
"""config.json keys that are not the architecture (remote code, the checkpoint's quantization)."""

TOP_K_KEYS = ("num_experts_per_tok", "num_experts_per_token", "experts_per_token", "moe_top_k",
              "moe_topk", "top_k", "top_k_experts")
"""Config attributes that hold the routed experts per token, first found wins."""

_ATTENTION = ("self_attn", "attn", "attention", "self_attention", "multi_head_attention")
_MLP = ("mlp", "feed_forward", "block_sparse_moe", "moe", "ffn")
_SHARED = ("shared_expert", "shared_experts", "shared_mlp")


class Unmodelled(Exception):
    """A part of the built model that tierlab's Model cannot express (the message names it)."""


def transformers_version() -> str | None:
    """The installed transformers' version, None when transformers or torch is missing."""
    try:
        import torch  # noqa: F401
        import transformers
    except ImportError:
        return None
    return transformers.__version__


@contextmanager
def quiet() -> Iterator[None]:
    """transformers' warnings and log lines about a config it builds (token ids out of a small
    vocab, deprecated keys) held back: tierlab says in one line what matters."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(level)


def text_config(data: Mapping, where: str) -> Any:
    """transformers' config object of the text decoder (a multimodal config's `text_config`)."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    kind = data["model_type"]
    if kind not in CONFIG_MAPPING:
        remote = " (its auto_map asks for trust_remote_code, which tierlab never runs)" \
            if "auto_map" in data else ""
        raise ConfigError(f"{where}: model_type {kind!r} is not known to transformers "
                          f"{transformers_version()}{remote}; tierlab reads only architectures "
                          "transformers builds itself")
    cfg = {k: v for k, v in data.items() if k not in DROPPED_KEYS and k != "model_type"}
    try:
        with quiet():
            config = AutoConfig.for_model(kind, **cfg)
        text = config.get_text_config(decoder=True)
    except Exception as e:      # transformers' own validation: one line, never a traceback
        raise ConfigError(f"{where}: transformers rejects this {kind!r} config: "
                          f"{_first_line(e)}") from None
    if not hasattr(text, "model_type"):     # a text_config that the config class does not take
        raise ConfigError(f"{where}: model_type {kind!r} ({type(config).__name__}) takes no "
                          "text_config: the decoder's keys belong at the top level")
    return text


def build(config: Any, where: str, data: Mapping | None = None) -> Any:
    """The causal LM of `config` on the meta device (transformers' AutoModelForCausalLM); for a
    multimodal `data` whose text decoder has no causal-LM class of its own (Qwen2.5-VL, Llama 3.2
    Vision), the decoder and LM head of the model transformers builds for the whole
    config (AutoModelForImageTextToText), its towers left out."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"), quiet():
            return AutoModelForCausalLM.from_config(config)
    except Exception as e:
        refusal = ConfigError(f"{where}: transformers cannot build a causal LM of model_type "
                              f"{config.model_type!r}: {_first_line(e)}")
    decoder = multimodal_decoder(data) if data is not None else None
    if decoder is None:
        raise refusal from None
    return decoder


def multimodal_decoder(data: Mapping) -> Any:
    """The text decoder + LM head of the image-text model transformers builds for `data` (meta
    device), as one module with the causal LM's embedding accessors; None when it builds none."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    cfg = {k: v for k, v in data.items() if k not in DROPPED_KEYS and k != "model_type"}
    try:
        with torch.device("meta"), quiet():
            full = AutoModelForImageTextToText.from_config(
                AutoConfig.for_model(data["model_type"], **cfg))
    except Exception:       # noqa: BLE001 - not an image-text model: the causal-LM refusal holds
        return None

    class TextDecoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model, self.lm_head = full.get_decoder(), full.get_output_embeddings()

        def get_input_embeddings(self):
            return self.model.get_input_embeddings()

        def get_output_embeddings(self):
            return self.lm_head

    return TextDecoder()


COUNT_ATTRIBUTES = (("num_hidden_layers", "n_layers"), ("hidden_size", "hidden"),
                    ("intermediate_size", "ffn"), ("num_attention_heads", "n_heads"),
                    ("num_key_value_heads", "n_kv_heads"), ("vocab_size", "vocab"),
                    ("head_dim", "attn_head_dim"), ("num_local_experts", "n_experts"),
                    ("num_experts", "n_experts"), ("n_routed_experts", "n_experts"),
                    ("num_experts_per_tok", "experts_per_token"),
                    ("qk_nope_head_dim", "attn_head_dim"), ("qk_rope_head_dim", "attn_head_dim"),
                    ("v_head_dim", "attn_head_dim"), ("q_lora_rank", "attn_head_dim"),
                    ("kv_lora_rank", "attn_head_dim"))
"""transformers config attributes -> the Model field whose bound (tierlab.bounds) they meet."""


INDEXER_ATTRIBUTES = (("index_n_heads", bounds.MODEL["n_heads"]),
                      ("index_head_dim", bounds.MODEL["n_heads"]),
                      ("index_topk", bounds.ATTENTION_WINDOW))
"""DeepSeek sparse attention's indexer keys (AttentionTensors.indexer) and their bounds: heads
and head width at least 1 (DeepseekV32Indexer builds wq_b of index_n_heads x index_head_dim), a
top-k of at least one key."""


PER_LAYER_WIDTH = bounds.Bound(0, bounds.MODEL["hidden"].high, why=bounds.MODEL["hidden"].why)
"""hidden_size_per_layer_input (PerLayerInputs.width): 0 is transformers' "none"
(modeling_gemma4.py line 1346: `if self.hidden_size_per_layer_input:`), else a width."""


def check_counts(get: Any, where: str) -> None:
    """The config's counts (`get(attribute)`: of the config.json mapping, then of transformers'
    config object) within the bounds of the Model fields they become, before anything is built
    from them (a 1e9-layer config takes hours to build, even on the meta device)."""
    for attr, field in COUNT_ATTRIBUTES:
        value = get(attr)
        if isinstance(value, int) and not isinstance(value, bool):
            bounds.check(value, bounds.MODEL[field], f"{where}: {attr}")
    for attr, bound in INDEXER_ATTRIBUTES:
        value = get(attr)
        if isinstance(value, int) and not isinstance(value, bool):
            bounds.check(value, bound, f"{where}: {attr}")
    check_per_layer_keys(get, where)


def check_per_layer_keys(get: Any, where: str) -> None:
    """Gemma 4's per-layer-input keys (Model.per_layer_inputs): hidden_size_per_layer_input a
    whole number >= 0 (0: none), and where it is > 0, vocab_size_per_layer_input >= 1 (the
    table's rows): one ConfigError line naming the key (transformers would fail building a
    tensor of negative size, or an embedding of 0 rows)."""
    width = get("hidden_size_per_layer_input")
    if width is None:
        return
    bounds.check(width, PER_LAYER_WIDTH, f"{where}: hidden_size_per_layer_input")
    vocab = get("vocab_size_per_layer_input")
    if width and vocab is not None:
        bounds.check(vocab, bounds.MODEL["vocab"], f"{where}: vocab_size_per_layer_input")


def check_layer_counts(config: Any, where: str) -> None:
    """Each layer's value of a heterogeneous config's per-layer count (transformers'
    per_layer_config: Gemma 4's head_dim, num_key_value_heads; configuration_gemma4.py fills
    them from global_head_dim, num_global_key_value_heads) a whole number within its Model
    field's bound and >= 1 (a head 0 wide holds nothing to attend with): one ConfigError line
    naming the layer and the key."""
    fields = dict(COUNT_ATTRIBUTES)
    for attr in getattr(config, "per_layer_attributes", None) or ():
        for i, layer in enumerate(config.per_layer_config):
            value = getattr(layer, attr, None)
            if attr not in fields or value is None:
                continue
            key = f"{where}: per_layer_config layer {i} {attr}"
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 1:
                raise ConfigError(f"{key}: must be >= 1, got {value!r}")
            bounds.check(value, bounds.MODEL[fields[attr]], key)


REPEAT_SUFFIXES = ("_loops", "_passes", "_cycles")
"""Config keys that run blocks more than once per token: Dory's n_recurrent_loops
(modeling_dory.py DoryModel.forward: `for loop_idx in range(n_loops)` over the recurrent
layers), Inkling2-Loop's loop_num_passes, HRM's H_cycles / L_cycles."""


def check_repeats(config: Any, where: str) -> None:
    """A config whose blocks run in loops (a REPEAT_SUFFIXES key above 1): one ConfigError line,
    since tierlab times each block once per token."""
    loops = {k: v for k, v in config.to_dict().items() if k.lower().endswith(REPEAT_SUFFIXES)
             and isinstance(v, int) and not isinstance(v, bool) and v > 1}
    if loops:
        what = ", ".join(f"{k} = {v}" for k, v in loops.items())
        raise ConfigError(f"{where}: model_type {config.model_type!r} runs blocks more than once "
                          f"per token ({what}); tierlab times each block once, so it does not "
                          "model looped blocks")


def config_value(config: Any, attr: str) -> Any:
    """config.attr (None where absent); for an attribute a heterogeneous config sets per layer
    (transformers' HeterogeneousConfigMixin, e.g. Gemma 4: reading it on the whole config
    raises AmbiguousGlobalPerLayerAttributeError) the largest of the layers' values, which is
    what a bound checks."""
    if attr in (getattr(config, "per_layer_attributes", None) or ()):
        values = [getattr(layer, attr, None) for layer in config.per_layer_config]
        numbers = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
        return max(numbers) if numbers else next((v for v in values if v is not None), None)
    return getattr(config, attr, None)


def layer_config(config: Any, layer: int) -> Any:
    """The config block `layer` is built from: a heterogeneous config's own for that layer
    (transformers' HeterogeneousConfigMixin `per_layer_config[layer]`, a whole config with the
    layer's values: modeling_gemma4.py Gemma4TextAttention.__init__ reads its head_dim and
    num_key_value_heads there), else `config`."""
    if not getattr(config, "per_layer_attributes", None):
        return config
    return config.per_layer_config[layer]


def _unread(e: Exception) -> str:
    """Why a built model's modules or config could not be read, in one line: a per-layer
    attribute of a heterogeneous config (transformers' AmbiguousGlobalPerLayerAttributeError,
    raised on reading it from the whole config) is named as such."""
    if type(e).__name__ == "AmbiguousGlobalPerLayerAttributeError":
        attr = str(e).split("'")[1] if str(e).count("'") >= 2 else "an attribute"
        return (f"its layers differ in {attr} (a heterogeneous per-layer config, transformers' "
                "per_layer_config); tierlab's blocks of one kind share one shape")
    return _first_line(e)


def _first_line(e: Exception) -> str:
    """The exception's first line (and the next one when the first only introduces it)."""
    text = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    head = " ".join(text[:2]) if len(text) > 1 and text[0].endswith(":") else \
        (text[0] if text else "")
    return f"{type(e).__name__}: {head}"


def notes(data: Mapping, where: str) -> tuple[str, ...]:
    """What the simulation of a built config leaves out, for the Model's `source` text."""
    config = text_config(data, where)
    out = []
    towers = [k.removesuffix("_config") for k in data if k.endswith("_config")
              and k != "text_config" and isinstance(data[k], Mapping)
              and k != "quantization_config"]
    if isinstance(data.get("text_config"), Mapping) or towers:   # Qwen2.5-VL: no text_config
        out.append(f"text decoder only: the {'/'.join(towers) or 'vision'} tower is left out")
    return tuple(out)


WINDOW_KEYS = {"full_attention": None, "sliding_attention": "sliding_window",
               "chunked_attention": "attention_chunk_size", "indexed_attention": None}
"""transformers' `layer_types` entries tierlab times -> the config key of their window
(masking_utils.py: create_causal_mask, create_sliding_window_causal_mask,
create_chunked_causal_mask). `indexed_attention` (DeepSeek sparse attention) is causal over all
keys: eager / SDPA compute the dense scores and mask all but the indexer's top-k
(modeling_deepseek_v32.py DeepseekV32Attention.forward: `index_mask`); timed only where its
indexer was read (AttentionTensors.indexer, check_indexed)."""


def windows_of_types(types: list, get: Callable[[str], Any], where: str, *,
                     bidirectional: bool = False) -> tuple[int, ...]:
    """Model.attention_windows of a list of layer types, `get(key)` the config's window keys:
    a `sliding_attention` layer attends `sliding_window` keys (masking_utils.py
    `sliding_window_overlay`: kv_idx > q_idx - sliding_window), a `chunked_attention` one its
    chunk of `attention_chunk_size` (`chunked_overlay`), a `full_attention` one all (0);
    `bidirectional`: Gemma 3's window (modeling_gemma3.py `_bidirectional_window_overlay`:
    |q_idx - kv_idx| < sliding_window) spans 2 w - 1 keys. Another type, a missing window or
    one out of bounds.ATTENTION_WINDOW: one ConfigError line naming the key."""
    out = []
    for t in types:
        if t not in WINDOW_KEYS:
            raise ConfigError(f"{where}: layer_types: {t!r} is not modelled (tierlab times "
                              f"{', '.join(WINDOW_KEYS)})")
        key = WINDOW_KEYS[t]
        if key is None:
            out.append(0)
            continue
        if get(key) is None:
            raise ConfigError(f"{where}: layer_types lists {t!r} layers but {key} is not set "
                              "(transformers cannot build their mask)")
        window = int(bounds.check(get(key), bounds.ATTENTION_WINDOW, f"{where}: {key}"))
        out.append(2 * window - 1 if bidirectional and t == "sliding_attention" else window)
    return tuple(out) if any(out) else ()


def attention_windows(config: Any, where: str, mixer_layers: tuple = ()) -> tuple[int, ...]:
    """Model.attention_windows of transformers' config object, as its modeling file masks:
    its `layer_types` (the config class fills them in `__post_init__`: Gemma 3's
    sliding_window_pattern, gpt-oss's alternation, Llama 4's no_rope_layers -> chunked), else
    a set `sliding_window` in every layer (modeling_mistral.py and its copies:
    create_sliding_window_causal_mask unless config.sliding_window is None); `mixer_layers`
    (Model.mixer: Mamba's "linear_attention", LFM2's "conv" blocks) attend nothing: 0."""
    types = getattr(config, "layer_types", None)
    if not types:
        types = ["sliding_attention" if getattr(config, "sliding_window", None) else
                 "full_attention"] * config.num_hidden_layers
    types = ["full_attention" if i in mixer_layers else t for i, t in enumerate(types)]
    bidirectional = config.model_type == "gemma3_text" and \
        bool(getattr(config, "use_bidirectional_attention", False))
    return windows_of_types(types, lambda key: getattr(config, key, None), where,
                            bidirectional=bidirectional)


# ----------------------------------------------------------------------------------------------
# reading the modules: each reader returns Model fields, or raises Unmodelled naming what it met


def _child(module: Any, names: tuple[str, ...]) -> tuple[str, Any] | None:
    return next(((n, c) for n, c in module.named_children() if n in names), None)


def _is_norm(module: Any) -> bool:
    return "norm" in type(module).__name__.lower()


def _numel(module: Any) -> int:
    return sum(p.numel() for p in module.parameters())


def _norm_width(norm: Any) -> int:
    """Elements a norm normalises, read off its weight (0 without one)."""
    weight = getattr(norm, "weight", None)
    return weight.numel() if weight is not None else 0


def _matrices(module: Any) -> dict[str, Any]:
    """name -> parameter of the matrices (2-D/3-D, not a norm's, not a bias)."""
    norms = {n for n, m in module.named_modules() if n and _is_norm(m)}
    return {n: p for n, p in module.named_parameters()
            if p.dim() >= 2 and "bias" not in n.rsplit(".", 1)[-1]
            and n.rsplit(".", 1)[0] not in norms}


def decoder_layers(model: Any, n_layers: int) -> Any:
    """The ModuleList of the decoder blocks: the largest one with n_layers entries."""
    lists = [m for m in model.modules() if type(m).__name__ == "ModuleList" and len(m) == n_layers]
    if not lists:
        raise Unmodelled(f"no list of {n_layers} decoder layers")
    return max(lists, key=_numel)


def attention_fields(attn: Any, config: Any, hidden: int) -> dict:
    """Heads, kv heads and head width from the config object, checked against the projections;
    fused or separate q/k/v; q/k norms ('head': head_dim wide, 'full': all heads). Projections
    of other shapes: the attention read as tensors (tensor_attention); a linear attention
    (NOT_SOFTMAX): Unmodelled, saying so."""
    not_softmax(attn)
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    q = heads * head_dim
    mats = _matrices(attn)
    numel = sum(p.numel() for p in mats.values())
    # kv heads: the config's, else multi-head (GPT-J has no num_key_value_heads)
    kv_heads = [n for n in (getattr(config, "num_key_value_heads", None), heads) if n]
    kv = next((n for n in kv_heads if numel == 2 * hidden * (q + n * head_dim)
               and _shapes_are(mats, hidden, q, n * head_dim)), None) \
        if len(mats) in (2, 4) else None    # q, k, v, o or qkv, o: else read as tensors
    # Qwen3-Next: q_proj outputs the query and a gate of q_dim (Model.attn_output_gate)
    gated = kv is None and len(mats) == 4 and any(
        numel == 2 * hidden * (q + n * head_dim) + hidden * q for n in kv_heads)
    if gated:
        kv = next(n for n in kv_heads if numel == 2 * hidden * (q + n * head_dim) + hidden * q)
    if kv is None:
        return tensor_attention(attn, config, hidden)
    widths = [w for w in (_norm_width(m) for n, m in attn.named_modules() if n and _is_norm(m))
              if w]
    if widths and max(widths) not in (head_dim, q):
        raise Unmodelled(f"q/k norms {widths} wide in {type(attn).__name__}")
    qk_norm = "none" if not widths else ("head" if max(widths) == head_dim else "full")
    return dict(n_heads=heads, n_kv_heads=kv, attn_head_dim=head_dim if q != hidden else 0,
                fused_qkv=len(mats) == 2, qk_norm=qk_norm, attn_output_gate=gated)


def _shapes_are(mats: dict, hidden: int, q: int, kv: int) -> bool:
    """The projections are q, k, v, o (or qkv, o) of q and kv widths, as Linear (out x in)
    or all as Conv1D (in x out) stores them: numel alone takes MiMo-V2-Flash's sliding layers
    (4 kv heads of 16 for k, of 8 for v) for 2 kv heads of 16."""
    want = [(q, hidden), (kv, hidden), (kv, hidden), (hidden, q)] if len(mats) == 4 else \
        [(q + 2 * kv, hidden), (hidden, q)]
    have = sorted(tuple(p.shape) for p in mats.values())
    return have in (sorted(want), sorted(s[::-1] for s in want))


NOT_SOFTMAX = ("deltaattention", "lightningattention", "retention", "rwkv")
"""Words in an attention module's class name that mark a linear attention, not softmax:
a MiniMaxLightningAttention, RwkvSelfAttention (their forwards keep a recurrent state, no score
matrix) or KimiLinearDeltaAttention / BailingHybridDeltaAttention (KDA) that is not the
computation hf_mixer.is_lightning, is_rwkv or is_kda times (those that are are read as mixers
before this).
Not "linear" alone: KimiLinearAttention is Kimi Linear's softmax MLA."""


def not_softmax(attn: Any) -> None:
    """Unmodelled, in one line, for an attention module of a linear-attention class."""
    name = type(attn).__name__
    if any(w in name.lower() for w in NOT_SOFTMAX):
        raise Unmodelled(f"linear attention ({name}: a recurrent state in place of softmax "
                         "scores, which tierlab does not time)")


def _int_attr(obj: Any, *names: str) -> tuple[str, Any] | None:
    """(name, value) of the first of `names` that `obj` sets to a number (0 included)."""
    for n in names:
        v = getattr(obj, n, None)
        if isinstance(v, int) and not isinstance(v, bool):
            return n, v
    return None


def score_shape(attn: Any, config: Any, hidden: int) -> tuple[int, int, int, int]:
    """(query heads, kv heads, q/k head width, v head width) as an attention module's forward
    reshapes its projections: its own attributes first (every transformers attention sets
    `head_dim`, or `qk_head_dim` and `v_head_dim` for MLA: modeling_deepseek_v3.py
    DeepseekV3Attention, modeling_minicpm3.py MiniCPM3Attention; `num_heads` or config's
    num_attention_heads; `num_key_value_groups` = heads / kv heads), then the config's. A width
    or count below 1 is Unmodelled naming its attribute."""
    heads = _int_attr(attn, "num_heads", "num_attention_heads") or \
        ("num_attention_heads", config.num_attention_heads)
    qk = _int_attr(attn, "qk_head_dim", "head_dim") or _int_attr(config, "head_dim") or \
        ("hidden_size // num_attention_heads", hidden // max(1, heads[1]))
    v = _int_attr(attn, "v_head_dim") or _int_attr(config, "v_head_dim") or qk
    for name, value in (heads, qk, v):
        if value < 1:
            raise Unmodelled(f"attention {name} = {value} in {type(attn).__name__} (heads and "
                             "head widths are whole numbers >= 1)")
    groups = _int_attr(attn, "num_key_value_groups")
    kv = heads[1] // groups[1] if groups and groups[1] > 0 and heads[1] % groups[1] == 0 else \
        (getattr(config, "num_key_value_heads", None) or heads[1])
    return heads[1], kv if heads[1] % kv == 0 else heads[1], qk[1], v[1]


def tensor_attention(attn: Any, config: Any, hidden: int) -> dict:
    """Model attention fields of a softmax attention whose projections are not q/k/v/o of its
    heads: its tensors as transformers builds them (Model.attention_tensors: every Linear weight
    a GEMM, every other tensor small; profiles/hf_mixer.py mixer_tensors, the same rule as a
    mixer's) and its score shape (score_shape), checked by its output projection: a Linear from
    heads x v width to hidden (o_proj, which every such forward ends with)."""
    heads, kv, qk, v = score_shape(attn, config, hidden)
    mats, small = mixer_tensors(attn)
    if not any(i == heads * v and o == hidden for _, i, o in mats):
        shapes = ", ".join(f"{n} {i}x{o}" for n, i, o in mats)
        raise Unmodelled(f"attention projections in {type(attn).__name__} ({shapes}) without an "
                         f"output projection from {heads} heads of {v} to {hidden}")
    return dict(n_heads=heads, n_kv_heads=kv, attn_head_dim=qk, fused_qkv=False,
                qk_norm="none", attn_output_gate=False,
                attention_tensors=AttentionTensors(matrices=mats, small_params=small,
                                                   v_head_dim=v, indexer=indexer_shape(attn)))


def indexer_shape(attn: Any) -> tuple[int, int, int]:
    """(heads, head width, top-k) of a DeepSeek sparse attention's `indexer` child
    (modeling_deepseek_v32.py DeepseekV32Indexer.__init__: n_heads = index_n_heads, head_dim =
    index_head_dim, index_topk), () without one; an indexer without them: Unmodelled."""
    child = _child(attn, ("indexer",))
    if child is None:
        return ()
    got = [_int_attr(child[1], n) for n in ("n_heads", "head_dim", "index_topk")]
    if any(g is None or g[1] < 1 for g in got):
        raise Unmodelled(f"an indexer ({type(child[1]).__name__}) whose heads, head width and "
                         "top-k tierlab does not find")
    return tuple(g[1] for g in got)


def linear_biases(module: Any) -> tuple[bool, bool]:
    """(every projection of `module` has a bias, some has one): a Linear's or Conv1D's (GPT-2)
    `bias`; 3-D experts' `*_bias` tensors count too."""
    flags = [getattr(m, "bias", None) is not None for m in module.modules()
             if not _is_norm(m) and getattr(m, "weight", None) is not None and m.weight.dim() == 2]
    flags += [True for n, _ in module.named_parameters() if n.endswith("_bias")]
    return bool(flags) and all(flags), any(flags)


def mlp_shape(module: Any, hidden: int, n: int = 1, fused_experts: bool = False) -> dict:
    """Width and gating of one MLP (of `n` experts stored together): 3 matrices, or 2 named
    gate_up (fused), is gated; 2 others are not (GPT: fc_in, fc_out)."""
    mats = _matrices(module)
    per = len(mats) if fused_experts else len(mats) / n
    gated = per == 3 or (per == 2 and (any("gate" in name for name in mats)
                                       or _fused_gate_up(list(mats.values()))))
    total = sum(p.numel() for p in mats.values()) // n
    width, rest = divmod(total, (3 if gated else 2) * hidden)
    if rest or per not in (2, 3):
        raise Unmodelled(f"an MLP of {per:g} matrices and {total:,} parameters in "
                         f"{type(module).__name__}")
    return dict(ffn=width, gated_mlp=gated, fused_gate_up=gated and per == 2)


def _fused_gate_up(mats: list) -> bool:
    """Two Linear weights (out x in) whose first outputs twice what the second takes: gate and
    up in one matrix, chunked in two (Granite's shared_mlp input_linear -> output_linear:
    modeling_granitemoehybrid.py GraniteMoeHybridMLP.forward)."""
    return len(mats) == 2 and all(p.dim() == 2 for p in mats) and \
        mats[0].shape[0] == 2 * mats[1].shape[1]


def experts_per_token(config: Any) -> int | None:
    """Top-k of the config object (the first of TOP_K_KEYS it sets)."""
    return next((getattr(config, k) for k in TOP_K_KEYS if getattr(config, k, None)), None)


def n_experts(experts: Any) -> int:
    """Routed experts of an `experts` module: a list of MLPs, or 3-D tensors (experts first)."""
    if type(experts).__name__ == "ModuleList":
        return len(experts)
    return next(iter(_matrices(experts).values())).shape[0]


def moe_fields(mlp: Any, config: Any, hidden: int, beside: Any = None) -> dict:
    """Routed experts (one 3-D tensor per matrix, or a list of MLPs), router, shared expert(s)
    and its gate; top-k from the config object. `beside`: a shared MLP that the block holds
    next to the MoE module rather than inside it, as (name, module) (Granite 4's shared_mlp)."""
    latent = [n for n, c in mlp.named_children() if "latent" in n and _numel(c)]
    if latent:                  # NemotronHMoE's moe_latent_size: experts on a narrower input
        raise Unmodelled(f"latent expert projections ({', '.join(latent)}) in "
                         f"{type(mlp).__name__}")
    experts = _child(mlp, ("experts",))[1]
    n = n_experts(experts)
    shape = mlp_shape(experts, hidden, n, fused_experts=type(experts).__name__ != "ModuleList")
    shared = _child(mlp, _SHARED) or beside
    shared_ffn = mlp_shape(shared[1], hidden)["ffn"] if shared else 0
    gate = sum(p.numel() for name, p in mlp.named_parameters()
               if name.startswith("shared_expert_gate.") and p.dim() == 2)
    inner = ("experts.",) + tuple(f"{s}." for s in _SHARED) + ("shared_expert_gate.",)
    router = sum(p.numel() for name, p in _matrices(mlp).items() if not name.startswith(inner))
    if router != hidden * n or gate not in (0, hidden):
        raise Unmodelled(f"a router of {router:,} parameters for {n} experts in "
                         f"{type(mlp).__name__}")
    top_k = experts_per_token(config)
    if not top_k:
        raise Unmodelled(f"no experts-per-token key ({', '.join(TOP_K_KEYS)}) in the config")
    return dict(n_experts=n, experts_per_token=top_k, expert_ffn=shape["ffn"],
                shared_ffn=shared_ffn, shared_gate=bool(gate), gated_mlp=shape["gated_mlp"],
                fused_gate_up=shape["fused_gate_up"])


def block_moe_fields(layer: Any, mlp: Any, config: Any, hidden: int) -> dict:
    """MoE fields of Gemma 4's MoE block (enable_moe_block; modeling_gemma4.py
    Gemma4TextDecoderLayer.__init__ lines 1352-1358, forward lines 1391-1403): a `router`
    (Gemma4TextRouter: proj hidden -> n, `scale` hidden, `per_expert_scale` n; its norm has no
    weight) and 3-D `experts` (Gemma4TextExperts: gate_up_proj, down_proj) that are children of
    the block and run on the same residual as its dense `mlp`, the outputs summed: a MoE whose
    always-active shared expert is that MLP (MoE.shared_ffn), the router's scales
    MoE.router_scales. Another router or experts: Unmodelled naming them."""
    experts, router = _child(layer, ("experts",))[1], _child(layer, ("router",))
    n = n_experts(experts)
    shape = mlp_shape(experts, hidden, n, fused_experts=type(experts).__name__ != "ModuleList")
    dense = mlp_shape(mlp, hidden)
    proj = sum(p.numel() for p in _matrices(router[1]).values()) if router else 0
    scales = sorted(p.numel() for _, p in router[1].named_parameters() if p.dim() == 1) \
        if router else []
    top_k = experts_per_token(config)
    if proj != hidden * n or scales != sorted([hidden, n]) or not top_k or \
            dense["gated_mlp"] != shape["gated_mlp"]:
        raise Unmodelled(f"a MoE beside the MLP in {type(layer).__name__} whose router "
                         f"({proj:,} + {sum(scales):,} parameters for {n} experts) or top-k "
                         "tierlab does not read (Gemma 4's enable_moe_block)")
    return dict(n_experts=n, experts_per_token=top_k, expert_ffn=shape["ffn"],
                shared_ffn=dense["ffn"], shared_gate=False, router_scales=True,
                gated_mlp=shape["gated_mlp"], fused_gate_up=shape["fused_gate_up"])


def layer_fields(layer: Any, config: Any, hidden: int) -> dict:
    """One decoder block: attention, or a state-space / short-conv mixer in its place
    (profiles/hf_mixer.py), None when it has neither that tierlab models; dense MLP or MoE;
    its norms, which projections carry biases, and the children left unread."""
    from tierlab.profiles.hf_mixer import find_mixer, mixer_fields

    if _child(layer, SHARED_BLOCK) is not None:
        return hybrid_fields(layer, config, hidden)
    attn, mlp = _child(layer, _ATTENTION), _child(layer, _MLP) or loose_mlp(layer)
    per_layer = per_layer_block(layer, hidden)      # Gemma 4's gate, projection and norm
    mixer = find_mixer(layer)           # in place of attention, or beside it (Falcon-H1)
    if mixer is not None and attn is not None and mixer[0] == attn[0]:
        attn = None                     # Kimi Linear's KDA: the mixer in the self_attn slot
    held = {n for n, c in layer.named_children()    # RWKV's channel-mix: the mixer holds it
            if mixer is not None and any(c is m for m in mixer[1].children())}
    if mlp is not None and mlp[0] in held:
        mlp = None
    part = None if mixer or attn or mlp else single_part_child(layer)   # Nemotron-H
    if part is not None:
        attn, mlp = (part[1:], None) if part[0] == "attention" else (None, part[1:])
    beside = _child(layer, _SHARED) if mlp is not None else None    # Granite 4's shared_mlp
    own = set(PER_LAYER_BLOCK) if per_layer else set()
    norms = [c for n, c in layer.named_children() if _is_norm(c) and n not in own
             and n not in EMBED_NORM]
    parts = (mixer, attn, mlp, beside) if mixer or part else \
        ((attn, mlp, beside) if attn and mlp else ())
    # Gemma 4's enable_moe_block: router and experts children of the block beside its mlp
    block_moe = mlp is not None and _child(layer, ("experts",)) is not None
    read = {n for n, _ in (p for p in parts if p is not None)} | own | held | \
        (set(LOOSE_MLP) if mlp is not None and mlp[0] == LOOSE_MLP[0] else set()) | \
        ({"experts", "router"} if block_moe else set())
    other = [f"{n} ({type(c).__name__})" for n, c in layer.named_children()
             if n not in read and not _is_norm(c) and _numel(c)]
    out = dict(other=other, n_norms=len(norms), norms=norms, attn=None, mlp=None, moe=None,
               mixer=None, attn_bias=None, mlp_bias=None, part=part and part[0],
               per_layer=per_layer,
               embed_norm=any(n in EMBED_NORM and _is_norm(c) for n, c in layer.named_children()))
    if mixer is not None:
        out["mixer"] = dict(mixer_fields(mixer[1]), attention=attn is not None)
    elif (attn is None or mlp is None) and part is None:
        return out
    if attn is not None:
        out["attn"] = attention_fields(attn[1], config, hidden)
        out["attn_bias"] = None if out["attn"].get("attention_tensors") else \
            linear_biases(attn[1])      # a tensor attention lists its biases itself
    if mlp is None:                 # Mamba: the mixer alone
        return out
    out["mlp_bias"] = linear_biases(mlp[1])[1]
    if _child(mlp[1], ("experts",)):
        out["moe"] = moe_fields(mlp[1], config, hidden, beside)
    elif block_moe:
        out["moe"] = block_moe_fields(layer, mlp[1], config, hidden)
    else:
        out["mlp"] = mlp_shape(mlp[1], hidden)
    return out


LOOSE_MLP = ("fc1", "fc2")
"""A block's MLP as two Linear children of the block itself, no `mlp` module (modeling_biogpt.py
BioGptDecoderLayer.__init__, modeling_xglm.py XGLMDecoderLayer.__init__: `self.fc1 =
nn.Linear(embed_dim, ffn_dim)`, `self.fc2 = nn.Linear(ffn_dim, embed_dim)`)."""


def loose_mlp(layer: Any) -> tuple[str, Any] | None:
    """("fc1", the block's LOOSE_MLP Linears held as one module) where the block has both and no
    MLP child, else None."""
    import torch

    kids = dict(layer.named_children())
    if not all(n in kids for n in LOOSE_MLP):
        return None
    return LOOSE_MLP[0], torch.nn.ModuleDict({n: kids[n] for n in LOOSE_MLP})


EMBED_NORM = ("pre_ln",)
"""A block's norm child that runs on the embedding before the first block (RWKV: modeling_rwkv.py
RwkvBlock.__init__ builds `pre_ln` in layer 0 only, forward: `if self.layer_id == 0: hidden =
self.pre_ln(hidden)`): Model.embed_norm, not a block norm."""

PER_LAYER_BLOCK = ("per_layer_input_gate", "per_layer_projection", "post_per_layer_input_norm")
"""A block's per-layer-input children (modeling_gemma4.py Gemma4TextDecoderLayer.__init__ lines
1345-1350; Gemma 3n's decoder layer builds the same three beside its AltUp and laurel)."""

PER_LAYER_MODEL = ("embed_tokens_per_layer", "per_layer_model_projection",
                   "per_layer_projection_norm")
"""The model-level per-layer-input modules (modeling_gemma4.py Gemma4TextModel.__init__ lines
1566-1580): the table, the projection hidden -> n_layers x width, its norm."""


def per_layer_block(layer: Any, hidden: int) -> int | None:
    """Width of a block's per-layer input (Model.per_layer_inputs: its gate hidden -> width, its
    projection width -> hidden, both without bias, and a norm of hidden), None where the block
    has none; any other shape or a part missing: Unmodelled naming it."""
    kids = dict(layer.named_children())
    have = [n for n in PER_LAYER_BLOCK if n in kids]
    if not have:
        return None
    gate, proj, norm = (kids.get(n) for n in PER_LAYER_BLOCK)
    ok = gate is not None and proj is not None and norm is not None and \
        getattr(gate, "bias", None) is None and getattr(proj, "bias", None) is None and \
        gate.weight.dim() == 2 and gate.weight.shape[1] == hidden and \
        tuple(proj.weight.shape) == (hidden, gate.weight.shape[0]) and \
        _norm_width(norm) == hidden and _numel(norm) == hidden
    if not ok:
        shapes = ", ".join(f"{n} {tuple(p.shape)}" for n in have
                           for p in kids[n].parameters())
        raise Unmodelled(f"per-layer inputs of other shapes than tierlab reads in "
                         f"{type(layer).__name__} ({shapes})")
    return int(gate.weight.shape[0])


def per_layer_fields(model: Any, read: list[dict], hidden: int) -> tuple[dict, list]:
    """({"per_layer_inputs": PerLayerInputs} and the model-level modules it takes, for
    outside_blocks) of blocks that read per-layer inputs, ({}, []) where none does. Every block
    of one width, and the model's table (vocab x n_layers x width, its own Embedding), its
    projection (hidden -> n_layers x width, no bias) and norm (width): else Unmodelled."""
    widths = [l["per_layer"] for l in read]
    if not any(w is not None for w in widths):
        return {}, []
    width = _same(widths, "per-layer input widths")
    mods = {n.rsplit(".", 1)[-1]: m for n, m in model.named_modules()}
    table, proj, norm = (mods.get(n) for n in PER_LAYER_MODEL)
    packed = len(read) * width
    if table is None or proj is None or norm is None or table.weight.shape[1] != packed or \
            tuple(proj.weight.shape) != (packed, hidden) or \
            getattr(proj, "bias", None) is not None or _numel(norm) != width:
        found = ", ".join(f"{n} {tuple(m.weight.shape)}" for n, m in
                          zip(PER_LAYER_MODEL, (table, proj, norm)) if m is not None)
        raise Unmodelled(f"per-layer inputs of {width} per block without the table, projection "
                         f"and norm of {len(read)} x {width} tierlab reads ({found or 'none'})")
    vocab = int(table.weight.shape[0])
    if vocab < 1:       # an Embedding of 0 rows builds on the meta device
        raise Unmodelled("a per-layer embedding table of 0 rows (vocab_size_per_layer_input)")
    return {"per_layer_inputs": PerLayerInputs(width=width, vocab=vocab)}, [table, proj, norm]


_SLOT = re.compile(r"_adapter_list\.(\d+)\.")
"""A tensor of one use's slot in a Zamba2 shared block's adapter lists (`linear_q_adapter_list`,
`gate_up_proj_adapter_list`: modeling_zamba2.py lines 249-274, 997-1006)."""


SHARED_BLOCK = ("shared_transformer", "shared_transf")
"""A hybrid layer's shared attention + MLP block: Zamba2's (modeling_zamba2.py
Zamba2HybridLayer), Zamba's (modeling_zamba.py ZambaHybridLayer: every hybrid layer's
`shared_transf` tied to the first's, `_tied_weights_keys`; no adapters)."""


def hybrid_fields(layer: Any, config: Any, hidden: int) -> dict:
    """A Zamba2HybridLayer (modeling_zamba2.py) or ZambaHybridLayer (modeling_zamba.py, one
    shared block, its MLP's gate, up and down apart): its `mamba_decoder` read as a mixer block, and
    the use of a shared block: the `shared_transformer`'s weights (tied across its uses: every
    Linear weight a GEMM, the norms and biases small), its `*_adapter_list` slot (each use runs
    its own: Zamba2Attention / Zamba2MLP `forward`, `layer_dic[layer_idx]`; every slot is built
    alike from the config, so one slot is read) and the layer's `linear` (hidden x hidden)."""
    out = layer_fields(layer.mamba_decoder, config, hidden)
    block = _child(layer, SHARED_BLOCK)[1]
    mats, small = mixer_tensors(block)
    slots = sorted({int(m.group(1)) for n, *_ in mats if (m := _SLOT.search(n))})
    own = [(_SLOT.sub("_adapter.", n), i, o) for n, i, o in mats
           if slots and f"_adapter_list.{slots[0]}." in n]
    weights = tuple(m for m in mats if not _SLOT.search(m[0]))
    attn = block.self_attn
    heads, head_dim = config.num_attention_heads, int(attn.head_dim)
    mlp = [p for n, p in block.feed_forward.named_parameters() if n in
           ("gate_up_proj.weight", "down_proj.weight")]
    split = len(mlp) == 1 and {"gate_proj.weight", "up_proj.weight"} <= \
        {n for n, _ in block.feed_forward.named_parameters()}      # Zamba's gate, up apart
    if (len(mlp) != 2 and not split) or heads * head_dim != attn.q_proj.weight.shape[0]:
        raise Unmodelled(f"a shared block of {_numel(block):,} parameters in "
                         f"{type(block).__name__}")
    gated = split or _fused_gate_up(mlp)
    out["shared"] = _shared_use(config, layer, weights, small, own, heads, head_dim, hidden,
                                dict(ffn=int(mlp[-1].shape[1]), gated_mlp=gated,
                                     fused_gate_up=gated and not split))
    return out


def _shared_use(config: Any, layer: Any, weights: tuple, small: tuple, own: list, heads: int,
                head_dim: int, hidden: int, mlp: dict) -> dict:
    """One use of a shared block (hybrid_fields): its weights, its own adapters and `linear`,
    the attention's heads and the MLP's shape; Zamba's one block where no num_mem_blocks."""
    return dict(
        blocks=getattr(config, "num_mem_blocks", None) or 1, matrices=weights,
        small_params=small,
        use_matrices=tuple(own) + (("linear", *layer.linear.weight.shape[::-1]),),
        attention=dict(n_heads=heads, n_kv_heads=config.num_key_value_heads,
                       attn_head_dim=head_dim if heads * head_dim != hidden else 0),
        mlp=mlp)


def shared_of(layers: list[dict]) -> dict:
    """Model fields of the shared blocks (Model.shared, and its attention and MLP in Model's
    attention and MLP fields: Zamba2 has no other), {} without: the same block at every use;
    config's num_mem_blocks distinct blocks (modeling_zamba2.py get_layers' cycle)."""
    idx = [i for i, l in enumerate(layers) if l.get("shared")]
    if not idx:
        return {}
    use = _same([layers[i]["shared"] for i in idx], "shared blocks")
    return dict(use["attention"], **use["mlp"], qk_norm="none", fused_qkv=False,
                shared=Shared(layers=tuple(idx), blocks=min(use["blocks"], len(idx)),
                              matrices=use["matrices"],
                              small_params=use["small_params"],
                              use_matrices=use["use_matrices"]))


SINGLE_PART = {"Attention": "attention", "MLP": "mlp", "MoE": "mlp"}
"""Class-name endings of a block's one child when the block holds a single part, and the part
(Nemotron-H's `mixer`: NemotronHAttention, NemotronHMLP, NemotronHMoE; modeling_nemotron_h.py
`NemotronHBlock.__init__`: `self.mixer = MIXER_TYPES[self.block_type](config, ...)`)."""


def single_part_child(layer: Any) -> tuple[str, str, Any] | None:
    """(part, child name, module) of a block whose one child beside its norms is an attention,
    an MLP or a MoE alone (SINGLE_PART), None for any other block."""
    kids = [(n, c) for n, c in layer.named_children() if not _is_norm(c) and _numel(c)]
    if len(kids) != 1:
        return None
    name, module = kids[0]
    part = next((p for end, p in SINGLE_PART.items() if type(module).__name__.endswith(end)), None)
    return (part, name, module) if part else None


def _same(values: list, what: str) -> Any:
    if any(v != values[0] for v in values):
        raise Unmodelled(f"{what} differ between layers")
    return values[0]


def norm_kind(norms: list) -> str:
    """'layernorm' when a norm carries a bias, 'rmsnorm' with a weight only, else
    'nonparametric' (Model.norm: the same kind everywhere)."""
    names = {n.rsplit(".", 1)[-1] for m in norms for n, _ in m.named_parameters()}
    return "layernorm" if "bias" in names else ("rmsnorm" if names else "nonparametric")


NO_ATTENTION = dict(n_heads=1, n_kv_heads=1, attn_head_dim=0, fused_qkv=False, qk_norm="none")
"""Model's attention fields where no block attends (Mamba: every block a mixer): unused."""


def block_fields(layers: list[dict]) -> dict:
    """Model fields shared by the blocks: attention (or none), MLP or MoE (+ dense layers),
    a mixer in place of attention, norms, biases."""
    attns = [l["attn"] for l in layers if l["attn"] is not None]
    fields = dict(attention_of(layers) if attns else NO_ATTENTION,
                  block_norms=_same([l["n_norms"] for l in layers], "norms per block"))
    fields.update(ffn_fields(layers))
    biases = [l["attn_bias"] for l in layers if l["attn_bias"] is not None]
    # an attention read as tensors holds its own biases: the MLPs' alone decide `bias`
    tensors = any(a.get("attention_tensors") for a in attns)
    attn_all, attn_any = _same(biases, "attention biases") if biases else (tensors, False)
    bias = attn_all and all(l["mlp_bias"] for l in layers if l["mlp_bias"] is not None)
    return dict(fields, bias=bias, qkv_bias=attn_any and not bias, mixer=mixer_of(layers),
                attention_only_layers=tuple(i for i, l in enumerate(layers)
                                            if l["part"] == "attention"),
                mlp_only_layers=tuple(i for i, l in enumerate(layers) if l["part"] == "mlp"),
                **shared_of(layers))


def attention_of(layers: list[dict]) -> dict:
    """Model's attention fields: the first attending block's shape, and the blocks of each other
    shape as Model.layer_attention (Gemma 4's global layers; heads and widths read per layer)."""
    from tierlab.profiles.schema import LayerAttention

    shapes: dict[tuple, list[int]] = {}
    for i, l in enumerate(layers):
        if l["attn"] is not None:
            shapes.setdefault(tuple(sorted(l["attn"].items(), key=lambda kv: kv[0])),
                              []).append(i)
    (first, _), *others = shapes.items()
    return dict(first, layer_attention=tuple(LayerAttention(layers=tuple(idx), **dict(shape))
                                             for shape, idx in others))


def ffn_fields(layers: list[dict]) -> dict:
    """MLP or MoE fields of the blocks that have one (every block but a Mamba's)."""
    from tierlab.profiles.schema import MoE

    dense = [l["mlp"] for l in layers if l["mlp"] is not None]
    moes = [l["moe"] for l in layers if l["moe"] is not None]
    if not moes:
        return dict(_same(dense, "MLP shapes")) if dense else \
            dict(ffn=layers[0]["mixer"]["matrices"][0][2] if layers[0]["mixer"] else 1,
                 gated_mlp=False)
    fields = {}
    moe = dict(_same(moes, "MoE layers"))
    fields.update(gated_mlp=moe.pop("gated_mlp"), fused_gate_up=moe.pop("fused_gate_up"))
    if dense and dense[0]["gated_mlp"] != fields["gated_mlp"]:
        raise Unmodelled("gated and non-gated MLPs in one model")
    # a fused gate_up in the experts only (GLM-4-MoE): same numel, split like the dense MLPs
    fields["fused_gate_up"] &= not dense or dense[0]["fused_gate_up"]
    fields["ffn"] = _same([d["ffn"] for d in dense], "dense MLP widths") if dense \
        else moe["expert_ffn"]
    fields["moe"] = MoE(**moe, dense_layers=tuple(i for i, l in enumerate(layers)
                                                  if l["moe"] is None))
    return fields


def mixer_of(layers: list[dict]) -> Any:
    """Model.mixer of the blocks whose attention is a mixer (the same in each), None without."""
    from tierlab.profiles.schema import Mixer

    idx = [i for i, l in enumerate(layers) if l["mixer"] is not None]
    if not idx:
        return None
    mixer = _same([layers[i]["mixer"] for i in idx], "mixers")
    mlp = _same([layers[i]["mlp"] is not None or layers[i]["moe"] is not None for i in idx],
                "MLPs beside the mixers")
    return Mixer(**mixer, layers=tuple(idx), mlp=mlp)


RECURRENT = ("mamba", "mixer", "delta", "linear_attn", "linearattention", "lightning",
             "recurrent", "lstm", "rwkv", "ssm")
"""Words in a block's child names or classes that mark a linear-attention or state-space layer."""


def missing_layers(read: list[dict], total: int | None = None) -> list[str]:
    """The blocks without the attention + MLP tierlab models, named by their children (`total`:
    the model's blocks, where `read` holds only those read)."""
    missing = [l for l in read if not modelled(l)]
    if not missing:
        return []
    kids = sorted({o for l in missing for o in l["other"]})
    return [f"{len(missing)} of {total or len(read)} layers have no attention and MLP tierlab "
            f"models: {', '.join(kids)} ({why_missing(kids)})"]


def modelled(layer: dict) -> bool:
    """A read block tierlab models: attention (+ MLP), a mixer, or one part alone."""
    return layer["attn"] is not None or layer["mixer"] is not None or layer["part"] is not None


def why_missing(kids: list[str]) -> str:
    """What kind of block tierlab does not model, from its unread children ("name (Class)")."""
    text = " ".join(kids).lower()
    return ("linear-attention/Mamba layers" if any(w in text for w in RECURRENT) else
            "short-convolution layers" if "shortconv" in text else
            "encoder-decoder cross-attention" if "encoder_attn" in text else
            "cross-attention to the vision tower" if "cross_attn" in text else
            "a block layout tierlab does not read")


def outside_blocks(model: Any, layers: Any, *read: Any) -> tuple[list, list[str]]:
    """(norms outside the blocks: the final norm, the parameters none of the readers took)."""
    taken = {id(p) for m in (layers, *read) if m is not None for p in m.parameters()}
    norms = [m for m in model.modules() if _is_norm(m)
             and not any(id(p) in taken for p in m.parameters())]
    taken |= {id(p) for m in norms for p in m.parameters()}
    left = [(n, p.numel()) for n, p in model.named_parameters() if id(p) not in taken]
    if not left:
        return norms, []
    names = ", ".join(n for n, _ in left[:3]) + (", ..." if len(left) > 3 else "")
    return norms, [f"{sum(k for _, k in left):,} parameters outside the blocks, the embedding "
                   f"and the head ({names})"]


def learned_positions(model: Any, layers: Any, emb: Any, hidden: int) -> Any:
    """A position table beside the token embedding (GPT-2-style; BioGPT's
    BioGptLearnedPositionalEmbedding, an nn.Embedding of max_position_embeddings + 2 rows), or
    None."""
    import torch

    inside = {id(m) for m in layers.modules()}
    tables = [m for m in model.modules() if isinstance(m, torch.nn.Embedding) and m is not emb
              and id(m) not in inside and m.weight.shape[-1] == hidden]
    return tables[0] if len(tables) == 1 else None


def built_fields(model: Any, config: Any) -> tuple[dict, list[str], bool]:
    """Model keyword arguments (without name, seq_len, source) read off a built model, what it
    holds that they do not express, and whether a block lacks what tierlab models."""
    emb, out = model.get_input_embeddings(), model.get_output_embeddings()
    vocab, hidden = emb.weight.shape
    layers = decoder_layers(model, config.num_hidden_layers)
    read, unread = [], set()
    for i, layer in enumerate(layers):  # every block looked at: one line names all unmodelled
        try:
            read.append(layer_fields(layer, layer_config(config, i), hidden))
        except Unmodelled as e:     # Zamba2's hybrid blocks beside the Mamba-2 ones
            unread.add(str(e))
    if unread:
        raise Unmodelled("; ".join(missing_layers(read, len(layers)) + sorted(unread)))
    problems = missing_layers(read)
    problems += sorted({f"{o} in the blocks" for l in read if modelled(l) for o in l["other"]})
    if not any(modelled(l) for l in read):
        raise Unmodelled(problems[0])
    pos = learned_positions(model, layers, emb, hidden)
    per_layer, per_layer_mods = per_layer_fields(model, read, hidden)
    final, left = outside_blocks(model, layers, emb, out, pos, *per_layer_mods)
    fields = dict(block_fields([l for l in read if modelled(l)]), n_layers=len(read),
                  hidden=hidden, vocab=vocab,
                  max_seq_len=getattr(config, "max_position_embeddings", None) or 2048,
                  tie_embeddings=out is not None and out.weight is emb.weight,
                  head_bias=out is not None and getattr(out, "bias", None) is not None,
                  norm=norm_kind(final + [n for l in read for n in l["norms"]]),
                  embed_norm=any(l.get("embed_norm") for l in read), **per_layer)
    if pos is not None:
        fields.update(learned_pos_emb=True, pos_emb_rows=pos.weight.shape[0])
    return fields, problems + left, not all(modelled(l) for l in read)


def transformers_counts(model: Any, config: Any) -> tuple[int, int]:
    """transformers' (total, active) parameters: active counts each MoE layer's routed experts
    top-k of n (the layer's `experts` module, its matrices and biases: an idle expert's bias is
    not used either; gpt-oss)."""
    total = sum(p.numel() for p in model.parameters())
    idle = 0
    for name, experts in model.named_modules():
        if name.rsplit(".", 1)[-1] == "experts":
            n = n_experts(experts)
            k = experts_per_token(config) or n
            idle += sum(p.numel() for p in experts.parameters()) * (n - k) // n
    return total, total - idle


def fields_of(data: Mapping, where: str) -> dict:
    """Model fields of a config.json whose model_type has no hand reader, built by transformers
    and checked against its count; a one-line ConfigError when they cannot be matched."""
    from tierlab.profiles.schema import Model

    from tierlab.profiles.hf_mixer import check_mixer_keys

    kind = data["model_type"]
    for part in (data, data.get("text_config")):    # transformers' config classes expand some
        if isinstance(part, Mapping):               # counts into lists (layer_types) at once
            check_counts(part.get, where)
            check_mixer_keys(part, where)
    config = text_config(data, where)
    check_counts(lambda attr: config_value(config, attr), where)    # before a model is built
    check_layer_counts(config, where)
    check_repeats(config, where)
    model = build(config, where, data)
    theirs, theirs_active = transformers_counts(model, config)
    problems: list[str] = []
    try:
        fields, problems, partial = built_fields(model, config)
        m = Model(name=kind, seq_len=fields["max_seq_len"], **fields)
        ours, ours_active = m.n_params, m.active_params
    except Exception as e:      # modules or config attributes of a kind tierlab does not read
        what = str(e) if isinstance(e, (Unmodelled, ValueError)) else _unread(e)
        # what the blocks hold beside (Gemma 4's per-layer inputs) named before what it breaks
        fields, problems, partial, ours, ours_active = None, problems + [what], True, None, None
    off = ours is None or abs(ours - theirs) > COUNT_TOLERANCE * theirs \
        or abs(ours_active - theirs_active) > COUNT_TOLERANCE * theirs_active
    if off or partial:
        raise ConfigError(refusal(where, kind, config, (ours, ours_active),
                                  (theirs, theirs_active), problems))
    mixed = (fields["mixer"].layers if fields["mixer"] is not None else ()) + \
        fields["mlp_only_layers"]       # Nemotron-H's "mlp" and "moe" blocks attend nothing
    check_indexed(config, fields, where)
    return dict(fields, attention_windows=attention_windows(config, where, mixed))


def check_indexed(config: Any, fields: dict, where: str) -> None:
    """`indexed_attention` layers only where every attention read holds its indexer
    (AttentionTensors.indexer): else one ConfigError line, the layer kind not timed."""
    if "indexed_attention" not in (getattr(config, "layer_types", None) or ()):
        return
    shapes = [fields.get("attention_tensors")] + \
        [a.attention_tensors for a in fields.get("layer_attention", ())]
    if not all(t is not None and t.indexer for t in shapes):
        raise ConfigError(f"{where}: layer_types: 'indexed_attention' beside attention without "
                          "a DeepSeek sparse attention indexer tierlab reads (a module `indexer` "
                          "with its heads, head width and top-k) is not modelled")


def refusal(where: str, kind: str, config: Any, ours: tuple, theirs: tuple,
            problems: list[str]) -> str:
    """The one line that refuses a built architecture: file, model_type, both counts, why."""
    def count(pair: tuple) -> str:
        total, active = pair
        if total is None:
            return "nothing it can model"
        return f"{total:,}" + (f" ({active:,} active)" if active != total else "")

    what = "; ".join(problems) or "parameters outside what tierlab's layout lists"
    ours_text = "tierlab cannot count it" if ours[0] is None else \
        f"tierlab counts {count(ours)} parameters"
    return (f"{where}: model_type {kind!r} is not a supported architecture: transformers "
            f"{transformers_version()} builds it ({type(config).__name__}), {ours_text}, "
            f"transformers {count(theirs)} (tolerance {COUNT_TOLERANCE:.1%}); not modelled: {what}")
