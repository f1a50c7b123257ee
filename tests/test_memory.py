"""sim/memory.py: the classic arithmetic, tier placement, fits, and DeepSpeed's own estimators."""
import json

import pytest
from click.testing import CliRunner

from tests import _simhelp as simhelp
from tierlab.cli import main
from tierlab.sim.memory import gpu_moments, pinned_bytes, plan_memory
from tierlab.sim.layout import param_layout


def scenario(config, model="tinyllama-1.1b", hardware="workstation-rtx3070", mb=4, seq=1024,
             sets=(), gpus=None, nodes=None, ckpt=True):
    """(hardware, model, strategy) through the one resolver, in bf16."""
    return simhelp.scenario(config, model=model, hardware=hardware, micro_batch=mb, seq=seq,
                            sets=sets, gpus=gpus, nodes=nodes, precision="bf16",
                            checkpointing=ckpt)


def test_70b_model_states_are_16_bytes_per_param():
    out = CliRunner().invoke(main, ["memory", "--model", "llama-2-70b", "--json"])
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    ms = d["model_states_GiB"]
    n = d["n_params"] / 2**30        # GiB per byte per parameter
    assert d["bytes_per_param"] == 16
    assert ms["params_16bit"] == ms["grads_16bit"] == pytest.approx(2 * n)
    assert ms["adam_m"] + ms["adam_v"] == pytest.approx(8 * n)
    assert ms["master_fp32"] == pytest.approx(4 * n)
    # 69 B x (2 + 2 + 8) = 828 GB without master weights; x 16 = 1.10 TB (1,025 GiB) with them
    assert ms["total"] - ms["master_fp32"] == pytest.approx(12 * n)
    assert ms["total"] == pytest.approx(1.10e12 / 2**30, rel=0.01)


def test_tinyllama_no_offload_does_not_fit_an_8gb_card():
    plan = plan_memory(*scenario("no-offload"))
    assert not plan.fits and plan.binding_tier == "gpu"
    assert not plan.tiers["gpu"].fits
    assert plan.tiers["gpu"].breakdown["optimizer_states"] == pytest.approx(16 * 1_100_048_384)


@pytest.mark.parametrize("config,where", [
    ("zero2-cpu", {"host": "pageable:adam_m_v", "gpu": "params"}),
    ("zero3-cpu", {"host": "pinned:params_16bit", "gpu": "gathered_params"}),
    ("zero3-nvme", {"nvme": "optimizer_p_m_v_fp32", "host": "pinned:optimizer_swap_buffers"}),
])
def test_offload_presets_place_bytes(config, where):
    plan = plan_memory(*scenario(config))
    assert plan.fits, plan.to_dict()
    for tier, item in where.items():
        assert plan.tiers[tier].breakdown[item] > 0
    assert plan.tiers["gpu"].used_bytes < 8 * 2**30


def test_nvme_bytes_are_16_per_param_and_max_in_cpu():
    hw, m, s = scenario("zero3-nvme")
    plan = plan_memory(hw, m, s)
    assert plan.tiers["nvme"].used_bytes == pytest.approx(16 * m.n_params)
    hw, m, s = scenario("zero3-nvme", sets=["zero_optimization.offload_param.device=nvme",
                                             "zero_optimization.offload_param.nvme_path=/x",
                                             "zero_optimization.offload_param.max_in_cpu=1e8"])
    plan = plan_memory(hw, m, s)
    # zero.Init writes every partition of >= 1 MiB to NVMe and nothing removes the files, so the
    # swap files hold all of them, max_in_cpu or not (partition_parameters.py _partition_param;
    # sim/layout.py swap_file_bytes); TinyLlama's norms (2048 elements each) are never swapped
    norms = (2 * m.n_layers + 1) * m.hidden
    assert plan.tiers["nvme"].breakdown["params_16bit"] == pytest.approx(2 * (m.n_params - norms))
    # in training only the sub-groups past max_in_cpu are read from there: here all of them,
    # the first (embedding + block 0, 1.1e8 elements) already overflows max_in_cpu 1e8
    assert param_layout(m, s, 1).nvme_param_fraction == 1.0
    # the max_in_cpu elements' pinned 16-bit flat buffer, at its power-of-two resident size
    assert plan.tiers["host"].breakdown["pinned:params_16bit"] == pytest.approx(pinned_bytes(2e8))


def test_checkpointing_saves_activation_memory():
    with_ckpt = plan_memory(*scenario("zero3-cpu", ckpt=True)).tiers["gpu"].used_bytes
    without = plan_memory(*scenario("zero3-cpu", ckpt=False)).tiers["gpu"].used_bytes
    assert without > with_ckpt + 3e9


