"""Advice that pays: `tierlab plan --ds-config` on configs users copy, its proposal measured.

Three steps (the second on the GPU host):

    python lab/scripts/bench_advice.py prepare            # CPU: plan each start, write the proposals
    NAME=h200-j PLAN=lab/advice/cases.yaml ... bash lab/scripts/gpu_paired.sh   # GPU: measure both
    python lab/scripts/bench_advice.py report RUNS_DIR [--profile h200-j]        # the table

`prepare` runs `tierlab plan -c START --max-gpu-mem 8GiB --micro-batch 4 --seq 1024 -H h200-host
--gpus 1 --json --write-config` for each start config and model, keeps the JSON and the proposed
ds_config under lab/advice/, and writes lab/advice/cases.yaml: one `tierlab run` case for the
start and one for the proposal, each on an 8 GiB capped H200 (--gpu-mem-cap 8GiB), in the form
lab/scripts/gpu_validate.py reads.

`report` reads the measured runs (a folder holding <case>/measurement.json) and prints, for each
start/proposal pair: predicted (from the plan, i.e. the stock h200-host profile, and, with
--profile, from the calibration of the machine that ran them) and measured step time, tokens/s,
GPU peak and host RSS, and the measured speedup beside the predicted one. A start that ran out of
memory is reported as such (the plan predicted whether it fits)."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

from labenv import ROOT  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)
ADVICE = ROOT / "lab" / "advice"
CAP = "8GiB"
SEQ = 1024
MICRO_BATCH = 4
HARDWARE = "h200-host"
MODELS = ("tinyllama-1.1b", "llama-3b")
STARTS = {
    # name: (path, origin). Origins with commits: tests/data/ds_configs/ORIGINS.yaml.
    "seed-example": ("profiles/configs/offload-example.json",
                     "the classic ZeRO-Offload example (stage 2, optimizer + params on CPU, fp16)"),
    "llamafactory-z3-offload": ("tests/data/ds_configs/llamafactory_ds_z3_offload.json",
                                "hiyouga/LLaMA-Factory examples/deepspeed/ds_z3_offload_config.json"),
    "axolotl-z3-cpuoffload-all": ("tests/data/ds_configs/axolotl_zero3_bf16_cpuoffload_all.json",
                                  "axolotl-ai-cloud/axolotl deepspeed_configs/"
                                  "zero3_bf16_cpuoffload_all.json"),
    "fastchat-s3": ("tests/data/ds_configs/fastchat_deepspeed_config_s3.json",
                    "lm-sys/FastChat playground/deepspeed_config_s3.json"),
}
SHORT = {"tinyllama-1.1b": "tinyllama", "llama-3b": "3b"}


def pair_name(model: str, start: str) -> str:
    return f"a-{SHORT[model]}-{start}"


def plan_command(model: str, start_path: str, proposed: Path) -> list[str]:
    return [sys.executable, "-m", "tierlab.cli", "plan", "-m", model, "-H", HARDWARE,
            "--gpus", "1", "--seq", str(SEQ), "--micro-batch", str(MICRO_BATCH),
            "--max-gpu-mem", CAP, "-c", start_path, "--json", "-q", "--no-progress",
            "--write-config", str(proposed)]


def prepare(jobs: int) -> int:
    ADVICE.mkdir(parents=True, exist_ok=True)
    cases = []
    for model in MODELS:
        for start, (path, _origin) in STARTS.items():
            name = pair_name(model, start)
            proposed = ADVICE / f"{name}.proposed.json"
            cmd = plan_command(model, path, proposed) + ["-j", str(jobs)]
            print(f"== {name}: tierlab {' '.join(cmd[3:])}", flush=True)
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            if done.returncode not in (0, 1):
                print(done.stderr, file=sys.stderr)
                return done.returncode
            plan = json.loads(done.stdout)
            (ADVICE / f"{name}.plan.json").write_text(json.dumps(plan, indent=1) + "\n")
            yours, best = plan["yours"], plan["plan"]["best"]
            cases.append({"name": f"{name}-start", "model": model, "config": path, "cap": CAP,
                          "seq": SEQ, "micro_batch": yours["micro_batch"],
                          "grad_accum": yours["grad_accum"]})
            if best and plan["changes"]:
                cases.append({"name": f"{name}-proposed", "model": model,
                              "config": str(proposed.relative_to(ROOT)), "cap": CAP, "seq": SEQ,
                              "micro_batch": best["micro_batch"],
                              "grad_accum": best["grad_accum"],
                              **({} if best["activation_checkpointing"] else
                                 {"checkpointing": False})})
            print(f"   yours {_fmt(yours)}\n   proposed {_fmt(best) if best else '-'}")
    text = ("# Written by `python lab/scripts/bench_advice.py prepare`: each start config and the\n"
            "# proposal `tierlab plan --ds-config` made from it, both run with --gpu-mem-cap 8GiB.\n"
            + yaml.safe_dump({"defaults": {"seq": SEQ, "micro_batch": MICRO_BATCH, "steps": 6,
                                           "warmup_steps": 2, "gpus": 1},
                              "cases": cases}, sort_keys=False, width=200))
    (ADVICE / "cases.yaml").write_text(text)
    print(f"{len(cases)} cases -> {(ADVICE / 'cases.yaml').relative_to(ROOT)}")
    return 0


def _fmt(c: dict) -> str:
    if not c.get("fits"):
        return f"{c['placement']}, mb {c['micro_batch']} gas {c['grad_accum']}: doesn't fit ({c['over']})"
    lo, hi = c.get("step_time_range_s") or (None, None)
    rng = f" ({lo:.2f}-{hi:.2f})" if lo else ""
    return (f"{c['placement']}, mb {c['micro_batch']} gas {c['grad_accum']}: "
            f"{c['step_time_s']:.3f} s{rng}, {c['tokens_per_s']:,.0f} tokens/s")


def _measured(run_dir: Path) -> dict | None:
    from tierlab.records.measurement import load_measurement
    from tierlab.validate.compare import measured_metrics

    if not (run_dir / "measurement.json").is_file():
        return None
    m = load_measurement(run_dir)
    out = {"status": m.status, "failure": m.failure_kind, "measurement": m}
    if m.status == "ok":
        out.update(measured_metrics(m))
        out["tokens_per_s"] = (m.summary or {}).get("tokens_per_s")   # the runner's own figure
    return out


def _predicted(measurement, profile: str) -> dict:
    from tierlab.profiles.load import load_hardware
    from tierlab.validate.compare import predicted_metrics, scenario_of

    result = scenario_of(measurement, load_hardware(profile)).simulate()
    out = predicted_metrics(result)
    out["fits"] = result.fits
    out["tokens_per_s"] = result.tokens_per_s
    return out


def _gib(x) -> str:
    return f"{x / 2**30:.2f}" if x else "-"


def report(runs: Path, profile: str | None) -> int:
    cases = yaml.safe_load((ADVICE / "cases.yaml").read_text())["cases"]
    names = sorted({c["name"].rsplit("-", 1)[0] for c in cases}, key=lambda n: [
        c["name"] for c in cases].index(n + "-start"))
    profiles = [("stock", HARDWARE)] + ([("cal", profile)] if profile else [])
    head = (f"{'pair':38s} {'run':8s} {'plan s':>7s} " + " ".join(f"{k + ' s':>7s}" for k, _ in
                                                               profiles)
            + f" {'meas s':>7s} {'meas tok/s':>10s} {'GPU GiB':>7s} {'RSS GiB':>7s}")
    print(f"plan s: `tierlab plan` when the proposal was made (lab/advice/*.plan.json); "
          f"stock s: today's simulator on {HARDWARE}"
          + (f"; cal s: on {profile}, the calibration of the machine that ran them" if profile
             else "") + "\n")
    print(head + "\n" + "-" * len(head))
    summary, fits = [], []
    for name in names:
        plan = json.loads((ADVICE / f"{name}.plan.json").read_text())
        row = {}
        for kind, pred in (("start", plan["yours"]), ("proposed", plan["plan"]["best"])):
            m = _measured(runs / f"{name}-{kind}")
            now = {k: _predicted(m["measurement"], prof) for k, prof in profiles} if m else {}
            row[kind] = (pred, m, now)
            ok = m is not None and m["status"] == "ok"
            meas = ("not run" if m is None else f"{m['step_time_s']:7.3f}" if ok else
                    f"{m['failure'] or m['status']}")
            plan_s = f"{pred['step_time_s']:7.3f}" if pred and pred.get("step_time_s") else (
                "  no fit" if pred else "      -")
            cols = " ".join(f"{now[k]['step_time_s']:7.3f}" if k in now and now[k]["fits"]
                            else "  no fit" if k in now else "      -" for k, _ in profiles)
            print(f"{name:38s} {kind:8s} {plan_s} {cols} {meas:>7s} "
                  f"{(m['tokens_per_s'] if ok else 0):10,.0f} "
                  f"{_gib(m.get('gpu_peak_allocated_bytes')) if ok else '-':>7s} "
                  f"{_gib(m.get('host_rss_bytes')) if ok else '-':>7s}")
            if m is not None and m["status"] != "ok" and m["failure"] == "oom":
                fits.append((name, kind, "oom", bool(now and now["stock"]["fits"])))
            elif ok:
                fits.append((name, kind, "trains", bool(now["stock"]["fits"])))
        (ps, ms, ns), (pp, mp, np_) = row["start"], row["proposed"]
        if ms and mp and ms["status"] == mp["status"] == "ok":
            meas_x = mp["tokens_per_s"] / ms["tokens_per_s"]
            pred_x = {k: np_[k]["tokens_per_s"] / ns[k]["tokens_per_s"] for k, _ in profiles}
            summary.append((name, meas_x, pp["tokens_per_s"] / ps["tokens_per_s"], pred_x))
        elif mp and mp["status"] == "ok" and ms:
            why = ms["failure"] or ms["status"]
            summary.append((name, None, why, {}))
    print("\nspeedup in tokens/s, proposal over start: measured, then predicted (error vs measured)")
    for name, meas_x, plan_x, pred_x in summary:
        if meas_x is None:
            what = ("ran out of memory at the cap" if plan_x == "oom" else
                    f"was not measured ({plan_x}: the device budget ended)")
            print(f"  {name:38s} start {what}; the proposal trains")
            continue
        preds = "  ".join(f"{k} {x:.2f}x ({x / meas_x - 1:+.0%})" for k, x in
                          [("plan", plan_x)] + list(pred_x.items()))
        print(f"  {name:38s} measured {meas_x:.2f}x  {preds}")
    print("\nfit verdicts (today's simulator, stock profile) against what the run did:")
    right = sum(1 for *_, what, fit in fits if fit == (what == "trains"))
    print(f"  {right} of {len(fits)} right; " + "; ".join(
        f"{n}-{k}: {what}, predicted {'fits' if fit else 'does not fit'}"
        for n, k, what, fit in fits if fit != (what == "trains")))
    wins = sum(1 for _, x, _, _ in summary if x and x >= 1.2)
    print(f"\npairs with a measured speedup >= 1.2x: {wins} of {len(summary)}")
    for key, _ in profiles:
        within = [abs(p[key] / x - 1) <= 0.15 for _, x, _, p in summary if x]
        print(f"predicted speedup within 15% of the measured one ({key}): {sum(within)} of "
              f"{len(within)}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("prepare", help="plan each start config; write lab/advice/")
    p.add_argument("-j", "--jobs", type=int, default=2)
    r = sub.add_parser("report", help="the table from the measured runs")
    r.add_argument("runs", type=Path, help="folder holding <case>/measurement.json")
    r.add_argument("--profile", help="the calibrated profile of the machine that ran them")
    args = ap.parse_args()
    if args.verb == "prepare":
        return prepare(args.jobs)
    if not args.runs.is_dir():
        print(f"error: {args.runs}: no such folder", file=sys.stderr)
        return 2
    return report(args.runs, args.profile)


if __name__ == "__main__":
    raise SystemExit(main())
