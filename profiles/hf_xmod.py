"""X-MOD (model_type `xmod`): a RoBERTa-shaped block (profiles/hf_bert.py) plus per-language
adapters after its MLP (Model.adapters).

transformers 5.25.0 models/xmod/modeling_xmod.py:
- XmodOutput (lines 415-458) holds `adapter_modules`, a ModuleDict of one XmodAdapter per
  entry of config.languages (lines 427-429); an XmodAdapter (lines 397-412) is dense1 hidden ->
  hidden // adapter_reduction_factor and dense2 back, both nn.Linear with bias, an activation
  between; with adapter_layer_norm a LayerNorm before the adapters, one per block, shared by
  the languages (line 423), read as one more block norm;
- lang_adapter (lines 438-458) loops over every language's adapter and runs it on the tokens of
  the samples of that language (`hidden_states[lang_mask]`, line 453): each token passes
  through one adapter, but every adapter's module is called, on no tokens for the languages the
  batch lacks. So under ZeRO-3 each adapter's hooks fire and each is gathered, and each
  parameter gets a gradient (zeros where its language is absent) and, requiring grad, its
  optimizer state (DeepSpeed's partitions take every trainable parameter: profiles/hf_encdec.py
  cites the lines) and its update.

tierlab counts every language's adapter in every block (Model.adapters copies of
adapter_matrices, adapter_small_params), holds, gathers and updates them as the block's other
tensors, and times one adapter a token (sim/flops.run_gemms: each language's GEMMs for
1 / adapters of the tokens). Not modelled: the bottleneck's activations and the masked copies
(`hidden_states[lang_mask]`, `new_hidden_states`, lines 449-455) in the activation memory, and
freeze_embeddings_and_language_adapters (lines 633-647), which a fine-tuning recipe may call:
tierlab trains every parameter.
"""
from __future__ import annotations

from typing import Any

from tierlab import bounds
from tierlab.profiles.hf_modules import Unmodelled

ADAPTERS = "output_adapter_modules"
"""XmodOutput.adapter_modules as profiles/hf_bert.py bert_view names it in a block's view (a
module holding parameters none of the block's parts take, under its dotted name)."""

LANGUAGES = bounds.Bound(0, 10_000, why="X-MOD's checkpoints hold 81 languages")
"""Entries of config.languages: one adapter each in every block."""


def check_adapters(config: Any, where: str) -> None:
    """An Xmod config's languages of at most LANGUAGES entries (each is an adapter in every
    block) and adapter_reduction_factor from 1 to hidden_size (the bottleneck hidden_size //
    factor at least 1 wide, line 400), before anything is built: one ConfigError line naming
    the key."""
    if getattr(config, "model_type", None) != "xmod":
        return
    languages = getattr(config, "languages", None)
    if isinstance(languages, (list, tuple)):
        bounds.check(len(languages), LANGUAGES, f"{where}: languages (entries)")
    factor, hidden = (getattr(config, k, None) for k in ("adapter_reduction_factor", "hidden_size"))
    if isinstance(hidden, int) and hidden >= 1 and factor is not None:
        bounds.check(factor, bounds.Bound(1, hidden, why="hidden_size: a bottleneck of at "
                                                         "least 1"),
                     f"{where}: adapter_reduction_factor")


def adapter_tensors(adapter: Any) -> tuple[tuple, tuple]:
    """((name, in, out) of each 2-D weight, (name, numel) of each other tensor) of one adapter,
    names as transformers gives them within it (`dense1`, `dense1.bias`)."""
    mats, small = [], []
    for name, p in adapter.named_parameters():
        if p.dim() == 2 and name.endswith(".weight"):
            mats.append((name.removesuffix(".weight"), int(p.shape[1]), int(p.shape[0])))
        else:
            small.append((name, p.numel()))
    return tuple(mats), tuple(small)


def adapter_free(blocks: list) -> tuple[list, dict]:
    """(the block views without their ADAPTERS, Model fields: adapters, adapter_matrices,
    adapter_small_params) where every block holds per-language adapters, each of the same
    tensors; (blocks, {}) where none does."""
    import torch

    held = [dict(b.named_children()).get(ADAPTERS) for b in blocks]
    if not any(h is not None for h in held):
        return blocks, {}
    tensors = {adapter_tensors(a) for h in held if h is not None for a in h.values()}
    counts = {len(h) if h is not None else 0 for h in held}
    if len(tensors) != 1 or len(counts) != 1:
        raise Unmodelled(f"per-language adapters ({ADAPTERS}) in {sum(h is not None for h in held)}"
                         f" of {len(blocks)} blocks, or of different tensors or languages")
    (mats, small), = tensors
    views = [torch.nn.ModuleDict({n: c for n, c in b.named_children() if n != ADAPTERS})
             for b in blocks]
    return views, dict(adapters=counts.pop(), adapter_matrices=mats, adapter_small_params=small)


def adapter_note(fields: dict, n_layers: int) -> list[str]:
    """The not_modelled note of the adapters read by adapter_free; [] without."""
    if not fields:
        return []
    one = sum(i * o for _, i, o in fields["adapter_matrices"]) + \
        sum(k for _, k in fields["adapter_small_params"])
    n = fields["adapters"]
    return [f"per-language adapters ({n} language(s) x {one:,} parameters a block, "
            f"{n * one * n_layers:,} in all): counted, gathered and updated, one timed a token; "
            "their activations are not in the activation memory"]