def test_data_parallel_partitions_states():
    one = plan_memory(*scenario("no-offload", sets=["zero_optimization.stage=3"], gpus=1))
    eight = plan_memory(*scenario("no-offload", sets=["zero_optimization.stage=3"], gpus=8))
    assert eight.tiers["gpu"].breakdown["optimizer_states"] == pytest.approx(
        one.tiers["gpu"].breakdown["optimizer_states"] / 8)


# DeepSpeed's own estimators, when deepspeed is installed. tierlab's GPU/host totals add
# activations, buckets, context and slack; compare the model-state parts they share.
def _ds():
    return pytest.importorskip("deepspeed.runtime.zero.stage_1_and_2"), \
        pytest.importorskip("deepspeed.runtime.zero.stage3")


def _states(plan, tier, items):
    return sum(v for k, v in plan.tiers[tier].breakdown.items() if any(i in k for i in items))


def test_matches_deepspeed_zero2_estimator():
    z2, _ = _ds()
    hw, m, s = scenario("zero2-cpu", gpus=4)
    cpu, gpu = z2.estimate_zero2_model_states_mem_needs(m.n_params, num_gpus_per_node=4,
                                                        cpu_offload=True, additional_buffer_factor=1)
    plan = plan_memory(hw, m, s)
    assert plan.tiers["gpu"].breakdown["params"] == pytest.approx(gpu)
    # DeepSpeed: max(4 x gpus, 16) B/param on the host; tierlab requests the same 16 B/param
    # (fp32 p, g, m, v) and counts the two pinned fp32 buffers at their power-of-two size
    part = m.n_params / 4
    assert 4 * (4 * part + 4 * part + 8 * part) == pytest.approx(cpu)
    assert _states(plan, "host", ["master", "grads_fp32", "adam"]) == pytest.approx(
        4 * (2 * pinned_bytes(4 * part) + 8 * part))
    hw, m, s = scenario("no-offload", sets=["zero_optimization.stage=2"], gpus=4)
    _, gpu = z2.estimate_zero2_model_states_mem_needs(m.n_params, num_gpus_per_node=4,
                                                      cpu_offload=False)
    # DeepSpeed's 16 B/param of optimizer states count the fp32 gradient, which ZeRO-1/2 build
    # only inside the step (stage_1_and_2.py `step`): the persistent states plus that moment
    from tierlab.sim.memory import gpu_persistent

    kept = gpu_persistent(hw, m, s)
    states = kept["params"] + kept["grads"] + kept["optimizer_states"]
    assert states + gpu_moments(hw, m, s)["step"]["step_fp32_grad"] == pytest.approx(gpu)
    assert kept["optimizer_states"] == pytest.approx(12 * m.n_params / 4)


def test_matches_deepspeed_zero3_estimator():
    _, z3 = _ds()
    hw, m, s = scenario("zero3-cpu", gpus=2)
    cpu, gpu, _ = z3.estimate_zero3_model_states_mem_needs(
        m.n_params, m.params_per_layer, num_gpus_per_node=2, cpu_offload=True,
        cpu_offload_params=True, zero_init=True, additional_buffer_factor=1)
    plan = plan_memory(hw, m, s)
    # DeepSpeed: 18 B/param on the host (fp32 p, g, m, v + 16-bit p); tierlab requests the same
    # items and counts the pinned ones (per-sub-group fp32 grads, 16-bit flat) at power-of-two
    part = m.n_params / 2
    assert 2 * (4 * part + 4 * part + 8 * part + 2 * part) == pytest.approx(cpu)
    groups = [sum(g) for g in param_layout(m, s, 2).groups]
    assert sum(groups) == pytest.approx(part)
    # offload_param.device=cpu: the 16-bit flat buffer holds the whole partition (max_in_cpu
    # only caps it for device nvme: stage3.py _create_param_groups_fp16_flat_cpu_memory)
    assert _states(plan, "host", ["master", "grads_fp32", "adam", "params_16bit"]) == \
        pytest.approx(2 * (12 * part + sum(pinned_bytes(4 * g) for g in groups)
                           + pinned_bytes(2 * part)))
    # DeepSpeed: 4 B x largest layer on the GPU (16-bit param + grad). tierlab's largest gathered
    # module is the embedding (65.5 M) here, and it adds the prefetch bucket: documented difference.
    # The gradient side belongs to the backward moment (the loss moment binds this config).
    largest = max(m.params_per_layer, m.vocab * m.hidden)
    assert gpu_moments(hw, m, s)["backward"]["gathered_grads"] == pytest.approx(2 * largest)
    assert gpu == 4 * m.params_per_layer


