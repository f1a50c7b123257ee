"""A model as the units DeepSpeed fetches (embedding, blocks, head) and the order one micro-step
uses them (pure Python; `workload.py` turns the uses into operations; `layout.py` partitions and
groups their parameters and says where each lives).

Sources (deepspeed 0.19.8, runtime/zero/): partitioned_param_coordinator.py `fetch_sub_module`,
`__params_to_release` (reuse distance, prefetch); parameter_offload.py
`_register_deepspeed_module` (hooks per submodule), `mark_persistent_parameters`.
"""
from __future__ import annotations

from dataclasses import dataclass

from tierlab.profiles.layout import (UNRUN_PREFIX, embed_params, expected_experts_hit,
                                     head_params)
from tierlab.profiles.schema import Model
from tierlab.sim.strategy import Strategy


@dataclass(frozen=True, kw_only=True)
class Module:
    """A unit DeepSpeed fetches as a whole in this coarse model: embedding, one block, the head."""

    name: str
    kind: str
    """'embed', 'block' or 'head'."""
    fetch_numel: int
    """Elements gathered before use: non-persistent parameters (>= persistence threshold)."""
    fetch_tensors: int
    """Parameters gathered (one NVMe swap buffer each)."""
    own_params: tuple[int, ...]
    """Numel of the parameters this module owns (tied LM head owns none), in model order."""
    own_names: tuple[str, ...] = ()
    """Their names ('embed_tokens', 'layers.3.q_proj', 'final_norm', 'lm_head')."""
    hooked: int = 0
    """nn.Modules holding parameters directly: each gets ZeRO-3's fetch/release hooks
    (parameter_offload.py `_register_deepspeed_module` hooks every submodule; fetch_sub_module
    gathers `iter_params(module, recurse=False)`) — HF Llama: 7 Linear + 2 RMSNorm per block."""



# ----------------------------------------------------------------------------------------------
# the model as modules and parameters

def modules(model: Model, strategy: Strategy) -> list[Module]:
    """embed, blocks..., head — with the parameters each gathers and owns. A parameter is gathered
    unless ZeRO-3 persists it: numel <= stage3_param_persistence_threshold (parameter_offload.py
    `mark_persistent_parameters`)."""
    thr = strategy.zero.stage3_param_persistence_threshold if strategy.zero.stage == 3 else -1
    emb = embed_params(model)
    head = head_params(model)
    head_own = {k: n for k, n in head.items() if k != "lm_head" or not model.tie_embeddings}

    def mod(name, kind, used, own, hooked):
        big = [n for n in used if n > thr]
        return Module(name=name, kind=kind, fetch_numel=sum(big), fetch_tensors=len(big),
                      own_params=tuple(own.values()), own_names=tuple(own), hooked=hooked)

    blocks = {model.layer_kind(rep): _block(model, strategy, rep)
              for rep, _ in model.layer_groups()}
    out = [mod("embed", "embed", list(emb.values()), emb, len(emb))]
    for i in range(model.n_layers):
        own, used, hooked = blocks[model.layer_kind(i)]
        out.append(mod(f"L{i}", "block", used, {f"layers.{i}.{k}": n for k, n in own.items()},
                       hooked))
    mixer = sum(1 for k in head if k.startswith("hyper_connection_mixer."))    # Qwen4-Exp's
    # norm + lm_head; BERT: + the transform's dense and norm, no final norm after post-LN blocks
    hooked = 2 + mixer + 2 * model.head_transform - (not model.final_norm) + \
        model.codebooks - 1     # Musicgen: one Linear per codebook (modeling_musicgen.py 640)
    out.append(mod("head", "head", list(head.values()), head_own, hooked))
    return out


