"""Blocks a built model runs more than once per forward (Model.loops, profiles/schema.py Loop),
read from transformers' config object and the built modules (profiles/hf_build.py), for the
three text decoders transformers 5.25.0 builds with loops:

- Dory (modeling_dory.py DoryModel.forward, lines 528-570): layers[:n_input_layers] once, then
  `for loop_idx in range(n_loops)` (n_recurrent_loops) the n_recurrent_layers after them, each
  pass from `self.norm(hidden_states) + input_hidden_states`, then the n_output_layers once;
  every pass with gradients (no torch.no_grad in the forward).
- Inkling2-Loop (modeling_inkling2_loop.py Inkling2LoopTextModel.forward, lines 1406-1491):
  layers[:loop_layer_index_start] once, a first pass over the loop layers, then `for loop_idx
  in range(1, loop_num_passes)` the loop layers again from the pre-loop states, each taking
  `messages` from the previous pass (`self.message_input`, line 1451), then the rest once;
  every pass with gradients. The loop layers (Inkling2LoopSlidingLoopDecoderLayer,
  Inkling2LoopFullLoopDecoderLayer, lines 957-1193) hold four message gates each
  (q/k/v/mlp_message_gate, lines 975-978 and 1129-1132: Inkling2LoopMessageGate, lines 81-98)
  that run only when `messages` is given (lines 1005-1011, 1035-1036; 1159-1163, 1187-1188):
  Loop.matrices.
- HRM (modeling_hrm_text.py HrmTextModel.forward, lines 493-525): two stacks of
  num_layers_per_stack blocks (`self.L_module`, `self.H_module`, HrmTextStack, lines 279-308);
  `for high_cycle_idx in range(H_cycles)`: `for low_cycle_idx in range(L_cycles)` the L stack,
  then the H stack. In H cycle h only the last L_bp_cycles_padded[h] L passes carry gradients
  (`grad_threshold`, `ctx = nullcontext() if low_cycle_idx >= grad_threshold else
  torch.no_grad()`, lines 497-503; L_bp_cycles left-padded with 1s to H_cycles, line 414); the
  H stack always does. tierlab's blocks are the L stack's then the H stack's (config
  num_hidden_layers is rewritten to num_layers_per_stack x H_cycles x (L_cycles + 1) cache
  slots, configuration_hrm_text.py __post_init__ line 115, and holds no block count).

Approximations: the parameter-free work between passes (Dory's L2 norm and add, Inkling2's
message attention over the previous pass's block states, HRM's stack norms and adds) is not
timed; Inkling2-Loop's model-level message queries (`message_input.query`) are counted outside
the blocks, as the loader notes.
"""
from __future__ import annotations

from typing import Any, Callable

from tierlab import bounds
from tierlab.errors import ConfigError
from tierlab.profiles.hf_mixer import mixer_tensors
from tierlab.profiles.hf_modules import Unmodelled, named_child
from tierlab.profiles.schema import Loop

PASS_KEYS = ("n_recurrent_loops", "loop_num_passes", "H_cycles", "L_cycles")
"""The config keys of the passes tierlab reads (Dory; Inkling2-Loop; HRM's two): any other key
that runs blocks in loops is refused (profiles/hf_config.py check_repeats)."""

BACKPROP_KEY = "L_bp_cycles"
"""HRM's L passes with gradients per H cycle (a list, configuration_hrm_text.py)."""

BACKPROP_PASSES = bounds.Bound(0, bounds.LOOP_PASSES.high, why=bounds.LOOP_PASSES.why)
"""One entry of L_bp_cycles: 0 (every L pass of that cycle under torch.no_grad) or more (all,
from L_cycles on: `grad_threshold` <= 0)."""

MESSAGE_GATES = ("q_message_gate", "k_message_gate", "v_message_gate", "mlp_message_gate")
"""Inkling2-Loop's loop layers' message gates (Inkling2LoopSlidingLoopDecoderLayer.__init__,
lines 975-978; Inkling2LoopFullLoopDecoderLayer.__init__, lines 1129-1132)."""

STACKS = ("L_module", "H_module")
"""HRM's two stacks in tierlab's block order (HrmTextModel.__init__, lines 408-409)."""


def check_loop_keys(get: Callable[[str], Any], where: str) -> None:
    """The passes (PASS_KEYS) whole numbers of 1 to bounds.LOOP_PASSES, and HRM's L_bp_cycles a
    list of whole numbers >= 0, before transformers sees them (`get(key)`: of the config.json
    mapping or of the config object): one ConfigError line naming the file and key."""
    for key in PASS_KEYS:
        value = get(key)
        if value is not None:
            bounds.check(value, bounds.LOOP_PASSES, f"{where}: {key}")
    backprop = get(BACKPROP_KEY)
    if backprop is None:
        return
    if not isinstance(backprop, (list, tuple)) or len(backprop) > bounds.LOOP_PASSES.high:
        raise ConfigError(f"{where}: {BACKPROP_KEY}: expected a list of whole numbers, got "
                          f"{backprop!r}"[:200])
    for i, value in enumerate(backprop):
        bounds.check(value, BACKPROP_PASSES, f"{where}: {BACKPROP_KEY}[{i}]")


