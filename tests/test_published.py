"""Published DeepSpeed figures (tolerance +-20%; each test cites its publication).

Where the simulator misses a figure the test is xfail(strict=True) with the reason; constants are
not bent to reach it. Model shapes of the 13/20/40B GPTs are assumed (12 L h^2 params): the blog
does not give them.
"""
from dataclasses import replace
from pathlib import Path

import pytest

from tierlab.profiles.load import load_hardware, load_model
from tierlab.profiles.schema import Model
from tierlab.sim import simulate
from tierlab.sim.memory import plan_memory
from tierlab.scenario import resolve

LAB = Path(__file__).resolve().parents[1] / "lab"

TOL = 0.20
COMPUTE_REASON = (
    "GPU compute too fast: the V100 profile's assumed matmul_efficiency (e_max 0.85, not "
    "calibrated) runs the 10B forward at ~91 TFLOP/s; the tutorial's forward (2.0e14 FLOP in "
    "6.1-6.4 s) is ~32 TFLOP/s and its backward (3x forward FLOPs with recompute, 11.8-12.6 s) "
    "~49 TFLOP/s. Unfused Megatron-era kernels (dropout, bias-GeLU, masked softmax) and "
    "DeepSpeed activation-checkpointing overheads are not modelled, and a backward of exactly "
    "3x forward FLOPs at one efficiency cannot give the published 1:1.95 forward:backward split")


def gpt(n_layers: int, hidden: int, name: str = "gpt") -> Model:
    return Model(name=name, n_layers=n_layers, hidden=hidden, ffn=4 * hidden,
                 n_heads=hidden // 128, n_kv_heads=hidden // 128, vocab=50257, seq_len=1024,
                 max_seq_len=1024, gated_mlp=False, tie_embeddings=True, norm="layernorm",
                 bias=True, learned_pos_emb=True)


def strategy(preset, hw, model, micro_batch, sets=()):
    """The Strategy of a preset through the one resolver (fp16, as on the V100s)."""
    return resolve(model, hw, preset, overrides=sets, micro_batch=micro_batch,
                   seq=model.seq_len, precision="fp16").strategy


def within(value, lo, hi=None):
    hi = lo if hi is None else hi
    return lo * (1 - TOL) <= value <= hi * (1 + TOL)


# ---------------------------------------------------------------------------------------------
# ZeRO-Offload tutorial: GPT-2 10B, 1x V100 (DGX-2 host), micro-batch 10, ZeRO-2 + CPU offload:
# 25.8-26.8 s/iteration = forward 6.1-6.4 + backward 11.8-12.6 + optimizer 7.6-8.0 s.
# "Iteration" = one micro-batch of 10 (GAS 1): 4 x 2e14 FLOP / 26.3 s = 31 TFLOP/s, which is the
# blog's "ZeRO-2 Offload ~30 TFLOP/s (10B)"; with accumulation the rate would exceed the V100.

@pytest.fixture(scope="module")
def gpt2_10b():
    hw = load_hardware("dgx-2", gpus_per_node=1)
    m = load_model("gpt2-10b")
    return simulate(hw, m, strategy("zero2-cpu", hw, m, 10))


def test_gpt2_10b_optimizer_phase(gpt2_10b):
    # 10.3e9 params / 1.6e9 params/s CPU Adam = 6.4 s + 20.6 GB fp16 H2D at 12 GB/s = 1.7 s
    assert within(gpt2_10b.phases["optimizer_s"], 7.6, 8.0)


def test_gpt2_10b_iteration(gpt2_10b):
    # ~21.0 s: within 20% since the software profile's ZeRO-2 offload per-parameter gradient
    # copies (host sync per parameter) serialise the fp32 D2H with backward (was ~17.1 s)
    assert within(gpt2_10b.step_time_s, 25.8, 26.8)


@pytest.mark.xfail(strict=True, reason=COMPUTE_REASON + " (predicted ~2.2 s vs 6.1-6.4 s)")
def test_gpt2_10b_forward(gpt2_10b):
    assert within(gpt2_10b.phases["forward_s"], 6.1, 6.4)


def test_gpt2_10b_backward(gpt2_10b):
    # ~10.4 s: within 20% of 11.8 s since the per-parameter gradient copies (was ~6.8 s)
    assert within(gpt2_10b.phases["backward_s"], 11.8, 12.6)


@pytest.mark.xfail(strict=True, reason=COMPUTE_REASON + " (predicted ~51 vs ~30 TFLOP/s)")
def test_gpt2_10b_zero2_offload_tflops(gpt2_10b):
    assert within(gpt2_10b.tflops_per_gpu, 30)