@pytest.mark.lab
def test_zero3_gradient_bucket_reduction_moment():
    """stage3.py __reduce_and_partition_ipg_grads: reduce_scatter_coalesced's flat copy of the
    bucket + (offload) the largest partition's GPU copy and fp64 norm; measured Llama-0.5B ZeRO-3
    CPU at 1 x 512 tokens peaks at 3.44 GiB allocated, where this moment sets the peak."""
    hw, m, s = scenario("zero3-cpu", model="llama-0.5b", hardware="h200x2-b", mb=1, seq=512,
                        gpus=1)
    emb = m.vocab * m.hidden
    assert m.n_params < s.zero.reduce_bucket_size       # one bucket: reduced in the epilogue
    got = gpu_moments(hw, m, s)["grad_reduce"]
    assert got == pytest.approx({"reduce_scatter_flat": 2 * m.n_params,
                                 "grad_partition_copy": 2 * emb, "grad_norm_fp64": 8 * emb})
    moments = gpu_moments(hw, m, s)
    assert max(moments, key=lambda k: sum(moments[k].values())) == "grad_reduce"
    # two ranks: the flat copy is the whole bucket, the per-parameter temporaries halve
    hw2, m2, s2 = scenario("zero3-cpu", model="llama-0.5b", hardware="h200x2-b", mb=1, seq=512,
                           gpus=2)
    got2 = gpu_moments(hw2, m2, s2)["grad_reduce"]
    assert got2["reduce_scatter_flat"] == got["reduce_scatter_flat"]
    assert got2["grad_norm_fp64"] == pytest.approx(got["grad_norm_fp64"] / 2)
    # no offload: only the flat copy; reduce_scatter off: not even that
    hw3, m3, s3 = scenario("zero3-cpu", model="llama-0.5b", hardware="h200x2-b", mb=1, seq=512,
                           gpus=1, sets=["zero_optimization.offload_optimizer.device=none",
                                 "zero_optimization.offload_param.device=none",
                                 "zero_optimization.reduce_scatter=false"])
    assert gpu_moments(hw3, m3, s3)["grad_reduce"] == {}


@pytest.mark.lab
def test_zero3_mid_backward_reduction_holds_what_is_not_yet_reached():
    """A model bigger than the bucket reduces it mid-backward: the blocks not reached keep their
    inputs and gathered params (a share), the block at hand its recomputed activations; the NVMe
    swapper holds the bucket's fp32 casts."""
    hw, m, s = scenario("zero3-nvme", hardware="h200x2-b", gpus=1)
    assert m.n_params > s.zero.reduce_bucket_size
    moments = gpu_moments(hw, m, s)
    got, held = moments["grad_reduce"], moments["loss"]
    left = 1 - s.zero.reduce_bucket_size / m.n_params
    assert got["gathered_params"] == pytest.approx(held["gathered_params"] * left)
    assert got["recompute_block"] == moments["backward"]["recompute_block"]
    assert got["grad_fp32_swap_staging"] == pytest.approx(4.0 * s.zero.reduce_bucket_size)
    assert "grad_fp32_cast" not in got


@pytest.mark.lab
def test_zero3_without_offload_builds_fp32_gradients_one_sub_group_at_a_time():
    """stage3.py `_prepare_fp32_grad_for_sub_group` / `_release_sub_group`: the fp32 gradient
    and its flat 16-bit source exist for one sub-group inside the step, not for the partition
    all step long (h200-m, Llama-3B seq 2048: 59.6 GB measured; 74.3 GB predicted when the whole
    fp32 gradient partition was held)."""
    from tierlab.sim.memory import gpu_persistent

    none = ["zero_optimization.offload_optimizer.device=none",
            "zero_optimization.offload_param.device=none"]
    sets = none + ["zero_optimization.sub_group_size=100000000"]
    hw, m, s = simhelp.scenario("zero3-cpu", model="llama-3b", hardware="h200-host", sets=sets)
    step = gpu_moments(hw, m, s)["step"]
    assert step == {"step_fp32_grad": pytest.approx(4e8), "step_flat_grad_16bit": pytest.approx(2e8)}
    assert gpu_persistent(hw, m, s)["optimizer_states"] == pytest.approx(12 * m.n_params, rel=1e-3)
    # stage 0's FP16_Optimizer keeps its flat fp32 gradient: 16 B/param held
    hw, m, s = simhelp.scenario("no-offload", model="llama-3b", hardware="h200-host")
    assert gpu_persistent(hw, m, s)["optimizer_states"] == pytest.approx(16 * m.n_params)


