"""Musicgen and Musicgen Melody (model_types `musicgen`, `musicgen_melody`): a decoder over audio
codes with one token table and one LM head per codebook (Model.codebooks).

transformers 5.25.0 models/musicgen/modeling_musicgen.py:
- MusicgenDecoder holds `embed_tokens`, a ModuleList of num_codebooks nn.Embedding of
  vocab_size + 1 rows each (lines 425-428: the extra row is the pad/BOS code), hidden wide;
  the input embedding is the sum of the codebooks' lookups (line 508) - no GEMM;
- the positions are sinusoidal, a non-persistent buffer (MusicgenSinusoidalPositionalEmbedding,
  line 122: `nn.Buffer(..., persistent=False)`), not a parameter: transformers counts none and
  neither does tierlab (no Model.learned_pos_emb);
- MusicgenForCausalLM holds `lm_heads`, a ModuleList of num_codebooks nn.Linear hidden ->
  vocab_size without bias (lines 640-642); each runs on the last hidden states and the logits
  are stacked, (batch, codebooks, seq, vocab) (line 727); the loss is the mean of the
  codebooks' cross-entropies (lines 744-749). tierlab times the heads as num_codebooks GEMMs of
  hidden x vocab, holds num_codebooks x vocab logits a token (layout.logits_per_token), and
  hooks each head and each table as its own module under ZeRO-3 (sim/modules.py);
- every block (MusicgenDecoderLayer, lines 292-330) holds a cross-attention to the text
  encoder's states, `encoder_attn` and `encoder_attn_layer_norm`, run only `if
  encoder_hidden_states is not None` (line 362); the causal LM alone is given none (its forward
  passes the caller's encoder_hidden_states, default None, line 713): counted, held and updated,
  not run, as the decoders of profiles/hf_encdec.py (Model.unrun_matrices).

models/musicgen_melody/modeling_musicgen_melody.py: the same tables (lines 404-407) and heads
(lines 635-637), blocks without cross-attention (MusicgenMelodyDecoderLayer, lines 300-323):
its conditioning (text and chroma states) is prepended to the audio embeddings when given
(`torch.cat([encoder_hidden_states, inputs_embeds], dim=1)`, line 501). The causal LM alone is
given none; tierlab's sequence is the audio codes alone (seq_len tokens a sample): prepended
conditioning would lengthen every block's sequence, which is not modelled.
"""
from __future__ import annotations

from typing import Any

from tierlab import bounds
from tierlab.profiles.hf_modules import Unmodelled

CODEBOOKS = bounds.Bound(1, 1_000, why="Musicgen uses 4 codebooks, 8 in stereo")
"""num_codebooks (Model.codebooks): one table and one head each; at least one."""

CODEBOOK_KEY = "num_codebooks"
"""The decoder config's key (configuration_musicgen.py MusicgenDecoderConfig, line 48)."""


def check_codebooks(config: Any, where: str) -> None:
    """num_codebooks of the decoder config within CODEBOOKS before anything is built (a 1e9
    codebooks config would build 1e9 tables): one ConfigError line naming the key."""
    value = getattr(config, CODEBOOK_KEY, None)
    if value is not None:
        bounds.check(value, CODEBOOKS, f"{where}: {CODEBOOK_KEY}")


def codebook_modules(model: Any) -> tuple[Any, Any, dict, list]:
    """(the first token table, the first LM head, Model fields, the other tables and heads) of a
    built causal LM whose input and output embeddings are ModuleLists, one per codebook
    (Musicgen); (its embedding, its head, {}, []) otherwise. Every table of one shape, every
    head of one shape, as many of each: else Unmodelled."""
    import torch

    emb, out = model.get_input_embeddings(), model.get_output_embeddings()
    lists = [isinstance(m, torch.nn.ModuleList) for m in (emb, out)]
    if not any(lists):
        return emb, out, {}, []
    tables, heads = (list(m) if isinstance(m, torch.nn.ModuleList) else [m] for m in (emb, out))
    if not all(lists) or len(tables) != len(heads) or not tables or \
            len({tuple(t.weight.shape) for t in tables}) != 1 or \
            len({(tuple(h.weight.shape), h.bias is not None) for h in heads}) != 1:
        raise Unmodelled(f"{len(tables)} token embeddings and {len(heads)} LM heads of "
                         "different shapes or numbers, where tierlab holds one of each per "
                         "codebook")
    rows, vocab = int(tables[0].weight.shape[0]), int(heads[0].weight.shape[0])
    fields = dict(codebooks=len(tables), vocab=vocab, **({"embed_rows": rows}
                                                        if rows != vocab else {}))
    return tables[0], heads[0], fields, tables[1:] + heads[1:]


def codebook_notes(model: Any, fields: dict) -> list[str]:
    """The not_modelled note of a Musicgen Melody-like decoder, whose conditioning is
    prepended to the sequence rather than cross-attended; [] otherwise."""
    kind = getattr(getattr(model, "config", None), "model_type", "")
    if not fields or not kind.startswith("musicgen_melody"):    # its decoder's: _decoder
        return []
    return ["the conditioning Musicgen Melody prepends to the audio codes (text and chroma "
            "states, modeling_musicgen_melody.py line 501) is not modelled: the sequence is the "
            "audio codes alone, as the causal LM without encoder states runs it"]
