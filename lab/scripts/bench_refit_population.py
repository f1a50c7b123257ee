"""Issue 31, a candidate not adopted: refit the software profile's fitted host terms on a wider
population of machines. The shipped terms were fitted on three lab machines (h200x2-b, -c, -d);
the fresh machines (lab/fresh) run DeepSpeed's hooks faster (docs/calibration.md, "Host-bound
classes against their machine's reference"). Here the fit (tierlab.validate.fit.fit_software,
the same golden-section searches lab/scripts/fit.py runs) also takes fresh machines' reference
runs (their c-* cases), each run on its own machine's calibrated profile, and the machines it
did not take are predicted with the result.

    .venv/bin/python lab/scripts/bench_refit_population.py [--test h100-g,h100-h,...]
    .venv/bin/python lab/scripts/bench_refit_population.py --lomo

--test NAMES: fit on the fit machines plus every other fresh machine, predict NAMES (default: the
six measured after every choice of the software profile, h100-g to -l) and the lab's 16
calibrated machines. --lomo: leave one machine out: each fresh machine predicted by a fit on
the fit machines and the other fresh machines (one fit per machine: about 12 min on 2 cores).
Prints the fitted values against the shipped ones and step / forward MAPE; asserts nothing.
"""
from __future__ import annotations

import argparse
import statistics

from labenv import LAB  # noqa: E402  (sets $TIERLAB_PROFILES to the lab)

import bench_host_scale as scale
import tierlab
from tierlab.profiles.schema import Software
from tierlab.sim.host_costs import default_software
from tierlab.validate.compare import case_key, find_measurements
from tierlab.validate.fit import fit_software, fitted_values

FIT_MACHINES = [str(LAB / "cases" / f"h200x2-{x}") for x in "bcd"]
LAST = "h100-g,h100-h,h100-i,h100-j,h100-k,h100-l"
SHOWN = ("host_dispatch_per_module", "offload_grad_copy_per_param", "zero3_hook_per_module")


def fresh() -> dict[str, tuple[str, str]]:
    """{fresh machine: (its folder, its calibrated profile)}."""
    return {folder.rsplit("/", 1)[-1]: (folder, profile)
            for folder, profile in scale.fresh_machines()}


def refit(train: list[str]) -> Software:
    """The shipped profile refitted on its own training runs plus the c-* runs of the fresh
    machines `train` (each on its folder's calibrated profile)."""
    base = default_software()
    folders = [fresh()[name][0] for name in train]
    keys = [case_key(d) for d in find_measurements(folders)
            if case_key(d).split("/")[1].startswith("c-")]
    return fit_software(FIT_MACHINES + folders, base, train=[*base.train_cases, *keys])


def errors(machines, software: Software, metric: str) -> list[float]:
    out = []
    for folder, profile in machines:
        v = tierlab.validate_runs([folder], hardware=profile, software=software)
        out += [abs(r.error_pct) for r in v.report.rows
                if r.metric == metric and r.error_pct is not None]
    return out


def mape(e: list[float]) -> str:
    return f"{statistics.mean(e):5.2f}% (worst {max(e):4.1f}%, n={len(e)})"


def split(test: list[str]) -> None:
    machines = fresh()
    unknown = sorted(set(test) - set(machines))
    if unknown:
        raise SystemExit(f"error: --test {', '.join(unknown)}: no such folder in {LAB / 'fresh'}")
    train = [m for m in sorted(machines) if m not in test]
    sw, base = refit(train), default_software()
    print(f"refit on the fit machines + {len(train)} fresh machines' c-* runs; predicted: "
          f"{', '.join(test)} and the lab's 16 calibrated machines")
    new, old = fitted_values(sw), fitted_values(base)
    for key in SHOWN:
        print(f"  {key:28s} {new[key]:>10s}  (shipped {old[key]})")
    held = [machines[m] for m in test]
    for label, s in (("shipped", base), ("refit", sw)):
        print(f"{label:8s} held-out fresh step {mape(errors(held, s, 'step_time_s'))}  forward "
              f"{mape(errors(held, s, 'forward_s'))}")
        print(f"{label:8s} lab            step {mape(errors(scale.lab_machines(), s, 'step_time_s'))}")


def lomo() -> None:
    machines, base = fresh(), default_software()
    pooled = {(label, metric): [] for label in ("shipped", "refit")
              for metric in ("step_time_s", "forward_s")}
    for name in sorted(machines):
        sw = refit([m for m in sorted(machines) if m != name])
        row = []
        for label, s in (("shipped", base), ("refit", sw)):
            for metric in ("step_time_s", "forward_s"):
                e = errors([machines[name]], s, metric)
                pooled[label, metric] += e
                if metric == "step_time_s":
                    row.append(f"{statistics.mean(e):5.1f}%")
        print(f"{name:8s} step MAPE shipped {row[0]}, refit without it {row[1]} (hook "
              f"{sw.zero3_hook_s_per_module * 1e3:.3f} ms, grad copy "
              f"{sw.offload_grad_s_per_param * 1e3:.3f} ms)", flush=True)
    for (label, metric), e in pooled.items():
        print(f"pooled {label:8s} {metric:12s} {mape(e)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--test", default=LAST, help="fresh machines to hold out, comma-separated")
    ap.add_argument("--lomo", action="store_true", help="leave each fresh machine out in turn")
    args = ap.parse_args()
    if args.lomo:
        lomo()
    else:
        split(args.test.split(","))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
