"""Hugging Face `config.json` -> transformers' config object, checked before a model is built.

The config side of reading an architecture transformers builds (profiles/hf_build.py): the
text decoder's config object (a multimodal config's `text_config`), the counts it holds within
tierlab's bounds (a 1e9-layer config takes hours to build, even on the meta device), looped
blocks of a kind tierlab does not read refused, the attention windows of its `layer_types`, and
the model built from it on the meta device. transformers and torch are optional
(tierlab[runner]): imported inside the functions.
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping

from tierlab import bounds
from tierlab.errors import ConfigError
from tierlab.profiles.hf_loops import PASS_KEYS


DROPPED_KEYS = ("auto_map", "quantization_config", "_name_or_path", "architectures")
"""config.json keys that are not the architecture (remote code, the checkpoint's quantization)."""


TOP_K_KEYS = ("num_experts_per_tok", "num_experts_per_token", "experts_per_token", "moe_top_k",
              "moe_topk", "top_k", "top_k_experts")
"""Config attributes that hold the routed experts per token, first found wins."""


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
        text = decoder_config(config)
    except Exception as e:      # transformers' own validation: one line, never a traceback
        raise ConfigError(f"{where}: transformers rejects this {kind!r} config: "
                          f"{first_line(e)}") from None
    if not hasattr(text, "model_type"):     # a text_config that the config class does not take
        raise ConfigError(f"{where}: model_type {kind!r} ({type(config).__name__}) takes no "
                          "text_config: the decoder's keys belong at the top level")
    return text


def decoder_config(config: Any) -> Any:
    """The config of `config`'s decoder: get_text_config(decoder=True), but a flat
    encoder-decoder config (BART, Marian, Whisper: `decoder_layers` beside `encoder_layers`) is
    its own decoder's. transformers 5.25.0 configuration_utils.py get_text_config, lines
    1572-1598, returns for it a copy with each `decoder_*` value moved to its plain name (onto
    `encoder_layers` through the attribute_map) and the `decoder_*` attribute deleted, so it
    reads the class default, and the decoder-only causal LM (modeling_bart.py BartDecoder)
    reads exactly those: bart with decoder_layers 3 built 12 layers; marian's default
    decoder_vocab_size became None (`padding_idx >= None` in nn.Embedding). So the copy gets
    them back: plain names (num_hidden_layers, num_attention_heads) and `decoder_*` alike
    hold the decoder's values."""
    text = config.get_text_config(decoder=True)
    if text is config or type(text) is not type(config):
        return text
    for key, value in config.to_dict().items():
        if key.startswith("decoder"):
            setattr(text, key, value)
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
                              f"{config.model_type!r}: {first_line(e)}")
    named = named_causal_lm(data["model_type"], config) if data is not None else None
    if named is not None:
        return named
    decoder = multimodal_decoder(data) if data is not None else None
    if decoder is None:
        raise refusal from None
    return decoder


def named_causal_lm(model_type: str, config: Any) -> Any:
    """The causal LM transformers' own causal-LM mapping names for the file's `model_type`, built
    on the meta device from its decoder config, where the mapping is keyed by the outer type but
    the class takes the text config (Emu3: `emu3` -> Emu3ForCausalLM(Emu3TextConfig), which
    AutoModelForCausalLM.from_config cannot find from `emu3_text_model`); None otherwise or where
    it does not build."""
    import torch
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    cls = getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type, ""), None)
    if cls is None or not isinstance(config, getattr(cls, "config_class", ())):
        return None
    try:
        with torch.device("meta"), quiet():
            return cls(config)
    except Exception:       # noqa: BLE001 - the causal-LM refusal holds
        return None


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


def detach_towers(model: Any) -> list[str]:
    """Take out of a built causal LM the towers transformers builds inside it, and name them: the
    outermost modules that hold a sub-model of their own (a PreTrainedModel) but not the token
    embedding. Phi-4-multimodal's Phi4MultimodalModel keeps its image and audio encoders in
    `model.embed_tokens_extend` (transformers 5.25.0 modeling_phi4_multimodal.py line 1480, a
    Phi4MultimodalFeatureEmbedding, lines 1328-1337: Phi4MultimodalImageEmbedding, lines
    455-477, around a Phi4MultimodalVisionModel and its projections; Phi4MultimodalAudioEmbedding,
    lines 1044-1059, around a Phi4MultimodalAudioModel and its projections): text decoder only,
    as for the towers other multimodal configs keep beside the decoder (notes)."""
    from transformers import PreTrainedModel

    emb = model.get_input_embeddings()
    out: list[str] = []
    for name, module in list(model.named_modules()):
        if not name or any(name.startswith(t + ".") for t in out) or \
                any(m is emb for m in module.modules()) or \
                not any(isinstance(m, PreTrainedModel) for m in module.modules()):
            continue
        out.append(name)
    notes = []
    for name in out:
        parent, _, child = name.rpartition(".")
        tower = model.get_submodule(name)
        size = sum(p.numel() for p in tower.parameters())
        notes.append(f"{name} ({type(tower).__name__}, {size:,} parameters), a tower inside the "
                     "decoder, left out")
        delattr(model.get_submodule(parent), child)
    return notes


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
                      ("index_num_heads", bounds.MODEL["n_heads"]),
                      ("index_head_dim", bounds.MODEL["n_heads"]),
                      ("index_topk", bounds.ATTENTION_WINDOW))
