"""The product as users get it: the wheel, installed without torch into a fresh virtualenv and
run from an empty directory, runs every verb that needs no GPU; the verbs that train or measure
name the extra to install (exit 2). And no simulation verb imports torch or DeepSpeed where they
are installed.

The wheel is built from this checkout (`pip wheel --no-deps`); the virtualenv's dependencies (the
core `install_requires`, from the package index) are cached in ~/.cache/tierlab-tests, keyed by
that list and the Python version, so a warm run reinstalls only the wheel (a few seconds)."""
from __future__ import annotations

import configparser
import hashlib
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tierlab-tests"
EXTRA = "pip install 'tierlab[runner]'"


def _core_requirements() -> list[str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return cfg["options"]["install_requires"].split()


def _pip(python: Path, *args: str) -> None:
    done = subprocess.run([str(python), "-m", "pip", "-q", "--disable-pip-version-check", *args],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def _core_venv() -> Path:
    """A virtualenv with the core dependencies only (no torch, no DeepSpeed), cached."""
    reqs = _core_requirements()
    key = hashlib.sha256(json.dumps([sys.version, reqs]).encode()).hexdigest()[:12]
    home = CACHE / f"core-venv-{key}"
    python = home / "bin" / "python"
    if not (home / ".complete").exists():
        shutil.rmtree(home, ignore_errors=True)
        venv.create(home, with_pip=True)
        _pip(python, "install", *reqs)
        (home / ".complete").touch()
    return home


@pytest.fixture(scope="module")
def core(tmp_path_factory) -> dict:
    """The built wheel installed into the core virtualenv: {'bin': its bin/, 'cwd': an empty
    directory outside the checkout, 'env': an environment that does not see the checkout}."""
    wheels = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                           "--no-build-isolation", "-w", str(wheels), str(ROOT)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    [wheel] = wheels.glob("tierlab-*.whl")
    home = _core_venv()
    _pip(home / "bin" / "python", "install", "--no-deps", "--force-reinstall", str(wheel))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "VIRTUAL_ENV", "TIERLAB_"))}
    env["PATH"] = f"{home / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return {"bin": home / "bin", "cwd": tmp_path_factory.mktemp("empty"), "env": env}


