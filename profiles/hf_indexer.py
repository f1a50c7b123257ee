"""Sparse attention indexers read off the built modules (profiles/hf_modules.py tensor_attention
reads the shape, profiles/hf_build.py checks the layers): which keys each query of an
`indexed_attention` layer scores is picked by an indexer, forward work only (AttentionTensors
.indexer: heads, head width, top-k; timed by sim/flops.py indexer_work). transformers 5.25.0:

- DeepSeek-V3.2 (modeling_deepseek_v32.py DeepseekV32Indexer) and its copies, a module
  `indexer` in the attention with `n_heads` = index_n_heads, `head_dim` = index_head_dim,
  `index_topk`: GLM-MoE-DSA, AXK2, dots3-note (modeling_dots3_note.py Dots3NoteTextIndexer lines
  205-221, built only in `indexed_attention` layers, line 508), HY-V4 (modeling_hy_v4.py
  HYV4Indexer lines 175-191, built only where config.indexer_types says "full", line 362).
- DeepSeek-V4's `compressor.indexer` (hf_compressed.compressor_indexer): `num_heads`.
- Kolibri 1.1 (modeling_kolibri1_1.py Kolibri1_1Indexer lines 77-88): no weights; `num_heads` =
  index_num_heads, `topk` = index_topk, no head width of its own: it scores the attention's first
  num_heads query heads against key head 0 (`score`, lines 90-96, on the query_states and
  key_states of Kolibri1_1Attention.forward, line 324), so its width is the attention's head_dim.
- Qwen4-Exp (modeling_qwen4_exp.py Qwen4ExpTextQSAIndexer lines 769-886, built in every
  Qwen4ExpTextAttention, line 952): `index_n_heads`, `index_head_dim`, `token_budget` (lines
  775-780); one fused `index_qk_proj` (lines 781-785); it scores mean-pooled blocks of
  `compress_ratio` keys and returns a boolean mask the attention ANDs into its own (lines
  963-969), so nothing of it gets a gradient and the attention's scores stay dense.

An `indexed_attention` layer without an indexer is read only where it reuses an earlier one's
top-k (HY-V4's "shared" indexer_types: HYV4Attention.forward lines 425-437 takes
prev_topk_indices; its own scores run dense and masked as every indexed layer's, line 440).
"""
from __future__ import annotations

from typing import Any

from tierlab.errors import ConfigError
from tierlab.profiles.hf_compressed import compressor_indexer, whole_attr

INDEXED = "indexed_attention"
"""The `layer_types` entry of a layer whose keys an indexer picks (masking_utils: causal)."""

SHARED = "shared"
"""HY-V4's `indexer_types` entry of a layer that reuses the top-k of the last "full" one
(configuration_hy_v4.py; modeling_hy_v4.py line 361 `skip_topk`)."""

HEADS, WIDTH, TOP_K = (("n_heads", "num_heads", "index_n_heads"), ("head_dim", "index_head_dim"),
                       ("index_topk", "topk", "token_budget"))
"""The indexer's attributes, DeepSeek-V3.2's names first (DeepseekV32Indexer.__init__), then
DeepSeek-V4's `num_heads` (DeepseekV4Indexer.__init__ lines 506-508), Kolibri 1.1's
`num_heads`, `topk` (Kolibri1_1Indexer.__init__ lines 80-81) and Qwen4-Exp's `index_n_heads`,
`index_head_dim`, `token_budget` (modeling_qwen4_exp.py Qwen4ExpTextQSAIndexer.__init__ lines
775-780: config indexer_n_heads, indexer_head_dim, indexer_budget; its top-k is the tokens a
query keeps, block_topk = token_budget // compress_ratio blocks of compress_ratio tokens each,
lines 868-870)."""


def indexer_module(attn: Any) -> Any:
    """An attention's indexer: its child `indexer` (DeepSeek-V3.2 and copies, Kolibri 1.1) or
    DeepSeek-V4's `compressor.indexer`; None without one (an attribute set to None, as HY-V4's
    shared layers and dots3-note's sliding ones hold, is no child)."""
    child = dict(attn.named_children()).get("indexer")
    return child if child is not None else compressor_indexer(attn)


