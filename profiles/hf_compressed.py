"""DeepSeek-V4's attention read off the built module (profiles/hf_modules.py tensor_attention
calls these): its grouped low-rank output projection and its compressed KV (transformers 5.25.0
models/deepseek_v4/modeling_deepseek_v4.py; DeepSeek-AI 2026, "DeepSeek-V4", sec. 2.3).

- `o_a_proj` is a DeepseekV4GroupedLinear (lines 313-342): an nn.Linear of n_groups x d_g rows
  and heads x head_dim / n_groups columns whose forward is a bmm of the g groups, each
  (heads x head_dim / g) -> d_g: 2 x (heads x head_dim / g) x (g x d_g) FLOPs per token, the
  2 x in x out of the Linear it subclasses. `o_b_proj` mixes g x d_g -> hidden (line 804).
- `compressor` (CSA: DeepseekV4CSACompressor, lines 599-711; HCA: DeepseekV4HCACompressor, lines
  372-454): kv_proj and gate_proj of every token (hidden -> 2 x head_dim for CSA, head_dim for
  HCA), then one compressed KV entry per closed window of `compress_rate` tokens (a softmax-gated
  sum over the window, 2 x compress_rate slots for CSA's overlapping windows), s // m entries;
  the attention concatenates them to the keys (DeepseekV4Attention.forward, line 840:
  `kv = torch.cat([kv, compressed_kv], dim=2)`) and masks the ones a query may not see.
- CSA's `compressor.indexer` (DeepseekV4Indexer, lines 473-596): a compressor of its own at
  index_head_dim, `q_b_proj` on the attention's q residual, `scorer.weights_proj`, scores over
  the s // m compressed entries and their top `index_topk`; its output is integer indices, so
  nothing of it gets a gradient (forward work only, as DeepSeek-V3.2's indexer); its shape is read
  by profiles/hf_indexer.py indexer_of, as every indexer's.
Each reader returns plain values; hf_modules raises Unmodelled with the text they give.
"""
from __future__ import annotations

from typing import Any

COMPRESSOR = "compressor"
"""The child of DeepseekV4Attention that holds the compressed KV (line 806)."""


def whole_attr(obj: Any, *names: str) -> int | None:
    """The first of `names` that `obj` sets to a whole number (0 and negatives included)."""
    values = (getattr(obj, n, None) for n in names)
    return next((v for v in values if isinstance(v, int) and not isinstance(v, bool)), None)


def grouped_matrices(attn: Any) -> tuple[tuple[str, int, int, int], ...]:
    """(name, in, out, groups) of the grouped Linears inside `attn` (a Linear subclass with an
    `n_groups` attribute: DeepseekV4GroupedLinear, line 332), as Linear stores them: weight
    out x in, in = one group's input width."""
    return tuple((n, int(m.weight.shape[1]), int(m.weight.shape[0]),
                  whole_attr(m, "n_groups") or 0)
                 for n, m in attn.named_modules() if n and whole_attr(m, "n_groups") is not None
                 and getattr(m, "weight", None) is not None and m.weight.dim() == 2)


def grouped_output_error(attn: Any, mats: tuple, heads: int, v: int, hidden: int) -> str:
    """'' where the grouped output projection takes heads x v to hidden (o_a_proj: g groups of
    heads x v / g -> d_g each, then a Linear of g x d_g -> hidden among `mats`), else what is
    wrong, naming the config key; '' too where `attn` has no grouped Linear."""
    for name, n_in, n_out, groups in grouped_matrices(attn):
        if groups < 1 or n_in * groups != heads * v or n_out % groups:
            return (f"a grouped output projection {name} of {groups} groups of {n_in} -> "
                    f"{n_out // max(1, groups)} that does not take {heads} heads of {v} "
                    f"(o_groups must divide num_attention_heads x head_dim)")
        if not any(i == n_out and o == hidden for _, i, o in mats):
            return f"a grouped output projection {name} to {n_out} without a Linear {n_out} -> {hidden}"
    return ""


def compress_rate(attn: Any) -> tuple[int, str]:
    """(tokens per compressed KV entry of the attention's compressor, '' or what is wrong):
    (0, '') without a compressor; DeepseekV4CSACompressor / HCACompressor.__init__ set
    `compress_rate` from config.compress_rates (lines 396, 624)."""
    child = dict(attn.named_children()).get(COMPRESSOR)
    if child is None:
        return 0, ""
    rate = whole_attr(child, "compress_rate")
    if rate is None or rate < 1:
        return 0, (f"a compressor ({type(child).__name__}) of compress_rate {rate} "
                   "(compress_rates: whole numbers >= 1)")
    return rate, ""


def compressor_indexer(attn: Any) -> Any:
    """DeepSeek-V4's Lightning Indexer, `compressor.indexer` (DeepseekV4CSACompressor.__init__
    line 631), or None."""
    child = dict(attn.named_children()).get(COMPRESSOR)
    return None if child is None else dict(child.named_children()).get("indexer")

