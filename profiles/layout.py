"""The parameter tensors of a `Model`: one transformer block, the embedding and the head.

Pure functions of the Model's fields (no HF names, no I/O). `Model.layer_matrices` and friends
call them; `profiles/hf_arch.py` maps each Hugging Face architecture onto the fields.

Conventions
- A block's matrices are listed as (in, out) in the order HF Llama builds them: attention, then
  the MLP (up, down, gate — the order the first build used, kept so sub-group boundaries do not
  move), then for MoE layers the router, each routed expert and the shared expert(s).
- Routed experts are one tensor per expert matrix (`experts.{e}.up_proj`, as transformers 4.x
  and DeepSpeed-MoE build them); transformers >= 5 fuses each layer's experts into one 3-D
  tensor — same numel, fewer tensors (see docs/models.md).
- `block_gemms` lists the GEMMs a token passes through with the fraction of tokens that pass:
  1 for attention, dense MLP, router and shared experts; top_k / n_experts for each routed
  expert's matrices (balanced routing: each expert sees tokens x k / E tokens), and for each
  attention expert's (JetMoE's mixture of attention heads: AttentionTensors.expert_matrices).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:       # pragma: no cover
    from tierlab.profiles.schema import Model

NORM_PARAMS_PER_ELEMENT = {"rmsnorm": 1, "layernorm": 2, "nonparametric": 0}
"""Parameters a norm holds per normalised element: RMSNorm weight; LayerNorm weight + bias;
OLMo-1's LayerNorm without affine parameters."""


BLOCK_NORMS = ("input_norm", "post_attention_norm", "pre_feedforward_norm",
               "post_feedforward_norm", "post_feedforward_norm_1", "pre_feedforward_norm_2",
               "post_feedforward_norm_2")
"""A block's own norms, hidden wide, in order (Model.block_norms of them): Llama's two, Gemma-2's
four, Gemma 4's MoE block's seven (modeling_gemma4.py Gemma4TextDecoderLayer.__init__ lines
1337-1340 and 1356-1358)."""


def norm_numel(model: "Model", width: int) -> int:
    return width * NORM_PARAMS_PER_ELEMENT[model.norm]


ATTENTION_TENSORS_PREFIX = "attn."
"""Names of an attention read as tensors (Model.attention_tensors): `attn.` + transformers' name
within the attention module (`attn.q_a_proj`, `attn.q_a_layernorm.weight`, `attn.sinks`)."""


UNRUN_PREFIX = "unrun."
"""Names of the tensors a block stores but its forward never runs (Model.unrun_matrices,
unrun_small_params: an encoder-decoder's cross-attention): `unrun.encoder_attn.q_proj`."""


ADAPTER_PREFIX = "adapters."
"""Names of a block's per-language adapters (Model.adapters: Xmod), one copy per language:
`adapters.3.dense1` (profiles/hf_xmod.py)."""


CROSS_KV = ("k_proj", "v_proj")
"""A cross-attention block's projections of the vision states (Model.cross_attention)."""


CROSS_GATES = ("cross_attn_attn_gate", "cross_attn_mlp_gate")
"""A cross-attention block's tanh gates on its attention and MLP outputs (modeling_mllama.py
MllamaCrossAttentionDecoderLayer lines 681, 685, forward lines 711, 718)."""


def attention_matrices(model: "Model") -> dict[str, tuple[int, int]]:
    """(in, out) of the attention projections (MHA/GQA/MQA, fused or not, or MLA; or the
    Linear weights of Model.attention_tensors as transformers builds them)."""
    h, q, kv = model.hidden, model.q_dim, model.kv_dim
    if model.attention_tensors is not None:
        t = model.attention_tensors
        mats = {ATTENTION_TENSORS_PREFIX + n: (i, o) for n, i, o in t.matrices}
        # a mixture of attention heads (JetMoE): each expert's q and o projections, one tensor
        # per expert as the MoE's routed experts are listed (transformers: one 3-D tensor each)
        mats.update({f"{ATTENTION_TENSORS_PREFIX}{n}.{e}": (i, o) for e in range(t.n_experts)
                     for n, i, o in t.expert_matrices})
        return mats
    if model.mla is not None:
        a = model.mla
        mats = ({"q_a_proj": (h, a.q_lora_rank), "q_b_proj": (a.q_lora_rank, model.n_heads * a.qk_head_dim)}
                if a.q_lora_rank else {"q_proj": (h, model.n_heads * a.qk_head_dim)})
        mats["kv_a_proj_with_mqa"] = (h, a.kv_lora_rank + a.qk_rope_head_dim)
        mats["kv_b_proj"] = (a.kv_lora_rank, model.n_heads * (a.qk_nope_head_dim + a.v_head_dim))
        mats["o_proj"] = (model.n_heads * a.v_head_dim, h)
        return mats
    if model.fused_qkv:
        return {"qkv_proj": (h, q + 2 * kv), "o_proj": (q, h)}
    gate = 2 if model.attn_output_gate else 1      # Qwen3-Next: q_proj outputs query + gate
    return {"q_proj": (h, gate * q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h)}


