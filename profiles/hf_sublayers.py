"""Decoder layers that hold two attention sublayers, read as two tierlab blocks each
(profiles/hf_build.py): LongCat-Flash.

transformers 5.25.0 modeling_longcat_flash.py LongcatFlashDecoderLayer (lines 433-512) holds
`self_attn`, a ModuleList of two MLAs (line 450), `mlps`, two dense MLPs (line 451), two of each
norm (lines 452-457) and one shortcut-connected MoE `mlp` (line 448: LongcatFlashMoE, its
`experts` and `router`). forward (lines 470-510): attention 0, then the MoE and MLP 0 on the
same normed input (lines 485-488), attention 1, MLP 1, and the MoE's output added to the
residual after MLP 1 (line 510). configuration_longcat_flash.py (lines 116-122) counts
`num_hidden_layers = 2 x num_layers` for it.

tierlab's block is one attention + one MLP/MoE, so decoder layer i becomes
  block 2i:     attention 0 + a MoE whose always-active shared expert is MLP 0 (MoE.shared_ffn:
                the two read the same input and their outputs are summed into the residual,
                the MoE's one sublayer later: the same FLOPs and parameters);
  block 2i + 1: attention 1 + MLP 1 (a dense layer: MoE.dense_layers).
The router scores n_routed_experts + zero_expert_num experts (LongcatFlashTopkRouter line 135);
the zero-computation experts hold no parameters (MoE.zero_experts).
"""
from __future__ import annotations

from typing import Any, Callable

from tierlab import bounds
from tierlab.errors import ConfigError
from tierlab.profiles.hf_modules import decoder_layers


ZERO_EXPERT_KEY = "zero_expert_num"
"""The config key of the zero-computation experts (configuration_longcat_flash.py line 112;
LongcatFlashMoE line 202 reads `config.zero_expert_num or 0`)."""


PAIRED = ("self_attn", "mlps", "input_layernorm", "post_attention_layernorm")
"""A two-sublayer decoder layer's ModuleLists of two (LongcatFlashDecoderLayer lines 450-457)."""


def zero_experts(config: Any) -> int:
    """The config object's zero-computation experts (0 where it has none)."""
    return int(getattr(config, ZERO_EXPERT_KEY, None) or 0)


def check_zero_experts(get: Callable[[str], Any], where: str) -> None:
    """zero_expert_num a whole number >= 0, and the top-k (moe_topk, num_experts_per_tok) at
    most n_routed_experts + zero_expert_num (torch.topk over the router's scores fails beyond):
    one ConfigError line naming the key. transformers builds either (a negative count shrinks
    the router: LongcatFlashTopkRouter line 135)."""
    zero = get(ZERO_EXPERT_KEY)
    if zero is None:
        return
    if isinstance(zero, bool) or not isinstance(zero, int) or zero < 0:
        raise ConfigError(f"{where}: {ZERO_EXPERT_KEY}: must be a whole number >= 0, got {zero!r}")
    bounds.check(zero, bounds.MODEL["n_experts"], f"{where}: {ZERO_EXPERT_KEY}")
    n = get("n_routed_experts")
    for key in ("moe_topk", "num_experts_per_tok"):
        k = get(key)
        if isinstance(n, int) and isinstance(k, int) and not isinstance(k, bool) \
                and k > n + zero:
            raise ConfigError(f"{where}: {key}: {k} exceeds the {n + zero} experts the router "
                              f"picks from (n_routed_experts {n} + {ZERO_EXPERT_KEY} {zero})")


def decoder_blocks(model: Any, config: Any) -> tuple[Any, list]:
    """(the decoder layers' ModuleList, tierlab's blocks in order): for a config whose layers
    hold two sublayers each (num_hidden_layers = 2 x the list's length, every layer's PAIRED
    lists of two and one MoE `mlp`) two blocks per layer (sublayer_blocks), looked for first
    (with one such layer, its own lists of two would pass for the decoder's); else the list
    of num_hidden_layers layers themselves (decoder_layers' Unmodelled without one)."""
    n = config.num_hidden_layers
    halves = [m for m in model.modules() if type(m).__name__ == "ModuleList" and not n % 2
              and len(m) == n // 2 and all(two_sublayers(layer) for layer in m)]
    if halves:
        return halves[0], [b for layer in halves[0] for b in sublayer_blocks(layer)]
    layers = decoder_layers(model, n)
    return layers, list(layers)


def two_sublayers(layer: Any) -> bool:
    """`layer` holds the PAIRED ModuleLists of two and a MoE `mlp` (experts + router), nothing
    else with parameters."""
    kids = dict(layer.named_children())
    pairs = all(type(kids.get(n)).__name__ == "ModuleList" and len(kids[n]) == 2 for n in PAIRED)
    moe = kids.get("mlp")
    return pairs and moe is not None and {"experts", "router"} <= \
        {n for n, _ in moe.named_children()} and \
        set(kids) == set(PAIRED) | {"mlp"}


def sublayer_blocks(layer: Any) -> list[Any]:
    """The two tierlab blocks of a two-sublayer decoder layer (module docstring): each a
    ModuleDict of its attention, norms and MLP; block 0's MLP the MoE with MLP 0 as its
    `shared_experts` (read by hf_blocks.moe_fields)."""
    import torch

    moe = dict(layer.mlp.named_children())
    blocks = []
    for i in (0, 1):
        mlp = layer.mlps[i] if i else torch.nn.ModuleDict(
            dict(moe, shared_experts=layer.mlps[0]))
        blocks.append(torch.nn.ModuleDict({
            "self_attn": layer.self_attn[i], "input_layernorm": layer.input_layernorm[i],
            "post_attention_layernorm": layer.post_attention_layernorm[i], "mlp": mlp}))
    return blocks