# ---------------------------------------------------------------------------------------------
# ZeRO-3 Offload blog (2021): 1x V100, ~48/47/46/43 TFLOP/s for 10/13/20/40B. The batch is not
# published; we take the largest power-of-two micro-batch the memory planner fits.

def _largest_fitting_micro_batch(hw, m, preset):
    best = None
    for mb in (1, 2, 4, 8, 16, 32, 64):
        if plan_memory(hw, m, strategy(preset, hw, m, mb)).fits:
            best = mb
    return best


# Until 2026-12-01 these were strict xfails: the simulator predicted ~66-67 TFLOP/s flat across
# 10-20B (the GEMMs compute-bound at micro-batch 16), and a lower GEMM efficiency was the guess.
# They pass since ZeRO-3's fp16 overflow check over the host gradient partition is modelled
# (stage3.py has_overflow, lab/notes/host-costs.md): fp16 on a V100, 0.76 ns per element (the stock
# figure, derived on an H200 host) adds 7.6 s per step at 10B. The blog ran a 2021 DeepSpeed on a
# DGX-2 host nobody calibrated, and the prediction stays flat (48.3-49.1 TFLOP/s) where the
# published figures fall from 48 to 43: within tolerance, not a reproduced trend.


# 40B: stop 8 passed it at micro-batch 8 (~45.1 TFLOP/s) because the planner then added every
# GPU item at once and 16 did not fit. Stop 9's planner takes the peak as the persistent items
# plus the largest moment of the step (loss backward, block backward, optimizer step) — what the
# 29 H200 runs measured within 4.3% — so micro-batch 16 fits and the 40B joins the 10-20B cases.
@pytest.mark.parametrize("layers, hidden, published", [
    (50, 4096, 48), (40, 5120, 47), (25, 8192, 46), (50, 8192, 43)])
def test_zero3_offload_one_v100(layers, hidden, published):
    hw = load_hardware("dgx-2", gpus_per_node=1)
    m = gpt(layers, hidden)
    mb = _largest_fitting_micro_batch(hw, m, "zero3-cpu")
    r = simulate(hw, m, strategy("zero3-cpu", hw, m, mb))
    assert r.fits and within(r.tflops_per_gpu, published)


# ---------------------------------------------------------------------------------------------
# 1T parameters on 512 V100s (32 DGX-2): 48.9 TFLOP/s per GPU (ZeRO-3 Offload blog).

@pytest.mark.xfail(strict=True, reason=(
    "does not fit: at micro-batch 1 the memory planner needs ~41 GiB of a 32 GiB V100 (one "
    "gathered 7.9e9-param block = 14.7 GiB of fp16 params + 14.7 GiB of fp16 grads); the "
    "published run relies on memory-centric tiling (TiledLinear), which tierlab does not model. "
    "The timing alone, with the preset's prefetch limits, predicts ~42 TFLOP/s"))
def test_one_trillion_on_512_v100():
    hw = load_hardware("dgx-2", nodes=32)
    m = load_model("dense-1t")
    r = simulate(hw, m, strategy("zero3-cpu", hw, m, 1))
    assert r.fits and within(r.tflops_per_gpu, 48.9)


# ---------------------------------------------------------------------------------------------
# ZeRO-Infinity (SC21), largest trainable model on one DGX-2 (16x V100 32 GB, 1.5 TB RAM):
# data parallel 1.4B, ZeRO-Offload 13B, ZeRO-3 20B, ZeRO-Infinity CPU 70B, NVMe 1T.
# Largest GPT (any of a few hidden sizes, any depth) the memory planner fits at micro-batch 1.

STRATEGIES = {
    "data-parallel": ("no-offload", ()),
    "zero-offload": ("zero2-cpu", ()),
    "zero-3": ("zero3-cpu", ("zero_optimization.offload_param.device=none",
                             "zero_optimization.offload_optimizer.device=none")),
    "infinity-cpu": ("zero3-cpu", ()),
    "infinity-nvme": ("zero3-nvme", ("zero_optimization.offload_param.device=nvme",
                                     "zero_optimization.offload_param.nvme_path=/nvme")),
}


def _largest_trainable(name):
    preset, sets = STRATEGIES[name]
    hw = load_hardware("dgx-2")
    best = 0
    for hidden in (1024, 2048, 4096, 8192, 16384, 25600):
        lo, hi = 0, 4096
        while lo < hi:
            mid = (lo + hi + 1) // 2
            m = gpt(mid, hidden)
            if plan_memory(hw, m, strategy(preset, hw, m, 1, sets)).fits:
                lo = mid
            else:
                hi = mid - 1
        if lo:
            best = max(best, gpt(lo, hidden).n_params)
    return best


