"""DeepSpeed host costs per event from calibrate_ds.py's points (pure: no measuring here).

For one term: the narrow model's measured phase time grows by dT_meas from depth L1 to L2; the
simulator, given this host's calibrated hardware and every term derived before this one (this
one at 0), predicts dT_sim. What the simulator does not yet charge is this term's events:

    term = (dT_meas - dT_sim) / (events(L2) - events(L1))

so bandwidth, CPU Adam and GPU time that the engine already models are never counted twice,
and a term is in the engine's own units (per submodule use, per parameter tensor). Terms are
derived in TERMS' order, each on its own variant and phase, except a POOLED term: the median of
the same derivation over every variant that pays its event alike. The CHECKS variants are measured
too but derive nothing: their slopes, predicted with every term, are reported in the source
(how well the terms carry to a configuration they were not taken from).

A term that comes out at or below zero measured nothing: its event costs host time (each is a
Python call path of DeepSpeed's), so the difference was lost in the noise between the processes
it subtracts (lab/scripts/dispatch_probe.py). It is listed as a problem and the base profile's value
stays, with its source, as for a variant that could not run; a zero would have been a guess.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from tierlab.profiles.schema import HOST_COST_FIELDS, Hardware, Model, Software
from tierlab.sim.host_costs import measured_costs

TERMS = (  # (Software field, variant, phase, event: 'use' per submodule use | 'tensor' per step
    #          | 'accum' per tensor and micro-step)
    ("host_dispatch_s_per_module", "stage0", "forward_s", "use"),
    ("host_dispatch_bwd_s_per_module", "stage0", "backward_s", "use"),
    ("stage0_step_s_per_param", "stage0", "optimizer_s", "tensor"),
    ("zero3_hook_s_per_module", "zero3", "forward_s", "use"),
    ("zero3_hook_bwd_s_per_module", "zero3", "backward_s", "use"),
    ("zero3_step_s_per_param", "zero3", "optimizer_s", "tensor"),
    ("zero3_offload_hook_s_per_module", "zero3_offload", "forward_s", "use"),
    ("zero3_offload_hook_bwd_s_per_module", "zero3_offload", "backward_s", "use"),
    ("offload_step_s_per_param", "zero3_offload", "optimizer_s", "tensor"),
    ("zero3_pageable_bwd_s_per_module", "zero3_offload_pageable", "backward_s", "use"),
    ("offload_step_pageable_s_per_param", "zero3_offload_pageable", "optimizer_s", "tensor"),
    ("offload_grad_s_per_param", "zero2_offload", "backward_s", "tensor"),
    ("offload_accum_s_per_param", "zero2_offload_gas2", "backward_s", "accum"),
    ("zero12_step_s_per_param", "zero2", "optimizer_s", "tensor"),
    ("zero12_hook_bwd_s_per_module", "zero2", "backward_s", "use"),
)
POOLED = {"host_dispatch_s_per_module": ("stage0", "zero2", "zero2_offload",
                                         "zero2_offload_pageable", "zero2_offload_gas2")}
"""Terms whose event every listed variant pays alike: the forward of stage 0 and of ZeRO-1/2 (with
or without offload_optimizer, pinned or not, per micro-step) is the same kernel dispatch (ZeRO-1/2
register no forward hooks: stage_1_and_2.py hooks the gradients only). Each variant gives the term
from its own pair of processes and the median is kept: the host-bound forward of one process
differs from another's on the same machine by up to 2x (lab/scripts/dispatch_probe.py), so one pair
alone is as likely to catch a slow process as not."""

CHECKS = (("zero3_offload_gas2", "forward_s"), ("zero3_offload_gas2", "backward_s"),
          ("zero2_offload_pageable", "backward_s"), ("zero2_offload", "optimizer_s"))


def zeroed(software: Software) -> Software:
    """`software` with every host cost at zero, none left to fall back on another (the
    derivation's starting point: each term is charged only what it measured; the dispatch term
    it derives carries no checkpoint wrapper, so none is taken off: host_costs.measured_costs)."""
    return replace(software, **measured_costs(dict.fromkeys(HOST_COST_FIELDS, 0.0)))


def _scenario(variant_name: str, layers: int, hardware: Hardware):
    from tierlab.runner import calibrate_ds as cds
    from tierlab.sim.strategy import Flags, parse_ds_config

    v = cds.variant_named(variant_name)
    model = Model(**cds.narrow_model(layers))
    flags = Flags(micro_batch=cds.MICRO_BATCH, grad_accum=v.grad_accum, world_size=1,
                  precision="bf16", activation_checkpointing=False, hidden=model.hidden)
    strategy, _ = parse_ds_config(cds.ds_config(v, "bf16"), flags, where=f"calibrate {v.name}")
    return replace(hardware, gpus_per_node=1, nodes=1), model, strategy


def _events(kind: str, variant_name: str, layers: int, hardware: Hardware) -> float:
    """Events of one step of the narrow model the term is charged per (the engine's counts)."""
    from tierlab.sim.modules import modules

    hw, model, s = _scenario(variant_name, layers, hardware)
    mods = modules(model, s)
    if kind == "use":       # per phase: each hooked submodule used once per micro-step
        return float(sum(m.hooked for m in mods) * s.gradient_accumulation_steps)
    tensors = float(sum(len(m.own_params) for m in mods))
    return tensors * (s.gradient_accumulation_steps if kind == "accum" else 1)


def _sim_phase(variant_name: str, layers: int, phase: str, hardware: Hardware,
               sw: Software) -> float:
    from tierlab.sim.engine import run_step, phase_times

    hw, model, s = _scenario(variant_name, layers, hardware)
    return phase_times(run_step(hw, model, s, software=sw))[phase]


def _measured(points: list[dict], variant: str, phase: str) -> dict[int, float]:
    return {p["layers"]: p[phase] for p in points
            if p.get("variant") == variant and p.get("status") == "ok" and phase in p}


def _slope_term(points: list[dict], variant: str, phase: str, kind: str, hardware: Hardware,
                sw: Software) -> tuple[float, str] | None:
    """(seconds per event, how) from one variant's two depths; None unless both were measured."""
    meas = _measured(points, variant, phase)
    if len(meas) < 2:
        return None
    lo, hi = min(meas), max(meas)
    d_meas = meas[hi] - meas[lo]
    d_sim = (_sim_phase(variant, hi, phase, hardware, sw)
             - _sim_phase(variant, lo, phase, hardware, sw))
    d_events = _events(kind, variant, hi, hardware) - _events(kind, variant, lo, hardware)
    value = (d_meas - d_sim) / d_events
    return value, (f"narrow Llama ({variant}, {lo} vs {hi} layers, {phase[:-2]}): "
                   f"({d_meas * 1e3:.1f} ms measured - {d_sim * 1e3:.1f} ms simulated "
                   f"without it) / {d_events:.0f} events")


def derive(points: list[dict], hardware: Hardware, base: Software
           ) -> tuple[dict[str, float], dict[str, str], list[str]]:
    """({field: seconds}, {field: how it was derived}, [problems: terms left to the base])."""
    sw = zeroed(base)
    values: dict[str, float] = {}
    how: dict[str, str] = {}
    problems: list[str] = []
    for field, variant, phase, kind in TERMS:
        each = [e for e in (_slope_term(points, v, phase, kind, hardware, sw)
                            for v in POOLED.get(field, (variant,))) if e is not None]
        if not each:
            problems.append(f"{field}: {variant} not measured at two depths")
            continue
        value = statistics.median(v for v, _ in each)
        text = (each[0][1] if len(each) == 1 else
                f"median of {len(each)} configurations' terms, each from its own "
                f"processes: " + "; ".join(f"{t} = {v * 1e6:.1f} us" for v, t in each))
        if value <= 0:
            # the event was not seen above the noise between processes (a pair of processes
            # differs by up to 2x: POOLED's note): no measurement, so the base keeps the term
            # and the terms after it are derived with the base's value, as the engine will run
            problems.append(f"{field}: {text} = {value * 1e6:.1f} us, not above the noise "
                            f"between processes")
            sw = replace(sw, **{field: getattr(base, field)})
            continue
        values[field] = value
        sw = replace(sw, **{field: value})
        how[field] = text
    for variant, phase in CHECKS:
        meas = _measured(points, variant, phase)
        if len(meas) >= 2:
            lo, hi = min(meas), max(meas)
            pred = (_sim_phase(variant, hi, phase, hardware, sw)
                    - _sim_phase(variant, lo, phase, hardware, sw))
            how[f"check:{variant}.{phase}"] = (f"{variant} {phase[:-2]} slope predicted "
                                               f"{pred * 1e3:.1f} ms vs measured "
                                               f"{(meas[hi] - meas[lo]) * 1e3:.1f} ms")
    return values, how, problems


# ----------------------------------------------------------------------------------------------
# No measured term without proof: the held-out check

ADOPT_MARGIN_PCT = 0.5
"""A measured term replaces the stock one only if the held-out error falls by more than this many
percentage points: a term no held-out configuration depends on (the error does not move) stays
stock, unproven."""


@dataclass(frozen=True)
class TermDecision:
    """One host-cost term of a calibration: the stock value, the measured one, what was kept."""

    field: str
    stock_s: float | None
    measured_s: float
    adopted: bool
    why: str


def held_out_error(points: list[dict], hardware: Hardware, software: Software
                   ) -> tuple[float | None, int]:
    """(mean |error| %, n) of the CHECKS phases at every measured depth, simulated with
    `software` on `hardware` (whose own host costs should be empty): configurations calibrate
    trained but derived no term from (zero3_offload_gas2, zero2_offload_pageable's backward,
    zero2_offload's optimizer step)."""
    errs = []
    for variant, phase in CHECKS:
        for layers, measured in sorted(_measured(points, variant, phase).items()):
            if measured > 0:
                sim = _sim_phase(variant, layers, phase, hardware, software)
                errs.append(abs(sim - measured) / measured * 100.0)
    return (statistics.mean(errs) if errs else None), len(errs)


def adopt(points: list[dict], hardware: Hardware, base: Software, values: dict[str, float]
          ) -> tuple[dict[str, float], list[TermDecision], float | None, float | None]:
    """(kept {field: seconds}, one TermDecision per measured term, held-out error % with the
    stock terms, with the kept ones). Terms are tried in TERMS' order, each on top of those kept
    before it; one is kept only if the held-out error falls by more than ADOPT_MARGIN_PCT."""
    stock_err, n = held_out_error(points, hardware, base)
    sw, err, kept, decisions = base, stock_err, {}, []
    for field, value in values.items():
        stock = getattr(base, field)
        if err is None:
            decisions.append(TermDecision(field, stock, value, False,
                                          "no held-out configuration was measured"))
            continue
        trial = replace(sw, **measured_costs({field: value}))
        e, _ = held_out_error(points, hardware, trial)
        if e < err - ADOPT_MARGIN_PCT:
            decisions.append(TermDecision(field, stock, value, True,
                                          f"held-out error {err:.1f}% -> {e:.1f}%"))
            sw, err, kept[field] = trial, e, value
        elif abs(e - err) <= 1e-9:
            decisions.append(TermDecision(field, stock, value, False,
                                          "no held-out configuration depends on it"))
        else:
            decisions.append(TermDecision(field, stock, value, False,
                                          f"held-out error {err:.1f}% -> {e:.1f}% with it"))
    return kept, decisions, stock_err, err
