"""Fit the software profile's host-side terms on a named training subset of measured runs.

`fit_software(paths, base[, hardware])` returns a Software whose fitted terms minimise the
error on `base.train_cases` only ('folder/run' keys; the held-out cases never enter), each run
simulated on the profile its folder's validate.yaml names (the one calibrated with it), or on
`hardware` for all. Each term is
one golden-section search of a squared relative error, in this order, each on the cases where
nothing unfitted is left:
  1. host dispatch s per submodule use: the stage-0 cases' forward + backward phase times (their
     steady step time where a run has no --breakdown);
  2. stage-0 optimizer host loop s per parameter tensor: the stage-0 cases' optimizer phase;
  3. ZeRO-1/2 offload gradient copies s per parameter: the stage-1/2 offload cases' step time;
  4. ZeRO-3 hooks s per submodule use (on top of dispatch): the 1-rank stage-3 cases' step time;
  5. multi-rank straggler wait s per step: the optimizer phase of cases with 2+ ranks;
then the step-1 warm-up and first-touch rate (least squares of step 1 - simulated step 1 =
fixed + touched bytes / rate; with a slope <= 0 the rate is kept and the fixed part is the
median) and the process baseline RSS (median residual).

Pure functions: `fitted_values` gives the terms as the profile's quantity strings and
`write_values` returns the profile's YAML text with them (sources kept). The lab's front end,
`python lab/scripts/fit.py lab/cases/h200x2-b lab/cases/h200x2-c lab/cases/h200x2-d --write`,
prints them and writes them into profiles/software/deepspeed-0.19.8.yaml.
"""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import replace
from typing import Callable

from tierlab.errors import ConfigError
from tierlab.profiles.fields import FITTED_TERMS
from tierlab.profiles.schema import Hardware, Software
from tierlab.records.measurement import load_measurement
from tierlab.sim.engine import first_step_extra_s
from tierlab.validate.compare import case_key, find_measurements, scenario_of, with_profiles


def training_cases(paths, keys, hardware: Hardware | None = None):
    """[(key, Measurement, Hardware)] of the runs under `paths` named in `keys` ('folder/run'),
    each with its folder's calibrated profile (validate.yaml), or `hardware` for all when given:
    the runs `fit_software` fits on."""
    dirs = [d for d in find_measurements(paths) if case_key(d) in keys]
    pairs = [(d, hardware) for d in dirs] if hardware is not None else with_profiles(dirs)
    return [(case_key(d), load_measurement(d), hw) for d, hw in pairs]


def _sim(hw, m, sw):
    sc = scenario_of(m, hw, sw)
    return sc.hardware, sc.model, sc.strategy, sc.simulate()


def _zero(m) -> dict:
    return m.ds_config.get("zero_optimization") or {}


def _ranks(m) -> int:
    """Ranks of the run (all on one node here: the validation hosts are single-node)."""
    return int((m.run or {}).get("world_size") or 1)


def _phase(m, name: str) -> float | None:
    entry = (m.summary or {}).get(name)
    return entry.get("median") if isinstance(entry, dict) else None


def _step(m) -> float:
    return m.summary["step_time_s"]["median"]


def _fwd_bwd(m) -> float | None:
    f, b = _phase(m, "forward_s"), _phase(m, "backward_s")
    return f + b if f is not None and b is not None else None


_PREDICT: dict[str, Callable] = {
    "step": lambda r: r.step_time_s,
    "fwd_bwd": lambda r: r.phases.get("forward_s", 0.0) + r.phases.get("backward_s", 0.0),
    "optimizer": lambda r: r.phases.get("optimizer_s", 0.0)}
_MEASURE: dict[str, Callable] = {"step": _step, "fwd_bwd": _fwd_bwd,
                                 "optimizer": lambda m: _phase(m, "optimizer_s")}


def _golden(cases, sw: Software, field: str, keep, hi: float,
            target: str = "step", lo: float = 0.0) -> float:
    """Golden-section search of Software.`field` on `target` ('step', 'fwd_bwd' or 'optimizer';
    'fwd_bwd' falls back to the step time for a run without phase times, 'optimizer' skips such
    a run) over the cases `keep` accepts; the field stays as it is when none qualifies."""
    sub = []
    for _, m, h in cases:
        if m.status != "ok" or not keep(m):
            continue
        kind = target if _MEASURE[target](m) is not None else "step"
        if kind != target and target == "optimizer":
            continue
        sub.append((m, h, kind, _MEASURE[kind](m)))
    if not sub:
        return getattr(sw, field)

    def loss(x):
        s2 = replace(sw, **{field: x})
        return sum((_PREDICT[kind](_sim(h, m, s2)[3]) / meas - 1) ** 2
                   for m, h, kind, meas in sub)

    a, b, g = lo, hi, (math.sqrt(5) - 1) / 2
    for _ in range(30):
        c, d = b - g * (b - a), a + g * (b - a)
        if loss(c) < loss(d):
            b = d
        else:
            a = c
    return (a + b) / 2


def _offload_1_2(m) -> bool:
    return _zero(m).get("stage") in (1, 2) and \
        (_zero(m).get("offload_optimizer") or {}).get("device", "none") != "none"


def fit_dispatch_s(cases, sw: Software, hi_s: float = 2e-3) -> float:
    """host_dispatch_s_per_module on the stage-0 training cases (no hooks, no offload)."""
    return _golden(cases, sw, "host_dispatch_s_per_module",
                   lambda m: _zero(m).get("stage", 0) == 0, hi_s, "fwd_bwd")


