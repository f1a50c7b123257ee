"""BERT-style blocks and the tensors around them, read as a decoder (profiles/hf_build.py).

The causal-LM classes of the BERT family (transformers 5.25.0 modeling_bert.py BertLMHeadModel,
lines 832-846, and RoBERTa, CamemBERT, Data2VecText, ERNIE, RoCBert, RoFormer, XLM-RoBERTa(-XL),
RoBERTa-PreLayerNorm, Megatron-BERT, BigBird, BertGeneration, GIT) build a BertLayer (lines
356-375): `attention.self` holds query, key and value (lines 154-156), `attention.output` the
output `dense` and a LayerNorm (lines 283-288), `intermediate.dense` hidden -> intermediate
(line 330), `output.dense` back and a LayerNorm (lines 342-347). bert_view holds those as the
attention and MLP tierlab reads (profiles/hf_modules.py attention_fields, mlp_shape: q/k/v/o
with biases, a two-matrix MLP) and the block's norms wherever the variant keeps them (post-LN:
attention.output.LayerNorm and output.LayerNorm; pre-LN: RoBERTa-PreLayerNorm's
attention.LayerNorm and intermediate.LayerNorm, XLM-RoBERTa-XL's
attention.self_attn_layer_norm and the layer's LayerNorm, Megatron-BERT's attention.ln and ln);
a norm is an elementwise pass wherever it runs. Around the blocks (bert_fields): the
embeddings module's token-type table and other tensors (Model.embed_tensors), its LayerNorm
(Model.embed_norm), the LM head's transform (Model.head_transform: dense + LayerNorm, lines
470-484), a final norm only where the variant has one (pre-LN: Model.final_norm), and
ELECTRA's and RemBERT's factorized embeddings (Model.embed_width, Model.head_width). XLM's
blocks, kept as parallel lists, are read the same way (parallel_blocks).
"""
from __future__ import annotations

from typing import Any

from tierlab.profiles.hf_modules import Unmodelled, is_norm, param_count


QKV = ("query", "key", "value")
"""BertSelfAttention's projections (modeling_bert.py lines 154-156)."""


def is_bert_layer(layer: Any) -> bool:
    """A BertLayer-shaped block: attention.self with QKV, attention.output.dense,
    intermediate.dense and output.dense."""
    kids = dict(layer.named_children())
    attn, inter, out = kids.get("attention"), kids.get("intermediate"), kids.get("output")
    inner = getattr(attn, "self", None)
    return inner is not None and all(hasattr(inner, n) for n in QKV) and \
        hasattr(getattr(attn, "output", None), "dense") and hasattr(inter, "dense") and \
        hasattr(out, "dense")


def bert_blocks(model: Any, layers: Any, blocks: Any) -> tuple[Any, Any, int]:
    """(the blocks' ModuleList, the blocks as hf_blocks.layer_fields reads them, their width:
    the query's input, which is not the token table's where the embedding is factorized,
    ELECTRA's and RemBERT's) where every block is BERT-shaped (bert_view) or the model keeps
    its blocks as parallel lists (parallel_blocks: XLM); (layers, blocks, 0) otherwise."""
    parallel = parallel_blocks(model, layers)
    if parallel is not None:
        return parallel, list(parallel), int(parallel[0]["attention"].q_lin.weight.shape[1])
    if not len(blocks) or not all(is_bert_layer(b) for b in blocks):
        return layers, blocks, 0
    width = int(blocks[0].attention.self.query.weight.shape[1])
    return layers, [bert_view(b) for b in blocks], width


PARALLEL = {"attention": "attentions", "mlp": "ffns", "norm_1": "layer_norm1",
            "norm_2": "layer_norm2"}
"""A block's parts as XLM keeps them, one ModuleList each (transformers 5.25.0 modeling_xlm.py
XLMModel.__init__ lines 709-724: attentions of MultiHeadAttention, q_lin/k_lin/v_lin/out_lin;
ffns of TransformerFFN, lin1/lin2; layer_norm1 and layer_norm2 after each, post-LN, forward
lines 839-854) -> the child name hf_blocks.layer_fields reads."""


def parallel_blocks(model: Any, layers: Any) -> Any:
    """XLM's blocks (PARALLEL) as a ModuleList of one ModuleDict per block, None where the
    module holding `layers` lacks one of the lists or they differ in length."""
    import torch

    holder = next((m for m in model.modules() if any(c is layers for c in m.children())), None)
    lists = {k: getattr(holder, v, None) for k, v in PARALLEL.items()}
    if any(not isinstance(l, torch.nn.ModuleList) or len(l) != len(layers)
           for l in lists.values()) or not hasattr(lists["attention"][0], "q_lin"):
        return None
    return torch.nn.ModuleList(torch.nn.ModuleDict({k: l[i] for k, l in lists.items()})
                               for i in range(len(layers)))


