"""The range without re-timing every op kind of every end (issue 32, item 2): sim/ranges.py
brackets an end by re-timing only the kinds whose resource reads the input it moves
(resources.READS) and keeps an end's changes for the points that share what times them. The
range must be the one the method gives re-timing everything (`fast=False`), bit for bit, on
every point of the committed grid (tests/data/engine_grid.json) and over a sweep's points."""
from __future__ import annotations

import pytest

from tierlab.scenario import resolve
from tierlab.sim import host_costs, ranges
from tierlab.sim.engine import Timer, run_steps, shape_of
from tierlab.sim.resources import READS
from tierlab.sweeps.run import Base, resolve as resolve_point
from tests.test_engine_grid import GRID, key


def _scenario(p: dict):
    return resolve(p["model"], p["hardware"], p["preset"], overrides=p["sets"],
                   micro_batch=p["micro_batch"], seq=p["seq"], grad_accum=p["grad_accum"],
                   gpus=p["gpus"], nodes=p["nodes"], precision=p["precision"],
                   checkpointing=p["checkpointing"])


def _both(hw, model, strategy, software):
    runs = run_steps(hw, model, strategy, software=software)
    budget = 2 * (1 + (runs.first is not runs.steady))
    args = (hw, model, strategy, runs.software, runs.steady, budget)
    return (ranges.step_range(*args, fast=True), ranges.step_range(*args, fast=True),
            ranges.step_range(*args, fast=False))


@pytest.mark.parametrize("point", GRID, ids=key)
def test_fast_range_is_the_full_one_bit_for_bit(point):
    sc = _scenario(point)
    cold, warm, full = _both(sc.hardware, sc.model, sc.strategy, sc.software)
    assert cold == full          # floats compared exactly (dataclass equality)
    assert warm == full          # the kept changes give the same


@pytest.mark.parametrize("point", GRID[::4], ids=key)
def test_an_input_moves_only_the_ops_of_the_resources_that_read_it(point):
    """What the fast brackets rest on: re-timed with one input at an end, an op kind whose
    resource does not read that input keeps its seconds exactly."""
    sc = _scenario(point)
    hw, sw = sc.hardware, host_costs.software_for(sc.hardware, sc.software)
    shape = shape_of(run_steps(hw, sc.model, sc.strategy, software=sw).steady.workload)
    eff = host_costs.with_host_costs(sw, hw)
    base = [Timer(hw, sc.model, sc.strategy, eff).seconds(op) for op in shape.kinds]
    resources = tuple(dict.fromkeys(op.resource for op in shape.kinds))
    for name, _, lo, hi in ranges.uncertain_inputs(hw, sw):
        readers = ranges._resources_read(resources, name)
        for value in (lo, hi):
            h2, s2 = ranges.perturbed(hw, sw, name, value)
            timer = Timer(h2, sc.model, sc.strategy, host_costs.with_host_costs(s2, h2))
            for op, was in zip(shape.kinds, base):
                if op.resource not in readers:
                    assert timer.seconds(op) == was, (name, op.resource, op.work)


def test_reads_names_parts_of_the_profile():
    parts = {"gpu", "cpu", "pcie", "nvme", "network", "software"}
    for name, paths in READS.items():
        assert paths and all(p.partition(".")[0] in parts for p in paths), name


def test_a_sweeps_points_share_kept_changes_and_keep_their_range():
    """Neighbours of a sweep (CPU Adam rate x drives x presets) answer the full method's range
    whether their ends' changes were kept by an earlier point or not."""
    base = Base(model="tinyllama-1.1b", hardware="workstation-rtx3070", ds_config="zero3-cpu")
    for config in ("no-offload", "zero2-cpu", "zero3-cpu", "zero3-nvme"):
        for drives in (1, 4):
            for adam in (0.5e9, 2e9, 8e9):
                sc = resolve_point(base, {"config": config, "nvme.drives": drives,
                                          "cpu.adam_throughput": adam, "micro_batch": 2})
                _, warm, full = _both(sc.hardware, sc.model, sc.strategy, sc.software)
                assert warm == full, (config, drives, adam)
