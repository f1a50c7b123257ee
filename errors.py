"""The one exception type for user errors: cli.py prints its message on one line and exits 2."""


class ConfigError(ValueError):
    """Bad user input: a missing file, malformed JSON/YAML, an unknown profile, an impossible config.

    The message names the file, key and value, and fits on one line."""


class Interrupted(BaseException):
    """SIGINT/SIGTERM turned into an exception so `finally` blocks flush and stop workers;
    cli.py exits 128 + signum (130 for Ctrl-C, 143 for SIGTERM)."""

    def __init__(self, signum: int, partial=None):
        super().__init__(f"signal {signum}")
        self.signum = signum
        self.partial = partial
        """What was done before the signal (a sweep's SweepOutcome so far), or None; a sweep
        sets it on a KeyboardInterrupt too."""


def require(*modules: str, extra: str = "runner", what: str = "this command") -> None:
    """Import each optional dependency now; a missing one is one ConfigError line naming the
    pip extra that installs it (a core install has no torch, deepspeed or psutil)."""
    import importlib

    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ConfigError(f"{what} needs {', '.join(missing)} (not installed): "
                          f"pip install 'tierlab[{extra}]'")
