import os

os.environ.setdefault("DS_ACCELERATOR", "cpu")
