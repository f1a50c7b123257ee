"""Write profiles/deepspeed/ds_config_schema.json from the installed DeepSpeed (0.19.8): the
table tierlab judges ds_configs with when deepspeed is not installed (dsconfig/schema.py).

    .venv/bin/python bench/vendor_ds_schema.py

tests/test_ds_read.py fails when the file and a fresh dump differ.
"""
import json

from tierlab.safeio import write_text
from tierlab.dsconfig.schema import SCHEMA_PATH, schema_from_deepspeed

if __name__ == "__main__":
    write_text(SCHEMA_PATH, json.dumps(schema_from_deepspeed(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SCHEMA_PATH}")