def _block(model: Model, strategy: Strategy, layer: int):
    """(own {name: numel}, used, hooked) of one block. A MoE block owns every expert; ZeRO-3
    gathers only the experts its tokens are routed to (HF calls an expert's module only if a token
    picked it): in expectation E x (1 - (1 - k/E)^T) of them for T = micro_batch x seq tokens —
    all of them unless T is tiny (Mixtral, 16 tokens: 7.9 of 8). Hooked: the Linear modules (a
    fused pair counts once) plus the norms that are their own modules. A tensor the forward never
    runs (Model.unrun_matrices: its module is never called, so no hook gathers it) is owned, not
    used."""
    mats, small = model.layer_matrices(layer), model.layer_small_params(layer)
    norms = sum(1 for k in small if "norm" in k and not k.startswith(UNRUN_PREFIX))
    own = {**{k: i * o for k, (i, o) in mats.items()}, **small}
    if not model.is_moe_layer(layer):
        return own, [n for k, n in own.items() if not k.startswith(UNRUN_PREFIX)], \
            sum(not k.startswith(UNRUN_PREFIX) for k in mats) + norms
    m = model.moe
    tokens = strategy.train_micro_batch_size_per_gpu * model.seq_len
    pool = m.n_experts + m.zero_experts     # LongCat: zero-computation experts hold nothing
    hit = min(m.n_experts, max(min(m.experts_per_token, m.n_experts), round(
        expected_experts_hit(pool, m.experts_per_token, tokens) * m.n_experts / pool)))
    idle = {f"experts.{e}." for e in range(hit, m.n_experts)} | {UNRUN_PREFIX}
    used, n_used = [], 0
    for name, n in own.items():
        if not any(name.startswith(p) for p in idle):
            used.append(n)
            n_used += name in mats
    return own, used, n_used + norms


def ceil_div(a: float, b: int) -> float:
    """Elements of one rank's partition (a rate model: fractional elements are fine)."""
    return a / b



# ----------------------------------------------------------------------------------------------
# the trace of one micro-step: every use of every module, and whether it needs a fetch

@dataclass(frozen=True, slots=True)
class Use:
    module: int
    kind: str
    """'fwd', 'recompute' or 'bwd'."""
    fetch: bool


def forward_uses(model: Model) -> tuple[tuple[int, bool], ...]:
    """(module, gradients) of every module use of one forward, in order (indices into
    `modules`): the embedding, each block run (Model.forward_order: a looped block once per
    pass, a pass under torch.no_grad without gradients), the head."""
    return ((0, True), *((i + 1, grad) for i, grad in model.forward_order),
            (model.n_layers + 1, True))


def trace(mods: list[Module], strategy: Strategy, first_step: bool,
          forward: tuple[tuple[int, bool], ...] | None = None) -> list[Use]:
    """Module uses in execution order; a use fetches unless the params stayed gathered.

    `forward`: the forward's uses (forward_uses; None: every module once, with gradients); the
    backward runs those with gradients in reverse, a block's recompute (activation
    checkpointing) right before its backward, so a looped block is used once per pass each
    way. Stage 3 keeps a module's params gathered until its next use if fewer than
    stage3_max_reuse_distance elements are used in between (`__params_to_release`; a loop's
    next pass is such a use); on step 1 the trace is incomplete and every use releases (and so
    re-fetches).
    """
    ckpt = strategy.activation_checkpointing
    forward = forward if forward is not None else tuple((j, True) for j in range(len(mods)))
    order = [(j, "fwd") for j, _ in forward]
    for j, grad in reversed(forward):
        if not grad:
            continue
        if ckpt and mods[j].kind == "block":
            order.append((j, "recompute"))
        order.append((j, "bwd"))
    if strategy.zero.stage < 3:
        return [Use(j, k, False) for j, k in order]
    reuse = strategy.zero.stage3_max_reuse_distance
    prefix = [0]
    for j, _ in order:
        prefix.append(prefix[-1] + mods[j].fetch_numel)
    last: dict[int, int] = {}
    uses = []
    for i, (j, kind) in enumerate(order):
        fetch = mods[j].fetch_numel > 0
        if fetch and not first_step and j in last:
            fetch = prefix[i] - prefix[last[j] + 1] >= reuse
        last[j] = i
        uses.append(Use(j, kind, fetch))
    return uses


def prefetch_depth(mods: list[Module], strategy: Strategy, first_step: bool) -> int:
    """How many uses ahead parameter fetches are issued (0 = fetched when needed).

    fetch_sub_module prefetches up to min(max_live - available, prefetch_bucket) elements on every
    sub-module call once the trace is complete; calls come several per block, so in steady state
    the frontier runs ahead until max_live_parameters elements are gathered."""
    z = strategy.zero
    sizes = [m.fetch_numel for m in mods if m.fetch_numel > 0]
    if first_step or z.stage < 3 or z.stage3_prefetch_bucket_size <= 0 or not sizes:
        return 0
    block = max(sizes)
    if block > z.stage3_max_live_parameters:
        return 0
    return max(1, z.stage3_max_live_parameters // block)
