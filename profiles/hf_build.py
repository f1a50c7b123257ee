"""Hugging Face `config.json` -> `Model` fields for an architecture without a hand reader.

transformers builds the model from its own config class on the meta device (no weights, no
network, no remote code) and the fields are read off the real modules: the decoder layers, the
input embedding (vocab x hidden), the attention projections (heads from the config object,
checked against the shapes), the MLP or the experts (gated or not, widths, router, shared
expert), the norms and the biases. Then tierlab's own count of the derived Model
(profiles/layout.py) must equal transformers' within COUNT_TOLERANCE, total and active; if not,
a one-line ConfigError names the file, the model_type, both counts and what is not modelled.
transformers and torch are optional (tierlab[runner]): imported inside the functions.
"""
from __future__ import annotations

from typing import Any, Mapping

from tierlab.errors import ConfigError
from tierlab.profiles.hf_altup import altup_blocks, altup_notes, check_altup
from tierlab.profiles.hf_bert import bert_blocks, bert_fields
from tierlab.profiles.hf_bigbird import block_sparse
from tierlab.profiles.hf_blt import refuse_byte_latent
from tierlab.profiles.hf_reformer import refuse_reformer
from tierlab.profiles.hf_codebooks import check_codebooks, codebook_modules, codebook_notes
from tierlab.profiles.hf_xmod import adapter_free, adapter_note, check_adapters
from tierlab.profiles.hf_xlnet import check_xlnet, xlnet_blocks, xlnet_fields
from tierlab.profiles.hf_encdec import check_decoder, cross_children, cross_free, decoder_fields
from tierlab.profiles.hf_prophetnet import check_ngram, stream_fields
from tierlab.profiles.hf_zaya import check_router, routed_blocks
from tierlab.profiles.hf_blocks import layer_fields, parallel_experts
from tierlab.profiles.hf_cross import check_cross_layers, cross_fields, vision_tokens
from tierlab.profiles.hf_config import (attention_windows, build, check_counts,
                                        check_layer_counts, check_repeats, config_value,
                                        detach_towers,
                                        experts_per_token, layer_config, text_config,
                                        transformers_version, unread_reason)
from tierlab.profiles.hf_hyper import hyper_notes, model_hyper
from tierlab.profiles.hf_indexer import check_indexed
from tierlab.profiles.hf_loops import (check_loop_keys, check_loop_layers, looped_blocks,
                                      stacked_blocks)
from tierlab.profiles.hf_modules import Unmodelled, is_norm, n_experts, param_count
from tierlab.profiles.hf_mixer import check_mixer_keys
from tierlab.profiles.hf_sublayers import check_zero_experts, decoder_blocks, zero_experts
from tierlab.profiles.schema import LayerAttention, Mixer, Model, MoE, PerLayerInputs, Shared


COUNT_TOLERANCE = 5e-3
"""tierlab's count of a built architecture may differ from transformers' by 0.5 % (issue 30):
what tierlab does not model (attention sinks, router biases) stays below it."""


PER_LAYER_MODEL = ("embed_tokens_per_layer", "per_layer_model_projection",
                   "per_layer_projection_norm")
"""The model-level per-layer-input modules (modeling_gemma4.py Gemma4TextModel.__init__ lines
1566-1580): the table, the projection hidden -> n_layers x width, its norm."""


def per_layer_fields(model: Any, read: list[dict], hidden: int) -> tuple[dict, list]:
    """({"per_layer_inputs": PerLayerInputs} and the model-level modules it takes, for
    outside_blocks) of blocks that read per-layer inputs, ({}, []) where none does. Every block
    of one width, and the model's table (vocab x n_layers x width, its own Embedding), its
    projection (hidden -> n_layers x width, no bias) and norm (width): else Unmodelled."""
    widths = [l["per_layer"] for l in read]
    if not any(w is not None for w in widths):
        return {}, []
    width = same_in_all(widths, "per-layer input widths")
    mods = {n.rsplit(".", 1)[-1]: m for n, m in model.named_modules()}
    table, proj, norm = (mods.get(n) for n in PER_LAYER_MODEL)
    packed = len(read) * width
    if table is None or proj is None or norm is None or table.weight.shape[1] != packed or \
            tuple(proj.weight.shape) != (packed, hidden) or \
            getattr(proj, "bias", None) is not None or param_count(norm) != width:
        found = ", ".join(f"{n} {tuple(m.weight.shape)}" for n, m in
                          zip(PER_LAYER_MODEL, (table, proj, norm)) if m is not None)
        raise Unmodelled(f"per-layer inputs of {width} per block without the table, projection "
                         f"and norm of {len(read)} x {width} tierlab reads ({found or 'none'})")
    vocab = int(table.weight.shape[0])
    if vocab < 1:       # an Embedding of 0 rows builds on the meta device
        raise Unmodelled("a per-layer embedding table of 0 rows (vocab_size_per_layer_input)")
    return {"per_layer_inputs": PerLayerInputs(width=width, vocab=vocab)}, [table, proj, norm]


