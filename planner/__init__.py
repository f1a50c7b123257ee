"""The planner: the fastest DeepSpeed configuration that fits (search.py), its candidates and
verdicts (variants.py), and the `--ds-config` mode that starts from your config (from_config.py)."""
