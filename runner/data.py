"""Training data: synthetic tokens (default) or an Alpaca-format file (JSON array or JSONL of
{instruction, input, output}) tokenized with a local tokenizer or a built-in byte-level one.

Batches are CPU LongTensors of shape (micro_batch, seq); the labels are the inputs (transformers
shifts them inside the loss).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tierlab.errors import ConfigError

SAMPLE_DATASET = Path(__file__).resolve().parent / "data" / "alpaca_sample.jsonl"
_ALPACA_KEYS = {"instruction", "input", "output"}


def synthetic_batches(vocab: int, micro_batch: int, seq: int, seed: int = 0) -> Iterator:
    """Uniform random token ids, reproducible from `seed`."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    while True:
        yield torch.randint(0, vocab, (micro_batch, seq), generator=gen)


def load_alpaca(path: str | Path) -> list[dict]:
    """Read Alpaca records from a JSON array or JSONL file; each needs instruction and output
    (input optional). Errors name the file and record."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--dataset {path}: no such file")
    from tierlab.safeio import read_text

    text = read_text(path)
    try:
        if text.lstrip().startswith("["):
            records = json.loads(text)
        else:
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: malformed JSON at line {e.lineno}: {e.msg}")
    if not records or not isinstance(records, list):
        raise ConfigError(f"{path}: no records (expected a JSON array or JSONL of objects)")
    for i, rec in enumerate(records):
        if not isinstance(rec, dict) or not {"instruction", "output"} <= set(rec):
            raise ConfigError(f"{path}: record {i} needs 'instruction' and 'output' keys")
        extra = set(rec) - _ALPACA_KEYS
        if extra:
            raise ConfigError(f"{path}: record {i} has unknown key {sorted(extra)[0]!r}")
    return records


def format_alpaca(rec: dict) -> str:
    """One record as a prompt + response text."""
    parts = [f"### Instruction:\n{rec['instruction'].strip()}"]
    if str(rec.get("input", "")).strip():
        parts.append(f"### Input:\n{rec['input'].strip()}")
    parts.append(f"### Response:\n{rec['output'].strip()}")
    return "\n\n".join(parts)


@dataclass(frozen=True)
class ByteTokenizer:
    """UTF-8 bytes as ids 0..255, then BOS 256, EOS 257. Needs a model vocab >= 258."""

    bos_token_id: int = 256
    eos_token_id: int = 257
    vocab_size: int = 258

    def encode(self, text: str) -> list[int]:
        return [self.bos_token_id, *text.encode("utf-8"), self.eos_token_id]


class _HFTokenizer:
    def __init__(self, directory: str):
        from transformers import AutoTokenizer

        path = Path(directory).expanduser()
        if not path.is_dir():
            raise ConfigError(f"--tokenizer {path}: not a directory (local tokenizers only)")
        try:
            self.tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError) as e:
            raise ConfigError(f"--tokenizer {path}: cannot load a tokenizer: {e}") from None
        self.vocab_size = len(self.tok)

    def encode(self, text: str) -> list[int]:
        ids = self.tok(text, add_special_tokens=True)["input_ids"]
        eos = self.tok.eos_token_id
        return ids + ([eos] if eos is not None else [])


def get_tokenizer(directory: str | None):
    return _HFTokenizer(directory) if directory else ByteTokenizer()


def tokenize_alpaca(records: list[dict], tokenizer, vocab: int) -> list[int]:
    """All records as one token stream (each ends with EOS)."""
    if tokenizer.vocab_size > vocab:
        raise ConfigError(f"the tokenizer has {tokenizer.vocab_size} ids but the model's vocab is "
                          f"{vocab}; use a matching --tokenizer or a larger model vocab")
    stream: list[int] = []
    for rec in records:
        stream.extend(tokenizer.encode(format_alpaca(rec)))
    return stream


def packed_batches(stream: list[int], micro_batch: int, seq: int) -> Iterator:
    """Pack the token stream into (micro_batch, seq) blocks, cycling through it for ever."""
    import torch

    if not stream:
        raise ConfigError("the dataset produced no tokens")
    need = micro_batch * seq
    reps = -(-need // len(stream)) + 1
    data = torch.tensor(stream * reps if len(stream) < need else stream, dtype=torch.long)
    offset = 0
    while True:
        if offset + need > data.numel():
            offset = 0
        yield data[offset:offset + need].view(micro_batch, seq)
        offset += need


def make_batches(*, vocab: int, micro_batch: int, seq: int, dataset: str | None = None,
                 tokenizer: str | None = None, seed: int = 0) -> Iterator:
    """The runner's batch iterator: synthetic unless `dataset` is given."""
    if dataset is None:
        if tokenizer:
            raise ConfigError("--tokenizer needs --dataset")
        return synthetic_batches(vocab, micro_batch, seq, seed)
    stream = tokenize_alpaca(load_alpaca(dataset), get_tokenizer(tokenizer), vocab)
    return packed_batches(stream, micro_batch, seq)
