"""Offload planner: the fastest DeepSpeed ZeRO configuration that fits every memory tier.

Search, cheapest test first (the vocabulary is in planner/variants.py):
1. every placement (ZeRO stage x where parameters and optimizer states live: GPU, CPU, NVMe) x
   micro-batch x activation checkpointing is checked with the memory planner (microseconds
   each), first with DeepSpeed-like defaults, then with the most frugal buffers; a placement
   whose smallest footprint does not fit is out, with the tier that binds;
2. the two largest fitting micro-batches of each placement (with and without checkpointing) are
   simulated;
3. the best TUNED_PLACEMENTS placements are tuned one knob at a time (coordinate descent over
   KNOBS: sub_group_size, optimizer swap pipelining with the buffer count it needs, aio block
   size / queue depth / intra-op parallelism, max_in_cpu, prefetch bucket); a variant that does
   not fit is never kept;
4. the best NVMe configuration is re-simulated with 1..16 drives: when does NVMe stop binding?
Ranking is tokens/s; a configuration without offload wins over an offloading one unless the
latter is more than PREFER_NO_OFFLOAD_MARGIN faster ("if it fits without offload, don't offload").
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Callable, Sequence

from tierlab.errors import ConfigError
from tierlab.planner.fsdp2 import format_fsdp2, fsdp2_candidate
from tierlab.planner.variants import (DEFAULT_NVME_PATH, KNOBS, NVME_DRIVE_COUNTS,
                                     PREFER_NO_OFFLOAD_MARGIN, TUNED_PLACEMENTS, Candidate,
                                     PlanResult, Request, Variant, Simulate, build, frugal_knobs,
                                     placements, to_deepspeed)
from tierlab.units import GiB, fmt_gib

log = logging.getLogger(__name__)

__all__ = ["plan", "format_plan", "PlanResult", "Candidate"]


def _gib(nbytes: float) -> str:
    return fmt_gib(nbytes) if nbytes < 10 * GiB else fmt_gib(nbytes, 0)


def _over(memory, tier_name: str | None = None) -> str:
    """'host needs 1,234 GiB > 1,000 GiB per node' for the binding (or the given) tier."""
    tier = memory.tiers[tier_name or memory.binding_tier]
    scope = "per GPU" if tier.tier == "gpu" else "per node"
    return f"{tier.tier} needs {_gib(tier.used_bytes)} > {_gib(tier.limit_bytes)} {scope}"


class Search:
    """Caches memory checks and simulations of variants; counts simulations."""

    def __init__(self, req: Request, simulator: Callable, jobs: int,
                 progress: Callable[[int], None] | None = None):
        self.req, self.simulator, self.jobs = req, simulator, jobs
        self.progress = progress
        self.seen: dict[Variant, Candidate] = {}
        self.simulations = 0

    def check(self, v: Variant) -> Candidate:
        """Memory only."""
        from tierlab.sim.memory import plan_memory

        if v in self.seen:
            return self.seen[v]
        try:
            hw, strategy = build(v, self.req)
            memory = plan_memory(hw, self.req.model, strategy, headroom=self.req.headroom)
            cand = Candidate(variant=v, fits=memory.fits, memory=memory,
                             over="" if memory.fits else _over(memory),
                             ds_config=to_deepspeed(strategy))
        except (ConfigError, ValueError) as e:
            cand = Candidate(variant=v, fits=False, verdict="error", reason=str(e))
        self.seen[v] = cand
        return cand

    def simulate(self, variants: Sequence[Variant]) -> list[Candidate]:
        """Simulate the fitting ones not simulated yet (in a pool when jobs > 1)."""
        from tierlab.sweeps.run import run_points

        cands = [self.check(v) for v in variants]
        todo = list(dict.fromkeys(c.variant for c in cands
                                  if c.fits and not c.result and c.verdict != "error"))
        rows = run_points(todo, Simulate(self.req, self.simulator), jobs=self.jobs,
                          on_rows=self.progress and (lambda done: self.progress(len(done))))
        self.simulations += len(todo)
        for v, row in zip(todo, rows):
            cand = self.seen[v]
            if row.get("error"):
                cand.verdict, cand.reason = "error", row["error"]
                continue
            cand.result = row
        return cands


def _batches(world: int, global_batch: int | None, grad_accum: int | None,
             micro_batch: int | None, max_micro_batch: int) -> list[tuple[int, int]]:
    """(micro_batch, grad_accum) pairs, largest micro-batch first."""
    mbs = [micro_batch] if micro_batch else [m for m in (1, 2, 4, 8, 16, 32, 64, 128, 256)
                                             if m <= max_micro_batch]
    if global_batch is None:
        return [(m, grad_accum or 1) for m in sorted(mbs, reverse=True)]
    if global_batch % world:
        raise ConfigError(f"--global-batch {global_batch} is not divisible by the {world} GPUs")
    per_gpu = global_batch // world
    out = [(m, per_gpu // m) for m in sorted(mbs, reverse=True) if per_gpu % m == 0]
    if not out:
        raise ConfigError(f"--global-batch {global_batch}: no micro-batch divides the "
                          f"{per_gpu} sequences per GPU")
    return out


def _fitting(s: Search, placement, batches, ckpts) -> tuple[list[Candidate], Candidate]:
    """Fitting variants of a placement (defaults, else frugal buffers) and its smallest
    footprint (for the 'does not fit' reason)."""
    fits, smallest = [], None
    for ckpt in ckpts:
        for mb, gas in batches:
            v = Variant(placement=placement, micro_batch=mb, grad_accum=gas, checkpointing=ckpt)
            c = s.check(v)
            if not c.fits and c.verdict != "error":
                frugal = v
                for key, value in frugal_knobs(placement).items():
                    frugal = frugal.with_knob(key, value)
                c = s.check(frugal)
            if c.fits:
                fits.append(c)
            elif smallest is None or (_pressure(c), mb) < (_pressure(smallest),
                                                            smallest.variant.micro_batch):
                smallest = c
    return fits, smallest


def _pressure(c: Candidate) -> float:
    """used / capacity of the fullest tier (an unused tier of zero capacity does not count)."""
    if c.memory is None:
        return float("inf")
    return max((t.used_bytes / t.capacity_bytes if t.capacity_bytes else
                (float("inf") if t.used_bytes else 0.0)) for t in c.memory.tiers.values())


def _pick(fits: list[Candidate], per_ckpt: int = 2) -> list[Variant]:
    """The largest fitting micro-batches for each checkpointing choice."""
    out = []
    for ckpt in (True, False):
        same = sorted((c for c in fits if c.variant.checkpointing == ckpt),
                      key=lambda c: -c.variant.micro_batch)
        out += [c.variant for c in same[:per_ckpt]]
    return out


def _best(cands) -> Candidate | None:
    done = [c for c in cands if c.fits and c.result and c.tokens_per_s > 0]
    return max(done, key=lambda c: c.tokens_per_s) if done else None


def _tune(s: Search, cand: Candidate) -> Candidate:
    """Coordinate descent over the knobs that matter for this placement."""
    best = cand
    for key, values, applies in KNOBS:
        if not applies(best.variant.placement):
            continue
        trial = s.simulate([best.variant.with_knob(key, v) for v in values])
        top = _best([best, *trial])
        if top is not None and top.tokens_per_s > best.tokens_per_s * 1.001:
            best = top
    return best


def _nvme_scaling(s: Search, cand: Candidate, current: int) -> list[dict]:
    counts = sorted(set(NVME_DRIVE_COUNTS) | {current})
    variants = [replace(cand.variant, nvme_drives=d) for d in counts]
    s.simulate(variants)
    out = []
    for d, v in zip(counts, variants):
        c = s.seen[v]
        out.append({"nvme_drives": d, "fits": c.fits, "step_time_s": c.step_time_s,
                    "tokens_per_s": c.tokens_per_s or None, "bottleneck": c.bottleneck})
    return out


def _nvme_note(scaling: list[dict], current: int) -> str:
    """Does NVMe bind with the drives the hardware has, from how many drives does it stop
    binding, and from how many does another doubling save < 5%?"""
    ok = [r for r in scaling if r["step_time_s"]]
    if not ok:
        return "no NVMe drive count fits."
    now = next((r for r in ok if r["nvme_drives"] == current), ok[0])
    is_nvme = [str(r["bottleneck"]).startswith("nvme") for r in ok]
    if is_nvme[ok.index(now)]:
        free = [r for r, n in zip(ok, is_nvme) if not n and r["nvme_drives"] > current]
        head = (f"NVMe binds with the {current} drive{'s' * (current > 1)} here "
                f"({now['step_time_s']:.3g} s/step); " +
                (f"it stops binding at {free[0]['nvme_drives']} drives ({free[0]['step_time_s']:.3g} "
                 f"s/step, then {free[0]['bottleneck']} binds)" if free else
                 f"it still binds with {ok[-1]['nvme_drives']} drives"))
    else:
        binds = [r["nvme_drives"] for r, n in zip(ok, is_nvme) if n]
        head = (f"NVMe does not bind with the {current} drive{'s' * (current > 1)} here "
                f"({now['step_time_s']:.3g} s/step, {now['bottleneck']} binds)" +
                (f"; it would with {max(binds)} or fewer" if binds else ""))
    sat = next((a for a, b in zip(ok, ok[1:]) if b["step_time_s"] > 0.95 * a["step_time_s"]),
               None)
    if sat is None:
        tail = f"each doubling up to {ok[-1]['nvme_drives']} drives still saves >= 5%"
    else:
        tail = (f"beyond {sat['nvme_drives']} drives ({sat['step_time_s']:.3g} s/step) another "
                "doubling saves < 5%")
    return f"{head}; {tail}."


def _speed_key(c: Candidate) -> tuple:
    """Faster first; within 0.5% the placement that moves less off the GPU first."""
    import math

    dev = {"none": 0, "cpu": 1, "nvme": 2}
    p = c.variant.placement
    return (-round(math.log(max(c.tokens_per_s, 1e-12)) / math.log(1.005)),
            dev[p.param] + dev[p.optimizer], p.stage)


def _rank(per_placement: list[Candidate], failed: list[Candidate],
          min_tps: float | None) -> tuple[Candidate | None, list[Candidate]]:
    """Order and verdicts: fitting by tokens/s (no-offload preferred within the margin)."""
    ok = sorted([c for c in per_placement if c.result], key=_speed_key)
    fast = [c for c in ok if not min_tps or c.tokens_per_s >= min_tps]
    winner = fast[0] if fast else None
    plain = next((c for c in fast if not c.variant.placement.offloads), None)
    if winner is not None and plain is not None and winner is not plain \
            and winner.tokens_per_s <= plain.tokens_per_s * (1 + PREFER_NO_OFFLOAD_MARGIN):
        gain = winner.tokens_per_s / plain.tokens_per_s - 1
        winner.verdict = "offload not needed"
        winner.reason = (f"{gain:.0%} faster, but the model fits without offload (margin "
                         f"{PREFER_NO_OFFLOAD_MARGIN:.0%}): don't offload")
        winner = plain
    for c in ok:
        if c is winner:
            c.verdict, c.reason = "best", f"fastest that fits every tier; {c.bottleneck} binds"
        elif min_tps and c.tokens_per_s < min_tps:
            c.verdict = "too slow"
            c.reason = f"{c.tokens_per_s:,.0f} < --min-tokens-per-s {min_tps:,.0f}"
        elif not c.verdict:
            ratio = winner.tokens_per_s / c.tokens_per_s if winner else 1.0
            c.verdict = "slower"
            c.reason = (f"{ratio:.2f}x slower than the best; {c.bottleneck} binds" if ratio > 1.005
                        else f"as fast as the best but offloads more; {c.bottleneck} binds")
    for c in failed:
        if c.verdict != "error":
            c.verdict, c.reason = "doesn't fit", c.over
    ranked = ([winner] if winner else []) + [c for c in ok if c is not winner]
    ranked += sorted([c for c in failed if c.verdict != "error"], key=_pressure)
    ranked += [c for c in failed if c.verdict == "error"]
    return winner, ranked


def add_ranges(req: Request, cands: list[Candidate]) -> None:
    """Each placement's best candidate re-simulated with its step time's 80% range
    (sim/ranges.py): step_time_low_s / step_time_high_s in its result."""
    from tierlab.sim.ranges import simulate_ranged

    for c in cands:
        if c.result and "step_time_low_s" not in c.result:
            hw, strategy = build(c.variant, req)
            lo, hi = simulate_ranged(hw, req.model, strategy).step_time_range_s
            c.result = {**c.result, "step_time_low_s": lo, "step_time_high_s": hi}


def tokens_per_s_range(c: Candidate) -> tuple[float, float] | None:
    """(low, high) tokens/s from the step time's 80% range, None without one."""
    return c.tokens_per_s_range


