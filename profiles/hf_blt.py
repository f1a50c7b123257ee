"""Byte Latent Transformer (model_type `blt`): counted exactly as transformers counts it, refused
in one line.

transformers 5.25.0 models/blt/modeling_blt.py BltForCausalLM (lines 1332-1343) holds, in
BltModel (lines 1150-1169):
- a local encoder over bytes (BltLocalEncoder, lines 562-590): encoder_config's layers at its
  hidden size, its byte embedding, a projection hidden -> hidden x cross_attn_k and the
  cross-attention from patches to bytes (one, or one per layer with cross_attn_all_layers);
- hash n-gram embeddings (`encoder_hash_tok_embedding`, lines 1159-1161): one table of
  encoder_hash_byte_group_vocab x nb_functions x len(byte_group_size) rows, encoder wide,
  looked up and summed into the byte embedding (compute_hash_embeddings, lines 1034-1069);
- a global transformer over patches (BltGlobalTransformer, lines 753-776): global_config's layers
  at its own hidden size, behind a projection where encoder hidden x cross_attn_k differs from
  it (configuration_blt.py BltConfig.__post_init__, lines 253-256);
- a local decoder over bytes (BltLocalDecoder, lines 676-702): decoder_config's layers, a
  projection of the patches hidden_size_global -> hidden x cross_attn_k, cross-attention from
  bytes to patches, a final norm;
- an entropy patcher (BltPatcher, lines 852-869; with patch_in_forward) that is frozen: put in
  eval mode, every parameter requires_grad = False (lines 1162-1166); run in the forward on the
  input bytes (lines 1212-1222), no gradient reaches it;
- the LM head, decoder hidden -> vocab (line 1343); where tie_word_embeddings the encoder's
  byte embedding is the head's weight (`_tied_weights_keys`, line 1336, is {target: source},
  modeling_utils.py line 1115: embed_tokens takes lm_head's tensor, whatever its shape).

The global transformer runs at the patch count, which the patcher decides per sample from its
entropies and patching_threshold (patch_lengths_from_entropies, lines 933-984; patch_size only
switches it on, lines 918-924); patch_size (4) is the nominal mean patch in bytes. tierlab's
blocks share one width and one sequence length (profiles/layout.py, sim/flops.py), which these
three stacks do not: the model is counted and refused, never simulated as something else.
"""
from __future__ import annotations

from typing import Any, Mapping

from tierlab import bounds
from tierlab.errors import ConfigError
from tierlab.profiles.hf_config import build, check_counts, transformers_version

SECTIONS = ("encoder_config", "global_config", "decoder_config", "patcher_config")
"""BltConfig's sub-configs (configuration_blt.py BltConfig.sub_configs_defaults, lines
214-219), each with its own layers, hidden size, heads and MLP width."""


HASH_KEYS = (("encoder_hash_byte_group_vocab", bounds.MODEL["vocab"]),
             ("encoder_hash_byte_group_nb_functions", bounds.MODEL["n_layers"]),
             ("cross_attn_k", bounds.MODEL["n_heads"]))
"""BltConfig's other counts and the bounds they meet: the hash table's rows per function and
byte-group size, the hash functions, the patch copies per cross-attention ("Number of
cross-attention heads", configuration_blt.py lines 185-186)."""


SECTION_KEYS = (("cross_attn_k", bounds.MODEL["n_heads"]),
                ("hidden_size_global", bounds.MODEL["hidden"]))
"""The local encoder's and decoder's own counts beside check_counts' (configuration_blt.py
lines 43-44, 82-83): their patch copies, the decoder's patch width in (line 689)."""


def is_byte_latent(config: Any) -> bool:
    """`config` is transformers' BltConfig (model_type 'blt')."""
    return getattr(config, "model_type", None) == "blt"


def check_sections(data: Mapping, config: Any, where: str) -> None:
    """Every sub-config's counts (as the file writes them, then as transformers fills them) and
    the hash counts within tierlab's bounds, before a model is built: one ConfigError line naming
    the file, the sub-config and the key."""
    for key in SECTIONS:
        part = data.get(key)
        if isinstance(part, Mapping):
            check_counts(part.get, f"{where}: {key}")
        sub = getattr(config, key, None)
        if sub is not None:
            check_counts(lambda attr, sub=sub: getattr(sub, attr, None), f"{where}: {key}")
            for attr, bound in SECTION_KEYS:
                if getattr(sub, attr, None) is not None:
                    bounds.check(getattr(sub, attr), bound, f"{where}: {key}: {attr}")
    for key, bound in HASH_KEYS:
        value = getattr(config, key, None)
        if value is not None:
            bounds.check(value, bound, f"{where}: {key}")
    sizes = config.encoder_hash_byte_group_size
    if not isinstance(sizes, list) or not sizes or \
            any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes):
        raise ConfigError(f"{where}: encoder_hash_byte_group_size: expected a list of whole "
                          f"numbers >= 1, got {sizes!r}")
    bounds.check(hash_rows(config), bounds.MODEL["vocab"],
                 f"{where}: encoder_hash_byte_group_vocab x nb_functions x "
                 "len(encoder_hash_byte_group_size)")


def hash_rows(config: Any) -> int:
    """Rows of encoder_hash_tok_embedding (modeling_blt.py lines 1159-1160): 500,002 x 1 x 6 =
    3,000,012 by default."""
    return config.encoder_hash_byte_group_vocab * \
        config.encoder_hash_byte_group_nb_functions * len(config.encoder_hash_byte_group_size)