def bert_view(layer: Any) -> Any:
    """A BertLayer as the children hf_blocks.layer_fields reads: `attention` (query, key, value,
    dense), `mlp` (fc1 = intermediate.dense, fc2 = output.dense), each norm of the block, and
    every other module holding parameters none of these take under its dotted name, which
    layer_fields names as unread (Xmod's adapters, `output_adapter_modules`: profiles/hf_xmod.py).
    Cross-attention: Unmodelled."""
    import torch

    inner, attn_out = layer.attention.self, layer.attention.output
    if getattr(layer, "crossattention", None) is not None:
        raise Unmodelled("cross-attention to an encoder's states in every block "
                         "(add_cross_attention: `crossattention`, modeling_bert.py lines 363-371),"
                         " which tierlab does not time")
    flat: dict[str, Any] = {
        "attention": torch.nn.ModuleDict({**{n: getattr(inner, n) for n in QKV},
                                          "dense": attn_out.dense}),
        "mlp": torch.nn.ModuleDict({"fc1": layer.intermediate.dense, "fc2": layer.output.dense})}
    taken = {id(p) for m in flat.values() for p in m.parameters()}
    for name, module in layer.named_modules():
        if name and is_norm(module) and param_count(module) and \
                not any(id(p) in taken for p in module.parameters()):
            flat[f"norm.{name}".replace(".", "_")] = module
            taken |= {id(p) for p in module.parameters()}
    added: list[str] = []
    for name, module in layer.named_modules():
        own = {id(p) for p in module.parameters()}
        if name and own and not own & taken and not any(name.startswith(a + ".") for a in added):
            flat[name.replace(".", "_")] = module
            added.append(name)
    return torch.nn.ModuleDict(flat)


EXTRA = {"pooler": "BigBird's pooler (modeling_big_bird.py lines 1496-1497, 1676: a Linear on "
                   "the first token of each sample, no loss uses it)",
         "embed_positions": "RoFormer's sinusoidal table for its rotary q/k (modeling_roformer.py "
                            "lines 50-54, 397-399: frozen, _freeze=True)",
         "visual_projection": "GIT's projection of the image tower's features (modeling_git.py "
                              "lines 693-703, 725), which runs only on images"}
"""Modules outside the blocks, the embeddings and the head that a BERT-family causal LM holds,
counted in Model.embed_tensors, not timed, each named in not_modelled."""


def bert_fields(model: Any, config: Any, layers: Any, emb: Any, out: Any,
                hidden: int) -> tuple[dict, list, list[str]]:
    """(Model fields, the modules they take, notes) of what a BERT-family causal LM holds
    around its blocks: the embeddings module's tensors (embedding_tensors), a projection of a
    factorized embedding, the LM head's transform, the EXTRA modules and whether a norm follows
    the last block. BigBird's block-sparse attention: timed in profiles/hf_bigbird.py."""
    embeddings = next((m for m in model.modules() if any(c is emb for c in m.children())), None)
    width = int(emb.weight.shape[1])
    tensors, mods, notes, embed_norm = embedding_tensors(embeddings, emb, width, layers)
    project = embed_projection(model, width, hidden)
    transform = head_transform(model, out, hidden, (layers, embeddings))
    mods += project + transform
    extra, extra_mods, extra_notes = extra_tensors(model, mods)
    mods += extra_mods
    head = int(transform[0].weight.shape[0]) if transform else hidden
    return dict(embed_tensors=tuple(tensors + extra), embed_norm=embed_norm,
                head_transform=bool(transform), final_norm=bool(final_norms(model, layers, mods)),
                embed_width=width if project else 0,
                head_width=head if head != hidden else 0), \
        mods, notes + extra_notes + decoder_notes(config)


def embedding_tensors(embeddings: Any, emb: Any, width: int,
                      layers: Any) -> tuple[list, list, list, bool]:
    """(Model.embed_tensors entries, their modules, notes, whether a LayerNorm is among them:
    Model.embed_norm) of the embeddings module beside the token table `emb`, the position
    table (hf_build.learned_positions) and the blocks (`layers`): BERT's token_type_embeddings
    (modeling_bert.py line 61) and LayerNorm (line 63), RoCBert's pronunciation and shape
    tables and map_inputs_layer (a Linear: counted, not timed), XLM's layer_norm_emb and
    lang_embeddings (modeling_xlm.py lines 701-706)."""
    import torch

    tensors, mods, notes, norm = [], [], [], False
    blocks = {id(p) for p in layers.parameters()}
    for name, child in (embeddings.named_children() if embeddings is not None else ()):
        if child is emb or not param_count(child) or name == "position_embeddings" or \
                any(id(p) in blocks for p in child.parameters()):
            continue
        if is_norm(child) and param_count(child) == 2 * width and not norm:
            norm = True
        else:
            tensors += [(f"{name}.{n}", p.numel()) for n, p in child.named_parameters()]
            if isinstance(child, torch.nn.Linear):
                notes.append(f"{name} ({type(child).__name__} {child.in_features} -> "
                             f"{child.out_features}) in the embeddings, counted, not timed")
        mods.append(child)
    return tensors, mods, notes, norm