def _ties(winner: Candidate | None, ranked: list[Candidate]) -> list[str]:
    """Candidates whose tokens/s range overlaps the best's are ties: their verdict says so, and
    one note names them (the ranges share inputs, so an overlap is a tie, not a coin toss)."""
    best = tokens_per_s_range(winner) if winner is not None else None
    if best is None:
        return []
    ties = []
    for c in ranked:
        span = tokens_per_s_range(c) if c is not winner and c.verdict == "slower" else None
        if span is not None and span[1] >= best[0]:
            c.verdict = "tie"
            c.reason = (f"{c.tokens_per_s:,.0f} tokens/s ({span[0]:,.0f}-{span[1]:,.0f}) overlaps "
                        f"the best's 80% range ({best[0]:,.0f}-{best[1]:,.0f}); "
                        f"{c.bottleneck} binds")
            ties.append(c.label)
    if not ties:
        return []
    return [f"{len(ties)} alternative(s) tie with the best within the 80% ranges of their "
            f"predicted speed: {'; '.join(ties)}. The simulator cannot rank them on these "
            f"profiles: measure the inputs `tierlab simulate` lists as range drivers."]


def _notes(hw, winner: Candidate | None, ranked: list[Candidate], min_tps) -> list[str]:
    notes = []
    plain_fit = [c for c in ranked if not c.variant.placement.offloads and c.fits
                 and c.verdict != "error"]
    plain_fail = [c for c in ranked if not c.variant.placement.offloads and not c.fits]
    if plain_fit:
        c = plain_fit[0]
        notes.append(f"Fits without offload ({c.label}, micro-batch {c.variant.micro_batch}): "
                     "don't offload.")
    elif plain_fail:
        notes.append(f"Needs offload: without it, {plain_fail[0].over}.")
    cpu = [c for c in ranked if c.variant.placement.optimizer == "cpu"]
    nvme = [c for c in ranked if "nvme" in (c.variant.placement.param,
                                           c.variant.placement.optimizer)]
    if cpu and not any(c.fits for c in cpu) and not plain_fit:
        notes.append(_cpu_note(hw, cpu, nvme))
    if winner is None:
        fits = [c for c in ranked if c.fits and c.result]
        if fits and min_tps:
            notes.append(f"No configuration reaches {min_tps:,.0f} tokens/s; the fastest that "
                         f"fits does {fits[0].tokens_per_s:,.0f}.")
        else:
            close = next((c for c in ranked if c.memory is not None), None)
            what = f": closest is {close.label} ({close.over})" if close else ""
            notes.append(f"Nothing fits on {hw.name}{what}. It can't be done here: add GPUs "
                         "(--gpus/--nodes), host RAM or NVMe drives.")
    else:
        if winner.variant.checkpointing:
            notes.append("Activation checkpointing is on: enable it in the model "
                         "(model.gradient_checkpointing_enable()); it is not a ds_config key.")
        else:
            notes.append("Activation checkpointing is off: the activations fit, and skipping "
                         "the recompute is faster.")
        if "nvme" in (winner.variant.placement.param, winner.variant.placement.optimizer):
            notes.append("Set nvme_path to a directory on the NVMe drives that accepts O_DIRECT "
                         "(not tmpfs).")
    return notes


