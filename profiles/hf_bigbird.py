"""BigBird's block-sparse attention as tierlab times it: a window of keys per query.

transformers 5.25.0 modeling_big_bird.py BigBirdBlockSparseAttention splits the sequence into
blocks of b = `block_size` tokens (n = s / b blocks) and scores each query block against
(bigbird_block_sparse_attention, lines 398-610):
- the first and the last query block (global): every key, s (`first_product`, line 400;
  `last_product`, line 605);
- the second and the last-but-one: the first three (last three) key blocks, the global one at
  the other end and r = `num_random_blocks` random blocks, (4 + r) b keys (`second_key_mat`,
  line 418; `second_last_key_mat`, line 552);
- every middle block: a window of 3 key blocks, the first and the last (global) and r random
  blocks, (5 + r) b keys (`band_product`, line 514: first, inner band, random, last).
Score pairs per head: 2 b s + 2 (4 + r) b^2 + (n - 4)(5 + r) b^2, so a query sees
(7 + r) b - 2 (6 + r) b^2 / s keys on average: 622 for bigbird-roberta (b 64, r 3) at s 4096.
tierlab times it as a window of (7 + r) b keys in every block (Model.attention_windows,
sim/flops.py attended_keys: min(window, s) keys a query, no halving), the same mechanism as a
sliding window: 2 (6 + r) b^2 / s keys above the exact count (2.9 % at 4096, 11 % at 1024).
The parameters are those of full attention: query, key and value Linear (lines 230-232) and
BigBirdSelfOutput's dense, read by profiles/hf_bert.py.

BigBirdModel.forward runs full attention instead where s <= (5 + 2 r) b (lines 1575-1593:
`max_tokens_to_attend`), and pads s to a multiple of b first (_pad_to_block_size, line 1743).
Only BigBird's causal LM (model_type big_bird) runs it: BigBird-Pegasus' decoder attends fully
and causally whatever attention_type says (modeling_bigbird_pegasus.py
BigBirdPegasusDecoderLayer line 1324: BigBirdPegasusDecoderAttention; create_causal_mask, line
1765); its encoder, the only block-sparse part, is not in the causal LM.
"""
from __future__ import annotations

from typing import Any

from tierlab import bounds
from tierlab.errors import ConfigError

SPARSE_TYPES = ("big_bird",)
"""model_types whose causal LM runs block-sparse attention with attention_type
'block_sparse' (BigBirdAttention.__init__, modeling_big_bird.py lines 1070-1073)."""


def is_block_sparse(config: Any) -> bool:
    """The config's causal LM runs BigBird's block-sparse attention."""
    return config.model_type in SPARSE_TYPES and \
        getattr(config, "attention_type", None) == "block_sparse"


def sparse_window(block_tokens: int, random_blocks: int) -> int:
    """Keys a query is timed to see: (7 + r) b, the global query blocks' s keys spread over the
    sequence (2 b a query) beside a middle block's (5 + r) b (module docstring)."""
    return (7 + random_blocks) * block_tokens


def exact_keys(seq_tokens: int, block_tokens: int, random_blocks: int) -> float:
    """Keys a query sees on average as bigbird_block_sparse_attention scores them, s padded to
    a multiple of b: s where s <= (5 + 2 r) b (full attention, lines 1579-1580), else
    (2 b s + 2 (4 + r) b^2 + (n - 4)(5 + r) b^2) / s, n = s / b."""
    s = -(-seq_tokens // block_tokens) * block_tokens
    if s <= (5 + 2 * random_blocks) * block_tokens:
        return float(s)
    n, b, r = s // block_tokens, block_tokens, random_blocks
    return (2 * b * s + 2 * (4 + r) * b * b + (n - 4) * (5 + r) * b * b) / s


def block_sparse(config: Any, where: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """(Model.attention_windows, not_modelled notes) of a block-sparse BigBird config; ((), ())
    for any other. block_size and num_random_blocks out of their bounds: one ConfigError line."""
    if not is_block_sparse(config):
        return (), ()
    b = int(bounds.check(config.block_size, bounds.ATTENTION_WINDOW, f"{where}: block_size"))
    r = int(bounds.check(config.num_random_blocks, bounds.RANDOM_BLOCKS,
                         f"{where}: num_random_blocks"))
    window = sparse_window(b, r)
    if window > bounds.ATTENTION_WINDOW.high:
        raise ConfigError(f"{where}: block_size {b} x (7 + num_random_blocks {r}) = {window:,} "
                          f"keys a query is beyond the bound {bounds.ATTENTION_WINDOW.high:g}")
    return (window,) * config.num_hidden_layers, sparse_notes(b, r)


def sparse_notes(b: int, r: int) -> tuple[str, ...]:
    """What timing BigBird's block-sparse attention as a window leaves out."""
    full = (5 + 2 * r) * b
    return (f"block-sparse attention (block_size {b}, num_random_blocks {r}) is timed as "
            f"{sparse_window(b, r):,} keys a query (the (7 + r) b of global, window and random "
            f"blocks), 2 (6 + r) b^2 / s above the exact average "
            f"(modeling_big_bird.py lines 398-610); sequences of <= {full:,} tokens run full "
            "attention (lines 1579-1593), timed as min(window, s) keys; s is not padded to a "
            "multiple of block_size (line 1743); the gathers of random blocks, the shifted "
            "windows' copies and the block masks are not timed",
            "block-sparse attention masks no future tokens even with is_decoder (it masks only "
            "padding: band_mask, to_mask, rand_mask): a causal LM trained with it sees the next "
            "tokens; timed as transformers runs it")
