"""One home per fact (issue 28 item 3): the field table (hardware YAML key, field, dimension;
software term, field, host cost or fitted) and the host-cost term list live in profiles/fields.py,
the swap-buffer rule in sim/layout.py; every user reads them and agrees with them."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from tierlab.profiles import fields as table
from tierlab.profiles import schema
from tierlab.profiles.load import load_hardware, load_part, load_software
from tierlab.units import parse_quantity

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / "profiles" / "fields.py"


def _package_files():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in ("tests", "bench", "lab", "build", "docs") or rel.parts[0].startswith("."):
            continue
        yield path


def _literal_lists(path: Path):
    """(line, {string elements}) of every literal tuple, list, set and dict (its keys) in `path`."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None]
        else:
            continue
        strings = {e.value for e in items if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        if strings:
            yield node.lineno, strings


def _lists_of(names: set[str], at_least: int = 3) -> list[str]:
    """Where outside profiles/fields.py a literal collection names `at_least` of `names`."""
    out = []
    for path in _package_files():
        rel = str(path.relative_to(ROOT))
        if path == HOME:
            continue
        out += [f"{rel}:{line}: {sorted(strings & names)}"
                for line, strings in _literal_lists(path) if len(strings & names) >= at_least]
    return out


def test_software_terms_are_listed_once():
    keys = {t.key for t in table.SOFTWARE_TERMS}
    names = keys | {t.field for t in table.SOFTWARE_TERMS}
    assert not _lists_of(names), "\n".join(_lists_of(names))


def test_hardware_keys_are_listed_once():
    # the system file's own keys (dram, nodes, ...) are also the writer's document order; the
    # parts' keys and fields are the table's alone
    names = {x for f in table.HARDWARE_FIELDS if f.part != "system" for x in (f.key, f.field)}
    assert not _lists_of(names), "\n".join(_lists_of(names))


def test_table_names_real_fields():
    classes = {"gpu": schema.GPU, "cpu": schema.CPU, "nvme": schema.NVMe, "pcie": schema.PCIe,
               "network": schema.Network, "system": schema.Hardware}
    for f in table.HARDWARE_FIELDS:
        names = {x.name for x in dataclasses.fields(classes[f.part])}
        assert f.field.split(".")[0] in names, f
        assert f.part in table.FOLDERS
    software = {x.name for x in dataclasses.fields(schema.Software)}
    assert {t.field for t in table.SOFTWARE_TERMS} <= software
    assert len({t.key for t in table.SOFTWARE_TERMS}) == len(table.SOFTWARE_TERMS)
    assert schema.HOST_COST_FIELDS is table.HOST_COST_FIELDS
    assert schema.PEAK_FLOPS_DTYPES is table.PEAK_FLOPS_DTYPES


def test_loader_reads_the_table():
    hw = load_hardware("dgx-a100")
    for f in table.HARDWARE_FIELDS:
        obj = hw
        for attr in f.path:
            obj = obj[attr] if isinstance(obj, dict) else getattr(obj, attr)
        assert obj is not None or not f.required, f
        owner = hw if f.part == "system" else getattr(hw, f.part)
        if f.dimension != "count" and f.required:
            assert f.field in owner.sources, f          # read under the table's field name
    sw = load_software()
    for t in table.SOFTWARE_TERMS:
        if t.required:
            assert t.field in sw.sources, t


def test_host_costs_read_and_written_by_the_table(tmp_path):
    import yaml

    from tierlab.profiles.load import HARDWARE_DIR

    data = yaml.safe_load((HARDWARE_DIR / "cpus" / "2x-epyc-7763.yaml").read_text())
    data["deepspeed_host_costs"] = {t.key: {"value": "0.25 ms", "source": "test"}
                                    for t in table.SOFTWARE_TERMS if t.host_cost}
    path = tmp_path / "cpu.yaml"
    path.write_text(yaml.safe_dump(data))
    cpu = load_part("cpus", str(path))
    assert cpu.host_costs == {f: pytest.approx(0.25e-3) for f in table.HOST_COST_FIELDS}
    assert set(table.HOST_COST_FIELDS) == {t.field for t in table.SOFTWARE_TERMS
                                           if t.host_cost}
    not_costs = {t.field for t in table.SOFTWARE_TERMS if not t.host_cost}
    assert not_costs == {"first_step_fixed_s", "first_touch_Bps", "process_baseline_bytes",
                         "multi_rank_sync_s", "fit_adam_params_per_s", "host_speed_share",
                         "checkpoint_carried_s_per_block"}     # a share of the fitted dispatch


def test_sweep_keys_agree_with_the_table():
    from tierlab.sweeps.keys import HARDWARE_KEYS

    rows = {f.sweep_key: f for f in table.HARDWARE_FIELDS if f.sweep_key}
    assert set(HARDWARE_KEYS) == set(rows)
    for key, (path, dim, typ) in HARDWARE_KEYS.items():
        assert (path, dim) == (rows[key].path, rows[key].dimension)
        assert typ is (int if dim == "count" else float)
    assert "pcie.h2d_pinned" in HARDWARE_KEYS and "nvme.drives" in HARDWARE_KEYS


def test_spread_and_fit_agree_with_the_table():
    from tierlab.validate import fit, spread

    assert spread.FITTED == {t.key: t.field for t in table.FITTED_TERMS}
    for (part, field), (folder, key, dim) in spread.KIND_FIELDS.items():
        row = table.hardware_field(part, field)
        assert (folder, key, dim) == (table.FOLDERS[part], row.key, row.dimension)
    sw = load_software()
    values = fit.fitted_values(sw)
    assert list(values) == [t.key for t in table.FITTED_TERMS]
    for t in table.FITTED_TERMS:            # what the fit writes reads back as the value
        assert parse_quantity(values[t.key], t.dimension, t.key) == \
            pytest.approx(getattr(sw, t.field), rel=5e-3, abs=1e-9)


# ----------------------------------------------------------------------------------------------
# the swap-buffer rule

def test_swap_buffer_rule_is_written_once():
    """The optimizer swap buffer (io-aligned largest sub-group) and the parameter swap buffer
    (io-aligned buffer_size) are sized in sim/layout.py only."""
    found = []
    for path in _package_files():
        text = path.read_text(encoding="utf-8")
        for needle in ("io_aligned_numel(max(sum(g)", "io_aligned_numel(op.buffer_size",
                       "io_aligned_numel(\n            op.buffer_size",
                       "int(pipeline_read) + int(pipeline_write)", "4 * (1 + read + write)",
                       "largest_matrix_numel(model) // ", "largest_matrix_numel(req.model)"):
            if needle in text:
                found.append(f"{path.relative_to(ROOT)}: {needle}")
    assert sorted({f.split(":")[0] for f in found}) == ["sim/layout.py"], found


def test_swap_buffer_users_agree():
    from tests._simhelp import scenario
    from tierlab.runner import preflight
    from tierlab.sim.grad_swap import grad_swapper
    from tierlab.sim.layout import (optimizer_buffers_needed, optimizer_swap_buffers,
                                    param_layout, param_swap_buffers)
    from tierlab.sim.memory_host import host_breakdown

    sets = ("zero_optimization.offload_param.device=nvme",
            "zero_optimization.offload_param.nvme_path=/var/tmp/x",
            "zero_optimization.offload_optimizer.buffer_count=12",
            "zero_optimization.offload_optimizer.pipeline_read=true",
            "zero_optimization.offload_optimizer.pipeline_write=true")
    hw, m, s = scenario("zero3-nvme", model="llama-0.5b", sets=sets, micro_batch=1, seq=2048)
    lay = param_layout(m, s, s.data_parallel_size)
    opt, par = optimizer_swap_buffers(lay.groups, s), param_swap_buffers(s)
    assert opt.count == 12 and opt.elem_bytes == 4 and opt.numel >= max(sum(g) for g in lay.groups)
    assert par.count == s.zero.offload_param.buffer_count and par.numel >= \
        s.zero.offload_param.buffer_size
    host = host_breakdown(hw, m, s)
    assert host["pinned:optimizer_swap_buffers"] == opt.nbytes
    assert host["pinned:param_swap_buffers"] == par.nbytes
    swapper = grad_swapper(lay, s).swapper
    assert (swapper.buffer_numel, swapper.buffers) == (opt.numel, opt.count)
    assert preflight.optimizer_buffers_needed(m, s) == \
        optimizer_buffers_needed(s, len(lay.groups)) == 12
    assert optimizer_buffers_needed(s, 1) == 4


def test_range_classes_are_columns_of_the_field_table():
    """No default range for counts and capacities; module call, CUDA context, process baseline
    and step-1 terms stay out of the steady step (the module call is a recorded fact; the host's
    speed enters through its measured CPU Adam rate, sim/host_costs.host_speed_factor): both read off the table's
    columns."""
    assert table.EXACT_FIELDS == {"hbm_bytes", "dram_bytes", "capacity_bytes", "sockets", "cores",
                                  "gpus_per_node", "nvme_drives", "nodes", "gpus_per_switch",
                                  "nvme_per_switch"}
    assert table.NOT_STEADY == {"module_call_s", "adam_one_thread_params_per_s",
                                "cuda_context_bytes", "process_baseline_bytes",
                                "first_step_fixed_s", "first_touch_Bps"}


def test_calibrates_writer_spells_no_hardware_key():
    """runner/calibrate_profile.py writes hardware YAML through the field table's keys
    (yaml_key), not keys of its own: none of the table's keys is a string literal there, beyond
    the raw record's own keys (facts, results) and the names the table lookups take."""
    import ast

    keys = {f.key.split(".")[0] for f in table.HARDWARE_FIELDS}
    fields = {f.field for f in table.HARDWARE_FIELDS}
    tree = ast.parse((ROOT / "runner" / "calibrate_profile.py").read_text(encoding="utf-8"))
    lookups = {id(a) for n in ast.walk(tree) if isinstance(n, ast.Call)
               and getattr(n.func, "id", "") == "yaml_key" for a in ast.walk(n)}
    records = ("facts", "results")             # the raw record's own keys, not profile keys
    facts = {id(n.slice) for n in ast.walk(tree) if isinstance(n, ast.Subscript)
             and getattr(n.value, "id", "") in records}
    facts |= {id(a) for n in ast.walk(tree) if isinstance(n, ast.Call)
              and getattr(n.func, "attr", "") == "get"
              and getattr(n.func.value, "id", "") in records for a in n.args}
    spelled = sorted((n.lineno, n.value) for n in ast.walk(tree)
                     if isinstance(n, ast.Constant) and n.value in keys - fields
                     and id(n) not in lookups | facts)
    assert not spelled, spelled
