"""Leave-one-class-out validation of the software profile's fitted terms (ARCHITECTURE rule 18).

Every measured run belongs to mechanism classes (`classes_of`): its base class
`stage<N>-<none|cpu|nvme>` (the deepest tier anything is offloaded to), the mechanisms it
exercises (MECHANISMS), its model shape (`model:<name>`) and its machine (`machine:<folder>`).
For each class C, `loco()` refits the software profile with `fit.fit_software` on the training
pool minus every member of C, then predicts every finished run of C with that refit: C is
predicted by a profile that never saw it. A fit depends only on the set of runs it is given, so
one fit serves every class that removes the same set (a class with no member in the pool uses
the fit on the whole pool).

Where removing C leaves no run that can fit a term, fit_software keeps that term's value from
the base profile, which was fitted with C in it: such a term is listed per class as `kept`
(the prediction is then not fully blind). Nothing here prints (cli.py and bench/ do).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

from tierlab.errors import ConfigError
from tierlab.profiles.schema import Hardware, Software
from tierlab.sim.strategy import Flags, Strategy, parse_ds_config
from tierlab.validate.compare import Row, compare_measurement, summarize
from tierlab.validate.fit import fit_software

MECHANISMS = {
    "grad-accum": "gradient_accumulation_steps > 1",
    "pageable": "an active offload block with pin_memory false (DeepSpeed 0.19.8 default: true)",
    "zero3-no-offload": "ZeRO-3 with neither parameters nor optimizer offloaded",
    "nvme-no-pipeline": "optimizer on NVMe without pipeline_read / pipeline_write",
    "nvme-pipeline": "optimizer on NVMe with pipeline_read or pipeline_write",
    "nvme-params": "ZeRO-3 parameters offloaded to NVMe",
    "multi-rank": "world size > 1",
}
"""The mechanism classes and what puts a run in one (besides model:, machine:, stage<N>-)."""
FAMILIES = ("model:<name>", "machine:<folder>", "stage<N>-<none|cpu|nvme>")
METRICS = ("step_time_s", "forward_s", "backward_s", "optimizer_s")
"""What a held-out class is scored on: the steady step and, where measured, its phases."""
_TIERS = ("none", "cpu", "nvme")


def strategy_of(m) -> Strategy:
    """The Strategy DeepSpeed ran for a Measurement (its resolved ds_config, 0.19.8 defaults)."""
    world = int((m.run or {}).get("world_size") or 1)
    strategy, _ = parse_ds_config(m.ds_config, Flags(world_size=world),
                                  where=f"measurement {m.run_id}")
    return strategy


def classes_of(m, folder: str) -> tuple[str, ...]:
    """The classes a measured run belongs to: base class, mechanisms, model, machine."""
    s = strategy_of(m)
    z, opt, par = s.zero, s.zero.offload_optimizer, s.zero.offload_param
    blocks = [opt] + ([par] if z.stage == 3 else [])
    active = [b for b in blocks if b.device != "none"]
    deepest = max((b.device for b in active), key=_TIERS.index, default="none")
    flags = {"grad-accum": s.gradient_accumulation_steps > 1,
             "pageable": any(not b.pin_memory for b in active),
             "zero3-no-offload": z.stage == 3 and not active,
             "nvme-no-pipeline": opt.device == "nvme" and not opt.pipeline,
             "nvme-pipeline": opt.device == "nvme" and opt.pipeline,
             "nvme-params": z.stage == 3 and par.device == "nvme",
             "multi-rank": s.data_parallel_size > 1}
    name = str((m.model or {}).get("name") or "unnamed").lower().replace(" ", "-")
    return (f"stage{z.stage}-{deepest}", *(c for c in MECHANISMS if flags[c]),
            f"model:{name}", f"machine:{folder}")


@dataclass(frozen=True, kw_only=True)
class Case:
    """One finished measured run with its profile and classes."""

    key: str
    """'folder/run' (compare.case_key)."""
    measurement: object
    hardware: Hardware
    classes: tuple[str, ...]


def load_cases(paths: Iterable, hardware: str | None = None) -> list[Case]:
    """The finished (status ok) runs under `paths`, each on its folder's profile (or
    `hardware` for all), with its classes. A path with none is a ConfigError."""
    from tierlab.records.measurement import load_measurement
    from tierlab.validate.compare import case_key, find_measurements, with_profiles

    paths = list(paths)
    out = []
    for d, hw in with_profiles(find_measurements(paths), hardware):
        m = load_measurement(d)
        if m.status == "ok":
            out.append(Case(key=case_key(d), measurement=m, hardware=hw,
                            classes=classes_of(m, d.parent.name)))
    if not out:
        raise ConfigError(f"no finished (status ok) run under {', '.join(map(str, paths))}")
    return out


def check_classes(names: Iterable[str], cases: Sequence[Case]) -> list[str]:
    """`names` if every one is a class of some run in `cases`; else a ConfigError naming it."""
    present = sorted({c for case in cases for c in case.classes})
    for name in names:
        if name in present:
            continue
        known = name in MECHANISMS or name.split(":")[0] in ("model", "machine") or \
            (name.startswith("stage") and name.partition("-")[2] in _TIERS)
        why = "no finished run of class" if known else "unknown class"
        raise ConfigError(f"{why} {name!r} here; classes: {', '.join(present)}")
    return list(names)


@dataclass(frozen=True, kw_only=True)
class ClassResult:
    """One class held out: what was removed from the fit, what it was fitted on, the errors."""

    name: str
    members: tuple[str, ...]
    """The class's finished runs, all predicted by the refit."""
    excluded: tuple[str, ...]
    """Pool runs of the class, removed from the fit."""
    fit_on: tuple[str, ...]
    """The refit's train_cases (empty: nothing left to fit on, nothing predicted)."""
    kept: tuple[str, ...]
    """Fitted terms no remaining run could fit: their base values (fitted with the class in)."""
    summary: dict
    """compare.summarize() of METRICS over the members."""

    def to_dict(self) -> dict:
        return {"class": self.name, "n": len(self.members), "members": list(self.members),
                "excluded": list(self.excluded), "fit_on": list(self.fit_on),
                "kept": list(self.kept), "summary": self.summary}