def check_loop_layers(config: Any, where: str) -> None:
    """The looped sections of transformers' config object blocks of the model, before it is
    built: Dory's n_input_layers and n_recurrent_layers, Inkling2-Loop's loop_layer_index_start
    and _end (transformers checks their sums and multiples, not their signs): one ConfigError
    line naming the keys."""
    get = lambda key: getattr(config, key, None)        # noqa: E731
    n = get("num_hidden_layers")
    if get("n_recurrent_loops") is not None:
        _section(get("n_input_layers"), get("n_recurrent_layers"), n,
                 "n_input_layers, n_recurrent_layers", where)
    elif get("loop_num_passes") is not None:
        start, end = get("loop_layer_index_start"), get("loop_layer_index_end")
        _section(start, end - start, n, "loop_layer_index_start, loop_layer_index_end", where)


def stacked_blocks(model: Any) -> tuple[Any, list] | None:
    """(the stacks' layers as one ModuleList, the blocks: L stack, then H stack) of HRM, None
    for a model without its STACKS."""
    import torch

    base = getattr(model, "model", None)
    stacks = [getattr(base, name, None) for name in STACKS]
    if any(getattr(s, "layers", None) is None for s in stacks):
        return None
    blocks = [b for s in stacks for b in s.layers]
    return torch.nn.ModuleList(blocks), blocks


def looped_blocks(blocks: list, config: Any) -> tuple[list, tuple[Loop, ...]]:
    """(the blocks, the loops) of a config whose blocks run in loops (its sections checked by
    check_loop_layers), the blocks of a loop that holds message gates viewed without them
    (their tensors are the Loop's matrices); (blocks, ()) for every other config."""
    get = lambda key: getattr(config, key, None)        # noqa: E731
    if get("n_recurrent_loops") is not None:
        return blocks, dory_loops(get)
    if get("loop_num_passes") is not None:
        return inkling_loops(blocks, get)
    if get("H_cycles") is not None and get("L_cycles") is not None:
        return blocks, hrm_loops(get, len(blocks))
    return blocks, ()


def _section(first: Any, count: Any, n_layers: int, keys: str, where: str) -> None:
    """Blocks first .. first + count - 1 whole numbers within the model's n_layers: else one
    ConfigError line naming the keys."""
    whole = all(isinstance(v, int) and not isinstance(v, bool) for v in (first, count))
    if not (whole and 0 <= first and 1 <= count and first + count <= n_layers):
        raise ConfigError(f"{where}: {keys}: the looped blocks ({first!r}, {count!r} of them) "
                          f"are not blocks of the model's {n_layers}")


def dory_loops(get: Callable[[str], Any]) -> tuple[Loop, ...]:
    """Dory's one loop: its recurrent layers, n_recurrent_loops passes (module docstring)."""
    first = get("n_input_layers")
    return (Loop(layers=tuple(range(first, first + get("n_recurrent_layers"))),
                 passes=get("n_recurrent_loops")),)


def inkling_loops(blocks: list, get: Callable[[str], Any]) -> tuple[list, tuple[Loop, ...]]:
    """Inkling2-Loop's loop layers, loop_num_passes passes, their message gates read off the
    first loop layer (each loop layer holds the same: else Unmodelled) as the Loop's matrices
    and taken out of the blocks' views."""
    import torch

    layers = tuple(range(get("loop_layer_index_start"), get("loop_layer_index_end")))
    gates = [gate_matrices(blocks[i]) for i in layers]
    if any(g != gates[0] for g in gates) or not gates[0]:
        raise Unmodelled("loop layers whose message gates differ (or hold none)")
    views = [torch.nn.ModuleDict({n: c for n, c in b.named_children() if n not in MESSAGE_GATES})
             if i in layers else b for i, b in enumerate(blocks)]
    return views, (Loop(layers=layers, passes=get("loop_num_passes"), matrices=gates[0]),)


def gate_matrices(block: Any) -> tuple[tuple[str, int, int], ...]:
    """(gate.name, in, out) of each Linear of the block's MESSAGE_GATES (their norms hold no
    weight: Inkling2LoopUnweightedRMSNorm); a gate holding another tensor: Unmodelled."""
    out = []
    for gate in MESSAGE_GATES:
        child = named_child(block, (gate,))
        if child is None:
            continue
        mats, small = mixer_tensors(child[1])
        if small:
            raise Unmodelled(f"a message gate holding {', '.join(n for n, _ in small)} in "
                             f"{type(block).__name__}")
        out += [(f"{gate}.{n}", i, o) for n, i, o in mats]
    return tuple(out)


def hrm_loops(get: Callable[[str], Any], n_layers: int) -> tuple[Loop, ...]:
    """HRM's loops (module docstring): both stacks, H_cycles passes; inside, the L stack,
    L_cycles passes, run k of H cycle h (k = h x L_cycles + l) under torch.no_grad where l <
    L_cycles - L_bp_cycles_padded[h]."""
    per_stack = get("num_layers_per_stack")
    if not isinstance(per_stack, int) or 2 * per_stack != n_layers:
        raise Unmodelled(f"HRM stacks of {n_layers} blocks, not 2 x num_layers_per_stack "
                         f"({per_stack!r})")
    high, low = get("H_cycles"), get("L_cycles")
    raw = list(get(BACKPROP_KEY) or [])
    padded = [1] * max(0, high - len(raw)) + raw        # HrmTextModel.__init__, line 414
    no_grad = tuple(h * low + l for h in range(high) for l in range(low)
                    if l < low - (padded[h] if h < len(padded) else 1))
    return (Loop(layers=tuple(range(n_layers)), passes=high),
            Loop(layers=tuple(range(per_stack)), passes=low, no_grad=no_grad))
