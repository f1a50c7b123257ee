"""Reformer's causal LM (model_type `reformer`, is_decoder true): counted exactly as transformers
counts it, refused in one line.

transformers 5.25.0 models/reformer/modeling_reformer.py ReformerModelWithLMHead (lines
2150-2164; it asserts is_decoder, line 2153, so the default config, is_decoder false, is not
built at all) holds:
- word embeddings, vocab x hidden (ReformerEmbeddings, line 320), and axial position embeddings
  (AxialPositionEmbeddings, lines 193-221: one tensor per axis, axial_pos_shape[i] x
  axial_pos_embds_dim[i], the dims summing to hidden) or, with axial_pos_embds false, a table of
  max_position_embeddings x hidden (PositionEmbeddings, line 304);
- one ReformerLayer per entry of attn_layers (configuration_reformer.py line 148; lines
  1490-1500): ReformerAttention (lines 1347-1365) = a LayerNorm of hidden, the self-attention
  of that entry and ReformerSelfOutput's dense, heads x attention_head_size -> hidden, no bias
  (line 1339); ChunkReformerFeedForward (lines 1466-1488) = a LayerNorm, dense hidden ->
  feed_forward_size and output feed_forward_size -> hidden, both with bias (lines 1444, 1458),
  run in chunks of chunk_size_feed_forward tokens (the same FLOPs);
- "local" = LocalSelfAttention (lines 1110-1129): query, key and value Linear, no bias; chunks
  of local_attn_chunk_length tokens, each attending itself and local_num_chunks_before/after
  neighbours, causal: (1 + before + after) x local_attn_chunk_length keys a query;
- "lsh" = LSHSelfAttention (lines 416-440): one shared query_key Linear and value, no bias;
  vectors hashed into num_buckets by random rotations drawn in the forward (_hash_vectors,
  torch.randn, lines 728-732: not parameters, nor buffers), num_hashes rounds, sorted by bucket
  and chunked in lsh_attn_chunk_length tokens attending lsh_num_chunks_before/after neighbours:
  num_hashes x (1 + before + after) x lsh_attn_chunk_length keys a query (line 897);
- the reversible residual (_ReversibleFunction, lines 1654-1758): two streams [x1, x2] of
  hidden each, concatenated (line 1714, 1791), activations recomputed in backward rather than
  stored; the encoder's final LayerNorm over 2 x hidden (line 1769);
- ReformerOnlyLMHead (lines 1822-1829): decoder 2 x hidden -> vocab with bias, and a bias of
  vocab beside it (not the decoder's).

tierlab's blocks read one residual stream of hidden with full (or windowed) attention and store
activations for backward: LSH attention's hashing, sorting and gathers and the reversible
layers' recompute are not expressed, so the model is counted and refused, never simulated as
something else.
"""
from __future__ import annotations

from typing import Any

from tierlab import bounds
from tierlab.errors import ConfigError
from tierlab.profiles.hf_config import build, transformers_version

KINDS = ("local", "lsh")
"""attn_layers entries ReformerAttention builds (lines 1356-1365)."""

CHUNK_KEYS = ("local_attn_chunk_length", "lsh_attn_chunk_length")
NEIGHBOUR_KEYS = ("local_num_chunks_before", "local_num_chunks_after",
                  "lsh_num_chunks_before", "lsh_num_chunks_after")


def is_reformer(config: Any) -> bool:
    """`config` is transformers' ReformerConfig (model_type 'reformer')."""
    return getattr(config, "model_type", None) == "reformer"


def check_keys(config: Any, where: str) -> None:
    """Reformer's own counts within tierlab's bounds: one ConfigError line naming the key."""
    layers = list(config.attn_layers)
    if not layers or any(kind not in KINDS for kind in layers):
        raise ConfigError(f"{where}: attn_layers: expected a list of 'local' and 'lsh', got "
                          f"{config.attn_layers!r}")
    for key in CHUNK_KEYS:
        bounds.check(getattr(config, key), bounds.ATTENTION_WINDOW, f"{where}: {key}")
    for key in NEIGHBOUR_KEYS:
        bounds.check(getattr(config, key), bounds.NEIGHBOUR_CHUNKS, f"{where}: {key}")
    bounds.check(config.num_hashes, bounds.HASH_ROUNDS, f"{where}: num_hashes")
    for key in ("attention_head_size", "feed_forward_size"):
        bounds.check(getattr(config, key), bounds.MODEL["ffn"], f"{where}: {key}")
    if config.axial_pos_embds:
        shape, dims = list(config.axial_pos_shape), list(config.axial_pos_embds_dim)
        if not shape or len(shape) != len(dims):
            raise ConfigError(f"{where}: axial_pos_shape {shape} and axial_pos_embds_dim {dims}: "
                              "expected two lists of the same length")
        for i, (n, d) in enumerate(zip(shape, dims)):
            bounds.check(n, bounds.MODEL["seq_len"], f"{where}: axial_pos_shape[{i}]")
            bounds.check(d, bounds.MODEL["hidden"], f"{where}: axial_pos_embds_dim[{i}]")


