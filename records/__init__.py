"""Records of real runs: the Measurement (full config, versions, host facts, every step) that
the runner writes and the validator reads."""