def indexer_of(module: Any, attention_width: int) -> tuple[tuple[int, int, int] | None, str]:
    """((heads, head width, top-k), '') of an indexer (HEADS, WIDTH, TOP_K); an indexer without
    weights and head width of its own scores the attention's query heads, `attention_width` wide
    (Kolibri 1.1); (None, what is missing) where one is missing or below 1."""
    weightless = next(iter(module.parameters()), None) is None
    width = whole_attr(module, *WIDTH)
    if width is None and weightless:
        width = attention_width
    got = [whole_attr(module, *HEADS), width, whole_attr(module, *TOP_K)]
    if any(g is None or g < 1 for g in got):
        return None, (f"an indexer ({type(module).__name__}) whose heads, head width and top-k "
                      f"tierlab does not find (index_n_heads or index_num_heads, index_head_dim "
                      f"or head_dim, index_topk: {got[0]}, {got[1]}, {got[2]})")
    return (got[0], got[1], got[2]), ""


def layer_tensors(fields: dict, layer: int) -> Any:
    """The AttentionTensors block `layer` is read with (Model.shaped, before the Model is)."""
    shape = next((a for a in fields.get("layer_attention", ()) if layer in a.layers), None)
    return shape.attention_tensors if shape is not None else fields.get("attention_tensors")


def check_indexed(config: Any, fields: dict, where: str) -> tuple[str, ...]:
    """Every `indexed_attention` layer read with its indexer (AttentionTensors.indexer), or one
    that reuses the top-k of an earlier layer's (HY-V4's indexer_types "shared"); else one
    ConfigError line naming the key, the layer not timed. Returns what of the indexers is not
    modelled (indexer_notes), for the Model's not_modelled."""
    types = list(getattr(config, "layer_types", None) or ())
    reuse = list(getattr(config, "indexer_types", None) or ())
    indexed = [i for i, t in enumerate(types) if t == INDEXED]
    read = [i for i in indexed if (t := layer_tensors(fields, i)) is not None and t.indexer]
    for i in sorted(set(indexed) - set(read)):
        if i >= len(reuse) or reuse[i] != SHARED:
            raise ConfigError(f"{where}: layer_types: {INDEXED!r} (layer {i}) beside attention "
                              "without a DeepSeek sparse attention indexer tierlab reads (a "
                              "module `indexer` with its heads, head width and top-k) is not "
                              "modelled")
        if not any(j < i for j in read):
            raise ConfigError(f"{where}: indexer_types: layer {i} is {SHARED!r} with no 'full' "
                              "indexer before it whose top-k it could reuse (HY-V4's forward "
                              "refuses it)")
    return indexer_notes(config) if indexed else ()


def indexer_notes(config: Any) -> tuple[str, ...]:
    """Kolibri 1.1's and Qwen4-Exp's selections, which AttentionTensors.indexer has no place
    for, with the config's figures (configuration_kolibri1_1.py, configuration_qwen4_exp.py;
    () for every other indexer)."""
    ratio = getattr(config, "indexer_compress_ratio", None)
    if ratio is not None:
        return (f"Qwen4ExpTextQSAIndexer's blocks (modeling_qwen4_exp.py lines 845-870): each "
                f"query scores the means of its s // indexer_compress_ratio = s // {ratio} "
                f"complete key blocks and keeps the top indexer_budget // {ratio} blocks plus the "
                f"incomplete tail; timed as DeepSeek-V3.2's indexer: every query scored against "
                f"every key",)
    pool = getattr(config, "index_pool_size", None)
    if pool is None:
        return ()
    budget = config.index_topk + config.index_num_local_tokens + config.index_num_sink_tokens
    return (f"Kolibri1_1Indexer's selection (modeling_kolibri1_1.py lines 124-171): only queries "
            f"that see more than index_topk + index_num_local_tokens + index_num_sink_tokens = "
            f"{budget:,} keys are scored, and beyond index_pool_size = {pool:,} keys a pool is "
            f"first picked from s / index_compression = s / {config.index_compression} block "
            "means; timed as DeepSeek-V3.2's indexer: every query scored against every key",)
