"""`tierlab calibrate`: measure this host into a system profile and its part profiles."""
from __future__ import annotations

import sys

import click

from tierlab.commands.examples import epilog
from tierlab.commands.json_stdout import json_only_stdout, keep_json
from tierlab.commands.options import json_option
from tierlab.errors import require
from tierlab.safeio import check_not_input
from tierlab.scenario import DEFAULT_HARDWARE


@click.command(epilog=epilog("calibrate"))
@click.option("--nvme-path", default=None, metavar="DIR",
              help="Directory on the drive to measure with DeepSpeed aio (O_DIRECT); must exist, "
                   "be writable and not be tmpfs. Without it the NVMe part comes from --hardware.")
@click.option("--out", default=None, metavar="FILE",
              help="System profile YAML to write (default: DIR/hardware/systems/NAME.yaml, DIR "
                   "the first folder $TIERLAB_PROFILES names, else ./tierlab-profiles: with "
                   "TIERLAB_PROFILES=DIR every verb finds it by name); the measured GPU/CPU/NVMe "
                   "parts go to gpus/, cpus/, nvme/ beside its systems/ folder, or beside FILE "
                   "when it is not in one.")
@click.option("--name", default=None,
              help="Profile name, also the file stem of the part profiles (default: the --out "
                   "file stem, else calibrated-HOSTNAME).")
@click.option("--hardware", "-H", default=DEFAULT_HARDWARE, show_default=True, metavar="BASE",
              help="Base system profile: what cannot be measured here (network, a GPU on a "
                   "CPU-only host, ...) is copied from it with its original sources.")
@click.option("--quick", is_flag=True,
              help="Few sizes and points, small files, no DeepSpeed host costs (CI, smoke "
                   "checks; 5 min 45 s on a 2-core box without a GPU).")
@click.option("--host-costs", is_flag=True,
              help="Also measure DeepSpeed's host costs (narrow Llama models trained in "
                   "separate processes, 5-8 min on an H200 host). Each measured term replaces "
                   "the software profile's only where calibrate's held-out configurations "
                   "(trained, not fitted on) are predicted better with it; the table at the end "
                   "says which and why.")
@click.option("--raw", default=None, metavar="FILE",
              help="Also write every measured point, with its settings, host facts and library "
                   "versions, as JSON. Rewritten after every benchmark (\"complete\": false "
                   "until the end), so a killed calibration keeps what it measured: rebuild "
                   "with --from-raw.")
@click.option("--skip", default="", metavar="LIST",
              help="Comma-separated benchmarks not to run: gpu, pcie, gemm, layer (real Hugging "
                   "Face decoder layers at each model's width, plain and checkpointed, ~1-2 min), "
                   "nccl, aio, adam, memcpy, dispatch (the hooked module-call time), deepspeed "
                   "(DeepSpeed's host costs on narrow Llama models, 5-8 min; lab/notes/host-costs.md), "
                   "overflow (ZeRO-3's fp16 overflow check over a 512 MiB fp16 host buffer, seconds), "
                   "cast (the fp32 -> bf16 host copy after CPU Adam, 1 GiB of fp32, seconds).")
@click.option("--sweep", multiple=True, metavar="KEY=V1,V2",
              help="Override sweep points, e.g. --sweep aio_block_sizes=1MiB,8MiB --sweep "
                   "aio_queue_depths=32,128 --sweep repeats=2 (sizes take a unit: K/M/G = SI, "
                   "Ki/Mi/Gi = binary; "
                   "repeatable; keys are the fields of runner.microbench.SweepPlan). "
                   "host_processes=N (default 3) measures CPU Adam, the cast and the module call "
                   "in N processes, the profile taking the median (1: this process only).")
@click.option("--from-raw", "from_raw", default=None, metavar="FILE",
              help="Measure nothing: rebuild the profile from a raw record that an earlier "
                   "`calibrate --raw` wrote (on this or another host), with this version's rules.")
@json_option
@click.pass_context
def calibrate(ctx, nvme_path, out, name, hardware, quick, host_costs, raw, skip, sweep, from_raw,
              as_json):
    """Measure this host (PCIe, GEMM, NCCL, aio, CPU Adam, memcpy, module call) into a profile.

    Writes a system profile in the loader's format whose measured numbers say 'measured <date> by
    tierlab calibrate: <settings>', plus the measured part profiles; what it cannot measure is
    taken from --hardware and keeps its source. Benchmarks that need missing hardware are
    skipped and listed, and so is each DeepSpeed host-cost term that measured nothing (not two
    depths, or a difference at or below zero): the software profile's value stays for it.
    --json prints {profile, wrote, summary} (the files written and the summary's lines)."""
    with json_only_stdout(ctx, as_json):     # DeepSpeed's host costs log on stdout
        _calibrate(ctx, nvme_path, out, name, hardware, quick, host_costs, raw, skip, sweep,
                   from_raw, as_json)


def _calibrate(ctx, nvme_path, out, name, hardware, quick, host_costs, raw, skip, sweep,
               from_raw, as_json) -> None:
    from tqdm import tqdm

    from tierlab.runner import calibrate as cal
    from tierlab.runner.calibrate_paths import (calibration_paths, calibration_summary,
                                                default_name, raw_saver, rebuild_from_raw,
                                                refuse_empty, write_calibration)

    refuse_empty(out=out, raw=raw, from_raw=from_raw)
    if from_raw:
        check_not_input(out, (from_raw,), "--out")       # --from-raw r.json --out r.json
        check_not_input(raw, (from_raw,), "--raw")
        result = rebuild_from_raw(from_raw, name, out)
        paths = calibration_paths(out, result.hardware.name, raw)
    else:
        name = default_name(out) if name is None else name
        paths = calibration_paths(out, name, raw)     # refused now, not after measuring
        require("torch", "psutil", what="calibrate (measuring)")
        plan = cal.apply_sweep_overrides(cal.quick_plan(deepspeed=host_costs) if quick else
                                         cal.SweepPlan(deepspeed=host_costs), list(sweep))

        def bar(tasks):
            progress = tqdm(tasks, desc="calibrate", unit="pt", file=sys.stderr, mininterval=0.5)
            for task in progress:
                progress.set_postfix_str(task.label, refresh=False)
                yield task

        result = cal.calibrate(name=name, base=hardware, nvme_path=nvme_path, plan=plan,
                               skip={s.strip() for s in skip.split(",") if s.strip()},
                               progress=bar, save_raw=raw_saver(raw))
    wrote: list[str] = []
    write_calibration(result, paths, raw, wrote=lambda path: wrote.append(str(path)) or (
        None if as_json else click.echo(f"wrote {path}")))
    if as_json:
        import json

        keep_json(ctx, json.dumps({"profile": result.hardware.name, "wrote": wrote,
                                   "summary": list(calibration_summary(result))}, indent=2))
        return
    for line in calibration_summary(result):
        click.echo(line)