def shared_of(layers: list[dict]) -> dict:
    """Model fields of the shared blocks (Model.shared, and its attention and MLP in Model's
    attention and MLP fields: Zamba2 has no other), {} without: the same block at every use;
    config's num_mem_blocks distinct blocks (modeling_zamba2.py get_layers' cycle)."""
    idx = [i for i, l in enumerate(layers) if l.get("shared")]
    if not idx:
        return {}
    use = same_in_all([layers[i]["shared"] for i in idx], "shared blocks")
    return dict(use["attention"], **use["mlp"], qk_norm="none", fused_qkv=False,
                shared=Shared(layers=tuple(idx), blocks=min(use["blocks"], len(idx)),
                              matrices=use["matrices"],
                              small_params=use["small_params"],
                              use_matrices=use["use_matrices"]))


def most_common(values: list) -> Any:
    """The value most blocks have (the first of them on a tie)."""
    return max(values, key=values.count)


SMALL_PER_LAYER = (("n_norms", "norms per block"), ("attn_bias", "attention biases"))
"""Block features that may differ between layers and are counted as most blocks have them:
a norm (hidden elements) or a bias (ModernBERT's decoder: layer 0 has no attention norm,
modeling_modernbert_decoder.py `nn.Identity() if layer_id == 0`; GPT-NeoX-Japanese: the last
layer's dense_bias) holds a few thousand parameters of a block's millions and costs an
elementwise pass; the count check (COUNT_TOLERANCE) bounds what this leaves out, and the
Model's source names it."""


def layer_differences(layers: list[dict]) -> list[str]:
    """One note per SMALL_PER_LAYER feature that differs between the blocks: which layers have
    what, and what each block is counted with."""
    out = []
    for key, what in SMALL_PER_LAYER:
        values = [l[key] for l in layers if l[key] is not None]
        if len(set(values)) > 1:
            common = most_common(values)
            odd = [i for i, l in enumerate(layers) if l[key] is not None and l[key] != common]
            shown = ", ".join(map(str, odd[:4])) + (", ..." if len(odd) > 4 else "")
            out.append(f"{what} differ between layers (layer{'s' * (len(odd) > 1)} {shown}): "
                       f"each block counted as most are")
    return out


def same_in_all(values: list, what: str) -> Any:
    if any(v != values[0] for v in values):
        raise Unmodelled(f"{what} differ between layers")
    return values[0]


def norm_kind(norms: list) -> str:
    """'layernorm' when a norm carries a bias, 'rmsnorm' with a weight only, else
    'nonparametric' (Model.norm: the same kind everywhere)."""
    names = {n.rsplit(".", 1)[-1] for m in norms for n, _ in m.named_parameters()}
    return "layernorm" if "bias" in names else ("rmsnorm" if names else "nonparametric")


NO_ATTENTION = dict(n_heads=1, n_kv_heads=1, attn_head_dim=0, fused_qkv=False, qk_norm="none")
"""Model's attention fields where no block attends (Mamba: every block a mixer): unused."""