def attention_params(hidden: int, heads: int, kv_heads: int) -> int:
    """q, k, v, o of BltSelfAttention (lines 283-293), no bias, head_dim = hidden // heads
    (config.head_dim is not read)."""
    head = hidden // heads
    return 2 * hidden * heads * head + 2 * hidden * kv_heads * head


def layer_params(sub: Any) -> int:
    """One BltTransformerLayer (lines 136-146): attention, gated MLP of 3 x hidden x
    intermediate (lines 58-60), two RMSNorms (weight only)."""
    h = sub.hidden_size
    return attention_params(h, sub.num_attention_heads, sub.num_key_value_heads) + \
        3 * h * sub.intermediate_size + 2 * h


def cross_params(sub: Any) -> int:
    """The cross-attentions of a local encoder or decoder (lines 583-587, 695-699): one, or one
    per layer with cross_attn_all_layers; each q, k, v, o and q_norm, k_norm of hidden (lines
    356-361)."""
    h = sub.hidden_size
    n = sub.num_hidden_layers if sub.cross_attn_all_layers else 1
    return n * (attention_params(h, sub.num_attention_heads, sub.num_key_value_heads) + 2 * h)


def section_params(config: Any) -> dict[str, int]:
    """Parameters of each part of BltForCausalLM, as transformers builds it from `config`."""
    enc, glo, dec, pat = (getattr(config, k) for k in SECTIONS)
    tied = bool(config.tie_word_embeddings)         # the byte embedding is lm_head's tensor
    cross_in = glo.encoder_cross_output_size        # None where it equals the global width
    out = {"local_encoder": enc.num_hidden_layers * layer_params(enc) + cross_params(enc)
           + enc.hidden_size * enc.hidden_size * enc.cross_attn_k       # lines 576-580
           + (0 if tied else enc.vocab_size * enc.hidden_size),         # line 581
           "encoder_hash_tok_embedding": hash_rows(config) * enc.hidden_size,
           "global_transformer": glo.num_hidden_layers * layer_params(glo)
           + (cross_in * glo.hidden_size if cross_in is not None else 0),   # lines 768-773
           "local_decoder": dec.num_hidden_layers * layer_params(dec) + cross_params(dec)
           + dec.hidden_size_global * dec.hidden_size * dec.cross_attn_k    # lines 688-692
           + dec.hidden_size,                                           # its norm, line 693
           "lm_head": dec.hidden_size * config.vocab_size}
    if config.patch_in_forward:     # lines 858-867: layers, embedding, norm, its own head
        out["patcher"] = pat.num_hidden_layers * layer_params(pat) + \
            2 * pat.vocab_size * pat.hidden_size + pat.hidden_size
    return out


def built_counts(model: Any) -> tuple[int, int]:
    """transformers' (total, frozen) parameters of the built model, each tensor once."""
    params = list(model.parameters())
    return sum(p.numel() for p in params), sum(p.numel() for p in params if not p.requires_grad)


def stack(name: str, params: int, sub: Any) -> str:
    """'local encoder 19,142,656 (1 layer, hidden 1,024)'."""
    n = sub.num_hidden_layers
    return f"{name} {params:,} ({n} layer{'s' * (n != 1)}, hidden {sub.hidden_size:,})"


def refusal(where: str, config: Any, sections: dict[str, int], theirs: tuple[int, int]) -> str:
    """The one line that counts a BLT and refuses to simulate it."""
    enc, glo, dec = config.encoder_config, config.global_config, config.decoder_config
    total, frozen = theirs
    ours = sum(sections.values())
    said = f"tierlab counts {ours:,} parameters as transformers does" if ours == total else \
        f"tierlab counts {ours:,} parameters, transformers {total:,}"
    parts = [stack("local encoder", sections["local_encoder"], enc),
             f"hash n-gram embeddings {sections['encoder_hash_tok_embedding']:,} "
             f"({hash_rows(config):,} x {enc.hidden_size:,})",
             stack("global transformer", sections["global_transformer"], glo),
             stack("local decoder", sections["local_decoder"], dec),
             f"LM head {sections['lm_head']:,}" +
             (" (the byte embedding's tensor too)" if config.tie_word_embeddings else "")]
    if "patcher" in sections:
        parts.append(stack("entropy patcher", sections["patcher"], config.patcher_config)[:-1] +
                     f"; frozen: transformers builds {frozen:,} parameters without gradients)")
    return (f"{where}: model_type 'blt' is not a supported architecture: transformers "
            f"{transformers_version()} builds it (BltConfig), {said}: {', '.join(parts)}; "
            f"not modelled: a Byte Latent Transformer, a local encoder and decoder over bytes "
            f"(hidden {enc.hidden_size:,} and {dec.hidden_size:,}) around a global transformer "
            f"over patches (hidden {glo.hidden_size:,}; patches per sample set by the entropy "
            f"patcher, patch_size {config.patch_size} bytes nominal) joined by cross-attention, "
            f"which tierlab's blocks of one width and one sequence length do not express")


def refuse_byte_latent(data: Mapping, config: Any, where: str) -> None:
    """Nothing for any config but BltConfig; for it one ConfigError line: a bad count named, or
    the count of each part (checked against transformers' meta-device build) and why tierlab
    does not simulate it."""
    if not is_byte_latent(config):
        return
    check_sections(data, config, where)
    model = build(config, where, data)
    raise ConfigError(refusal(where, config, section_params(config), built_counts(model)))
