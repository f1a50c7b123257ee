"""One parameter layout (sim/layout.py): the workload, the memory planner and preflight read the
same partitions, sub-groups, persistence and residence, so they agree on the bytes of each tier."""
import pytest

from tierlab.runner import preflight as pf
from tierlab.sim.layout import param_layout, swap_file_bytes
from tierlab.sim.memory import plan_memory
from tierlab.sim.memory_host import pinned_bytes
from tierlab.sim.workload import build_workload, bytes_by_resource
from tests._simhelp import scenario

NVME_PARAMS = ("zero_optimization.offload_param.device=nvme",
               "zero_optimization.offload_param.nvme_path=/var/tmp/x")
CASES = {
    "zero2-cpu": ("zero2-cpu", ()),
    "zero3-cpu": ("zero3-cpu", ()),
    "zero3-cpu-no-persistence": ("zero3-cpu",
                                 ("zero_optimization.stage3_param_persistence_threshold=0",)),
    "zero3-cpu-persist-1e7": ("zero3-cpu",
                              ("zero_optimization.stage3_param_persistence_threshold=1e7",)),
    "zero3-nvme-optimizer": ("zero3-nvme", ()),
    "zero3-nvme-both": ("zero3-nvme", NVME_PARAMS),
    "zero3-nvme-both-max-in-cpu-3e8": ("zero3-nvme", NVME_PARAMS + (
        "zero_optimization.offload_param.max_in_cpu=3e8",
        "zero_optimization.offload_param.buffer_size=1.4e8")),
}


@pytest.mark.parametrize("gpus", [None, 2])
@pytest.mark.parametrize("name", sorted(CASES))
def test_workload_memory_and_preflight_agree_per_tier(name, gpus):
    preset, sets = CASES[name]
    hw, m, s = scenario(preset, model="llama-0.5b", sets=sets, gpus=gpus)
    dp, b = hw.world_size, s.bytes_per_param
    lay = param_layout(m, s, dp)
    plan = plan_memory(hw, m, s)
    wl = build_workload(hw, m, s)
    ranks = hw.gpus_per_node

    # partitions and sub-groups: the workload's optimizer walks the layout's sub-groups
    assert wl.sub_groups == tuple(float(sum(g)) for g in lay.groups)
    assert sum(wl.sub_groups) == lay.partition_numel
    assert pf.params_per_rank(m, s) == lay.partition_numel
    assert wl.nvme_param_fraction == lay.nvme_param_fraction

    # GPU: what persists (never fetched) is what the planner keeps resident
    fetched = sum(mod.fetch_numel for mod in lay.modules)
    if s.zero.stage == 3:
        assert plan.tiers["gpu"].breakdown.get("persistent_params", 0.0) == \
            b * lay.persistent_numel
        tied = m.vocab * m.hidden if m.tie_embeddings else 0     # the head gathers the embedding
        assert fetched - tied + lay.persistent_numel == m.n_params

    # CPU: the 16-bit flat buffer the planner pins is the layout's; the workload's param H2D
    # reads from it (and NVMe) one partition per fetched module use
    if s.param_device != "none":
        assert plan.tiers["host"].breakdown["pinned:params_16bit"] == \
            ranks * pinned_bytes(b * lay.cpu_flat_numel)

    # NVMe: the planner's swap files (per node) = preflight's per rank x ranks = the layout's
    files = swap_file_bytes(lay, s)
    nvme = plan.tiers["nvme"]
    assert nvme.used_bytes == pytest.approx(ranks * sum(files.values()), rel=1e-12)
    assert pf.swap_bytes_needed(m, s) == pytest.approx(sum(files.values()), rel=1e-12)
    for item, nbytes in files.items():
        assert nvme.breakdown[item] == pytest.approx(ranks * nbytes)
    # ... and the workload reads/writes what those files hold: p, m, v, g in, p, m, v, g out
    # (16 B per element; the files are io-aligned, 1 KiB x intra_op_parallelism per file), plus
    # the 16-bit params of the sub-groups past max_in_cpu written back after the step
    moved = bytes_by_resource(wl.ops)
    if s.optimizer_device == "nvme":
        opt_files = files["optimizer_p_m_v_fp32"] + files["grads_fp32"]
        assert moved["nvme_read"] - _param_reads(wl) == pytest.approx(opt_files, rel=1e-4)
        on_nvme = sum(sum(g) for g, n in zip(lay.groups, lay.on_nvme) if n)
        assert moved["nvme_write"] == pytest.approx(opt_files + b * on_nvme, rel=1e-4)
    else:
        assert "nvme_read" not in moved and not files