def block_fields(layers: list[dict]) -> dict:
    """Model fields shared by the blocks: attention (or none), MLP or MoE (+ dense layers),
    a mixer in place of attention, norms, biases."""
    attns = [l["attn"] for l in layers if l["attn"] is not None]
    fields = dict(attention_of(layers) if attns else NO_ATTENTION,
                  block_norms=most_common([l["n_norms"] for l in layers]))
    fields.update(ffn_fields(layers))
    biases = [l["attn_bias"] for l in layers if l["attn_bias"] is not None]
    # an attention read as tensors holds its own biases: the MLPs' alone decide `bias`; so
    # where no block attends and MLPs there are (RecurrentGemma's all-recurrent, Hawk, blocks)
    tensors = any(a.get("attention_tensors") for a in attns) or \
        (not attns and any(l["mlp_bias"] is not None for l in layers))
    attn_all, attn_any = most_common(biases) if biases else (tensors, False)
    bias = attn_all and all(l["mlp_bias"] for l in layers if l["mlp_bias"] is not None)
    return dict(fields, bias=bias, qkv_bias=attn_any and not bias, mixer=mixer_of(layers),
                attention_only_layers=tuple(i for i, l in enumerate(layers)
                                            if l["part"] == "attention"),
                mlp_only_layers=tuple(i for i, l in enumerate(layers) if l["part"] == "mlp"),
                **shared_of(layers))


def attention_of(layers: list[dict]) -> dict:
    """Model's attention fields: the first attending block's shape, and the blocks of each other
    shape as Model.layer_attention (Gemma 4's global layers; heads and widths read per layer)."""
    shapes: dict[tuple, list[int]] = {}
    for i, l in enumerate(layers):
        if l["attn"] is not None:
            shapes.setdefault(tuple(sorted(l["attn"].items(), key=lambda kv: kv[0])),
                              []).append(i)
    (first, _), *others = shapes.items()
    return dict(first, layer_attention=tuple(LayerAttention(layers=tuple(idx), **dict(shape))
                                             for shape, idx in others))


def ffn_fields(layers: list[dict]) -> dict:
    """MLP or MoE fields of the blocks that have one (every block but a Mamba's)."""
    dense = [l["mlp"] for l in layers if l["mlp"] is not None]
    moes = [l["moe"] for l in layers if l["moe"] is not None]
    if not moes:
        return dict(same_in_all(dense, "MLP shapes")) if dense else \
            dict(ffn=layers[0]["mixer"]["matrices"][0][2] if layers[0]["mixer"] else 1,
                 gated_mlp=False)
    fields = {}
    moe = dict(same_in_all(moes, "MoE layers"))
    fields.update(gated_mlp=moe.pop("gated_mlp"), fused_gate_up=moe.pop("fused_gate_up"))
    if dense and dense[0]["gated_mlp"] != fields["gated_mlp"]:
        raise Unmodelled("gated and non-gated MLPs in one model")
    # a fused gate_up in the experts only (GLM-4-MoE): same numel, split like the dense MLPs
    fields["fused_gate_up"] &= not dense or dense[0]["fused_gate_up"]
    fields["ffn"] = same_in_all([d["ffn"] for d in dense], "dense MLP widths") if dense \
        else moe["expert_ffn"]
    fields["moe"] = MoE(**moe, dense_layers=tuple(i for i, l in enumerate(layers)
                                                  if l["moe"] is None))
    return fields


def mixer_of(layers: list[dict]) -> Any:
    """Model.mixer of the blocks whose attention is a mixer (the same in each), None without."""
    idx = [i for i, l in enumerate(layers) if l["mixer"] is not None]
    if not idx:
        return None
    mixer = same_in_all([layers[i]["mixer"] for i in idx], "mixers")
    mlp = same_in_all([layers[i]["mlp"] is not None or layers[i]["moe"] is not None for i in idx],
                "MLPs beside the mixers")
    return Mixer(**mixer, layers=tuple(idx), mlp=mlp)


RECURRENT = ("mamba", "mixer", "delta", "linear_attn", "linearattention", "lightning",
             "recurrent", "lstm", "rwkv", "ssm")
"""Words in a block's child names or classes that mark a linear-attention or state-space layer."""


def missing_layers(read: list[dict], total: int | None = None) -> list[str]:
    """The blocks without the attention + MLP tierlab models, named by their children (`total`:
    the model's blocks, where `read` holds only those read)."""
    missing = [l for l in read if not modelled(l)]
    if not missing:
        return []
    kids = sorted({o for l in missing for o in l["other"]})
    return [f"{len(missing)} of {total or len(read)} layers have no attention and MLP tierlab "
            f"models: {', '.join(kids)} ({why_missing(kids)})"]