def mlp_matrices(model: "Model", ffn: int, prefix: str = "") -> dict[str, tuple[int, int]]:
    """(in, out) of one MLP of width `ffn`: up, down (+ gate when gated)."""
    h = model.hidden
    if model.gated_mlp and model.fused_gate_up:
        return {f"{prefix}gate_up_proj": (h, 2 * ffn), f"{prefix}down_proj": (ffn, h)}
    mats = {f"{prefix}up_proj": (h, ffn), f"{prefix}down_proj": (ffn, h)}
    if model.gated_mlp:
        mats[f"{prefix}gate_proj"] = (h, ffn)
    return mats


def mixer_matrices(model: "Model") -> dict[str, tuple[int, int]]:
    """(in, out) of the mixer's projections (Model.mixer: as transformers builds them)."""
    return {f"mixer.{name}": (i, o) for name, i, o in model.mixer.matrices}


PER_LAYER_PREFIX = "per_layer_"
"""Names of a block's per-layer-input tensors (Model.per_layer_inputs: Gemma 4), as transformers
names them: per_layer_input_gate, per_layer_projection (post_per_layer_input_norm is a norm)."""


def per_layer_block_matrices(model: "Model") -> dict[str, tuple[int, int]]:
    """(in, out) of a block's per-layer-input GEMMs (modeling_gemma4.py
    Gemma4TextDecoderLayer.__init__ lines 1348-1349): per_layer_input_gate hidden -> width,
    per_layer_projection width -> hidden; {} without per-layer inputs."""
    p = model.per_layer_inputs
    if p is None:
        return {}
    return {"per_layer_input_gate": (model.hidden, p.width),
            "per_layer_projection": (p.width, model.hidden)}


def per_layer_input_params(model: "Model") -> dict[str, int]:
    """The model-level per-layer-input tensors (modeling_gemma4.py Gemma4TextModel.__init__
    lines 1566-1580): the table embed_tokens_per_layer, vocab x (n_layers x width); the
    projection per_layer_model_projection, hidden x (n_layers x width); its norm
    per_layer_projection_norm (width). Gemma 4's defaults: 262,144 x 7,680 = 2.01e9, 2,304 x
    7,680 = 17.7e6 and 256; {} without per-layer inputs."""
    p = model.per_layer_inputs
    if p is None:
        return {}
    packed = model.n_layers * p.width
    return {"embed_tokens_per_layer": p.vocab * packed,
            "per_layer_model_projection": model.hidden * packed,
            "per_layer_projection_norm": norm_numel(model, p.width)}


HYPER_CONNECTIONS = ("attn_hyper_connection.", "mlp_hyper_connection.")
"""Names of a block's gated residuals (Model.hyper_connections: Qwen4-Exp,
modeling_qwen4_exp.py Qwen4ExpTextDecoderLayer.__init__ lines 1390-1391)."""


def hyper_connection_matrices(model: "Model") -> dict[str, tuple[int, int]]:
    """(in, out) of one block's gated-residual GEMMs (modeling_qwen4_exp.py
    Qwen4ExpTextGatedResidual.__init__ lines 1118-1121), n streams, rank r, h hidden, each of
    the two: input_mix_weight_down n h -> r, input_mix_weight_up r -> n h, block_inject_weight
    n h -> n. Qwen4-Exp's defaults (n 4, r 320, h 2,048): 5,275,648 per gated residual (and
    its norm's 8,192); {} without hyper-connections."""
    if not model.hyper_connections:
        return {}
    n, r = model.hyper_connections
    wide = n * model.hidden
    return {f"{p}{k}": v for p in HYPER_CONNECTIONS for k, v in
            (("input_mix_weight_down", (wide, r)), ("input_mix_weight_up", (r, wide)),
             ("block_inject_weight", (wide, n)))}


