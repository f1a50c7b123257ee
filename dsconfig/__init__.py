"""Reading and judging a ds_config.json as DeepSpeed 0.19.8 does: the text (hjson), the keys
(read.py) and the vendored copy of DeepSpeed's config classes (schema.py)."""