@dataclass(frozen=True, kw_only=True)
class LocoReport:
    pool: tuple[str, ...]
    """The training pool every refit draws from."""
    classes: tuple[ClassResult, ...]
    overall: dict
    """summarize() over every class-held-out prediction (a run counted once per class)."""
    blind: dict
    """The same over the classes whose refit kept no term from the base profile."""
    in_sample: dict
    """summarize() of the pool predicted by the fit on the whole pool (for contrast)."""
    strict: dict | None
    """summarize() of each run predicted by a fit without any run sharing one of its classes."""
    strict_unfit: tuple[str, ...]
    """Runs for which that fit had nothing left to fit on (not predicted)."""
    strict_kept: tuple[str, ...]
    """Runs predicted by such a fit that kept some fitted term from the base profile."""
    fits: int
    """Distinct fits run."""

    def to_dict(self) -> dict:
        return {"pool": list(self.pool), "classes": [c.to_dict() for c in self.classes],
                "overall": self.overall, "blind": self.blind, "in_sample": self.in_sample,
                "strict": self.strict, "strict_unfit": list(self.strict_unfit),
                "strict_kept": list(self.strict_kept),
                "fits": self.fits}


def training_pool(cases: Sequence[Case], base: Software, pool: str | Sequence[str] = "train"):
    """The keys every refit draws from: 'train' = base.train_cases, 'all' = every finished
    run in `cases`, or the given keys; only those among `cases`."""
    here = [c.key for c in cases]
    if pool == "all":
        return tuple(here)
    wanted = set(base.train_cases if pool == "train" else pool)
    keys = tuple(k for k in here if k in wanted)
    if not keys:
        raise ConfigError(f"none of the training pool ({len(wanted)} cases) is among these runs; "
                          "give the folders holding them or the pool 'all' (--pool all)")
    return keys


def fitted_terms(full: Software, base: Software) -> tuple[str, ...]:
    """The numeric Software fields the fit changed (so it fits them), by field name."""
    return tuple(f.name for f in fields(Software)
                 if isinstance(getattr(base, f.name), float)
                 and getattr(full, f.name) != getattr(base, f.name))


def _fitter(paths, base: Software, hardware: Hardware | None, fit: Callable):
    """refit(train keys) -> Software or None (nothing to fit on), one fit per distinct set."""
    cache: dict[frozenset, Software | None] = {}

    def refit(train: Iterable[str]) -> Software | None:
        key = frozenset(train)
        if key not in cache:
            cache[key] = fit(paths, base, hardware, train=sorted(key)) if key else None
        return cache[key]
    return refit, cache


def _predictor():
    """predict(case, software) -> METRICS rows, one simulation per (run, fit)."""
    cache: dict[tuple[str, int], list[Row]] = {}

    def predict(case: Case, sw: Software) -> list[Row]:
        key = (case.key, id(sw))
        if key not in cache:
            rows = compare_measurement(case.hardware, case.measurement, name=case.key,
                                       software=sw)
            cache[key] = [r for r in rows if r.metric in METRICS]
        return cache[key]
    return predict


def _kept(sw: Software | None, base: Software, terms: Sequence[str]) -> tuple[str, ...]:
    if sw is None:
        return ()
    return tuple(t for t in terms if getattr(sw, t) == getattr(base, t))


def _hold_out(name, cases, pool, refit, predict, base, terms) -> tuple[ClassResult, list[Row]]:
    members = [c for c in cases if name in c.classes]
    gone = {c.key for c in members}
    sw = refit(k for k in pool if k not in gone)
    rows = [r for c in members for r in predict(c, sw)] if sw else []
    result = ClassResult(name=name, members=tuple(c.key for c in members),
                         excluded=tuple(k for k in pool if k in gone),
                         fit_on=tuple(sw.train_cases) if sw else (),
                         kept=_kept(sw, base, terms), summary=summarize(rows))
    return result, [replace(r, case=f"{name}: {r.case}") for r in rows]


