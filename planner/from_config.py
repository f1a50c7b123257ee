"""`plan --ds-config mine.json`: start from the user's config, say what to change.

The user's config is the baseline ("yours"), simulated as it is. The planner's search
(planner/search.py) then runs with every variant made from the user's config instead of the
planner's template (`base_ds_config`): only the keys a placement, batch or knob changes differ,
every other key stays as the user wrote it, and the global batch stays the user's. The changes
from yours to the best are applied one group at a time (placement, batch, checkpointing, then
each tuned knob), each simulated, so every group of dotted DeepSpeed keys carries the step time
and tokens/s it leads to. `proposed_config` writes the user's file with those keys changed and
every "auto" the Hugging Face integration fills kept as "auto" (the trainer's arguments to pass
are named instead), so it drops into the HF Trainer, axolotl or LLaMA-Factory unchanged.
"""
from __future__ import annotations

import copy
from pathlib import Path
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from tierlab.errors import ConfigError
from tierlab.planner.search import Search, add_ranges, format_plan, plan
from tierlab.planner.trainer import trainer_native
from tierlab.scenario import get_dotted
from tierlab.planner.variants import (Candidate, Placement, PlanResult, Request, Variant,
                                   base_ds_config, placements)

TRAINER_ARGS = {"train_micro_batch_size_per_gpu": "--per_device_train_batch_size",
                "gradient_accumulation_steps": "--gradient_accumulation_steps"}
"""HF TrainingArguments that fill the batch "auto" keys (transformers integrations/deepspeed.py
trainer_config_process; train_batch_size follows from them and the world size)."""
_UNIT = ("ZeRO stage and offload placement", "batch", "activation checkpointing")


# ----------------------------------------------------------------------------------------------
# the user's config as the planner's base

def base_config(cfg: Mapping[str, Any], where: str) -> dict:
    """The user's config with zero_optimization as DeepSpeed reads it (aliases -> stage3_* names,
    deprecated keys mapped, "auto" it would drop dropped) and the "auto" the HF integration
    fills kept, so a variant can change any key without clashing with an alias."""
    from tierlab.dsconfig.read import HF_FILLED, read

    cfg = copy.deepcopy(dict(cfg))
    zero = cfg.get("zero_optimization")
    if not isinstance(zero, Mapping):
        return cfg
    keep = {k.split(".", 1)[1]: "auto" for k in HF_FILLED if k.startswith("zero_optimization.")
            and zero.get(k.split(".", 1)[1]) == "auto"}
    # the table, as resolve judged the whole config: no planner verdict imports DeepSpeed
    _, reading = read({"zero_optimization": zero}, where, prefer="table")
    cfg["zero_optimization"] = {**copy.deepcopy(dict(reading.blocks["zero_optimization"])),
                                **keep}
    return cfg


def placement_of(strategy) -> Placement:
    """The placement a parsed config stands for, labelled like the planner's."""
    p = (strategy.zero.stage, strategy.param_device, strategy.optimizer_device)
    for known in placements(2, True):
        if (known.stage, known.param, known.optimizer) == p:
            return known
    where = {"none": "GPU", "cpu": "CPU", "nvme": "NVMe"}
    return Placement(f"ZeRO-{p[0]}, params on {where[p[1]]}, optimizer on {where[p[2]]}", *p)


# ----------------------------------------------------------------------------------------------
# the changes, one group at a time

@dataclass(kw_only=True)
class Step:
    """One group of changes applied on top of the ones before, and where it leads."""

    what: str
    changes: list[tuple[str, Any, Any]]
    """(dotted DeepSpeed key, yours, proposed); 'activation checkpointing' is no ds_config key."""
    candidate: Candidate


@dataclass(kw_only=True)
class FromConfig:
    where: str
    baseline: Candidate
    plan: PlanResult
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    base: Mapping[str, Any] = field(default_factory=dict)
    hidden: int | None = None
    """The model's hidden size: what the HF integration fills bucket-size "auto" with."""

    @property
    def changes(self) -> list[tuple[str, Any, Any]]:
        return [c for s in self.steps for c in s.changes]

    def to_dict(self) -> dict:
        return {"ds_config": self.where, "yours": self.baseline.to_dict(),
                "changes": [{"what": s.what, "keys": [{"key": k, "yours": a, "proposed": b}
                                                      for k, a, b in s.changes],
                             "step_time_s": s.candidate.step_time_s,
                             "tokens_per_s": s.candidate.tokens_per_s or None,
                             "fits": s.candidate.fits, "over": s.candidate.over}
                            for s in self.steps],
                "notes": self.notes, "plan": self.plan.to_dict()}