def layer_kinds(config: Any) -> list[str]:
    """The attention of each layer: attn_layers[i] (one kind where all are alike, lines
    1356-1359)."""
    return list(config.attn_layers)


def position_params(config: Any) -> int:
    """Axial: sum of axial_pos_shape[i] x axial_pos_embds_dim[i] (the default 64 x 64 over dims
    64 + 192: 16,384); else max_position_embeddings x hidden."""
    if config.axial_pos_embds:
        return sum(n * d for n, d in zip(config.axial_pos_shape, config.axial_pos_embds_dim))
    return config.max_position_embeddings * config.hidden_size


def layer_params(config: Any, kind: str) -> int:
    """One ReformerLayer: LayerNorm 2 h, query/key/value (local: 3) or query_key/value (lsh: 2)
    of h x a, output dense a x h; feed-forward LayerNorm 2 h, h x f + f, f x h + h."""
    h, f = config.hidden_size, config.feed_forward_size
    a = config.num_attention_heads * config.attention_head_size
    projections = 3 if kind == "local" else 2
    return 2 * h + projections * h * a + a * h + 2 * h + h * f + f + f * h + h


def section_params(config: Any) -> dict[str, int]:
    """Parameters of each part of ReformerModelWithLMHead, as transformers builds it."""
    h, v = config.hidden_size, config.vocab_size
    return {"embeddings": v * h + position_params(config),
            "layers": sum(layer_params(config, k) for k in layer_kinds(config)),
            "final_norm": 2 * 2 * h,                    # LayerNorm(2 h), line 1769
            "lm_head": 2 * h * v + v + v}               # decoder with bias, and bias: 1828-1829


def keys_per_query(config: Any, kind: str) -> int:
    """Keys a query is scored against (before the causal mask): local (1 + before + after) x
    local_attn_chunk_length; lsh num_hashes x (1 + before + after) x lsh_attn_chunk_length."""
    if kind == "local":
        return (1 + config.local_num_chunks_before + config.local_num_chunks_after) * \
            config.local_attn_chunk_length
    return config.num_hashes * (1 + config.lsh_num_chunks_before +
                                config.lsh_num_chunks_after) * config.lsh_attn_chunk_length


def refusal(where: str, config: Any, sections: dict[str, int], theirs: int) -> str:
    """The one line that counts a Reformer and refuses to simulate it."""
    ours = sum(sections.values())
    said = f"tierlab counts {ours:,} parameters as transformers does" if ours == theirs else \
        f"tierlab counts {ours:,} parameters, transformers {theirs:,}"
    kinds = layer_kinds(config)
    layers = ", ".join(f"{kinds.count(k)} {k} ({keys_per_query(config, k):,} keys scored a query)"
                       for k in KINDS if k in kinds)
    return (f"{where}: model_type 'reformer' is not a supported architecture: transformers "
            f"{transformers_version()} builds it (ReformerConfig), {said}; layers: {layers}; "
            "not modelled: LSH attention (hashing by random rotations, sorting into buckets, "
            "num_hashes rounds) and reversible layers (two streams of hidden, activations "
            "recomputed in backward), which tierlab's blocks do not express")


def refuse_reformer(config: Any, where: str) -> None:
    """Nothing for any config but ReformerConfig; for it one ConfigError line: a bad key named,
    transformers' own refusal (is_decoder false), or the count (checked against transformers'
    meta-device build) and why tierlab does not simulate it."""
    if not is_reformer(config):
        return
    check_keys(config, where)
    model = build(config, where)
    theirs = sum(p.numel() for p in model.parameters())
    raise ConfigError(refusal(where, config, section_params(config), theirs))