def _strict(cases, pool, refit, predict, base, terms) -> tuple[dict, tuple, tuple]:
    """Each run predicted by the fit on the pool minus every run sharing one of its classes:
    (summary, runs with nothing left to fit on, runs whose fit kept a base term)."""
    classes = {c.key: set(c.classes) for c in cases}
    rows, unfit, kept = [], [], []
    for case in cases:
        sw = refit(k for k in pool if not classes[k] & set(case.classes))
        if sw is None:
            unfit.append(case.key)
            continue
        rows += predict(case, sw)
        if _kept(sw, base, terms):
            kept.append(case.key)
    return summarize(rows), tuple(unfit), tuple(kept)


def loco(paths, base: Software, *, pool: str | Sequence[str] = "train",
         classes: Sequence[str] | None = None, hardware: str | None = None,
         strict: bool = False, fit: Callable = fit_software) -> LocoReport:
    """Leave-one-class-out over the finished runs under `paths` (module docstring). `pool`:
    'train' (base.train_cases), 'all' or keys; `classes`: the classes to hold out (default:
    every class with a run); `strict`: also each run with all its classes held out."""
    paths = list(paths)
    cases = load_cases(paths, hardware)
    names = check_classes(classes, cases) if classes else \
        sorted({c for case in cases for c in case.classes})
    keys = training_pool(cases, base, pool)
    hw = None if hardware is None else cases[0].hardware
    refit, cache = _fitter(paths, base, hw, fit)
    predict, full = _predictor(), refit(keys)
    terms = fitted_terms(full, base)
    results, rows, blind = [], [], []
    for name in names:
        result, held = _hold_out(name, cases, keys, refit, predict, base, terms)
        results.append(result)
        rows += held
        blind += [] if result.kept else held
    in_sample = summarize(r for c in cases if c.key in keys for r in predict(c, full))
    strict_summary, unfit, skept = _strict(cases, keys, refit, predict, base, terms) \
        if strict else (None, (), ())
    return LocoReport(pool=keys, classes=tuple(results), overall=summarize(rows),
                      blind=summarize(blind), in_sample=in_sample, strict=strict_summary,
                      strict_unfit=unfit, strict_kept=skept,
                      fits=sum(v is not None for v in cache.values()))


def _pct(s: dict | None, key: str = "mape_pct") -> str:
    return f"{s[key]:5.1f}%" if s else "     -"


def _line(label: str, summary: dict, n: str) -> str:
    step = summary.get("step_time_s")
    cells = [_pct(step), _pct(step, "max_pct"), *(_pct(summary.get(m)) for m in METRICS[1:])]
    return f"{label:34s} {n:>4s} " + " ".join(f"{c:>6s}" for c in cells) + \
        f"  {step['worst_case'] if step else '-'}"


def format_table(report: LocoReport) -> str:
    """The per-class table (text), one line per class, then the pooled lines and the terms a
    class's refit kept from the base profile."""
    out = [f"leave-one-class-out: each class predicted by a refit on the {len(report.pool)}-run "
           f"pool minus its members ({report.fits} fits)",
           f"{'class':26s} {'out':>3s} {'fit':>3s} {'n':>4s} {'step':>6s} {'max':>6s} "
           f"{'fwd':>6s} {'bwd':>6s} {'opt':>6s}  worst step-time run"]
    for c in report.classes:
        mark = "*" if c.kept else " "
        out.append(_line(f"{c.name[:25]:25s}{mark} {len(c.excluded):3d} {len(c.fit_on):3d}",
                         c.summary, str(len(c.members))))
    n = report.overall.get("step_time_s", {}).get("n", 0)
    out += ["", _line("held-out classes, pooled (a)", report.overall, str(n))]
    n = report.blind.get("step_time_s", {}).get("n", 0)
    out.append(_line("  classes without *, pooled", report.blind, str(n)))
    if report.strict is not None:
        n = report.strict.get("step_time_s", {}).get("n", 0)
        out.append(_line("each run, all its classes out (b)", report.strict, str(n)))
    n = report.in_sample.get("step_time_s", {}).get("n", 0)
    out.append(_line("in-sample: pool, fit on the pool", report.in_sample, str(n)))
    out.append("(a) every prediction above; a run counts once per class it belongs to")
    if report.strict is not None:
        out.append(f"(b) one prediction per run, by a fit on the pool runs sharing none of its "
                   f"classes; {len(report.strict_unfit)} runs had none left (not predicted), "
                   f"{len(report.strict_kept)} were predicted by a fit that kept a base term (*)")
    kept = [c for c in report.classes if c.kept]
    if kept:
        out += ["", "* terms kept from the base profile (no run left to fit them; the base "
                "profile was fitted with the class in):"]
        out += [f"  {c.name}: {', '.join(c.kept)}" for c in kept]
    return "\n".join(out)