def fit_stage0_step_s(cases, sw: Software, hi_s: float = 2e-3) -> float:
    """stage0_step_s_per_param on the stage-0 training cases' optimizer phase."""
    return _golden(cases, sw, "stage0_step_s_per_param",
                   lambda m: _zero(m).get("stage", 0) == 0, hi_s, "optimizer")


def fit_grad_copy_s(cases, sw: Software, hi_s: float = 5e-3) -> float:
    """offload_grad_s_per_param on the stage-1/2 training cases with offload_optimizer."""
    return _golden(cases, sw, "offload_grad_s_per_param",
                   lambda m: _offload_1_2(m) and _ranks(m) == 1, hi_s)


def fit_hook_s(cases, sw: Software, hi_s: float = 5e-3) -> float:
    """zero3_hook_s_per_module (on top of dispatch) on the 1-rank ZeRO-3 training cases."""
    return _golden(cases, sw, "zero3_hook_s_per_module",
                   lambda m: _zero(m).get("stage") == 3 and _ranks(m) == 1, hi_s)


def fit_multi_rank_sync(cases, sw: Software, hi_s: float = 1.0) -> float:
    """multi_rank_sync_s on the optimizer phase of the 2+-rank training cases."""
    return _golden(cases, sw, "multi_rank_sync_s", lambda m: _ranks(m) > 1, hi_s,
                   "optimizer")


def fit_first_step(cases, sw: Software) -> tuple[float, float]:
    """(first_step_fixed_s, first_touch_Bps) by least squares over the training cases."""
    xs, ys = [], []
    for _, m, hw in cases:
        if m.status != "ok" or not m.steps:
            continue
        h, model, s, r = _sim(hw, m, sw)
        schedule = r.first_step_time_s - first_step_extra_s(h, model, s, sw)
        touch = first_step_extra_s(h, model, s, replace(sw, first_step_fixed_s=0.0,
                                                        first_touch_Bps=1.0))
        xs.append(touch)
        ys.append(m.steps[0].wall_s - schedule)
    n, sx, sy = len(xs), sum(xs), sum(ys)
    sxx, sxy = sum(x * x for x in xs), sum(x * y for x, y in zip(xs, ys))
    den = n * sxx - sx * sx
    slope = (n * sxy - sx * sy) / den if den > 0 else 0.0
    if slope <= 0:      # the touched bytes do not explain step 1 here: keep the rate and fit
        slope = 1.0 / sw.first_touch_Bps   # the fixed part (median: step 1 is noisy)
        fixed = statistics.median(y - slope * x for x, y in zip(xs, ys))
    else:
        fixed = (sy - slope * sx) / n
    return max(0.0, fixed), 1.0 / slope


def fit_baseline(cases, sw: Software) -> float:
    """Median over training cases of measured RSS - the modelled items (per rank)."""
    res = []
    for _, m, hw in cases:
        rss = (m.summary or {}).get("peak_host_rss_bytes")
        if m.status != "ok" or not rss:
            continue
        h, _, _, r = _sim(hw, m, sw)
        host = r.memory.tiers["host"]
        items = host.used_bytes / h.gpus_per_node - sw.process_baseline_bytes
        res.append(rss - items)
    return statistics.median(res)


def fit_software(paths, base: Software, hardware: Hardware | None = None, *,
                 train=None) -> Software:
    """The terms fitted on base.train_cases under `paths`, each run simulated on its folder's
    profile (or on `hardware` for all). `train` ('folder/run' keys) replaces base.train_cases;
    then the result's train_cases are the keys actually fitted on (validate/loco.py)."""
    keys = set(base.train_cases if train is None else train)
    cases = training_cases(paths, keys, hardware)
    if not cases:
        raise ConfigError(f"none of train_cases {sorted(keys)} is under "
                          f"{', '.join(map(str, paths))}")
    if train is not None:
        base = replace(base, train_cases=tuple(sorted(k for k, _, _ in cases)))
    sw = replace(base, process_baseline_bytes=fit_baseline(cases, base))
    sw = replace(sw, host_dispatch_s_per_module=fit_dispatch_s(cases, sw))
    sw = replace(sw, stage0_step_s_per_param=fit_stage0_step_s(cases, sw))
    sw = replace(sw, offload_grad_s_per_param=fit_grad_copy_s(cases, sw))
    sw = replace(sw, zero3_hook_s_per_module=fit_hook_s(cases, sw))
    sw = replace(sw, multi_rank_sync_s=fit_multi_rank_sync(cases, sw))
    fixed, rate = fit_first_step(cases, sw)
    return replace(sw, first_step_fixed_s=fixed, first_touch_Bps=rate)


def fitted_values(sw: Software) -> dict[str, str]:
    """The fitted terms as the software profile's quantity strings, by YAML key (each in the
    form profiles/fields.py gives it)."""
    return {t.key: t.fitted(getattr(sw, t.field)) for t in FITTED_TERMS}


def write_values(text: str, values: dict[str, str]) -> str:
    """The software profile's YAML text with each `key: {value: ...` replaced (sources kept);
    a key the text lacks is an error (add it with its source first)."""
    for key, value in values.items():
        # a stated range belongs to the old value: dropped (the fitted default applies until
        # `python lab/scripts/spread.py ... --write` states the new spread, docs/ranges.md)
        text, n = re.subn(rf"^({re.escape(key)}: {{value: )[^,]+,( range: \[[^\]]*\],)?",
                          rf"\g<1>{value},", text, flags=re.M)
        if n != 1:
            raise KeyError(f"{key}: not once in the software profile")
    return text

