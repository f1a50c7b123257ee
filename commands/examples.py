"""The examples each verb's --help ends with (click's epilog), one home for all of them.
tests/test_help_examples.py runs every example that needs no GPU, so they stay true."""
from __future__ import annotations

EXAMPLES: dict[str, tuple[str, ...]] = {
    "simulate": (
        "tierlab simulate                                   # the built-in scenario, every preset",
        "tierlab simulate -m llama-2-7b -H dgx-a100 -c zero3-cpu --micro-batch 4 --seq 2048",
        "tierlab simulate -c zero3-nvme --hw nvme.drives=2 --trace step.json --json",
    ),
    "memory": (
        "tierlab memory -m llama-2-7b -c zero3-cpu --micro-batch 2 --seq 1024",
        "tierlab memory -m tinyllama-1.1b -c no-offload --gpu-mem-cap 8GiB --json",
    ),
    "plan": (
        "tierlab plan -m llama-2-7b -H workstation-rtx3070 --seq 1024 -o ds_config.json",
        "tierlab plan -m llama-2-70b -H dgx-a100 --global-batch 512 --json",
        "tierlab plan -c zero3-cpu -m tinyllama-1.1b --seq 1024   # start from a config (or a file)",
    ),
    "sweep": (
        "tierlab sweep -c zero3-nvme --vary nvme.drives=1,2,4 --out drives.csv --plot drives.png",
        "tierlab sweep --vary micro_batch=1..8 --vary checkpointing=true,false --out mb.csv",
        "tierlab sweep --no-ranges --vary seq=512,1024,2048 --vary micro_batch=1..16:x2 "
        "--out fast.csv   # no 80% range columns: faster",
        "tierlab sweep --list-keys",
    ),
    "plot": (
        "tierlab plot bottleneck --out bottleneck.png",
        "tierlab plot memory -m llama-2-7b -c zero3-nvme --out memory.png",
        "tierlab plot sweep --results drives.csv --out sweep.png",
    ),
    "validate": (
        "tierlab validate --example --out out/validate",
        "tierlab validate runs/ --hardware my-host --out out/validate   # your own runs",
    ),
    "run": (
        "tierlab run -m tinyllama-1.1b -c zero3-cpu --micro-batch 4 --seq 1024 --steps 10 "
        "--gpu-mem-cap 8GiB",
        "tierlab run -m llama-3b -c zero3-nvme --swap-dir /local_nvme/swap --out runs/z3nvme",
    ),
    "compare": (
        "tierlab compare -m tinyllama-1.1b --micro-batch 4 --seq 1024 --gpu-mem-cap 8GiB "
        "--uncapped-baseline",
        "tierlab compare --variants no-offload,zero3-cpu --steps 6 --out runs/cmp",
    ),
    "calibrate": (
        "tierlab calibrate --nvme-path /local_nvme/tierlab-cal --name my-host",
        "tierlab calibrate --host-costs --name my-host      # also DeepSpeed's host costs",
        "tierlab calibrate --from-raw my-host-raw.json --out out/my-host.yaml",
    ),
}
"""verb -> its example command lines (comments after '#' are not run)."""


def epilog(verb: str) -> str:
    """The --help epilog of `verb`: its examples, kept as written (click's \\b)."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in EXAMPLES[verb])
