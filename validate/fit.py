"""Fit the software profile's host-side terms on a named training subset of measured runs.

`fit_software(hardware, cases, base)` returns a Software whose fitted terms minimise the error on
`base.train_cases` only (the held-out cases never enter), one golden-section search of the steady
step time's squared relative error each, in this order: host dispatch seconds per submodule use
(the stage-0 cases, where nothing else is host-side), ZeRO-1/2 offload gradient-copy seconds per
parameter (the stage-1/2 offload cases, dispatch fixed), ZeRO-3 hook seconds per submodule use
on top of dispatch (the stage-3 cases); then the step-1 warm-up and
first-touch rate (least squares: step 1 - simulated step 1 = fixed + touched bytes / rate) and the
process baseline RSS (median residual). Run: `python -m tierlab.validate.fit validate/cases/h200x2
-H h200x2-host` and copy the printed values into profiles/software/deepspeed-0.19.8.yaml.
"""
from __future__ import annotations

import math
import statistics
import sys
from dataclasses import replace

from tierlab.profiles.schema import Hardware, Software


def _cases(paths, names):
    from tierlab.runner.measurement import load_measurement
    from tierlab.validate.compare import find_measurements

    return [(d.name, load_measurement(d)) for d in find_measurements(paths) if d.name in names]


def _sim(hw, m, sw):
    from tierlab.sim import simulate
    from tierlab.validate.compare import scenario_of

    h, model, s = scenario_of(m, hw)
    return h, model, s, simulate(h, model, s, software=sw)


def _zero(m) -> dict:
    return m.ds_config.get("zero_optimization") or {}


def _golden(hw: Hardware, cases, sw: Software, field: str, keep, hi_s: float) -> float:
    """Golden-section search of Software.`field` on the step time of the cases `keep` accepts;
    the field stays as it is when no training case qualifies."""
    sub = [(n, m) for n, m in cases if m.status == "ok" and keep(m)]
    if not sub:
        return getattr(sw, field)
    meas = {n: m.summary["step_time_s"]["median"] for n, m in sub}

    def loss(h):
        s2 = replace(sw, **{field: h})
        return sum((_sim(hw, m, s2)[3].step_time_s / meas[n] - 1) ** 2 for n, m in sub)

    a, b, g = 0.0, hi_s, (math.sqrt(5) - 1) / 2
    for _ in range(30):
        c, d = b - g * (b - a), a + g * (b - a)
        if loss(c) < loss(d):
            b = d
        else:
            a = c
    return (a + b) / 2


def fit_dispatch_s(hw: Hardware, cases, sw: Software, hi_s: float = 2e-3) -> float:
    """host_dispatch_s_per_module on the stage-0 training cases (no hooks, no offload)."""
    return _golden(hw, cases, sw, "host_dispatch_s_per_module",
                   lambda m: _zero(m).get("stage", 0) == 0, hi_s)


def fit_grad_copy_s(hw: Hardware, cases, sw: Software, hi_s: float = 5e-3) -> float:
    """offload_grad_s_per_param on the stage-1/2 training cases with offload_optimizer."""
    return _golden(hw, cases, sw, "offload_grad_s_per_param",
                   lambda m: _zero(m).get("stage") in (1, 2)
                   and (_zero(m).get("offload_optimizer") or {}).get("device", "none") != "none",
                   hi_s)


def fit_hook_s(hw: Hardware, cases, sw: Software, hi_s: float = 5e-3) -> float:
    """zero3_hook_s_per_module (on top of dispatch) on the ZeRO-3 training cases."""
    return _golden(hw, cases, sw, "zero3_hook_s_per_module",
                   lambda m: _zero(m).get("stage") == 3, hi_s)


def fit_first_step(hw: Hardware, cases, sw: Software) -> tuple[float, float]:
    """(first_step_fixed_s, first_touch_Bps) by least squares over the training cases."""
    from tierlab.sim.engine import first_step_extra_s

    xs, ys = [], []
    for _, m in cases:
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
    slope = (n * sxy - sx * sy) / (n * sxx - sx * sx)
    fixed = (sy - slope * sx) / n
    return max(0.0, fixed), 1.0 / slope if slope > 0 else float("inf")


def fit_baseline(hw: Hardware, cases, sw: Software) -> float:
    """Median over training cases of measured RSS - the modelled items (per rank)."""
    res = []
    for _, m in cases:
        rss = (m.summary or {}).get("peak_host_rss_bytes")
        if m.status != "ok" or not rss:
            continue
        h, _, _, r = _sim(hw, m, sw)
        host = r.memory.tiers["host"]
        items = host.used_bytes / h.gpus_per_node - sw.process_baseline_bytes
        res.append(rss - items)
    return statistics.median(res)


def fit_software(hw: Hardware, paths, base: Software) -> Software:
    cases = _cases(paths, set(base.train_cases))
    sw = replace(base, process_baseline_bytes=fit_baseline(hw, cases, base))
    sw = replace(sw, host_dispatch_s_per_module=fit_dispatch_s(hw, cases, sw))
    sw = replace(sw, offload_grad_s_per_param=fit_grad_copy_s(hw, cases, sw))
    sw = replace(sw, zero3_hook_s_per_module=fit_hook_s(hw, cases, sw))
    fixed, rate = fit_first_step(hw, cases, sw)
    return replace(sw, first_step_fixed_s=fixed, first_touch_Bps=rate)


def main(argv: list[str]) -> None:      # pragma: no cover - a developer tool
    import argparse

    from tierlab.profiles.load import load_hardware, load_software

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cases", nargs="+")
    p.add_argument("-H", "--hardware", required=True)
    p.add_argument("--software", default="deepspeed-0.19.8")
    a = p.parse_args(argv)
    sw = fit_software(load_hardware(a.hardware), a.cases, load_software(a.software))
    print(f"train_cases: {list(sw.train_cases)}")
    print(f"host_dispatch_per_module: {sw.host_dispatch_s_per_module * 1e3:.4f} ms")
    print(f"offload_grad_copy_per_param: {sw.offload_grad_s_per_param * 1e3:.4f} ms")
    print(f"zero3_hook_per_module: {sw.zero3_hook_s_per_module * 1e3:.4f} ms")
    print(f"first_step_fixed: {sw.first_step_fixed_s:.3f} s")
    print(f"first_touch_rate: {sw.first_touch_Bps / 1e9:.3f} GB/s")
    print(f"process_baseline: {sw.process_baseline_bytes / 1e9:.3f} GB")


if __name__ == "__main__":      # pragma: no cover
    main(sys.argv[1:])
