"""Where the lab is, for the lab's scripts (run as `python lab/scripts/NAME.py` from a checkout
with tierlab installed): importing this makes the test machines' profiles (lab/profiles) load
by name, through $TIERLAB_PROFILES as a user's own profiles do."""
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository root (the package `tierlab`)."""
LAB = ROOT / "lab"
CASES = LAB / "cases"
"""The measured runs, one folder per machine, each with a validate.yaml naming its profile."""

os.environ.setdefault("TIERLAB_PROFILES", str(LAB / "profiles"))
