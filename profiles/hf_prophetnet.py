"""ProphetNet's causal LM: its n-gram streams as Model.streams (profiles/hf_build.py).

transformers 5.25.0 modeling_prophetnet.py ProphetNetForCausalLM wraps ProphetNetDecoder, whose
forward appends `ngram` predicting streams to the main one: each a copy of the sequence made of
`ngram_embeddings[k]` (an Embedding of ngram rows, line 1069) plus the positions shifted by one
(line 1160), concatenated before the first block (line 1195: `torch.cat([hidden_states] +
ngram_hidden_states, 1)`) and normed together (embeddings_layer_norm, line 1198). So every block
runs (1 + ngram) x s tokens (Model.streams): ProphetNetNgramSelfAttention projects them all
(query/key/value_proj, lines 584-586) and `relative_pos_embeddings` (a Linear hidden ->
num_buckets x heads, line 554) runs on the main stream's tokens (line 750) and the predicting
streams' (line 800), out_proj on each stream's output; the decoder layer's norms and
feed_forward run on the whole (1 + ngram) s (ProphetNetDecoderLayer.forward lines 918 and
933-934). The attention scores the main stream causally over its s keys (line 629) and each
predicting stream over 2 s keys, the main stream's and its own (line 664,
`predict_key_states`; masked by ngram_attention_bias): s^2 (1 + 2 ngram) score pairs a head
(layout.stream_keys). The LM head runs on the predicting streams only, ngram x s tokens
(ProphetNetForCausalLM.forward lines 1771-1772: `predicting_streams = outputs[1]`,
`self.lm_head(predicting_streams)`), and _compute_loss (line 1797) takes log_softmax over all
ngram x s rows (Model.head_streams = ngram); the main stream gets no logits.

Counted as transformers counts it: ngram_embeddings (ngram x hidden) in Model.embed_tensors, the
position table (ProphetNetPositionalEmbeddings, an nn.Embedding of max_position_embeddings
rows, line 352) as learned positions, relative_pos_embeddings as a matrix of the attention, the
cross-attention (cross_attn, cross_attn_layer_norm: ProphetNetDecoderLayer lines 885-886)
counted and held but not run (profiles/hf_encdec.py, STREAM_CROSS). Approximated, and named in
the Model's not_modelled: the eager attention's score tensors and the relative-position gathers
(lines 727-769, 771-828) are not in the activation memory nor timed beyond the softmax traffic.
"""
from __future__ import annotations

from typing import Any

from tierlab import bounds
from tierlab.profiles.hf_modules import Unmodelled

NGRAM = "ngram_embeddings"
"""ProphetNet's embedding of its predicting streams (modeling_prophetnet.py line 1069)."""

NGRAM_KEY = "ngram"
"""The config's key (configuration_prophetnet.py ProphetNetConfig, line 64)."""

NGRAM_BOUND = bounds.Bound(0, 1_000, why="ProphetNet's published configs predict 2 tokens ahead "
                                         "and every block runs 1 + ngram copies of the sequence")
"""ngram before anything is built; 0 is refused once built (refuse_ngram_streams)."""

STREAM_CROSS = ("cross_attn", "cross_attn_layer_norm")
"""ProphetNetDecoderLayer's cross-attention and its norm (modeling_prophetnet.py lines 885-886),
run only with encoder_hidden_states (line 921)."""


DECODER_KEYS = (("num_encoder_layers", "num_decoder_layers"),
                ("num_encoder_attention_heads", "num_decoder_attention_heads"))
"""ProphetNetConfig's num_hidden_layers and num_attention_heads read the encoder's keys
(configuration_prophetnet.py lines 77-78 and its attribute_map, line 43); the causal LM builds the
decoder alone (ProphetNetDecoderWrapper), so the encoder's keys take the decoder's values."""


def check_ngram(config: Any, where: str) -> None:
    """ngram of a ProphetNet config within NGRAM_BOUND before anything is built (1e9 streams
    would build a 1e9-row table): one ConfigError line naming the key; then the encoder's
    DECODER_KEYS set to the decoder's, so the layer and head counts read are the decoder's."""
    if getattr(config, "model_type", "") != "prophetnet":
        return
    bounds.check(getattr(config, NGRAM_KEY), NGRAM_BOUND, f"{where}: {NGRAM_KEY}")
    for encoder, decoder in DECODER_KEYS:
        setattr(config, encoder, getattr(config, decoder))


def ngram_streams(model: Any) -> int | None:
    """The predicting streams of a built causal LM (rows of its NGRAM table), None without."""
    tables = ngram_tables(model)
    return int(tables[0].weight.shape[0]) if tables else None


def ngram_tables(model: Any) -> list:
    """The NGRAM table of a built causal LM, in a list; [] without."""
    return [m for name, m in model.named_modules() if name.rsplit(".", 1)[-1] == NGRAM]


def refuse_ngram_streams(model: Any) -> None:
    """Unmodelled for ngram 0: no predicting stream, so no logits; nothing otherwise."""
    n = ngram_streams(model)
    if n is not None and n < 1:
        raise Unmodelled(f"ProphetNet's n-gram streams: ngram {n} leaves no predicting stream, "
                         "the only one the LM head reads (modeling_prophetnet.py lines "
                         "1771-1772): transformers builds it, its forward cannot give logits")


def stream_fields(model: Any) -> tuple[dict, list, list[str]]:
    """(Model fields, the modules they take, not_modelled notes) of a causal LM's n-gram
    streams: streams 1 + ngram, head_streams ngram, the NGRAM table in embed_tensors; ({}, [],
    []) without."""
    tables = ngram_tables(model)
    if not tables:
        return {}, [], []
    n, width = (int(v) for v in tables[0].weight.shape)
    fields = dict(streams=1 + n, head_streams=n,
                  embed_tensors=((f"{NGRAM}.weight", n * width),))
    return fields, tables, [stream_note(n)]


def stream_note(n: int) -> str:
    """The not_modelled note of the n-gram streams."""
    return (f"ProphetNet's n-gram streams (ngram {n}): every block runs {1 + n} x the tokens, the "
            f"main stream scoring s keys and each predicting stream 2 s (s^2 (1 + 2 x {n}) pairs "
            f"a head, modeling_prophetnet.py lines 629 and 664), the LM head and loss {n} x the "
            "tokens (lines 1771-1772); the eager attention's score tensors and the "
            "relative-position gathers (num_buckets) are not in the activation memory, and "
            f"{NGRAM} is counted, not timed")
