"""What-if sweeps over hardware, strategy, batch and model keys: the keys (keys.py) and the
parallel, resumable driver (run.py) the CLI and the Python API share."""