def modelled(layer: dict) -> bool:
    """A read block tierlab models: attention (+ MLP), a mixer, or one part alone."""
    return layer["attn"] is not None or layer["mixer"] is not None or layer["part"] is not None


def why_missing(kids: list[str]) -> str:
    """What kind of block tierlab does not model, from its unread children ("name (Class)")."""
    text = " ".join(kids).lower()
    return ("linear-attention/Mamba layers" if any(w in text for w in RECURRENT) else
            "short-convolution layers" if "shortconv" in text else
            "encoder-decoder cross-attention" if "encoder_attn" in text else
            "cross-attention to the vision tower" if "cross_attn" in text else
            "a block layout tierlab does not read")


def outside_blocks(model: Any, layers: Any, *read: Any) -> tuple[list, list[str]]:
    """(norms outside the blocks: the final norm, the parameters none of the readers took)."""
    taken = {id(p) for m in (layers, *read) if m is not None for p in m.parameters()}
    norms = [m for m in model.modules() if is_norm(m)
             and not any(id(p) in taken for p in m.parameters())]
    taken |= {id(p) for m in norms for p in m.parameters()}
    left = [(n, p.numel()) for n, p in model.named_parameters() if id(p) not in taken]
    if not left:
        return norms, []
    names = ", ".join(n for n, _ in left[:3]) + (", ..." if len(left) > 3 else "")
    return norms, [f"{sum(k for _, k in left):,} parameters outside the blocks, the embedding "
                   f"and the head ({names})"]


def hyper_of(read: list[dict]) -> tuple[int, int] | None:
    """(streams, rank) of the blocks' gated residuals (profiles/hf_hyper.py: Qwen4-Exp), the
    same in every block; None where none holds them."""
    hyper = [l.get("hyper") for l in read]
    if not any(hyper):
        return None
    return same_in_all(hyper, "hyper-connections")


def learned_positions(model: Any, layers: Any, emb: Any, hidden: int, *besides: Any) -> Any:
    """A position table beside the token embedding (GPT-2-style; BioGPT's
    BioGptLearnedPositionalEmbedding, an nn.Embedding of max_position_embeddings + 2 rows), or
    None."""
    import torch

    inside = {id(m) for m in layers.modules()}
    tables = [m for m in model.modules() if isinstance(m, torch.nn.Embedding) and m is not emb
              and m.weight is not emb.weight      # ProphetNet's wrapper shares the token table
              and id(m) not in inside and m.weight.shape[-1] == hidden
              and not any(m is b for b in besides)]     # BERT's token-type table
    return tables[0] if len(tables) == 1 else None


