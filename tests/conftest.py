"""The tests run in the checkout: the lab's test-machine profiles (lab/profiles) are reached by
name through $TIERLAB_PROFILES, as a user's own profiles are; tests/test_wheel.py runs the
product without it."""
import os
import sys
from pathlib import Path

LAB = Path(__file__).resolve().parents[1] / "lab"

os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ["TIERLAB_PROFILES"] = str(LAB / "profiles")
# the lab's and bench's scripts some tests import as modules (`import bench_repeatability`,
# `import render_docs`), never by file path; the lab's find `labenv` this way too
sys.path.insert(0, str(LAB.parent / "bench"))
sys.path.insert(0, str(LAB / "scripts"))