def _cpu_note(hw, cpu: list[Candidate], nvme: list[Candidate]) -> str:
    """Why CPU offload fails, and what to do: NVMe, or it can't be done here."""
    short = [c for c in cpu if c.memory is not None and not c.memory.tiers["host"].fits]
    if not short:
        c = min((c for c in cpu if c.memory is not None), key=_pressure, default=None)
        return f"CPU offload doesn't fit ({c.label}: {c.over})." if c else \
            "CPU offload doesn't fit."
    c = max(short, key=lambda c: c.variant.placement.param != "none")   # offloads the most
    head = (f"Host RAM ({fmt_gib(hw.dram_bytes, 0)}) is too small for CPU offload "
            f"({c.label}: {_over(c.memory, 'host')})")
    if any(n.fits and n.verdict != "error" for n in nvme):
        return head + ": offload to NVMe (ZeRO-Infinity) instead."
    if not hw.nvme_drives:
        return head + (" and this hardware has no NVMe drive: it can't be done here; add host "
                       "RAM or an NVMe drive.")
    n = min((n for n in nvme if n.memory is not None), key=_pressure, default=None)
    return head + (f"; NVMe offload doesn't fit either ({n.label}: {n.over})." if n else ".")


def plan(hardware, model, *, global_batch: int | None = None, grad_accum: int | None = None,
         micro_batch: int | None = None, checkpointing: bool | None = None,
         precision: str | None = None, min_tokens_per_s: float | None = None,
         max_gpu_mem_bytes: float | None = None, nvme_path: str = DEFAULT_NVME_PATH,
         max_micro_batch: int = 64, simulator: Callable | None = None,
         jobs: int = 1, base: dict | None = None, headroom=None,
         progress: Callable[[int], None] | None = None, fsdp2: bool = False) -> PlanResult:
    """Search placements, micro-batch, grad accumulation and knobs for `model` on `hardware`
    (profile objects). `global_batch`: sequences per optimizer step over all GPUs (the planner
    then trades micro-batch against gradient accumulation); without it gradient accumulation
    is `grad_accum` (default 1). `checkpointing` None tries both. `base`: the user's ds_config,
    which every variant changes instead of the planner's template (planner/from_config.py).
    `headroom`: what each fit verdict keeps free (sim/headroom.py; None: the default).
    `progress(n)` is called as each n simulations finish (a progress bar's update).
    `fsdp2`: also evaluate PyTorch FSDP2 CPU offload (planner/fsdp2.py) at the winner's
    micro-batch and checkpointing (micro-batch 1, checkpointing on, when nothing won)."""
    from tierlab.scenario import default_precision
    from tierlab.sim.engine import simulate
    from tierlab.sim.headroom import DEFAULT_HEADROOM

    if max_gpu_mem_bytes is not None:
        if max_gpu_mem_bytes <= 0:
            raise ConfigError(f"--max-gpu-mem must be > 0, got {max_gpu_mem_bytes}")
        hardware = replace(hardware, gpu=replace(
            hardware.gpu, hbm_bytes=min(hardware.gpu.hbm_bytes, max_gpu_mem_bytes)))
    precision = precision or default_precision(hardware)
    headroom = (headroom or DEFAULT_HEADROOM).check(hardware)
    req = Request(hardware=hardware, model=model, precision=precision, nvme_path=nvme_path,
                  base=base, headroom=headroom)
    s = Search(req, simulator or simulate, jobs, progress)
    batches = _batches(hardware.world_size, global_batch, grad_accum, micro_batch, max_micro_batch)
    ckpts = (True, False) if checkpointing is None else (checkpointing,)
    per_placement, failed = [], []
    for p in placements(hardware.world_size, hardware.nvme_drives > 0):
        fits, smallest = _fitting(s, p, batches, ckpts)
        if not fits:
            failed.append(smallest)
            continue
        sims = s.simulate(_pick(fits))
        best = _best(sims)
        if best is not None:
            per_placement.append(best)
            continue
        err = next((c for c in sims if c.verdict == "error"), fits[0])
        if err.verdict != "error":
            err.verdict, err.reason = "error", "the simulation gave no step time"
        failed.append(err)
    per_placement.sort(key=lambda c: -c.tokens_per_s)
    tuned = [_tune(s, c) for c in per_placement[:TUNED_PLACEMENTS]]
    per_placement = tuned + per_placement[TUNED_PLACEMENTS:]
    if simulator is None:
        add_ranges(req, per_placement)
    winner, ranked = _rank(per_placement, failed, min_tokens_per_s)
    _refuse_unevaluated(ranked)
    notes = _notes(hardware, winner, ranked, min_tokens_per_s) + _ties(winner, ranked)
    scaling: list[dict] = []
    nv = next((c for c in ranked if c.result and c.fits and "nvme" in (
        c.variant.placement.param, c.variant.placement.optimizer)), None)
    if nv is not None:
        scaling = _nvme_scaling(s, nv, hardware.nvme_drives)
        notes.append(f"{nv.label}: " + _nvme_note(scaling, hardware.nvme_drives))
    f2 = None
    if fsdp2:
        v = winner.variant if winner is not None else None
        f2 = fsdp2_candidate(hardware, model, micro_batch=v.micro_batch if v else 1,
                             checkpointing=v.checkpointing if v else True, precision=precision,
                             headroom=headroom, grad_accum=v.grad_accum if v else 1)
    return PlanResult(model=model.name, hardware=hardware.name, best=winner, alternatives=ranked,
                      fsdp2=f2,
                      trust=plan_trust(hardware, winner),
                      notes=notes, nvme_scaling=scaling, simulations=s.simulations,
                      gpus_per_node=hardware.gpus_per_node, nodes=hardware.nodes,
                      precision=precision, headroom={t: headroom.of(t).text()
                                                     for t in ("gpu", "host", "nvme")})


