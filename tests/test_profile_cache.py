"""One parse per profile file per process (issue 32): profiles/load.read_data keeps each parsed
document by (resolved path, inode, mtime_ns, size, finite), hands out copies, and reads an
edited file again. The parser is counted through read_data's `parse` seam."""
from __future__ import annotations

import os
import time

import pytest

from tierlab.errors import ConfigError
from tierlab.profiles.load import (HARDWARE_DIR, SETTLED_NS, clear_document_cache,
                                   load_hardware, read_data)
from tierlab.safeio import read_data as safe_read_data
from tierlab.scenario import resolve


class Counting:
    """safeio.read_data, counting its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, path, *, finite=True):
        self.calls += 1
        return safe_read_data(path, finite=finite)


def _settled(path, age_s: float = 60.0) -> None:
    """Date the file's mtime `age_s` seconds back (older than SETTLED_NS: cacheable)."""
    t = time.time_ns() - int(age_s * 1e9)
    os.utime(path, ns=(t, t))


def _write(path, text: str, age_s: float = 60.0) -> None:
    path.write_text(text)
    _settled(path, age_s)


def test_a_second_read_does_not_parse_again(tmp_path):
    f = tmp_path / "part.yaml"
    _write(f, "kind: gpu\nname: x\nlist: [1, 2, {a: 3}]\n")
    parse = Counting()
    first = read_data(f, parse=parse)
    second = read_data(f, parse=parse)
    assert parse.calls == 1
    assert first == second == {"kind": "gpu", "name": "x", "list": [1, 2, {"a": 3}]}
    assert read_data(tmp_path / "." / "part.yaml", parse=parse) == first      # resolved path
    assert parse.calls == 1


def test_callers_cannot_corrupt_the_cache(tmp_path):
    f = tmp_path / "part.yaml"
    _write(f, "kind: gpu\nnested: {a: [1, 2]}\n")
    parse = Counting()
    got = read_data(f, parse=parse)
    got["kind"] = "edited"
    got["nested"]["a"].append(3)
    again = read_data(f, parse=parse)
    again["nested"]["b"] = 1
    assert read_data(f, parse=parse) == {"kind": "gpu", "nested": {"a": [1, 2]}}
    assert parse.calls == 1


def test_an_edited_file_is_read_again(tmp_path):
    f = tmp_path / "part.yaml"
    _write(f, "value: 1\n", age_s=120)
    parse = Counting()
    assert read_data(f, parse=parse) == {"value": 1}
    _write(f, "value: 2\n", age_s=60)           # same size, newer mtime
    assert read_data(f, parse=parse) == {"value": 2}
    _write(f, "value: 33\n", age_s=60)          # same mtime, new size
    assert read_data(f, parse=parse) == {"value": 33}
    assert parse.calls == 3
    assert read_data(f, parse=parse) == {"value": 33} and parse.calls == 3


def test_a_file_just_written_is_never_cached(tmp_path):
    """Modified within SETTLED_NS: a rewrite in the same timestamp tick could keep mtime and
    size, so each read parses (git's racy-entry rule)."""
    f = tmp_path / "part.yaml"
    _write(f, "value: 1\n", age_s=SETTLED_NS / 1e9 / 4)
    parse = Counting()
    read_data(f, parse=parse)
    f.write_text("value: 2\n")                  # same size, maybe the same mtime
    assert read_data(f, parse=parse) == {"value": 2}
    assert parse.calls == 2


def test_finite_is_part_of_the_key(tmp_path):
    f = tmp_path / "config.json"
    _write(f, '{"a": NaN}')
    parse = Counting()
    assert read_data(f, finite=False, parse=parse)["a"] != 0
    with pytest.raises(ConfigError, match="not a finite number"):   # its own parse, never skipped
        read_data(f, parse=parse)
    assert parse.calls == 2


def test_a_warm_resolve_parses_no_profile_again():
    clear_document_cache()
    resolve("tinyllama-1.1b", "workstation-rtx3070", "zero2-cpu")
    parse = Counting()
    read_data(HARDWARE_DIR / "systems" / "workstation-rtx3070.yaml", parse=parse)
    assert parse.calls == 0
    assert load_hardware("workstation-rtx3070") == resolve(
        "tinyllama-1.1b", "workstation-rtx3070", "zero2-cpu").hardware


# ----------------------------------------------------------------------------------------------
# ds_config files go through the same cache; resolve judges a config once per flags

def test_a_ds_config_file_is_parsed_once_and_reread_when_edited(tmp_path):
    import json

    from tierlab.dsconfig.read import load_ds_config
    from tierlab.profiles.load import cached_document

    f = tmp_path / "mine.json"
    _write(f, json.dumps({"zero_optimization": {"stage": 2}, "train_batch_size": 8}))
    first, where = load_ds_config(str(f))
    first["zero_optimization"]["stage"] = 3                    # the caller's copy only
    assert load_ds_config(str(f))[0]["zero_optimization"]["stage"] == 2 and where == str(f)
    parse = Counting()
    assert cached_document(f, lambda: parse(f), ("ds_config",))["train_batch_size"] == 8
    assert parse.calls == 0                                    # load_ds_config's parse, kept
    _write(f, json.dumps({"zero_optimization": {"stage": 1}, "train_batch_size": 8}), age_s=30)
    assert load_ds_config(str(f))[0]["zero_optimization"]["stage"] == 1


def test_one_file_read_two_ways_is_two_documents(tmp_path):
    from tierlab.profiles.load import cached_document

    f = tmp_path / "c.json"
    _write(f, '{"a": 1}')
    assert cached_document(f, lambda: "as text", ("text",)) == "as text"
    assert read_data(f) == {"a": 1}
    assert cached_document(f, lambda: "other", ("text",)) == "as text"


def test_resolve_judges_a_config_once_per_flags_and_never_keeps_an_error():
    kw = dict(model="tinyllama-1.1b", hardware="workstation-rtx3070", ds_config="zero3-cpu")
    a, b = resolve(**kw, micro_batch=2), resolve(**kw, micro_batch=2)
    assert a.strategy is b.strategy and a.warnings == b.warnings
    c = resolve(**kw, micro_batch=4)
    assert c.strategy.train_micro_batch_size_per_gpu == 4 and c.strategy is not a.strategy
    d = resolve(**kw, micro_batch=2, overrides=["zero_optimization.sub_group_size=1e8"])
    assert d.strategy.zero.sub_group_size == 1e8 != a.strategy.zero.sub_group_size
    for _ in range(2):
        with pytest.raises(ConfigError, match="stage"):
            resolve(**kw, overrides=["zero_optimization.stage=7"])


def test_resolve_hands_back_one_model_per_model_object_and_seq():
    """What is built from a Model by identity (sim/layout.param_layout) is built once for a
    sweep's points, which pass one Model object."""
    from tierlab.profiles.load import load_model

    m = load_model("tinyllama-1.1b")
    a = resolve(m, "workstation-rtx3070", "zero3-cpu", seq=512).model
    b = resolve(m, "dgx-a100", "zero2-cpu", seq=512).model
    c = resolve(m, "workstation-rtx3070", "zero3-cpu", seq=1024).model
    assert a is b and a.seq_len == 512 and c.seq_len == 1024 and c is not a
    assert a == resolve(load_model("tinyllama-1.1b"), "workstation-rtx3070", seq=512).model