def _flat(d: Mapping, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def _ds_keys(search, v: Variant) -> dict[str, Any]:
    c = search.check(v)
    return _flat(c.ds_config) if c.ds_config else {}


def _diff(before: dict, after: dict) -> list[tuple[str, Any, Any]]:
    """Changed keys; a key only one side writes out (offload_param's defaults below stage 3)
    is no change unless it is a device."""
    out = []
    for k in sorted(set(before) | set(after)):
        a, b = before.get(k), after.get(k)
        if k.endswith(".device"):       # no offload block: no offload
            a, b = a or "none", b or "none"
        if a == b or ((a is None or b is None) and not k.endswith(".nvme_path")):
            continue
        out.append((k, a, b))
    return out


def _chain(base: Variant, best: Variant) -> list[tuple[str, Variant]]:
    """yours -> best, one group at a time: placement, batch, checkpointing, each knob."""
    v1 = replace(base, placement=best.placement)
    v2 = replace(v1, micro_batch=best.micro_batch, grad_accum=best.grad_accum)
    v3 = replace(v2, checkpointing=best.checkpointing)
    out = [(_UNIT[0], v1), (_UNIT[1], v2), (_UNIT[2], v3)]
    for key, value in best.knobs:
        out.append((key, out[-1][1].with_knob(key, value)))
    return out


def _steps(search, base: Variant, best: Variant) -> list[Step]:
    steps, prev = [], _ds_keys(search, base)
    for what, v in _chain(base, best):
        keys = _ds_keys(search, v)
        changes = _diff(prev, keys)
        prev_v = steps[-1].candidate.variant if steps else base
        if v.checkpointing != prev_v.checkpointing:
            changes.append(("activation checkpointing", "on" if prev_v.checkpointing else "off",
                            "on" if v.checkpointing else "off"))
        if not changes:
            continue
        cand = search.check(v)
        if cand.fits:
            cand = search.simulate([v])[0]
        steps.append(Step(what=what, changes=changes, candidate=cand))
        prev = keys
    return steps


def plan_from_config(hardware, model, cfg: Mapping[str, Any], where: str, *,
                     micro_batch: int | None = None, grad_accum: int | None = None,
                     checkpointing: bool | None = None, precision: str | None = None,
                     global_batch: int | None = None, simulator: Callable | None = None,
                     jobs: int = 1, **plan_kwargs) -> FromConfig:
    """Yours (the config as it is, batch "auto" filled from --micro-batch/--grad-accum), the
    planner's best made from it (same global batch unless `global_batch`), and the changes
    between them with their effect. Raises ConfigError for a config DeepSpeed refuses."""
    from tierlab.scenario import resolve
    from tierlab.sim.engine import simulate

    cap = plan_kwargs.pop("max_gpu_mem_bytes", None)
    if cap is not None:         # yours and the search see the same capped GPU
        if cap <= 0:
            raise ConfigError(f"--max-gpu-mem must be > 0, got {cap}")
        hardware = replace(hardware, gpu=replace(hardware.gpu,
                                                 hbm_bytes=min(hardware.gpu.hbm_bytes, cap)))
    ckpt = True if checkpointing is None else checkpointing
    sc = resolve(model, hardware, dict(cfg), micro_batch=micro_batch, grad_accum=grad_accum,
                 seq=model.seq_len, precision=precision, checkpointing=ckpt, where=where)
    s = sc.strategy
    base = base_config(cfg, where)
    yours = Variant(placement=placement_of(s), micro_batch=s.train_micro_batch_size_per_gpu,
                    grad_accum=s.gradient_accumulation_steps, checkpointing=ckpt)
    result = plan(hardware, model, global_batch=global_batch or s.train_batch_size,
                  checkpointing=checkpointing, precision=s.precision, simulator=simulator,
                  jobs=jobs, base=base, **plan_kwargs)
    req = Request(hardware=hardware, model=model, precision=s.precision,
                  nvme_path=plan_kwargs.get("nvme_path", "/local_nvme"), base=base,
                  headroom=plan_kwargs.get("headroom"))
    search = Search(req, simulator or simulate, jobs)
    baseline = search.check(yours)
    if baseline.fits:
        baseline = search.simulate([yours])[0]
        if simulator is None:           # yours gets the 80% range the proposal has
            add_ranges(req, [baseline])
    out = FromConfig(where=where, baseline=baseline, plan=result, base=base,
                     notes=list(sc.warnings), hidden=model.hidden)
    for key, given, value in (("train_micro_batch_size_per_gpu", micro_batch,
                               s.train_micro_batch_size_per_gpu),
                              ("gradient_accumulation_steps", grad_accum,
                               s.gradient_accumulation_steps)):
        if given is None and cfg.get(key) in ("auto", None) and cfg.get("train_batch_size") in (
                "auto", None):
            flag = "--micro-batch" if key.startswith("train") else "--grad-accum"
            out.notes.append(f'Your {key} is "auto" (the trainer fills it): yours is simulated '
                             f"with {value}; pass {flag} with your trainer's value.")
    if checkpointing is None:
        out.notes.append("Yours is simulated with activation checkpointing on (tierlab's "
                         "default); pass --no-checkpointing if you train without it.")
    best = result.best
    if best is None:
        return out
    if baseline.fits and baseline.tokens_per_s >= best.tokens_per_s * 0.995:
        out.notes.append("Keep your config: the planner found nothing faster that fits.")
        return out
    out.steps = _steps(search, yours, best.variant)
    return out


# ----------------------------------------------------------------------------------------------
# the proposed file, "auto" kept

def _zero_names() -> dict[str, tuple[str, ...]]:
    """canonical zero key -> every name DeepSpeed reads it by (alias, field name)."""
    from tierlab.dsconfig.schema import load_schema

    fields = load_schema()["models"]["DeepSpeedZeroConfig"]["fields"]
    return {spec.get("alias") or name: tuple({spec.get("alias") or name, name})
            for name, spec in fields.items()}


_LEGACY = {"offload_optimizer": "cpu_offload", "offload_param": "cpu_offload_param"}


def _set(out: dict, base: Mapping, key: str, value: Any) -> None:
    """out[key] = value, through the name the user spelt the key with (an alias stays an
    alias); a deprecated cpu_offload(_param) the change touches becomes its modern block."""
    from tierlab.scenario import set_dotted

    parts = key.split(".")
    if parts[0] == "zero_optimization" and isinstance(out.get("zero_optimization"), dict):
        zero = out["zero_optimization"]
        if len(parts) > 2 and _LEGACY.get(parts[1]) in zero:
            del zero[_LEGACY[parts[1]]]
            zero[parts[1]] = copy.deepcopy(dict(base["zero_optimization"].get(parts[1]) or {}))
        for name in _zero_names().get(parts[1], ()):
            if name in zero:
                parts[1] = name
                break
    set_dotted(out, ".".join(parts), value)


def _get(cfg: Mapping, key: str) -> Any:
    return get_dotted(cfg, key)


def _hf_fill(key: str, hidden: int | None) -> Any:
    """What transformers' trainer_config_finalize fills a bucket-size "auto" with (stage 3 for
    the stage3_* pair, where the proposal has them)."""
    if hidden is None:
        return None
    return {"zero_optimization.reduce_bucket_size": hidden * hidden,
            "zero_optimization.stage3_prefetch_bucket_size": int(0.9 * hidden * hidden),
            "zero_optimization.stage3_param_persistence_threshold": 10 * hidden}.get(key)


def proposed_config(user_cfg: Mapping[str, Any], result: FromConfig) -> tuple[dict, list[str]]:
    """(the user's config with the proposed keys changed, what to pass the trainer). "auto"
    where the user had it stays for the keys the HF integration fills from TrainingArguments
    (the batch: the argument to pass is named) and where the proposal keeps what it fills."""
    out = copy.deepcopy(dict(user_cfg))
    told = []
    for key, old, new in result.changes:
        if key == "activation checkpointing":
            told.append("activation checkpointing " + (
                "on: model.gradient_checkpointing_enable() (HF: --gradient_checkpointing)"
                if new == "on" else "off: drop --gradient_checkpointing"))
            continue
        if key == "train_batch_size" and _get(user_cfg, key) in ("auto", None):
            continue
        if key in TRAINER_ARGS and _get(user_cfg, key) == "auto":
            told.append(f'{key} stays "auto": pass {TRAINER_ARGS[key]} {new}')
            continue
        if _get(result.base, key) == "auto" and new == _hf_fill(key, result.hidden):
            continue        # the HF integration fills "auto" with this very value
        if key == "zero_optimization.overlap_comm" and _get(result.base, key) is None and \
                new == (result.plan.best.variant.placement.stage == 3):
            continue        # DeepSpeed's default follows the stage: True at stage 3 only
        _set(out, result.base, key, new)
    if is_preset(result.where):     # tierlab's own numbers (lr, betas, clipping) are not yours
        out = trainer_native(out, batch=False)
        told.append("the preset's optimizer hyper-parameters, gradient_clipping and fp16/bf16 "
                    'are written "auto": your TrainingArguments fill them')
    return out, told


def is_preset(where: str) -> bool:
    """Whether a config read from `where` is one of tierlab's presets (profiles/configs/)."""
    from tierlab.profiles.load import CONFIGS_DIR

    return Path(where).resolve().parent == CONFIGS_DIR.resolve()


# ----------------------------------------------------------------------------------------------
# text

def _v(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "(absent)"}[value]
    if isinstance(value, int) and abs(value) >= 10_000:
        text = f"{value:.0e}".replace("e+0", "e").replace("e+", "e")
        return text if float(text) == value else f"{value:,}"
    return str(value)


def _outcome(c: Candidate) -> str:
    if not c.fits:
        return f"doesn't fit: {c.over or c.reason}"
    if not c.step_time_s:
        return f"{c.verdict}: {c.reason}"
    step, tok = c.step_time_range_s, c.tokens_per_s_range
    rng = f" ({step[0]:.2f}-{step[1]:.2f})" if step else ""
    tok = f" ({tok[0]:,.0f}-{tok[1]:,.0f})" if tok else ""
    return (f"{c.step_time_s:.3f} s/step{rng}, {c.tokens_per_s:,.0f} tokens/s{tok} "
            f"({c.bottleneck} binds)")


def format_from_config(result: FromConfig) -> str:
    """Yours, the proposal, the changes with their effect, then the planner's table."""

    y, best = result.baseline, result.plan.best
    v = y.variant
    lines = [f"plan from {result.where}: {result.plan.model} on {result.plan.hardware}",
             f"yours:    {v.placement.label}, micro-batch {v.micro_batch}, grad accum "
             f"{v.grad_accum}, checkpointing {'on' if v.checkpointing else 'off'}: {_outcome(y)}"]
    if best is not None and result.steps:
        b = best.variant
        gain = (f" ({best.tokens_per_s / y.tokens_per_s - 1:+.0%} tokens/s)"
                if y.fits and y.tokens_per_s else "")
        lines.append(f"proposed: {b.placement.label}, micro-batch {b.micro_batch}, grad accum "
                     f"{b.grad_accum}, checkpointing {'on' if b.checkpointing else 'off'}: "
                     f"{_outcome(best)}{gain}")
        lines.append("what to change (dotted DeepSpeed keys, yours -> proposed), each group "
                     "applied on top of the ones above:")
        prev = y
        for s in result.steps:
            c = s.candidate
            delta = (f" ({c.tokens_per_s / prev.tokens_per_s - 1:+.0%})" if c.fits and
                     c.tokens_per_s and prev.fits and prev.tokens_per_s else "")
            lines.append(f"  {s.what}: -> {_outcome(c)}{delta}")
            lines += [f"      {k}: {_v(a)} -> {_v(b)}" for k, a, b in s.changes]
            prev = c
    lines += [f"* {n}" for n in result.notes]
    return "\n".join(lines + ["", format_plan(result.plan)])
