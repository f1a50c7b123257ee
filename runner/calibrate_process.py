"""The host-rate benchmarks again, each in a fresh process (`calibrate`'s `host_processes`).

One process's draw of a host rate is not the next one's: on one H100 host (lab/fresh/h100-g,
four calibrations within eight minutes) DeepSpeedCPUAdam at 16 threads ran 5.47-5.80, 4.35-4.39,
5.23-5.32 and 5.43-5.73 G params/s (each the repeats inside one process), and the training
process that follows is one more draw. So `calibrate` measures CPU Adam, the 16-bit cast and the
hooked module call in this process and again in `host_processes - 1` fresh ones, and the profile
takes the median of the processes, with their spread as its range
(runner/calibrate_profile.py `per_process`).

    python -m tierlab.runner.calibrate_process '{"bench": "adam", "n_params": 67108864,
                                                 "threads": [1, 2, 4, 8, 16], "repeats": 2}'

prints one line `POINTS <json list>` (the benchmark's points) and exits 0; the calibrating
process launches it (runner/calibrate.py `in_fresh_process`).
"""
from __future__ import annotations

import json
import sys

BENCHES = ("adam", "cast", "dispatch")


def measure(spec: dict) -> list[dict]:
    """The points of one host-rate benchmark, measured in this process."""
    from tierlab.runner import calibrate

    bench = spec.get("bench")
    if bench == "adam":             # the whole thread sweep: the profile reads its best setting
        return [p for t in spec["threads"]
                for p in calibrate.adam_throughput("deepspeed", int(spec["n_params"]), int(t),
                                                   int(spec["repeats"]))]
    if bench == "cast":
        return calibrate.cast16_time(int(spec["n_params"]), int(spec["repeats"]))
    if bench == "dispatch":
        return calibrate.module_call_time(bool(spec["cuda"]), int(spec["repeats"]))
    raise ValueError(f"bench must be one of {', '.join(BENCHES)}, got {bench!r}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tierlab.runner.calibrate_process '<json spec>'", file=sys.stderr)
        return 2
    try:
        spec = json.loads(args[0])
        points = measure(spec)
    except (ValueError, KeyError, TypeError) as e:
        print(f"calibrate_process: {e}", file=sys.stderr)
        return 2
    from tierlab.runner.calibrate import PROCESS_MARK

    print(PROCESS_MARK + json.dumps(points), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