def built_fields(model: Any, config: Any) -> tuple[dict, list[str], bool]:
    """Model keyword arguments (without name, seq_len, source) read off a built model, what it
    holds that they do not express, and whether a block lacks what tierlab models."""
    check_decoder(model)        # ProphetNet's n-gram streams
    # Musicgen: a table and a head per codebook (profiles/hf_codebooks.py), the first of each read
    emb, out, books, book_mods = codebook_modules(model)
    vocab, hidden = emb.weight.shape
    # HRM: two stacks of blocks; LongCat-Flash: two blocks per layer
    layers, blocks = stacked_blocks(model) or decoder_blocks(model, config)
    blocks, loops = looped_blocks(blocks, config)       # Dory, Inkling2-Loop, HRM: Model.loops
    blocks, altup = altup_blocks(model, blocks)         # Gemma 3n: AltUp, laurel in the attention
    blocks = routed_blocks(blocks)                      # Zaya: the MoE's router in the attention
    layers, blocks, bert = bert_blocks(model, layers, blocks)   # BERT's blocks, XLM's lists
    hidden = bert or hidden                             # ELECTRA, RemBERT: a narrower token table
    blocks, xlnet = xlnet_blocks(blocks)                # XLNet's relative attention (hf_xlnet.py)
    blocks, unrun = cross_free(blocks, cross_children(model))   # BART & co.: counted, not run
    streams, stream_mods, stream_notes = stream_fields(model)     # ProphetNet's n-gram streams
    blocks, adapters = adapter_free(blocks)     # Xmod: per-language adapters (hf_xmod.py)
    read, unread = [], set()
    for i, layer in enumerate(blocks):  # every block looked at: one line names all unmodelled
        try:
            read.append(layer_fields(layer, layer_config(config, i), hidden))
        except Unmodelled as e:     # Zamba2's hybrid blocks beside the Mamba-2 ones
            unread.add(str(e))
    if unread:
        raise Unmodelled("; ".join(missing_layers(read, len(blocks)) + sorted(unread)))
    problems = missing_layers(read)
    problems += sorted({f"{o} in the blocks" for l in read if modelled(l) for o in l["other"]})
    if not any(modelled(l) for l in read):
        raise Unmodelled(problems[0])
    bert_extra, bert_mods, bert_notes = bert_fields(model, config, layers, emb, out, hidden) \
        if bert else ({}, [], [])       # token types, the head's transform (profiles/hf_bert.py)
    bert_extra, bert_mods, bert_notes = (xlnet_fields(model, config) if xlnet else
                                         (bert_extra, bert_mods, bert_notes))   # XLNet's
    pos = learned_positions(model, layers, emb, emb.weight.shape[1], *bert_mods, *book_mods,
                            *stream_mods)
    per_layer, per_layer_mods = per_layer_fields(model, read, hidden)
    hyper = hyper_of(read)              # Qwen4-Exp's gated residuals, and the model's mixer
    mixer = model_hyper(model, hidden, hyper) if hyper else []
    final, left = outside_blocks(model, layers, emb, out, pos, *per_layer_mods, *altup, *mixer,
                                 *bert_mods, *book_mods, *stream_mods)
    final += [m.hc_norm for m in mixer]     # its norm: the final norm (layout.head_params)
    fields = dict(block_fields([l for l in read if modelled(l)]), n_layers=len(read),
                  hidden=hidden, vocab=vocab,
                  max_seq_len=getattr(config, "max_position_embeddings", None) or 2048,
                  tie_embeddings=out is not None and out.weight is emb.weight,
                  head_bias=out is not None and getattr(out, "bias", None) is not None,
                  norm=norm_kind(final + [n for l in read for n in l["norms"]]),
                  embed_norm=any(l.get("embed_norm") for l in read) or
                  any(is_norm(c) for c in emb.children()), loops=loops,
                  **per_layer,   # Inkling's embed_norm
                  **({"hyper_connections": hyper} if mixer else {}))
    if pos is not None:
        fields.update(learned_pos_emb=True, pos_emb_rows=pos.weight.shape[0])
    fields.update(bert_extra, **books, **adapters, **streams)
    problems += stream_notes
    problems += codebook_notes(model, books) + adapter_note(adapters, len(read))
    encdec, encdec_notes = decoder_fields(model, config, final, unrun, len(read))
    fields.update(encdec)
    problems += encdec_notes
    problems += bert_notes + layer_differences([l for l in read if modelled(l)])
    problems += altup_notes(config) if altup else []
    problems += hyper_notes(hyper, bool(mixer)) if hyper else []
    return fields, problems + left, not all(modelled(l) for l in read)


def transformers_counts(model: Any, config: Any) -> tuple[int, int]:
    """transformers' (total, active) parameters: active counts each MoE layer's routed experts
    top-k of n (the layer's `experts` module, its matrices and biases: an idle expert's bias is
    not used either; gpt-oss), or a module's parallel experts alone where it holds them beside
    its router (hf_blocks.parallel_experts: JetMoE's MoE and its attention's MoA, whose
    `experts` module holds the router and a bias too, modeling_jetmoe.py lines 279-292).
    Zero-computation experts (LongCat-Flash's zero_expert_num) hold nothing but are picked
    too: a token runs k x n / (n + zero) of the n real experts under balanced routing."""
    total = sum(p.numel() for p in model.parameters())
    idle = 0
    for name, module in model.named_modules():
        held = parallel_experts(module)
        experts = held if held is not None else module
        if held is not None or name.rsplit(".", 1)[-1] == "experts":
            n = n_experts(experts)
            pool = n + zero_experts(config)     # LongCat: zero-computation experts, no params
            k = experts_per_token(config) or n
            if pool:                            # no experts (a config's 0): none idle
                idle += sum(p.numel() for p in experts.parameters()) * (pool - k) // pool
    return total, total - idle