def extra_tensors(model: Any, taken: list) -> tuple[list, list, list]:
    """(Model.embed_tensors entries, modules, notes) of the EXTRA modules the model holds
    outside `taken`."""
    tensors, mods, notes = [], [], []
    for name, module in model.named_modules():
        key = name.rsplit(".", 1)[-1]
        if key in EXTRA and param_count(module) and not any(
                any(module is c for c in m.modules()) for m in taken + mods):
            tensors += [(f"{key}.{n}", p.numel()) for n, p in module.named_parameters()]
            notes.append(f"{key} ({param_count(module):,} parameters): {EXTRA[key]}; counted, "
                         "not timed")
            mods.append(module)
    return tensors, mods, notes


PROJECTIONS = ("embeddings_project", "embedding_hidden_mapping_in")
"""The Linear from a factorized token embedding to the blocks' width: ELECTRA's
(modeling_electra.py line 555, `embeddings_project` where embedding_size != hidden_size, run
at lines 610-611) and RemBERT's (modeling_rembert.py line 350, `embedding_hidden_mapping_in`,
input_embedding_size -> hidden_size, run at line 378)."""


def embed_projection(model: Any, width: int, hidden: int) -> list:
    """[the PROJECTIONS Linear, width -> hidden with a bias] where the token table is `width`
    wide and the blocks `hidden`; [] where they are one width. Else Unmodelled."""
    if width == hidden:
        return []
    found = [m for n, m in model.named_modules() if n.rsplit(".", 1)[-1] in PROJECTIONS]
    if len(found) != 1 or tuple(found[0].weight.shape) != (hidden, width) or \
            getattr(found[0], "bias", None) is None:
        raise Unmodelled(f"a token embedding {width} wide for blocks {hidden} wide without the "
                         f"one projection ({', '.join(PROJECTIONS)}) tierlab reads")
    return found


def head_transform(model: Any, out: Any, hidden: int, besides: tuple) -> list:
    """[dense, norm] of the LM head's transform before the decoder: a Linear from hidden to
    the decoder's input, with a bias, named `dense` beside one norm of that width, in the module
    holding the decoder or a child of it outside `besides` (the blocks, the embeddings):
    BertLMPredictionHead's `transform` (modeling_bert.py lines 470-499), RobertaLMHead's own
    dense and layer_norm (modeling_roberta.py lines 882-888), RemBERT's dense hidden ->
    output_embedding_size (modeling_rembert.py lines 444-447), ELECTRA's
    generator_predictions beside generator_lm_head on the model (modeling_electra.py lines 488
    and 977: ElectraGeneratorPredictions, hidden -> embedding_size); [] where there is none
    (BertGeneration, GIT)."""
    if out is None:
        return []
    width = int(out.weight.shape[1])
    holder = next((m for m in model.modules() if any(c is out for c in m.children())), None)
    inside = {id(m) for b in besides if b is not None for m in b.modules()}
    for module in (holder, *holder.children()) if holder is not None else ():
        kids = dict(module.named_children())
        dense = kids.get("dense")
        norms = [c for c in kids.values() if is_norm(c)]
        if id(module) not in inside and not any(id(m) in inside for m in module.children()) \
                and dense is not None and getattr(dense, "bias", None) is not None and \
                tuple(dense.weight.shape) == (width, hidden) and len(norms) == 1 and \
                param_count(norms[0]) == 2 * width:
            return [dense, norms[0]]
    return []


def final_norms(model: Any, layers: Any, mods: list) -> list:
    """Norms outside the blocks and the modules bert_fields took: the pre-LN variants' norm
    after the last block (RoBERTa-PreLayerNorm's LayerNorm, XLM-RoBERTa-XL's encoder.LayerNorm,
    Megatron-BERT's encoder.ln)."""
    taken = {id(p) for m in (layers, *mods) for p in m.parameters()}
    return [m for m in model.modules() if is_norm(m) and param_count(m)
            and not any(id(p) in taken for p in m.parameters())]


ALWAYS_CAUSAL = ("git",)
"""BERT-family types whose text is causal whatever is_decoder says (modeling_git.py lines
850-856: images attend bidirectionally, text causally, create_causal_mask)."""


def decoder_notes(config: Any) -> list[str]:
    """A note where the config leaves the flag that makes the mask causal false: the causal-LM
    class is built, but masks bidirectionally (modeling_bert.py BertModel lines 702-715:
    create_causal_mask only with is_decoder, BertLMHeadModel warns at line 842; XLM's `causal`,
    modeling_xlm.py get_masks lines 58-78, called at line 796); tierlab's step is the same
    either way (sim/flops.py counts the scores in full). None for ALWAYS_CAUSAL types."""
    if config.model_type in ALWAYS_CAUSAL:
        return []
    flag, where = ("causal", "modeling_xlm.py lines 58-78, 796") if config.model_type == "xlm" \
        else ("is_decoder", "modeling_bert.py lines 702-715")
    if getattr(config, flag, True):
        return []
    return [f"{flag} is false: transformers builds the causal-LM class but masks "
            f"bidirectionally ({where}), a text decoder needs {flag} true; the step is timed "
            "the same (scores counted in full, sim/flops.py)"]
