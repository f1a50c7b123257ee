"""A bad `--set` value is named as the flag the user typed, not as the preset or file it was
applied to (issue 34: 'every error names its culprit')."""
import pytest

from _cli import assert_user_error, run


@pytest.mark.parametrize("item, fragment", [
    ("zero_optimization.sub_group_size=abc", "expected a number, got 'abc'"),
    ("zero_optimization.stage=7", "beyond the bound 3"),
    ("optimizer.params.lr=fast", "expected a number, got 'fast'"),
])
def test_a_bad_set_value_names_the_set_item(item, fragment):
    result = run("simulate", "-c", "zero3-cpu", "--set", item)
    assert_user_error(result, f"--set {item}", fragment)
    assert "zero3-cpu.json" not in result.output


def test_a_bad_value_in_the_file_still_names_the_file(tmp_path):
    cfg = tmp_path / "mine.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 9}}')
    assert_user_error(run("simulate", "-c", str(cfg)), str(cfg), "zero_optimization.stage")
