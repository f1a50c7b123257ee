"""The order one forward runs its blocks in when some run in loops (Model.loops): pure functions
of the block count and the loops (profiles/schema.py Loop: consecutive `layers`, `passes`,
`no_grad`, `matrices`), read by duck typing, so the schema can call them without an import
circle.

A loop's blocks run as one section, `passes` times in a row, where the forward reaches its first
block; loops nest (HRM: the L stack's section inside the one of both stacks) or are apart. Every
block outside a loop runs once, in index order. Each run of a section is numbered over the whole
forward (0, 1, ...: an enclosing loop's passes included), and a run listed in its loop's
`no_grad` runs under torch.no_grad: forward only.
"""
from __future__ import annotations

from math import prod
from typing import Any, Sequence

from tierlab import bounds


def span(loop: Any) -> tuple[int, int]:
    """(first block, one past the last) of a loop's section."""
    return loop.layers[0], loop.layers[-1] + 1


def inside(inner: tuple[int, int], outer: tuple[int, int]) -> bool:
    """Section `inner` lies within `outer` (or is it)."""
    return outer[0] <= inner[0] and inner[1] <= outer[1]


def enclosing(loops: Sequence[Any], k: int) -> list[int]:
    """Indices of the loops whose sections strictly hold loop k's."""
    own = span(loops[k])
    return [j for j, l in enumerate(loops) if j != k and inside(own, span(l))]


def entries(loops: Sequence[Any], k: int) -> int:
    """Times one forward reaches loop k's section: its enclosing loops' passes multiplied."""
    return prod(loops[j].passes for j in enclosing(loops, k))


def innermost(loops: Sequence[Any], layer: int) -> int | None:
    """Index of the smallest loop whose section holds block `layer`, None outside every loop."""
    held = [k for k, l in enumerate(loops) if inside((layer, layer + 1), span(l))]
    return min(held, key=lambda k: len(loops[k].layers)) if held else None


def block_runs(n_layers: int, loops: Sequence[Any]) -> int:
    """Block runs of one forward: each block once times the passes of every loop holding it
    (a walk over the looped blocks only: n_layers is checked against its bound later)."""
    looped = {i for l in loops for i in range(*span(l))}
    return n_layers - len(looped) + sum(
        prod(l.passes for l in loops if inside((i, i + 1), span(l))) for i in looped)


def check_loops(n_layers: int, loops: Sequence[Any]) -> None:
    """ValueError naming what is wrong: a loop beyond the model's blocks, two loops that overlap
    without one holding the other (or over the same blocks), `no_grad` or `matrices` on a loop
    that holds another, a `no_grad` run the forward never reaches, more block runs than
    bounds.BLOCK_RUNS."""
    if not loops:
        return
    for k, loop in enumerate(loops):
        if span(loop)[1] > n_layers:
            raise ValueError(f"Model.loops[{k}].layers lists block {span(loop)[1] - 1}, the "
                             f"model has {n_layers}")
        for j in range(k):
            a, b = span(loop), span(loops[j])
            apart = a[1] <= b[0] or b[1] <= a[0]
            if a == b or not (apart or inside(a, b) or inside(b, a)):
                raise ValueError(f"Model.loops[{j}] and [{k}] must be apart or one inside the "
                                 f"other (blocks {b[0]}-{b[1] - 1}, {a[0]}-{a[1] - 1})")
    for k, loop in enumerate(loops):
        holds = any(k in enclosing(loops, j) for j in range(len(loops)))
        if holds and (loop.no_grad or loop.matrices):
            raise ValueError(f"Model.loops[{k}] holds another loop: no_grad and matrices belong "
                             "to the innermost one")
        runs = entries(loops, k) * loop.passes
        if any(r >= runs for r in loop.no_grad):
            raise ValueError(f"Model.loops[{k}].no_grad lists run {max(loop.no_grad)}; the "
                             f"forward runs its blocks {runs} times (0 to {runs - 1})")
    total = block_runs(n_layers, loops)
    if total > bounds.BLOCK_RUNS.high:
        raise ValueError(f"Model.loops: {total:,} block runs per forward, beyond the bound "
                         f"{bounds.BLOCK_RUNS.high:,.0f} ({bounds.BLOCK_RUNS.why})")


def forward_order(n_layers: int, loops: Sequence[Any]) -> tuple[tuple[int, bool], ...]:
    """(block, gradients) of every block run of one forward, in the order it runs them: blocks
    0, 1, ... once each without loops; a loop's section `passes` times in a row (HRM with 2
    blocks per stack, H_cycles 2, L_cycles 3: 0 1 0 1 0 1 2 3 0 1 0 1 0 1 2 3)."""
    count = [0] * len(loops)
    out: list[tuple[int, bool]] = []

    def walk(lo: int, hi: int, outer: tuple[int, ...], grad: bool) -> None:
        i = lo
        while i < hi:
            at = [k for k, l in enumerate(loops) if k not in outer and span(l)[0] == i
                  and inside(span(l), (lo, hi))]
            if not at:
                out.append((i, grad))
                i += 1
                continue
            k = max(at, key=lambda j: len(loops[j].layers))       # the outermost starts here
            for _ in range(loops[k].passes):
                walk(*span(loops[k]), outer + (k,), grad and count[k] not in loops[k].no_grad)
                count[k] += 1
            i = span(loops[k])[1]

    walk(0, n_layers, (), True)
    return tuple(out)
