"""What tests/test_linear_mixers.py and tests/test_recurrent_mixers.py check of every mixer model
they build: a config.json written, counted as transformers counts it (meta device), the mixer
read with its kind and layers, its FLOPs per token the hand count."""
from __future__ import annotations

import json
from pathlib import Path

from tierlab.profiles.load import load_model
from tests.test_hybrid_arch import meta_counts  # (needs transformers: importorskip'd by callers)


def write_config(tmp_path: Path, cfg: dict) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def assert_counted_as_transformers(path: Path, kind: str, layers) -> None:
    model = load_model(str(path))
    assert (model.n_params, model.active_params) == meta_counts(path)
    assert model.mixer.kind == kind
    assert model.mixer.layers == layers


def assert_scan_flops(path: Path, flops: int) -> None:
    assert load_model(str(path)).mixer.scan_flops_per_token == flops