def _param_reads(wl) -> float:
    return sum(op.nbytes for op in wl.ops if op.resource == "nvme_read" and op.pool == "param")


def test_half_billion_nvme_params_example():
    """issue 13's example: Llama-0.5B, zero3-nvme with the parameters on NVMe too. The memory plan
    said 7.91 GB of NVMe (16-bit params only past max_in_cpu: none here), preflight 8.88 GB (every
    swappable partition). DeepSpeed 0.19.8 sides with preflight: zero.Init writes every partition
    of >= 1 MiB to its swap file (partition_parameters.py `_partition_param`,
    `swap_out_and_release`) and `_move_to_flat_buffer` reads the ones under max_in_cpu back into
    the CPU flat buffer without removing the file. Both now say 8.88 GB."""
    hw, m, s = scenario("zero3-nvme", model="llama-0.5b", sets=NVME_PARAMS,
                        micro_batch=1, seq=2048)
    plan = plan_memory(hw, m, s)
    assert plan.tiers["nvme"].used_bytes == pytest.approx(8.881e9, rel=1e-4)
    assert pf.swap_bytes_needed(m, s) == pytest.approx(8.881e9, rel=1e-4)
    assert plan.tiers["nvme"].breakdown["params_16bit"] == pytest.approx(0.977e9, rel=1e-3)
    # in training nothing is read from there: the whole partition fits max_in_cpu (1e9)
    lay = param_layout(m, s, 1)
    assert lay.nvme_param_fraction == 0.0 and not pf.nvme_param_tensors(m, s)
    assert build_workload(hw, m, s).nvme_param_fraction == 0.0


def test_persistence_threshold_is_inclusive():
    """parameter_offload.py mark_persistent_parameters: `param.ds_numel <= param_threshold`."""
    hw, m, s = scenario("zero3-cpu", model="llama-0.5b",
                        sets=(f"zero_optimization.stage3_param_persistence_threshold={896}",))
    lay = param_layout(m, s, 1)
    norms = sum(n for n in lay.numels if n == m.hidden)
    assert norms and lay.persistent_numel >= norms


def test_stage3_partitions_pad_to_the_world_size():
    """partition_parameters.py _aligned_size: a tensor of n elements is padded to a multiple of dp,
    each rank holds ceil(n / dp) of it."""
    hw, m, s = scenario("zero3-cpu", model="llama-0.5b", gpus=2)
    odd = [n for n in param_layout(m, s, 1).numels if n % 3]
    lay3 = param_layout(m, s, 3)
    assert odd and lay3.partition_numel == sum(-(-n // 3) for n in lay3.numels)


def test_a_cached_layout_is_the_one_its_strategy_builds():
    """param_layout keys its cache by what the layout reads (sim/layout.layout_key), not by the
    strategy object: asked in any order over strategies that differ in stage, sub-groups,
    persistence, parameter offload, dtype, micro-batch (a MoE model's experts hit) and in keys no
    layout reads, for one model object each, every answer equals a fresh build."""
    from dataclasses import replace

    from tierlab.profiles.load import load_model
    from tierlab.sim.layout import _build_layout

    # 2 or 8 tokens: Mixtral's tokens reach 4 or 7 of its 8 experts (all 8 at 1024)
    models = (load_model("tinyllama-1.1b"),
              replace(load_model("tests/data/hf_configs/mixtral-8x7b.json"), seq_len=2))
    asks = []
    for preset in ("zero2-cpu", "zero3-cpu", "zero3-nvme"):
        for sets in ((), ("zero_optimization.sub_group_size=1e8",),
                     ("zero_optimization.stage3_param_persistence_threshold=1e7",),
                     ("zero_optimization.offload_param.max_in_cpu=1e8",),
                     ("zero_optimization.reduce_bucket_size=1e6",)):
            for mb, precision in ((1, "bf16"), (4, "bf16"), (4, "fp32")):
                for model in models:
                    _, m, s = scenario(preset, model=model, micro_batch=mb, seq=None, sets=sets,
                                       precision=precision)
                    assert m is model
                    asks.append((m, s))
    for m, s in asks + asks[::-1]:
        assert param_layout(m, s, 8) == _build_layout(m, s, 8)
