"""A built model's state-space / short-convolution mixer -> Model.mixer fields (profiles/schema.py
Mixer): its tensors read off transformers' meta-device module, its conv + scan FLOPs counted from
the modeling file's forward.

- tensors: every Linear weight of the mixer is a projection (a GEMM: in_proj, x_proj, dt_proj,
  out_proj); every other tensor (the depthwise conv's weight and bias, A_log, D, dt_bias, the
  Linears' biases, the mixer's own norms) is a small parameter, counted by numel.
- FLOPs per token of what is not a projection (multiply and add = 2 FLOPs), from the slow
  (pure torch) paths, which the CUDA kernels compute the same arithmetic of:
  * Mamba (modeling_mamba.py `MambaMixer.slow_forward`; Jamba's `JambaMambaMixer.slow_forward`
    and FalconMamba's copy): depthwise causal conv 2 k d per token (d = intermediate channels,
    k = conv_kernel); selective scan per channel and state: exp(dt A) 1, dt B 1, (dt B) u 1,
    state update A h + B u 2, C h 2 -> 7 d N; D skip 2 d; gate 1 d.
  * Mamba-2 (modeling_mamba2.py `Mamba2Mixer.torch_forward`, Bamba's copy; the SSD algorithm of
    Dao & Gu 2024, "Transformers are SSMs", sec. 6): conv 2 k (d + 2 G N); per head of width
    P = d / H and chunk L = chunk_size: C B^T in the chunk 2 L N, the masked (M x) 2 L P, the
    chunk states (B decay x) 2 N P, the states' output C h 2 N P; D skip 2 d. Counted at the
    full chunk (no causal halving, as the attention scores are) and L = chunk_size: a sequence
    shorter than one chunk is over-counted.
  * LFM2 short conv (modeling_lfm2.py `Lfm2ShortConv.slow_forward`): B x gate 1 h, depthwise
    conv 2 k h, C y gate 1 h.
"""
from __future__ import annotations

from typing import Any, Mapping

from tierlab import bounds

MIXER_CHILDREN = ("mixer", "mamba", "conv")
"""Child names of a decoder block that hold its mixer (Mamba: mixer; Jamba/Bamba: mamba;
LFM2: conv)."""

MIXER_CLASSES = {"MambaMixer": "mamba", "FalconMambaMixer": "mamba", "JambaMambaMixer": "mamba",
                 "Mamba2Mixer": "mamba2", "BambaMixer": "mamba2", "Lfm2ShortConv": "short_conv"}
"""transformers' mixer classes -> Mixer.kind (the ones whose forward hf_mixer counts)."""


def find_mixer(layer: Any) -> tuple[str, Any] | None:
    """(child name, module) of the block's mixer of a class in MIXER_CLASSES, or None."""
    return next(((n, c) for n, c in layer.named_children()
                 if n in MIXER_CHILDREN and type(c).__name__ in MIXER_CLASSES), None)


def mixer_tensors(module: Any) -> tuple[tuple, tuple]:
    """((name, in, out) of each Linear weight, (name, numel) of every other tensor)."""
    linear = {id(m.weight) for m in module.modules() if type(m).__name__ == "Linear"}
    mats, small = [], []
    for name, p in module.named_parameters():
        if id(p) in linear:
            mats.append((name.removesuffix(".weight"), int(p.shape[1]), int(p.shape[0])))
        else:
            small.append((name, int(p.numel())))
    return tuple(mats), tuple(small)


def _conv(module: Any) -> tuple[int, int]:
    """(channels, kernel) of the mixer's depthwise Conv1d (weight: channels x 1 x kernel)."""
    conv = next(m for m in module.modules() if type(m).__name__ == "Conv1d")
    channels, _, kernel = conv.weight.shape
    return int(channels), int(kernel)


def mamba_scan_flops(module: Any) -> float:
    """Mamba-1 per token: conv 2 k d + scan 7 d N + D skip 2 d + gate d (module docstring)."""
    d, n_state = module.A_log.shape
    channels, k = _conv(module)
    return float(2 * k * channels + 7 * d * n_state + 3 * d)


def mamba2_scan_flops(module: Any) -> float:
    """Mamba-2 (SSD) per token: conv 2 k (d + 2 G N) + H (2 L N + 2 L P + 4 N P) + 2 d."""
    heads = int(module.A_log.shape[0])
    d = next(p for n, p in module.named_parameters() if n == "out_proj.weight").shape[1]
    head_dim, n_state, chunk = d // heads, int(module.ssm_state_size), int(module.chunk_size)
    channels, k = _conv(module)
    per_head = 2 * chunk * n_state + 2 * chunk * head_dim + 4 * n_state * head_dim
    return float(2 * k * channels + heads * per_head + 2 * d)


def short_conv_flops(module: Any) -> float:
    """LFM2 per token: B x gate h + conv 2 k h + C y gate h."""
    channels, k = _conv(module)
    return float(2 * k * channels + 2 * channels)


SCAN_FLOPS = {"mamba": mamba_scan_flops, "mamba2": mamba2_scan_flops,
              "short_conv": short_conv_flops}


def mixer_fields(module: Any) -> dict:
    """Mixer keyword arguments (without layers, mlp) of one built mixer module."""
    kind = MIXER_CLASSES[type(module).__name__]
    mats, small = mixer_tensors(module)
    return dict(kind=kind, matrices=mats, small_params=small,
                scan_flops_per_token=SCAN_FLOPS[kind](module))


_SIZE = bounds.Bound(1, 1_000_000, why="the largest published mixers are < 20k wide")
MIXER_KEYS = ("state_size", "mamba_d_state", "ssm_state_size", "conv_kernel", "mamba_d_conv",
              "conv_L_cache", "expand", "mamba_expand", "time_step_rank", "mamba_dt_rank",
              "n_groups", "mamba_n_groups", "num_heads", "mamba_n_heads", "mamba_d_head",
              "chunk_size", "mamba_chunk_size")
"""config.json keys that size a mixer (MambaConfig, Mamba2Config, JambaConfig, BambaConfig,
Lfm2Config): whole numbers >= 1 where set, checked before transformers builds anything (a
negative state_size builds no tensor, or one of nonsense size). `time_step_rank` and
`mamba_dt_rank` may also be "auto" (the config classes' ceil(hidden / 16))."""


MIXER_MODEL_TYPES = ("mamba", "falcon_mamba", "mamba2", "jamba", "bamba", "lfm2")
"""model_types whose config carries MIXER_KEYS (elsewhere a `num_heads` means something else)."""


def check_mixer_keys(data: Mapping, where: str) -> None:
    """A mixer-sizing key of `data` (a config.json part of a MIXER_MODEL_TYPES model) that is set
    must be a whole number >= 1 (or "auto" for a time-step rank): else one ConfigError line
    naming the key."""
    if data.get("model_type") not in MIXER_MODEL_TYPES:
        return
    for key in MIXER_KEYS:
        value = data.get(key)
        if value is None or (value == "auto" and key in ("time_step_rank", "mamba_dt_rank")):
            continue
        bounds.check(value, _SIZE, f"{where}: {key}")