def hyper_connection_mixer(model: "Model") -> dict[str, int]:
    """The model's last gated residual, no inject (modeling_qwen4_exp.py
    Qwen4ExpTextModel.__init__ line 1496, forward line 1597: before the head, in place of a
    final norm): its down and up projections (n h x r each); its norm is the head's
    final_norm (n h). {} without hyper-connections."""
    if not model.hyper_connections:
        return {}
    n, r = model.hyper_connections
    return {f"hyper_connection_mixer.{k}": n * model.hidden * r
            for k in ("input_mix_weight_down", "input_mix_weight_up")}


def block_matrices(model: "Model", moe_layer: bool,
                   mixer_layer: bool = False) -> dict[str, tuple[int, int]]:
    """(in, out) of every weight matrix of one block, experts included; a mixer block's mixer
    in place of the attention (beside it when Mixer.attention: Falcon-H1; and nothing else
    when the mixer has no MLP: Mamba); then the block's per-layer-input GEMMs (Gemma 4)."""
    mats = _block_core_matrices(model, moe_layer, mixer_layer)
    if model.per_layer_inputs is not None:
        mats.update(per_layer_block_matrices(model))
    mats.update(hyper_connection_matrices(model))   # Qwen4-Exp: {} for every other model
    return mats


def _block_core_matrices(model: "Model", moe_layer: bool,
                         mixer_layer: bool) -> dict[str, tuple[int, int]]:
    """block_matrices without the per-layer-input GEMMs."""
    mats = attention_matrices(model) if not mixer_layer or model.mixer.attention else {}
    if mixer_layer:
        mats.update(mixer_matrices(model))
    if mixer_layer and not model.mixer.mlp:
        return mats
    if not moe_layer:
        mats.update(mlp_matrices(model, model.ffn))
        return mats
    m = model.moe
    mats["router"] = (model.hidden, m.n_experts + m.zero_experts)   # LongCat: + zero experts
    for e in range(m.n_experts):
        mats.update(mlp_matrices(model, m.expert_ffn, f"experts.{e}."))
    if m.shared_ffn:
        mats.update(mlp_matrices(model, m.shared_ffn, "shared_experts."))
    if m.shared_gate:
        mats["shared_expert_gate"] = (model.hidden, 1)
    return mats


def _biases(model: "Model", mats: dict[str, tuple[int, int]]) -> dict[str, int]:
    """`bias`: every attention and MLP matrix (not the router); `qkv_bias`: q, k, v only (an
    attention read as tensors lists its own biases: AttentionTensors.small_params)."""
    qkv = ("q_proj", "k_proj", "v_proj", "qkv_proj")
    out = {}
    for name, (_, n_out) in mats.items():
        base = name.rsplit(".", 1)[-1]
        if base in ("router", "shared_expert_gate") or name.startswith("mixer.") or \
                name.startswith((ATTENTION_TENSORS_PREFIX, PER_LAYER_PREFIX) +
                                HYPER_CONNECTIONS):
            continue
        if model.bias or (model.qkv_bias and base in qkv):
            out[f"{name}.bias"] = n_out
    return out


