"""ZeRO-1/2's own GPU work on each gradient bucket (DeepSpeed 0.19.8 stage_1_and_2.py): the copy
into the IPG buffer, average_tensor's div_, the copy into the gradient partition."""
import pytest

from tierlab.sim import devices, workload as wl
from tierlab.sim.engine import phase_times, run_step
from tests._simhelp import scenario

Z2 = ("zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=none")


@pytest.mark.parametrize("kw, want", [
    # bf16 (2 B): bucket copy 4 + div_ 4 + partition copy 4
    (dict(dp=1, contiguous=True, partition_copy=True), 12.0),
    # offload_optimizer: the partition goes to the host instead
    (dict(dp=1, contiguous=True, partition_copy=False), 8.0),
    # 2 ranks: + flatten of the slices 4 + this rank's half copied back 2; partition copy 2
    (dict(dp=2, contiguous=True, partition_copy=True), 4 + 4 + 4 + 2 + 2),
    # contiguous_gradients=false: flatten, div_, copy back
    (dict(dp=1, contiguous=False, partition_copy=True), 12.0),
])
def test_bucket_bytes_per_element(kw, want):
    assert devices.zero12_bucket_hbm_bytes_per_element(bytes_per_param=2, **kw) == want


def _bucket_ops(sets, grad_accum=1):
    hw, m, s = scenario("zero2-cpu", sets=sets, grad_accum=grad_accum, gpus=1)
    return m, [op for op in wl.build_workload(hw, m, s).ops if op.work == "zero12_bucket"]


def test_every_gradient_element_is_copied_once_per_micro_step_at_stage_2():
    m, ops = _bucket_ops(Z2, grad_accum=2)
    assert {op.resource for op in ops} == {"gpu_compute"}
    for micro in range(2):
        mine = [op for op in ops if op.name.startswith(f"m{micro}.")]
        assert sum(op.amount for op in mine) == pytest.approx(m.n_params)
        assert len(mine) > 1      # one per reduce bucket, during the backward


def test_stage_1_reduces_only_at_the_boundary():
    m, ops = _bucket_ops(("zero_optimization.stage=1",
                          "zero_optimization.offload_optimizer.device=none"), grad_accum=2)
    assert ops and all(op.name.startswith("m1.") for op in ops)
    assert sum(op.amount for op in ops) == pytest.approx(m.n_params)


@pytest.mark.parametrize("preset", ["no-offload", "zero3-cpu"])
def test_stage_0_and_3_have_no_bucket_copies(preset):
    hw, m, s = scenario(preset, gpus=1)
    assert not [op for op in wl.build_workload(hw, m, s).ops if op.work == "zero12_bucket"]


def test_gpu_bound_zero2_backward_is_stage_0_plus_the_bucket_bytes():
    """Without host costs the GPU stream bounds the backward: ZeRO-2 (no offload, one rank) adds
    12 B per parameter of HBM traffic at bf16 over stage 0."""
    hw, m, s0 = scenario("no-offload", gpus=1, precision="bf16")
    _, _, s2 = scenario("zero2-cpu", gpus=1, precision="bf16", sets=Z2)
    b0, b2 = (phase_times(run_step(hw, m, s))["backward_s"] for s in (s0, s2))
    assert b2 - b0 == pytest.approx(m.n_params * 12.0 / hw.gpu.hbm_bandwidth_Bps, rel=1e-6)


@pytest.mark.parametrize("sets, want", [
    # ZeRO-1/2 all-reduce the whole bucket by default (use_multi_rank_bucket_allreduce=true)
    (("zero_optimization.stage=2",), "all_reduce"),
    (("zero_optimization.stage=1",), "all_reduce"),
    (("zero_optimization.stage=2", "zero_optimization.reduce_scatter=false",
      "zero_optimization.use_multi_rank_bucket_allreduce=false"), "all_reduce"),
    # its slices reduced to their owners: reduce-scatter volume
    (("zero_optimization.stage=2", "zero_optimization.use_multi_rank_bucket_allreduce=false"),
     "reduce_scatter"),
    (("zero_optimization.stage=3",), "reduce_scatter"),
])
def test_gradient_collective_by_stage(sets, want):
    _, _, s = scenario("zero2-cpu", sets=sets, gpus=2)
    assert wl.grad_collective(s) == want


def test_collectives_in_the_schedule_at_two_ranks():
    def kinds(sets, grad_accum=1):
        hw, m, s = scenario("zero2-cpu", sets=sets, grad_accum=grad_accum, gpus=2)
        ops = wl.build_workload(hw, m, s).ops
        return [(op.name.split(".")[0], op.work) for op in ops
                if op.resource == "gpu_comm" and ".grads." in op.name]
    z2 = kinds(("zero_optimization.stage=2",), grad_accum=2)
    assert {w for _, w in z2} == {"all_reduce"} and {m for m, _ in z2} == {"m0", "m1"}
    z1 = kinds(("zero_optimization.stage=1",), grad_accum=2)
    assert z1 and {m for m, _ in z1} == {"m1"}       # ZeRO-1: only at the boundary