@pytest.mark.lab
@pytest.mark.parametrize("name, published", [
    ("data-parallel", 1.4e9), ("zero-offload", 13e9),
    pytest.param("zero-3", 20e9, marks=pytest.mark.xfail(strict=True, reason=(
        "the planner fits 24.6e9 params (+23%): DeepSpeed 0.19.8's ZeRO-3 without offload holds "
        "the fp32 gradient for one sub-group inside the step only (stage3.py "
        "_prepare_fp32_grad_for_sub_group / _release_sub_group), which the GPU peaks of 0.19.8 "
        "runs without offload confirm (lab/cases/h200-m: Llama-3B seq 2048 +3.1%, six "
        "ZeRO-2 / ZeRO-3 runs within 4%); the paper's 20B is the largest of the sizes it "
        "demonstrated with a 2021 DeepSpeed, as for the 1T below, and while the whole fp32 "
        "gradient partition was counted the planner matched it"))),
    ("infinity-cpu", 70e9),
    pytest.param("infinity-nvme", 1e12, marks=pytest.mark.xfail(strict=True, reason=(
        "the planner fits ~1.57e12 params (hidden 16384): 8 x 3.84 TB of NVMe hold 18 B/param; "
        "the paper's 1T is the size it demonstrated (with its 25600-wide shape, which needs "
        "tiling to fit the GPU), not a capacity limit"))),
])
def test_zero_infinity_largest_model_per_dgx2(name, published):
    assert within(_largest_trainable(name), published)


# ---------------------------------------------------------------------------------------------
# Published offload runs on hosts nobody calibrated (lab/published.yaml, sources there),
# predicted from the catalogue alone (issue 12's catalogue target: within 20% of the published
# step, or the published step inside the predicted 80% range; issue 14's coverage). The catalogue
# figures were sourced independently of these runs (docs/catalogue.md); lab/scripts/bench_published.py
# prints the table.

from tierlab.profiles.catalogue import list_catalogue  # noqa: E402
from tierlab.validate.published import load_published, predict  # noqa: E402

PUBLISHED_RUNS = {run.name: run for run in load_published(LAB / "published.yaml")}
_NO_BINDING = pytest.mark.xfail(strict=True, reason=(
    "~30% fast: the published run launches 2 ranks without --bind_cores_to_rank, so each rank's "
    "CPU Adam OpenMP pool spans all 256 hardware threads of both EPYC sockets (oversubscribed, "
    "memory across NUMA nodes); the same run with core binding is 13% faster (2.497 vs 2.887 s) "
    "and lands within 20%. tierlab's CPU Adam has no thread-placement/NUMA mechanism (issue 12, "
    "'CPU Adam on multi-socket ... NUMA hosts'); the catalogue is not bent to this run"))

# the runs each test expects to miss, with the mechanism that is missing
# (zenflow-qwen2.5-1.5b-zero2-no-offload missed both until 2026-12-02, +20.1%: the multi-rank
# wait fitted on CPU-offload runs was charged to a run without offload; sim/workload.py)
_MISSES_RANGE: dict = {}
_MISSES_20 = {**_MISSES_RANGE, "zenflow-qwen2.5-3b-zero-offload": _NO_BINDING}


def _params(misses: dict) -> list:
    return [pytest.param(n, marks=misses[n]) if n in misses else n for n in sorted(PUBLISHED_RUNS)]


@pytest.fixture(scope="module")
def published_predictions():
    return {name: predict(run) for name, run in PUBLISHED_RUNS.items()}


@pytest.mark.lab
def test_published_runs_are_on_catalogue_hosts():
    assert len(PUBLISHED_RUNS) >= 5
    for run in PUBLISHED_RUNS.values():
        assert run.system in {name for name, _ in list_catalogue("hardware")}, run.name
        assert run.source.strip() and run.step_s > 0


@pytest.mark.lab
@pytest.mark.parametrize("name", _params(_MISSES_RANGE))
def test_published_run_within_20_percent_or_inside_range(name, published_predictions):
    p = published_predictions[name]
    assert p.range_s is not None and p.range_s[0] < p.step_s < p.range_s[1]
    assert within(p.step_s, *p.run.measured_range_s) or p.inside, (
        f"{name}: predicted {p.step_s:.3f} s ({p.range_s[0]:.3f}-{p.range_s[1]:.3f}) vs "
        f"published {p.run.step_s:.3f} s")


@pytest.mark.lab
@pytest.mark.parametrize("name", _params(_MISSES_20))
def test_published_run_within_20_percent(name, published_predictions):
    p = published_predictions[name]
    # within 20% of the published repeats' spread, as the file's other published figures
    assert within(p.step_s, *p.run.measured_range_s), f"{name}: {p.error:+.1%}"