def block_small_params(model: "Model", moe_layer: bool,
                       mixer_layer: bool = False) -> dict[str, int]:
    """Parameters of one block that are not matrices: norms and biases (a mixer block: its
    mixer's conv, A_log, D, dt_bias and norms in place of the attention's)."""
    small = {}
    if model.hyper_connections:     # Qwen4-Exp: each gated residual's hc_norm, n x hidden
        for prefix in HYPER_CONNECTIONS:
            small[f"{prefix}hc_norm"] = norm_numel(model, model.hyper_connections[0] * model.hidden)
    else:
        for name in BLOCK_NORMS[:model.block_norms]:
            small[name] = norm_numel(model, model.hidden)
    if model.per_layer_inputs is not None:    # modeling_gemma4.py line 1350
        small["post_per_layer_input_norm"] = norm_numel(model, model.hidden)
    if moe_layer and model.moe.router_scales:   # Gemma4TextRouter's scale, per_expert_scale
        small["router.scale"] = model.hidden
        small["router.per_expert_scale"] = model.moe.n_experts
    if moe_layer and model.moe.output_bias:     # JetMoeMoE's bias (modeling_jetmoe.py l. 224)
        small["moe_bias"] = model.hidden
    if model.cross_attention:   # modeling_mllama.py lines 681, 685: one element each
        small.update(dict.fromkeys(CROSS_GATES, 1))
    if mixer_layer:
        small.update({f"mixer.{name}": n for name, n in model.mixer.small_params})
        if not model.mixer.attention:
            small.update(_biases(model, block_matrices(model, moe_layer, True)))
            return small
    if model.qk_norm == "head":
        small["q_norm"] = norm_numel(model, model.head_dim)
        small["k_norm"] = norm_numel(model, model.head_dim)
    elif model.qk_norm == "full":
        small["q_norm"] = norm_numel(model, model.q_dim)
        small["k_norm"] = norm_numel(model, model.kv_dim)
    if model.attention_tensors is not None:
        small.update({ATTENTION_TENSORS_PREFIX + n: k
                      for n, k in model.attention_tensors.small_params})
    if model.mla is not None:
        if model.mla.q_lora_rank:
            small["q_a_norm"] = norm_numel(model, model.mla.q_lora_rank)
        small["kv_a_norm"] = norm_numel(model, model.mla.kv_lora_rank)
    small.update(_biases(model, block_matrices(model, moe_layer, mixer_layer)))
    return small


def block_gemms(model: "Model", moe_layer: bool,
                mixer_layer: bool = False) -> dict[str, tuple[int, int, float]]:
    """name -> (in, out, token fraction) of every GEMM one block runs in the forward."""
    share = model.moe.token_share if moe_layer else 1.0
    return {name: (i, o, share if name.startswith("experts.") else attention_share(model, name))
            for name, (i, o) in block_matrices(model, moe_layer, mixer_layer).items()}


def attention_share(model: "Model", name: str) -> float:
    """Fraction of the tokens that block matrix `name` multiplies outside the MoE's experts:
    top-k / n for an attention expert's (AttentionTensors.token_share: JetMoE's MoA);
    cross_keys / s for a cross-attention block's k and v (Model.cross_attention: they project
    the cross_keys vision tokens of each sample, not its s text tokens); positions per token
    for a relative-position projection (AttentionTensors.position_matrix: XLNet's r); else 1."""
    if model.cross_attention and name in CROSS_KV:     # Llama 3.2 Vision: on the vision tokens
        return model.cross_keys / model.seq_len
    t = model.attention_tensors
    if t is None or not (t.expert_matrices or t.position_matrix) or \
            not name.startswith(ATTENTION_TENSORS_PREFIX):
        return 1.0
    return t.token_share(name[len(ATTENTION_TENSORS_PREFIX):])


def active_ffn(model: "Model", moe_layer: bool, mixer_layer: bool = False) -> float:
    """MLP width a token passes through: ffn, or top-k x expert width + shared width; 0 in a
    mixer-only block (Mamba)."""
    if mixer_layer and not model.mixer.mlp:
        return 0
    if not moe_layer:
        return model.ffn
    m = model.moe
    routed = m.experts_per_token * m.expert_ffn if not m.zero_experts else \
        m.token_share * m.n_experts * m.expert_ffn     # LongCat: k x n / (n + zero) real experts
    return routed + m.shared_ffn


def mean_active_ffn(model: "Model") -> float:
    """active_ffn averaged over the blocks (DeepSeek: 3 dense blocks, 58 MoE blocks)."""
    return sum(n * active_ffn(model, *model.layer_kind(rep))
               for rep, n in model.layer_groups()) / model.n_layers


def largest_matrix_numel(model: "Model") -> int:
    """Elements of the largest parameter tensor: a block matrix or the embedding (or Gemma 4's
    per-layer table or projection)."""
    tables = [token_rows(model) * token_width(model), model.vocab * logit_width(model)]
    return max(tables + list(per_layer_input_params(model).values()) + [i * o for rep, _ in model.layer_groups()
                                               for i, o in model.layer_matrices(rep).values()])


def token_width(model: "Model") -> int:
    """Width of the token table (Model.embed_width; hidden where it is 0)."""
    return model.embed_width or model.hidden


