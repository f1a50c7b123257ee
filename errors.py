"""The one exception type for user errors: cli.py prints its message on one line and exits 2."""


class ConfigError(ValueError):
    """Bad user input: a missing file, malformed JSON/YAML, an unknown profile, an impossible config.

    The message names the file, key and value, and fits on one line."""
