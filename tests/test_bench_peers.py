"""bench/bench_peers.py's pure pieces (issue 32): the scenario -> peer-input translations and the
table, checked without a venv, pip or either peer installed."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_peers as bp  # noqa: E402

from tierlab.scenario import resolve  # noqa: E402


@pytest.fixture(scope="module")
def facts():
    return {name: bp.scenario_facts(resolve(**kw)) for name, kw, _ in bp.SCENARIOS}


def _by(facts, word):
    return next(f for name, f in facts.items() if word in name)


def test_facts_are_the_scenarios(facts):
    assert len(facts) == 3
    tiny, big, huge = _by(facts, "TinyLlama"), _by(facts, "70B"), _by(facts, "1T")
    assert (tiny["dp"], tiny["zero"], tiny["offload_optimizer"], tiny["offload_param"]) == \
        (1, 2, "cpu", "none")
    assert (big["dp"], big["zero"], big["micro_batch"], big["seq"]) == (8, 3, 4, 4096)
    assert (big["offload_param"], big["offload_optimizer"]) == ("cpu", "cpu")
    assert (huge["dp"], huge["zero"], huge["offload_param"], huge["offload_optimizer"]) == \
        (512, 3, "nvme", "nvme")
    assert huge["gpus_per_node"] == 16 and "V100" in huge["gpu"]


def test_calculon_inputs(facts):
    big = bp.calculon_inputs(_by(facts, "70B"))
    exe, app = big["execution"], big["application"]
    assert (exe["num_procs"], exe["data_par"], exe["tensor_par"], exe["pipeline_par"]) == \
        (8, 8, 1, 1)
    assert exe["batch_size"] == 32 and exe["microbatch_size"] == 4
    assert exe["optimizer_sharding"] and exe["weight_offload"] and exe["optimizer_offload"]
    assert exe["data_par_net"] == 0 and exe["activation_recompute"] == "full"
    assert app == {"hidden": 8192, "feedforward": 28672 * 3 // 2, "seq_size": 4096,
                   "attn_heads": 64, "attn_size": 128, "num_blocks": 80}
    assert big["system_file"] == "a100_80g.json"
    assert any("ZeRO-1" in n for n in big["notes"]) and any("GQA" in n for n in big["notes"])

    tiny = bp.calculon_inputs(_by(facts, "TinyLlama"))
    assert not tiny["execution"]["optimizer_sharding"]      # Calculon asserts DP > 1 for it
    assert not tiny["execution"]["data_par_overlap"]
    assert tiny["execution"]["optimizer_offload"] and not tiny["execution"]["weight_offload"]
    assert tiny["system_file"] is None                      # none shipped for an RTX 3070
    sysj = tiny["system"]
    assert sysj["mem1"]["GiB"] == pytest.approx(8.0)
    assert sysj["mem2"]["GBps"] == pytest.approx(24.0)      # pinned PCIe, tierlab's profile
    assert sysj["matrix"]["float16"]["tflops"] == pytest.approx(40.6)

    huge = bp.calculon_inputs(_by(facts, "1T"))
    assert huge["execution"]["data_par_net"] == 1           # 512 > a node's 16
    assert huge["system_file"] is None
    mem2 = huge["system"]["mem2"]                            # the node's 8 NVMe drives / 16 GPUs
    assert mem2["GBps"] == pytest.approx(3.5 * 8 / 16)
    assert any("NVMe" in n for n in huge["notes"])


def test_llm_analysis_inputs(facts):
    big = bp.llm_analysis_inputs(_by(facts, "70B"))
    assert big["gpu_name"] == "a100-sxm-80gb"
    assert big["parallelism"] == {"dp_size": 8}
    t = big["training"]
    assert (t["batch_size_per_gpu"], t["seq_len"], t["ds_zero"]) == (4, 4096, 3)
    assert t["activation_recomputation"] == "FULL" and t["mlp_gated_linear_units"]
    m = big["model"]
    assert m["ffn_embed_dim"] == 28672 and m["expansion_ratio"] == 28672 / 8192
    assert m["num_key_value_heads"] == 8
    assert big["notes"] == ["cpu offload dropped (no offload in llm-analysis)"]
    assert bp.llm_analysis_inputs(_by(facts, "1T"))["gpu_name"] == "v100-sxm-32gb"
    tiny = bp.llm_analysis_inputs(_by(facts, "TinyLlama"))
    assert tiny["gpu_name"] is None and tiny["gpu"]["peak_fp16_TFLOPS"] == pytest.approx(40.6)


def test_table():
    ok = {"ok": True, "ms": 2.0, "step_s": 1.0}
    rows = [
        {"scenario": "a", "tierlab_ms": 4.0, "tierlab_fresh_ms": 8.0, "calculon": ok,
         "llm_analysis": {**ok, "ms": 0.5, "fits": False}},
        {"scenario": "b", "tierlab_ms": 1.0, "calculon": None,
         "calculon_reason": "not NVIDIA's", "llm_analysis": {"ok": False, "error": "boom"}},
        {"scenario": "c", "tierlab_ms": 300.0, "calculon": {**ok, "ms": 1.0},
         "llm_analysis": {"ok": False, "error": "AssertionError: max_batch_size_per_gpu -1"}},
    ]
    lines = bp.format_table(rows).splitlines()
    assert lines[0].startswith("| scenario | tierlab warm ranged")
    assert len(lines) == 5
    assert lines[2] == ("| a | 4.00 ms / 8.00 ms | 2.00 ms | 0.50 ms [no fit] | 2x / 4x "
                        "| 8x / 16x |")
    assert lines[3] == "| b | 1.00 ms | n/a (not NVIDIA's) | n/a (boom) | n/a | n/a |"
    assert "n/a (does not fit in GPU memory without offload)" in lines[4]
    assert "| 300x |" in lines[4]


def test_calculon_reason():
    assert bp.calculon_reason({"nvidia": True}) is None
    why = bp.calculon_reason({"error": "ModuleNotFoundError", "dist": {
        "version": "1.1.1", "home": "https://github.com/jango/calculon"}})
    assert "jango/calculon" in why and "--calculon-src" in why
    assert "not importable" in bp.calculon_reason({"error": "x"})