def logit_width(model: "Model") -> int:
    """Width the LM head reads (Model.head_width; hidden where it is 0)."""
    return model.head_width or model.hidden


def token_rows(model: "Model") -> int:
    """Rows of each token table (Model.embed_rows; vocab where it is 0)."""
    return model.embed_rows or model.vocab


def logits_per_token(model: "Model") -> int:
    """Logits the head produces per token of the sequence: vocab from each of Model.codebooks
    heads (Musicgen stacks them, modeling_musicgen.py line 727), for each of the
    Model.head_streams streams it reads (ProphetNet's ngram predicting streams,
    modeling_prophetnet.py lines 1771-1772)."""
    return model.vocab * model.codebooks * model.head_streams


def stream_keys(model: "Model", keys: float) -> float:
    """Mean keys per query over Model.streams streams where the first stream's queries score
    `keys` and each further stream's 2 x `keys`, the first stream's and its own
    (modeling_prophetnet.py ProphetNetNgramSelfAttention.forward: main s x s, line 629; each
    predicting stream s x 2 s, lines 664 and 677): keys x (1 + 2 n) / (1 + n), n = streams - 1;
    `keys` with one stream."""
    n = model.streams - 1
    return keys if not n else keys * (1 + 2 * n) / (1 + n)


def per_codebook(model: "Model", one: str, many: str, numel: int) -> dict[str, int]:
    """{one: numel} for one codebook; {many.format(c): numel} for each of Model.codebooks
    (Musicgen's ModuleLists: `embed_tokens.0`, `lm_heads.0`, modeling_musicgen.py lines 426
    and 640)."""
    if model.codebooks == 1:
        return {one: numel}
    return {many.format(c): numel for c in range(model.codebooks)}


def embed_params(model: "Model") -> dict[str, int]:
    """Token embedding, learned positions (GPT-2, OPT, StarCoder), embedding norm (BLOOM), the
    per-layer-input table, projection and norm (Gemma 4: per_layer_input_params), all in the
    embedding module (ZeRO-3 gathers them with it, sim/modules.py)."""
    width = token_width(model)
    out = per_codebook(model, "embed_tokens", "embed_tokens.{}", token_rows(model) * width)
    if model.learned_pos_emb:
        out["embed_positions"] = (model.pos_emb_rows or model.max_seq_len or model.seq_len) * width
    if model.embed_norm:
        out["embed_norm"] = norm_numel(model, width)
    out.update(model.embed_tensors)             # BERT's token-type table: () for most models
    if model.embed_width:                       # ELECTRA, RemBERT: the projection to hidden
        out.update({"embed_proj": width * model.hidden, "embed_proj.bias": model.hidden})
    out.update(per_layer_input_params(model))   # Gemma 4: {} for every other model
    return out


def head_params(model: "Model") -> dict[str, int]:
    """Final norm and LM head as the head module uses them (a tied head is the embedding);
    Qwen4-Exp: the hyper_connection_mixer, its norm n x hidden as the final norm; BERT: the
    head's transform (Model.head_transform), no final norm after post-LN blocks."""
    streams = model.hyper_connections[0] if model.hyper_connections else 1
    out = {"final_norm": norm_numel(model, streams * model.hidden)} if model.final_norm else {}
    out.update(hyper_connection_mixer(model))
    width = logit_width(model)
    if model.head_transform:    # BERT: dense h -> w, bias, a norm (modeling_bert.py 470-484)
        out.update({"head_transform": model.hidden * width, "head_transform.bias": width,
                    "head_transform_norm": norm_numel(model, width)})
    out.update(per_codebook(model, "lm_head", "lm_heads.{}", model.vocab * width))
    if model.head_bias:
        out.update(per_codebook(model, "lm_head.bias", "lm_heads.{}.bias", model.vocab))
    return out


def expected_experts_hit(n_experts: int, top_k: int, tokens: int) -> float:
    """Experts that at least one of `tokens` tokens is routed to, in expectation (uniform
    routing, each token picks top_k of n_experts): E x (1 - (1 - k/E)^T). Mixtral (8, top-2)
    with 16 tokens: 8 x (1 - 0.75^16) = 7.92; with 4096 tokens every expert is hit."""
    if top_k >= n_experts:
        return float(n_experts)
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** tokens)
