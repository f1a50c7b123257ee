"""What the tests of collected real config.json files share (tests/test_real_inputs.py,
tests/test_real_configs_3.py): a file's recorded verdict held against what tierlab does."""
from __future__ import annotations

from pathlib import Path

from tierlab.errors import ConfigError
from tierlab.profiles.load import load_model


def loaded_as_recorded(path: Path, verdict: str):
    """The Model tierlab loads from `path`, or None where it refuses it: a refusal must be one
    line naming the file and holding the text after `refused: ` in `verdict`; a load must be
    recorded as `counted`."""
    try:
        model = load_model(str(path))
    except ConfigError as e:
        text = str(e)
        assert "\n" not in text and text.startswith(str(path)), text
        assert verdict.startswith("refused: ") and verdict[len("refused: "):] in text, text
        return None
    assert verdict == "counted", (verdict, model.n_params)
    return model
