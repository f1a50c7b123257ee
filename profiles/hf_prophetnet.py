"""ProphetNet's causal LM, and why tierlab refuses it (profiles/hf_build.py via hf_encdec.py).

transformers 5.25.0 modeling_prophetnet.py ProphetNetForCausalLM wraps ProphetNetDecoder, whose
forward appends `ngram` predicting streams to the main one: each a copy of the sequence made of
`ngram_embeddings[k]` (an Embedding of ngram rows, line 1069) plus the positions shifted by one
(line 1160), concatenated before the first block (line 1195: `torch.cat([hidden_states] +
ngram_hidden_states, 1)`). So every block runs (1 + ngram) x s tokens: the q/k/v/out
projections, `relative_pos_embeddings` (a Linear hidden -> num_buckets x heads, line 554, run on
each stream's tokens, lines 750 and 800), the MLP and the norms. ProphetNetNgramSelfAttention
scores the main stream causally over its s keys (line 629) and each predicting stream over 2 s
keys: the main stream's and its own (line 664, `predict_key_states`; masked by
ngram_attention_bias, line 45): s^2 (1 + 2 ngram) score pairs a head. The LM head runs on the
predicting streams only, ngram x s tokens (ProphetNetForCausalLM.forward lines 1771-1772:
`predicting_streams = outputs[1]`, `self.lm_head(predicting_streams)`); the main stream gets no
logits.

tierlab's Model runs every block, the attention's keys and the LM head over seq_len tokens
(sim/flops.py, sim/memory.py): no field multiplies a block's tokens, nor the head's, by a number
of streams, and Model.attention_windows can only lower the keys a query sees. Counting alone
would be exact (the streams hold ngram x hidden parameters, the relative-position Linear is a
2-D weight in each block) but the step would be timed at about 1 / (1 + ngram) of its work, so
the type is refused in one line that says so.
"""
from __future__ import annotations

from typing import Any

from tierlab.profiles.hf_modules import Unmodelled

NGRAM = "ngram_embeddings"
"""ProphetNet's embedding of its predicting streams (modeling_prophetnet.py line 1069)."""


def ngram_streams(model: Any) -> int | None:
    """The predicting streams of a built causal LM (rows of its NGRAM table), None without."""
    tables = [m for name, m in model.named_modules() if name.rsplit(".", 1)[-1] == NGRAM]
    return int(tables[0].weight.shape[0]) if tables else None


def refuse_ngram_streams(model: Any) -> None:
    """Unmodelled for a causal LM with n-gram predicting streams (ProphetNet); nothing else."""
    n = ngram_streams(model)
    if n is None:
        return
    if n < 1:
        raise Unmodelled(f"ProphetNet's n-gram streams: ngram {n} leaves no predicting stream, "
                         "the only one the LM head reads (modeling_prophetnet.py lines "
                         "1771-1772): transformers builds it, its forward cannot give logits")
    raise Unmodelled(f"ProphetNet's n-gram streams ({type(model).__name__}, ngram {n}: every "
                     f"block runs the main stream and {n} predicting stream(s), {1 + n} x the "
                     "tokens, modeling_prophetnet.py line 1195; the n-gram self-attention scores "
                     f"s^2 (1 + 2 x {n}) pairs a head, lines 629 and 664; the LM head reads the "
                     f"{n} predicting streams only, {n} x the tokens, lines 1771-1772), where "
                     "tierlab runs every block and the head over seq_len tokens")