def plan_trust(hardware, best: Candidate | None) -> dict:
    """Where the winner's prediction comes from: the inputs of each resource it keeps busy
    (profiles/ranges.trust_of), with the software profile the simulations used."""
    from tierlab.profiles.ranges import trust_of
    from tierlab.sim.host_costs import software_for
    from tierlab.sim.resources import RESOURCES

    used = [r for r in RESOURCES if best is not None and (best.result.get(f"busy_{r}_s") or 0) > 0]
    return trust_of(hardware, software_for(hardware, None), used, memory=True)


def _refuse_unevaluated(ranked: list[Candidate]) -> None:
    """A configuration that could not be evaluated (a bad profile, a missing file, a refused key)
    is an error, never a "doesn't fit": a broken install must not turn into advice."""
    errors = [c for c in ranked if c.verdict == "error"]
    if errors:
        first = errors[0]
        raise ConfigError(f"plan: {len(errors)} of {len(ranked)} configurations could not be "
                          f"evaluated, so there is no verdict; the first, {first.label}: "
                          f"{first.reason.splitlines()[0] if first.reason else 'no reason'}")


def format_plan(result: PlanResult) -> str:
    """The ranked alternatives as a table, then the practical notes."""
    scale = f"{result.scale}, " if result.nodes > 1 else ""
    lines = [f"plan: {result.model} on {result.hardware} ({scale}{result.simulations} "
             "simulations)",
             f"{'#':>2s}  {'placement':58s} {'mb':>3s} {'gas':>4s} {'ckpt':>4s} "
             f"{'step s (80% range)':>22s} "
             f"{'tokens/s':>10s}  verdict: why", "-" * 120]
    for i, c in enumerate(result.alternatives, 1):
        v = c.variant
        step = f"{c.step_time_s:.3f}" if c.step_time_s else "-"
        if c.result.get("step_time_low_s"):
            step += f" ({c.result['step_time_low_s']:.2f}-{c.result['step_time_high_s']:.2f})"
        step = f"{step:>22s}"
        tps = f"{c.tokens_per_s:10,.0f}" if c.tokens_per_s else f"{'-':>10s}"
        lines.append(f"{i:2d}  {c.label:58s} {v.micro_batch:3d} {v.grad_accum:4d} "
                     f"{'on' if v.checkpointing else 'off':>4s} {step} {tps}  "
                     f"{c.verdict}: {c.reason}")
        if c.verdict == "best" and v.knobs:
            knobs = ", ".join(f"{k.split('.')[-1]}={_fmt(x)}" for k, x in v.knobs)
            lines.append(f"    settings: {knobs}")
    if result.nvme_scaling:
        row = "  ".join(f"{r['nvme_drives']}: {r['step_time_s']:.3g} s ({r['bottleneck']})"
                        if r["step_time_s"] else f"{r['nvme_drives']}: -"
                        for r in result.nvme_scaling)
        lines.append(f"NVMe drives -> step time: {row}")
    if result.headroom:
        lines.append("fits = below capacity less the headroom kept free: " + ", ".join(
            f"{t} {h}" for t, h in result.headroom.items()))
    if result.fsdp2 is not None:
        lines.append(format_fsdp2(result.fsdp2))
    lines += [f"* {n}" for n in result.notes]
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value >= 1e4:
        return f"{value:.0e}".replace("e+0", "e")
    if isinstance(value, int) and value >= 1 << 20 and value % (1 << 20) == 0:
        return f"{value >> 20}MiB"
    return str(value)