"""Sparse attention indexers' keys (AttentionTensors.indexer, profiles/hf_indexer.py) and their
bounds: heads and head width at least 1 (DeepseekV32Indexer builds wq_b of index_n_heads x
index_head_dim; Kolibri 1.1 scores with its attention's first index_num_heads query heads), a
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
layers), Inkling2-Loop's loop_num_passes, HRM's H_cycles / L_cycles. Those of
hf_loops.PASS_KEYS are read into Model.loops (profiles/hf_loops.py)."""


def check_repeats(config: Any, where: str) -> None:
    """A config whose blocks run in loops (a REPEAT_SUFFIXES key above 1) that no reader of
    profiles/hf_loops.py reads (hf_loops.PASS_KEYS): one ConfigError line naming the keys."""
    loops = {k: v for k, v in config.to_dict().items() if k.lower().endswith(REPEAT_SUFFIXES)
             and isinstance(v, int) and not isinstance(v, bool) and v > 1 and k not in PASS_KEYS}
    if loops:
        what = ", ".join(f"{k} = {v}" for k, v in loops.items())
        raise ConfigError(f"{where}: model_type {config.model_type!r} runs blocks more than once "
                          f"per token ({what}); tierlab reads the loops of "
                          f"{', '.join(PASS_KEYS)} only")


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


def unread_reason(e: Exception) -> str:
    """Why a built model's modules or config could not be read, in one line: a per-layer
    attribute of a heterogeneous config (transformers' AmbiguousGlobalPerLayerAttributeError,
    raised on reading it from the whole config) is named as such."""
    if type(e).__name__ == "AmbiguousGlobalPerLayerAttributeError":
        attr = str(e).split("'")[1] if str(e).count("'") >= 2 else "an attribute"
        return (f"its layers differ in {attr} (a heterogeneous per-layer config, transformers' "
                "per_layer_config); tierlab's blocks of one kind share one shape")
    return first_line(e)


def first_line(e: Exception) -> str:
    """The exception's first line (and the next one when the first only introduces it)."""
    text = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    head = " ".join(text[:2]) if len(text) > 1 and text[0].endswith(":") else \
        (text[0] if text else "")
    return f"{type(e).__name__}: {head}"


NOT_TOWERS = ("text_config", "quantization_config", "per_layer_config", "attn_config",
              "ffn_config")
"""`*_config` keys of a config.json that are no tower left out: the decoder itself, its
quantization, transformers' per-layer config of a heterogeneous decoder (Gemma 4's,
dots3-note's text config: `per_layer_config`, one entry per layer of another shape), and DBRX's
decoder parts (configuration_dbrx.py DbrxConfig: `attn_config` a DbrxAttentionConfig,
`ffn_config` a DbrxFFNConfig, both read by every block)."""


def notes(data: Mapping, where: str) -> tuple[str, ...]:
    """What the simulation of a built config leaves out, for the Model's `source` text."""
    config = text_config(data, where)
    out = []
    towers = [k.removesuffix("_config") for k in data if k.endswith("_config")
              and k not in NOT_TOWERS and isinstance(data[k], Mapping)]
    if isinstance(data.get("text_config"), Mapping) or towers:   # Qwen2.5-VL: no text_config
        out.append(f"text decoder only: the {'/'.join(towers) or 'vision'} tower is left out")
    return tuple(out)


WINDOW_KEYS = {"full_attention": None, "sliding_attention": "sliding_window",
               "chunked_attention": "attention_chunk_size", "indexed_attention": None,
               "compressed_sparse_attention": "sliding_window",
               "heavily_compressed_attention": "sliding_window",
               "hybrid": None, "hybrid_sliding": "sliding_window"}
"""transformers' `layer_types` entries tierlab times -> the config key of their window
(masking_utils.py: create_causal_mask, create_sliding_window_causal_mask,
create_chunked_causal_mask). `indexed_attention` (DeepSeek sparse attention) is causal over all
keys: eager / SDPA compute the dense scores and mask all but the indexer's top-k
(modeling_deepseek_v32.py DeepseekV32Attention.forward: `index_mask`); timed only where its
indexer was read or an earlier one's top-k reused (AttentionTensors.indexer,
profiles/hf_indexer.py check_indexed). DeepSeek-V4's compressed layers slide over
`sliding_window` local keys (modeling_deepseek_v4.py DeepseekV4Model.forward:
create_sliding_window_causal_mask for every layer) beside their compressed entries
(AttentionTensors.compress_rate, timed in sim/flops.py attended_keys). Inkling's and ZAYA's
`hybrid` layers are causal over all keys, their `hybrid_sliding` ones slide over
`sliding_window` (modeling_inkling.py InklingTextModel.forward line 759; modeling_zaya.py
ZayaModel.forward lines 743-744: create_causal_mask, create_sliding_window_causal_mask)."""


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


def experts_per_token(config: Any) -> int | None:
    """Top-k of the config object (the first of TOP_K_KEYS it sets), else of its MoE sub-config
    (DBRX: `ffn_config.moe_top_k`, configuration_dbrx.py DbrxFFNConfig)."""
    for part in (config, getattr(config, "ffn_config", None)):
        k = next((getattr(part, k) for k in TOP_K_KEYS if getattr(part, k, None)), None)
        if k:
            return k
    return None

