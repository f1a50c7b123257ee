"""Griffin's recurrent block (RecurrentGemma: De et al. 2024, "Griffin: Mixing Gated Linear
Recurrences with Local Attention for Efficient Language Models", arXiv 2402.19427, sec. 2.4) ->
its widths and FLOPs per token, for profiles/hf_mixer.py (Mixer.kind "rg_lru").

transformers 5.25.0 `models/recurrent_gemma/modeling_recurrent_gemma.py`:
- `RecurrentGemmaRecurrentBlock.__init__` (lines 395-413): linear_y, linear_x h -> w, linear_out
  w -> h (Linears with biases), a depthwise `conv_1d` of w channels and kernel k =
  conv1d_width (with bias), `rg_lru` (h = hidden_size, w = lru_width);
- `RecurrentGemmaRglru.__init__` (lines 284-299): `recurrent_param` w, the input and recurrence
  gates `input_gate_weight`, `recurrent_gate_weight` H x b x b (block-diagonal: one b x b
  matrix per head, H = num_attention_heads, b = w // H), their biases H x b.

FLOPs per token (multiply and add = 2 FLOPs, each elementwise op 1, exp and sqrt included, as
hf_mixer counts RWKV's; the Linears are GEMMs counted elsewhere), from the forward
(`RecurrentGemmaRecurrentBlock.forward` lines 415-461 with use_cache false, as in training;
`RecurrentGemmaRglru.forward` lines 301-339 and `_rnn_scan` lines 342-389):
- the depthwise causal conv 2 k w (its bias not counted, as Mamba's is not);
- the two gates, `torch.baddbmm(bias, x, W)` per head (lines 312, 315): 2 x (2 b^2 H + w) =
  4 w b + 2 w;
- the recurrence's elementwise work: `-8.0 * gate * softplus(param)` 2 w, `exp` w,
  `exp(2 * log_a)` 2 w, `activations * input_gate` w, `sqrt(1 - a^2)` 2 w, `reset + ~reset *
  multiplier` 2 w, `gated_inputs * multiplier` w (lines 319-330); the scan's `a * ~reset` w,
  `a * h + x` 2 w (lines 364-386); the block's `x_branch * y_branch` w (line 459) -> 15 w;
-> w (2 k + 4 b + 17). Not counted (as elsewhere): the sigmoids, the softplus of
`recurrent_param` (once per call, not per token), the gelu on the y branch. The default
config (w 2,560, H 10, b 256, k 4): 2,560 x 1,049 = 2,685,440 FLOPs per token and block, 6.8 %
of its three projections' 3 x 2 x 2,560^2.
"""
from __future__ import annotations

from typing import Any, Mapping

from tierlab import bounds
from tierlab.errors import ConfigError

RGLRU = ("transformers.models.recurrent_gemma.modeling_recurrent_gemma",
         "RecurrentGemmaRecurrentBlock", "RecurrentGemmaRglru")
"""What rglru_flops counts (module, recurrent block class, RG-LRU class): another class is one
whose forward (and the RG-LRU's forward and `_rnn_scan`) are this code."""


def rglru_widths(module: Any) -> tuple[int, int, int, int] | None:
    """(h, w, H, k) of a recurrent block of the shapes RecurrentGemmaRecurrentBlock builds:
    linear_y, linear_x h -> w and linear_out w -> h with biases, a depthwise conv_1d of w
    channels (weight w x 1 x k, bias w), an `rg_lru` of recurrent_param w and two gates of
    H x b x b with biases H x b, H b = w; else None."""
    try:
        lru, conv = module.rg_lru, module.conv_1d
        linears = [module.linear_y, module.linear_x, module.linear_out]
        shapes = [tuple(m.weight.shape) for m in linears] + [tuple(m.bias.shape) for m in linears]
        w, h = shapes[0]
        heads, b, _ = lru.input_gate_weight.shape
        k = int(conv.weight.shape[-1])
        gates = [tuple(p.shape) for p in (lru.input_gate_weight, lru.recurrent_gate_weight,
                                           lru.input_gate_bias, lru.recurrent_gate_bias,
                                           lru.recurrent_param)]
        conv_shapes = (tuple(conv.weight.shape), tuple(conv.bias.shape), conv.groups)
    except (AttributeError, TypeError, ValueError):
        return None
    ok = shapes == [(w, h), (w, h), (h, w), (w,), (w,), (h,)] and heads * b == w and \
        gates == [(heads, b, b), (heads, b, b), (heads, b), (heads, b), (w,)] and \
        conv_shapes == ((w, 1, k), (w,), w) and k >= 1 and \
        sum(1 for _ in module.parameters()) == 13    # 3 Linears x 2, conv x 2, RG-LRU's 5
    return (int(h), int(w), int(heads), k) if ok else None


