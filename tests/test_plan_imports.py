"""`tierlab plan` judges every configuration it simulates with the vendored table
(dsconfig/schema.py), never by importing DeepSpeed (~2.5 s of CPU per process, issue 32): the
planner's own variants, and the zero block of a config the user starts from (`--ds-config`),
which `resolve` already judges with the table. Each case runs the CLI in a fresh process, where
DeepSpeed and torch are installed (the runner extra of the test environment), and looks at
sys.modules after it."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tierlab.profiles.load import CONFIGS_DIR

CHECK = ("import sys\n"
         "from tierlab.cli import main\n"
         "code = main(sys.argv[1:], standalone_mode=False)\n"
         "print('IMPORTED', 'deepspeed' in sys.modules, 'torch' in sys.modules, code,"
         " file=sys.stderr)\n")


def _imported(*args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", CHECK, *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    line = [x for x in done.stderr.splitlines() if x.startswith("IMPORTED ")]
    assert line, done.stderr
    return line[-1].split()[1:]


def _user_file(tmp_path) -> str:
    """A config file of the user's (a path, not a preset name), with a zero key "auto"."""
    cfg = json.loads((CONFIGS_DIR / "zero3-cpu.json").read_text())
    cfg["zero_optimization"]["stage3_prefetch_bucket_size"] = "auto"
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(cfg))
    return str(path)


@pytest.mark.parametrize("extra", [(), ("-c", "zero3-cpu"), ("-c", "USER")],
                         ids=["search", "preset", "user-file"])
def test_plan_imports_neither_deepspeed_nor_torch(tmp_path, extra):
    extra = tuple(_user_file(tmp_path) if x == "USER" else x for x in extra)
    deepspeed, torch, code = _imported("plan", "-m", "llama-2-7b", "-H", "dgx-a100",
                                       "--no-progress", "--json", *extra)
    assert (deepspeed, torch) == ("False", "False")
    assert code == "None"            # a plan printed, no ctx.exit(1) or usage error
