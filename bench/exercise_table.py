"""The exercise's table (lab/notes/exercise.md) from the committed runs: each measured figure with
tierlab's prediction beside it, simulated on the stock profile of the host kind the runs ran on.

    .venv/bin/python bench/exercise_table.py [--hardware h200-host] [CASE_FOLDER ...]
    .venv/bin/python bench/exercise_table.py --flagged     # committed runs the loss check flags

Default folders: lab/exercise-h200-a/tinyllama-1.1b and .../llama-3b (written by
`bench/exercise_session.sh` on one H200 at an 8 GiB cap). Prints one markdown table per folder.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("TIERLAB_PROFILES", str(ROOT / "lab" / "profiles"))   # h200-host

from tierlab.profiles.load import load_hardware, load_software          # noqa: E402
from tierlab.records.measurement import (expected_initial_loss, load_measurement,  # noqa: E402
                                         loss_warnings)
from tierlab.validate.compare import measured_metrics, predicted_metrics, scenario_of  # noqa: E402

EXERCISE = ROOT / "lab" / "exercise-h200-a"
FOLDERS = [EXERCISE / "tinyllama-1.1b", EXERCISE / "llama-3b"]
GiB = 2**30
HEAD = ("| variant | measured: status | GPU peak alloc GiB | host RSS GiB | step s | tokens/s | "
        "loss step 0 -> last |\n|---|---|---|---|---|---|---|")


def _pair(measured, predicted, scale=1.0, nd=2) -> str:
    """'measured (predicted)'; '-' where a side has no figure."""
    m = "-" if measured is None else f"{measured / scale:,.{nd}f}"
    p = "-" if predicted is None else f"{predicted / scale:,.{nd}f}"
    return f"{m} ({p})"


def table_row(label: str, m, hardware, software) -> str:
    result = scenario_of(m, hardware, software).simulate()
    pred, meas = predicted_metrics(result), measured_metrics(m)
    verdict = "fits" if result.fits else f"OOM ({result.binding_tier})"
    status = "OOM" if m.failure_kind == "oom" else m.status
    s = m.summary or {}
    if m.status == "ok":
        loss = f"{m.steps[0].loss:.3f} -> {m.steps[-1].loss:.3f} ({len(m.steps)} steps)"
        tok = s.get("tokens_per_s")
        cells = [_pair(meas["gpu_peak_allocated_bytes"], pred["gpu_peak_allocated_bytes"], GiB),
                 _pair(meas["host_rss_bytes"], pred["host_rss_bytes"], GiB, 1),
                 _pair(meas["step_time_s"], pred["step_time_s"], 1.0, 3),
                 _pair(tok, result.tokens_per_s, 1.0, 0), loss]
    else:
        cells = [_pair(None, pred["gpu_peak_allocated_bytes"], GiB),
                 _pair(None, pred["host_rss_bytes"], GiB, 1),
                 _pair(None, pred["step_time_s"], 1.0, 3), _pair(None, result.tokens_per_s, 1.0, 0),
                 "-"]
    return f"| {label} | {status} (predicted: {verdict}) | " + " | ".join(cells) + " |"


def folder_table(folder: Path, hardware, software) -> str:
    rows = json.loads((folder / "compare.json").read_text())       # the variants, in run order
    first = load_measurement(folder / rows[0]["variant"])
    model, run = first.model, first.run
    cap = run.get("gpu_mem_cap_bytes")
    title = (f"{model['name']}, micro-batch {run['micro_batch']}, seq {run['seq']}, "
             f"{run['steps']} steps ({run['warmup_steps']} warm-up dropped); random init: "
             f"step-0 loss expected {expected_initial_loss(model['vocab'], model['hidden']):.2f}")
    lines = [f"{title}", "", HEAD]
    for r in rows:
        m = load_measurement(folder / r["variant"])
        label = r["variant"] + ("" if m.run.get("gpu_mem_cap_bytes") else " (no cap)")
        lines.append(table_row(label, m, hardware, software))
    if cap:
        lines += ["", f"GPU capped at {cap / GiB:.0f} GiB (torch.cuda.set_per_process_memory_"
                      f"fraction) except where marked; measured (predicted on {hardware.name})."]
    return "\n".join(lines)


def flagged(cases: Path = ROOT / "lab" / "cases") -> list[str]:
    """'folder/run: step-0 loss' of every committed record (ranks included) whose own loss
    check warns: the ZeRO-3 runs of tied models made before the init fix."""
    out = []
    for path in sorted(cases.rglob("measurement.json")):
        m = load_measurement(path.parent)
        if loss_warnings(m.model, m.run, m.steps):
            out.append(f"{path.parent.relative_to(cases)}: {m.model.get('name')}, stage "
                       f"{(m.ds_config.get('zero_optimization') or {}).get('stage')}, step-0 "
                       f"loss {m.steps[0].loss:.0f}")
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hardware", default="h200-host")
    ap.add_argument("--flagged", action="store_true",
                    help="list the committed runs whose loss check warns, and stop")
    ap.add_argument("folders", nargs="*", type=Path, default=FOLDERS)
    args = ap.parse_args(argv)
    if args.flagged:
        lines = flagged()
        print("\n".join(lines + [f"{len(lines)} records flagged"]))
        return 0
    hardware, software = load_hardware(args.hardware), load_software()
    print("\n\n".join(folder_table(f, hardware, software) for f in args.folders))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
