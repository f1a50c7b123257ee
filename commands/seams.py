"""The seams of the training verbs: the library functions `run` and `compare` call to train,
which a caller (the tests) may replace through click's context object instead of patching."""
from __future__ import annotations


def seam(ctx, name: str):
    """What a caller passed for `name` in click's context object (`main(obj={name: f})`), else
    None (the library's default). The seams: "train" (compare's per-variant worker), "preflight"
    (compare's check) and "setup_engine" (run's engine builder): tests stand in for DeepSpeed's
    engine or a training worker this way, never by patching the library."""
    obj = ctx.find_root().obj
    return obj.get(name) if isinstance(obj, dict) else None