def rglru_flops(module: Any) -> float:
    """Griffin's recurrent block per token: conv 2 k w + gates 4 w b + 2 w + recurrence 15 w
    = w (2 k + 4 b + 17) (module docstring)."""
    _, w, heads, k = rglru_widths(module)
    return float(w * (2 * k + 4 * (w // heads) + 17))


BLOCK_TYPES = ("recurrent", "attention")
"""RecurrentGemmaConfig's `block_types` entries (configuration_recurrent_gemma.py
`layers_block_type`, lines 98-102: "recurrent" -> linear_attention, any other entry ->
sliding_attention, so a misspelt entry would build attention silently)."""


DERIVED_KEYS = ("layers_block_type", "layer_types")
"""Keys RecurrentGemmaConfig derives from block_types (a property without a setter, line 99;
`layer_types` maps to it, attribute_map line 57): set in a config.json, transformers raises."""


def check_block_types(data: Mapping, where: str) -> None:
    """A RecurrentGemma config's `block_types`: a non-empty list of BLOCK_TYPES; no DERIVED_KEYS;
    `attention_window_size` within bounds.ATTENTION_WINDOW (the attention's sliding_window,
    attribute_map line 57); `lru_width` (where set) a multiple of num_attention_heads
    (RecurrentGemmaRglru.forward reshapes w into H blocks of w // H, line 309). Else one
    ConfigError line naming the key."""
    if data.get("model_type") != "recurrent_gemma":
        return
    derived = next((k for k in DERIVED_KEYS if data.get(k) is not None), None)
    if derived is not None:
        raise ConfigError(f"{where}: {derived}: RecurrentGemmaConfig derives it from block_types "
                          f"({' or '.join(BLOCK_TYPES)}, repeated); set block_types instead")
    if data.get("attention_window_size") is not None:
        bounds.check(data["attention_window_size"], bounds.ATTENTION_WINDOW,
                     f"{where}: attention_window_size")
    types = data.get("block_types")
    if types is not None:
        if not isinstance(types, (list, tuple)) or not types:
            raise ConfigError(f"{where}: block_types: expected a list of {' or '.join(BLOCK_TYPES)}"
                              f" (the pattern of blocks, repeated), got {types!r}")
        refuse_unknown(types, BLOCK_TYPES, f"{where}: block_types", "entry",
                       f"a block type: {' or '.join(BLOCK_TYPES)}")
    width, heads = data.get("lru_width"), data.get("num_attention_heads")
    if isinstance(width, int) and isinstance(heads, int) and heads >= 1 and width % heads:
        raise ConfigError(f"{where}: lru_width: {width} is not a multiple of num_attention_heads "
                          f"({heads}): the RG-LRU's gates split it into one block per head")


def refuse_unknown(entries, allowed, where_key: str, unit: str, what: str) -> None:
    """One ConfigError line naming the first of `entries` not in `allowed` and its position
    (a block pattern's entry: RecurrentGemma's block_types, Nemotron-H's pattern letters)."""
    bad = next((e for e in entries if e not in allowed), None)
    if bad is not None:
        raise ConfigError(f"{where_key}: {bad!r} ({unit} {list(entries).index(bad)}) is not "
                          f"{what}")