def fields_of(data: Mapping, where: str) -> dict:
    """Model fields of a config.json whose model_type has no hand reader, built by transformers
    and checked against its count; a one-line ConfigError when they cannot be matched. Its
    `not_modelled`: what the count check let through (parameters outside what the layout lists,
    children of the blocks not read, layer differences counted as most blocks have them), for
    the Model's source."""
    kind = data["model_type"]
    for part in (data, data.get("text_config")):    # transformers' config classes expand some
        if isinstance(part, Mapping):               # counts into lists (layer_types) at once
            check_counts(part.get, where)
            check_loop_keys(part.get, where)
            check_mixer_keys(part, where)
            check_zero_experts(part.get, where)
    check_xlnet(data, where)            # XLNet's own keys, before transformers reads them
    config = text_config(data, where)
    check_counts(lambda attr: config_value(config, attr), where)    # before a model is built
    refuse_byte_latent(data, config, where)     # BLT: counted, refused (hf_blt.py)
    refuse_reformer(config, where)              # Reformer: counted, refused (hf_reformer.py)
    check_layer_counts(config, where)
    check_loop_keys(lambda attr: getattr(config, attr, None), where)
    check_loop_layers(config, where)
    check_repeats(config, where)
    check_cross_layers(config, where)
    check_altup(config, where)                                      # Gemma 3n
    check_router(config, where)                                     # Zaya
    check_codebooks(config, where)                                  # Musicgen
    check_adapters(config, where)                                   # Xmod
    check_ngram(config, where)                                      # ProphetNet
    cross_keys, cross_notes = vision_tokens(data, config, where)    # Llama 3.2 Vision
    model = build(config, where, data)
    towers = detach_towers(model)                                   # Phi-4-multimodal
    theirs, theirs_active = transformers_counts(model, config)
    problems: list[str] = []
    try:
        fields, problems, partial = built_fields(model, config)
        cross, said = cross_fields(model, fields, cross_keys, cross_notes)
        fields, problems = dict(fields, **cross), problems + said
        m = Model(name=kind, seq_len=fields["max_seq_len"], **fields)
        ours, ours_active = m.n_params, m.active_params
    except Exception as e:      # modules or config attributes of a kind tierlab does not read
        what = str(e) if isinstance(e, (Unmodelled, ValueError)) else unread_reason(e)
        # what the blocks hold beside (Gemma 4's per-layer inputs) named before what it breaks
        fields, problems, partial, ours, ours_active = None, problems + [what], True, None, None
    off = ours is None or abs(ours - theirs) > COUNT_TOLERANCE * theirs \
        or abs(ours_active - theirs_active) > COUNT_TOLERANCE * theirs_active
    if off or partial:
        raise ConfigError(refusal(where, kind, config, (ours, ours_active),
                                  (theirs, theirs_active), problems))
    mixed = (fields["mixer"].layers if fields["mixer"] is not None else ()) + \
        fields["mlp_only_layers"]       # Nemotron-H's "mlp" and "moe" blocks attend nothing
    indexer_notes = check_indexed(config, fields, where)
    sparse, sparse_notes = block_sparse(config, where)     # BigBird: a window (hf_bigbird.py)
    return dict(fields, attention_windows=sparse or attention_windows(config, where, mixed),
                not_modelled=tuple(towers + problems) + indexer_notes + sparse_notes)


def refusal(where: str, kind: str, config: Any, ours: tuple, theirs: tuple,
            problems: list[str]) -> str:
    """The one line that refuses a built architecture: file, model_type, both counts, why."""
    def count(pair: tuple) -> str:
        total, active = pair
        if total is None:
            return "nothing it can model"
        return f"{total:,}" + (f" ({active:,} active)" if active != total else "")

    what = "; ".join(problems) or "parameters outside what tierlab's layout lists"
    ours_text = "tierlab cannot count it" if ours[0] is None else \
        f"tierlab counts {count(ours)} parameters"
    return (f"{where}: model_type {kind!r} is not a supported architecture: transformers "
            f"{transformers_version()} builds it ({type(config).__name__}), {ours_text}, "
            f"transformers {count(theirs)} (tolerance {COUNT_TOLERANCE:.1%}); not modelled: {what}")