def tierlab(core: dict, *args: str, code: int = 0) -> str:
    done = subprocess.run([str(core["bin"] / "tierlab"), *args], cwd=core["cwd"], env=core["env"],
                          capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == code, f"tierlab {' '.join(args)} -> {done.returncode}:\n{out[-3000:]}"
    assert "Traceback" not in out, out
    return out


def test_the_core_venv_has_no_torch_and_the_wheel_is_what_runs(core):
    probe = ("import importlib.util as u, tierlab; "
             "print(u.find_spec('torch') is None, u.find_spec('deepspeed') is None, tierlab.__file__)")
    done = subprocess.run([str(core["bin"] / "python"), "-c", probe], cwd=core["cwd"],
                          env=core["env"], capture_output=True, text=True)
    no_torch, no_ds, where = done.stdout.split()
    assert no_torch == no_ds == "True"
    assert "site-packages" in where and str(ROOT) not in where


def test_the_wheel_ships_no_lab_data(core):
    site = next((core["bin"].parent / "lib").glob("python*/site-packages/tierlab"))
    assert not (site / "validate" / "cases").exists()
    shipped = {p.stem for p in (site / "profiles" / "hardware" / "systems").glob("*.yaml")}
    assert "workstation-rtx3070" in shipped and not any(s.startswith("h200x") for s in shipped)
    assert not any("median_of" in p.read_text() for p in site.rglob("*.yaml"))


def test_simulate_and_memory(core):
    out = tierlab(core, "simulate")
    assert "TinyLlama-1.1B on workstation-rtx3070, micro-batch 4, seq 1024" in out
    rows = [line.split()[0] for line in out.splitlines()[2:] if not line.startswith("inputs:")]
    assert out.splitlines()[-1].startswith("inputs: ")     # where each input came from
    assert rows == ["no-offload", "zero2-cpu", "zero3-cpu", "zero3-nvme"]
    assert "NO (gpu)" in out and out.count(" yes") == 3
    out = tierlab(core, "memory", "-m", "llama-2-70b", "-H", "dgx-a100", "-c", "zero3-cpu",
                  "--micro-batch", "1", "--seq", "4096")
    assert "16 B/param" in out and "verdict: fits" in out


def test_plan_writes_a_config_and_gives_a_verdict(core):
    out = tierlab(core, "plan", "-m", "llama-2-7b", "-H", "workstation-rtx3070", "--seq", "1024",
                  "-o", "ds_config.json")
    assert "plan: Llama-2-7B on workstation-rtx3070" in out and "Nothing fits" not in out
    cfg = json.loads((core["cwd"] / "ds_config.json").read_text())
    assert cfg["zero_optimization"]["stage"] in (2, 3)


def test_sweep_and_plots(core):
    out = tierlab(core, "sweep", "-c", "zero3-nvme", "--micro-batch", "4", "--seq", "1024",
                  "--vary", "nvme.drives=1..4:x2", "--out", "drives.csv")
    assert "3 rows -> drives.csv: 3 computed, 0 already there, 0 with an error" in out
    tierlab(core, "plot", "sweep", "--results", "drives.csv", "--x", "nvme.drives",
            "-o", "drives.png")
    tierlab(core, "plot", "bottleneck", "-o", "bottleneck.png")
    for name in ("drives.png", "bottleneck.png"):
        assert (core["cwd"] / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_preflight_without_probing_judges_the_profile(core):
    out = tierlab(core, "preflight", "-m", "llama-2-7b", "-H", "workstation-rtx3070", "-c",
                  "zero3-cpu", "--seq", "1024", "--no-probe", code=2)
    assert "error: [memory] host needs" in out
    out = tierlab(core, "preflight", "-H", "workstation-rtx3070", "-c", "zero2-cpu", "--seq",
                  "1024", "--no-probe")
    assert "ok:" in out


def test_profiles_and_validate_on_the_shipped_example(core):
    out = tierlab(core, "profiles")
    assert "workstation-rtx3070" in out and "tinyllama-1.1b" in out and "h200x2-e" not in out
    out = tierlab(core, "validate", "--example", "--out", "val")
    assert "example/c-tinyllama-z2cpu-bd" in out and "example/c-tinyllama-z3cpu-bd" in out
    assert "oom                        2 runs, mismatches: none" in out
    assert {p.name for p in (core["cwd"] / "val").iterdir()} >= {"validate.csv", "scatter.png"}


@pytest.mark.parametrize("args", [
    ["run", "-c", "zero2-cpu", "--out", "r"], ["compare"], ["calibrate", "--name", "x"],
    ["preflight", "-c", "zero2-cpu"]])
def test_verbs_that_train_or_measure_name_the_extra(core, args):
    out = tierlab(core, *args, code=2)
    assert out.strip().count("\n") == 0 and out.startswith("error: ") and EXTRA in out, out
    assert not (core["cwd"] / "r").exists()


@pytest.mark.parametrize("args", [
    ["simulate"], ["memory"], ["plan", "-m", "llama-2-7b", "-H", "workstation-rtx3070",
                               "--seq", "1024"],
    ["sweep", "--vary", "nvme.drives=1..2"], ["preflight", "--no-probe"], ["profiles"]])
def test_no_simulation_verb_imports_torch_or_deepspeed_where_installed(args):
    """In the full environment (torch and DeepSpeed importable) as well."""
    script = ("import sys\nfrom tierlab.cli import main\n"
              "try:\n    main(sys.argv[1:], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
              "print('LOADED', sorted(m for m in ('torch', 'deepspeed', 'transformers') "
              "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          timeout=600)
    assert "LOADED []" in done.stdout, done.stdout[-1500:] + done.stderr[-1500:]