@pytest.mark.lab
def test_zero12_offload_boundary_norms_each_gradient_in_fp64_beside_the_buckets():
    """stage_1_and_2.py copy_grads_in_partition -> set_norm_for_param_grad_in_gpu (offloaded
    optimizer, boundary micro-step): each reduced gradient slice is cast to fp64 for its norm while
    both IPG buckets are alive. Measured (lab/scripts/memory_snapshot.py, one H200, TinyLlama ZeRO-2 CPU
    at mb 2 x 4 micro-steps): 0.488 GiB from that line + 2 x 0.373 GiB of buckets at the 3.81 GiB
    steady peak, which the backward then sets, not the logits."""
    hw, m, s = simhelp.scenario("zero2-cpu", hardware="h200-host", micro_batch=2, grad_accum=4,
                                gpus=1, precision="bf16")
    moments = gpu_moments(hw, m, s)
    emb = m.vocab * m.hidden
    assert moments["backward"]["grad_norm_fp64"] == pytest.approx(8 * emb)
    assert 8 * emb / 2**30 == pytest.approx(0.488, abs=0.001)
    assert max(moments, key=lambda k: sum(moments[k].values())) == "backward"
    peak = plan_memory(hw, m, s).tiers["gpu"]
    tensors = peak.used_bytes - peak.breakdown["cuda_context"] - peak.breakdown["allocator_slack"]
    assert tensors / 2**30 == pytest.approx(3.812, rel=0.05)
    # two ranks: the slice is capped at the rank's partition; no offload: the norm is the step's
    hw2, m2, s2 = scenario("zero2-cpu", hardware="h200-host", mb=2, gpus=2)
    lay = param_layout(m2, s2, 2)
    assert gpu_moments(hw2, m2, s2)["backward"]["grad_norm_fp64"] == pytest.approx(
        8 * min(emb, lay.partition_numel))
    hw3, m3, s3 = scenario("zero2-cpu", hardware="h200-host", mb=2, gpus=1,
                           sets=["zero_optimization.offload_optimizer.device=none"])
    assert "grad_norm_fp64" not in gpu_moments(hw3, m3, s3)["backward"]


@pytest.mark.lab
def test_zero1_accumulates_every_16bit_gradient_until_the_boundary():
    """stage_1_and_2.py reduce_ready_partitions_and_remove_grads: stage 1 (gradients not
    partitioned) reduces a bucket only at the accumulation boundary, so with micro-steps every
    16-bit gradient stays in param.grad, offloaded optimizer or not. h200-q, TinyLlama ZeRO-1 CPU
    at mb 2 x 2 micro-steps: 5.97 GiB allocated measured."""
    from tierlab.sim.memory import gpu_persistent

    sets = ["zero_optimization.stage=1"]
    hw, m, s = simhelp.scenario("zero2-cpu", hardware="h200-host", micro_batch=2, grad_accum=2,
                                gpus=1, precision="bf16", sets=sets)
    assert gpu_persistent(hw, m, s)["grads"] == pytest.approx(2 * m.n_params)
    peak = plan_memory(hw, m, s).tiers["gpu"]
    tensors = peak.used_bytes - peak.breakdown["cuda_context"] - peak.breakdown["allocator_slack"]
    assert tensors / 2**30 == pytest.approx(5.965, rel=0.05)
    # one micro-step: each bucket is reduced as it fills; ZeRO-2: partitioned gradients are too
    for kw in ({"grad_accum": 1, "sets": sets}, {"grad_accum": 2, "sets": ()}):
        hw, m, s = simhelp.scenario("zero2-cpu", hardware="h200-host", micro_batch=2, gpus=1,
                                    precision="bf16", **kw)
        assert gpu_persistent(hw, m, s)["grads"] == 0


@pytest.mark.lab
def test_memory_snapshot_replays_the_trace_to_the_peak_and_names_the_allocating_lines():
    """lab/scripts/memory_snapshot.py (GPU only) turns torch.cuda.memory history into the live set at
    the peak; its replay is pure: allocations, frees of blocks it saw allocated, and frees of
    blocks allocated before recording (which lower the total)."""
    import memory_snapshot as snap      # lab/scripts (tests/conftest.py puts it on sys.path)

    ds = [{"filename": "/x/site-packages/deepspeed/runtime/zero/stage_1_and_2.py", "line": 1886,
           "name": "set_norm_for_param_grad_in_gpu"}]
    trace = [{"action": "alloc", "addr": 1, "size": 100, "frames": ds},
             {"action": "free_completed", "addr": 99, "size": 30},       # from before recording
             {"action": "alloc", "addr": 2, "size": 50, "frames": []},
             {"action": "free_completed", "addr": 1, "size": 100},
             {"action": "alloc", "addr": 3, "size": 60, "frames": ds}]
    peak, freed_before, groups = snap.live_at_peak(trace)
    assert peak == 120 and freed_before == 30
    assert groups == {"deepspeed/runtime/zero/stage_1_and_2.py:1886 "
                      "set_norm_for_param_grad_in_gpu": 100, "?:None None": 50}
