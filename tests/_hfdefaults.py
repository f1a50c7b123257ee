"""transformers' default configs as a user's config.json, for the tests of the architectures
tierlab reads off a built model (BERT-family, encoder-decoder decoders, codebooks, X-MOD,
BigBird, ProphetNet): one home for writing them and for the ZeRO-3 strategy they simulate under."""
from __future__ import annotations

import json
from pathlib import Path


def default_config(model_type: str, **keys) -> dict:
    """transformers' default config of `model_type` (with `keys` set) as a config.json holds it
    (as bench/bench_architectures.py writes it)."""
    from transformers import AutoConfig

    return json.loads(AutoConfig.for_model(model_type, **keys).to_json_string())


def written(tmp_path: Path, data: dict, name: str | None = None) -> Path:
    """`data` written to tmp_path/NAME.json (NAME: its model_type unless given)."""
    path = tmp_path / f"{name or data.get('model_type', 'config')}.json"
    path.write_text(json.dumps(data))
    return path


def zero3_strategy():
    """bf16 ZeRO-3, micro-batch 1, nothing offloaded."""
    from tierlab.sim.strategy import parse_ds_config

    return parse_ds_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                            "zero_optimization": {"stage": 3}})[0]
