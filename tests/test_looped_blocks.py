"""Looped blocks (Model.loops, profiles/schema.py Loop; read by profiles/hf_loops.py): the three
text decoders transformers 5.25.0 builds whose forward runs blocks more than once per token —
Dory (n_recurrent_loops), Inkling2-Loop (loop_num_passes) and HRM (H_cycles, L_cycles, with
L passes under torch.no_grad) — load from their config.json, count like transformers' meta
model (weights once), and cost per pass: forward FLOPs per run, backward and stored activations
per run with gradients, a ZeRO-3 module use per run each way; bad pass counts are one line."""
import json
from dataclasses import asdict, replace

import pytest

from tests._cli import assert_user_error, run
from tests._simhelp import scenario
from tests.test_hybrid_arch import meta_counts
from tierlab.errors import ConfigError
from tierlab.profiles.hf_build import COUNT_TOLERANCE
from tierlab.profiles.load import load_model
from tierlab.profiles.schema import Loop, Model
from tierlab.sim import workload as wl
from tierlab.sim.flops import layer_forward, logits_forward, step_flops
from tierlab.sim.memory import activation_bytes, model_state_bytes
from tierlab.sim.modules import forward_uses, modules, trace

KINDS = ("dory", "inkling2_loop_text", "hrm_text")
SMALL = {
    # 4 blocks: 1 input, 2 recurrent run 3 times, 1 output (configuration_dory.py)
    "dory": dict(hidden_size=256, intermediate_size=512, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=64, vocab_size=1000, num_hidden_layers=4,
                 n_input_layers=1, n_recurrent_layers=2, n_output_layers=1, n_recurrent_loops=3),
    # 6 blocks, blocks 2-3 looped 3 times, each holding 4 message gates of rank 16
    "inkling2_loop_text": dict(
        hidden_size=256, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
        head_dim=64, swa_num_attention_heads=4, swa_num_key_value_heads=2, swa_head_dim=64,
        vocab_size=1000, unpadded_vocab_size=1000, moe_intermediate_size=512,
        n_routed_experts=4, num_experts_per_tok=2, n_layers_per_attn_res_block=2,
        loop_layer_index_start=2, loop_layer_index_end=4, loop_num_passes=3, loop_gate_rank=16),
    # two stacks of 2 blocks; 2 H cycles of 3 L passes, the last 1 then 2 with gradients
    "hrm_text": dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, head_dim=32,
                     vocab_size=1000, num_hidden_layers=2, H_cycles=2, L_cycles=3,
                     L_bp_cycles=[2]),
}
PASS_KEY = {"dory": "n_recurrent_loops", "inkling2_loop_text": "loop_num_passes",
            "hrm_text": "H_cycles"}
SEQ = 256


def _known(kind: str) -> None:
    pytest.importorskip("transformers")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if kind not in CONFIG_MAPPING:
        pytest.skip(f"this transformers has no {kind!r}")


def _small(tmp_path, kind: str, **extra):
    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps(dict(model_type=kind, **{**SMALL[kind], **extra})))
    return path


def _default(tmp_path, kind: str):
    """transformers' default config of `kind` as a config.json (bench/bench_architectures.py)."""
    from transformers import AutoConfig

    path = tmp_path / f"{kind}-default.json"
    path.write_text(AutoConfig.for_model(kind).to_json_string())
    return path


def _within_count(model: Model, path) -> None:
    total, active = meta_counts(path)
    assert abs(model.n_params - total) <= COUNT_TOLERANCE * total, (model.n_params, total)
    assert abs(model.active_params - active) <= COUNT_TOLERANCE * active


DEFAULT_LOOPS = {
    # configuration_dory.py: 36 layers, 8 input, 8 output, the 20 between looped twice
    "dory": (Loop(layers=tuple(range(8, 28)), passes=2),),
    # configuration_inkling2_loop.py: loop_layer_index_start 6, _end 18, 3 passes
    "inkling2_loop_text": (Loop(layers=tuple(range(6, 18)), passes=3),),
    # configuration_hrm_text.py: 16 blocks a stack, H_cycles 2, L_cycles 3, L_bp_cycles [2]
    # padded to [1, 2]: L runs 0, 1 (H cycle 0) and 3 (H cycle 1) under torch.no_grad
    "hrm_text": (Loop(layers=tuple(range(32)), passes=2),
                 Loop(layers=tuple(range(16)), passes=3, no_grad=(0, 1, 3))),
}


@pytest.mark.parametrize("kind", KINDS)
def test_default_config_loads_with_its_loops_counted_once(tmp_path, kind):
    _known(kind)
    path = _default(tmp_path, kind)
    m = load_model(str(path))
    want = DEFAULT_LOOPS[kind]
    assert [(l.layers, l.passes, l.no_grad) for l in m.loops] == \
        [(l.layers, l.passes, l.no_grad) for l in want]
    if kind == "inkling2_loop_text":    # 4 message gates x (down, forget, message) per block
        assert len(m.loops[0].matrices) == 12
        assert ("q_message_gate.down_proj", 2 * 2304, 64) in m.loops[0].matrices
    _within_count(m, path)


@pytest.mark.parametrize("kind", KINDS)
def test_small_config_loads_counts_and_simulates(tmp_path, kind):
    _known(kind)
    path = _small(tmp_path, kind)
    m = load_model(str(path))
    assert m.loops
    _within_count(m, path)
    for verb in ("simulate", "memory"):
        r = run(verb, "-m", str(path), "-H", "dgx-a100", "-c", "zero3-cpu", "--seq", str(SEQ))
        assert r.exit_code == 0, r.output


def test_default_configs_simulate_through_the_cli(tmp_path):
    for kind in KINDS:
        _known(kind)
        path = _default(tmp_path, kind)
        for verb in ("simulate", "memory"):
            r = run(verb, "-m", str(path), "-H", "dgx-a100", "-c", "zero3-cpu", "--seq", "512")
            assert r.exit_code == 0, (kind, r.output)


def test_forward_order_follows_the_modeling_files(tmp_path):
    """Dory: input block, the recurrent pair 3 times, output block (DoryModel.forward). HRM: per
    H cycle the L stack L_cycles times then the H stack (HrmTextModel.forward), the L runs
    before the last L_bp_cycles_padded[h] of each cycle without gradients."""
    _known("dory")
    _known("hrm_text")
    dory = load_model(str(_small(tmp_path, "dory")))
    assert dory.forward_order == tuple((i, True) for i in (0, 1, 2, 1, 2, 1, 2, 3))
    hrm = load_model(str(_small(tmp_path, "hrm_text")))
    L, H = ((0, 1), (2, 3))
    want = [(i, False) for i in 2 * L] + [(i, True) for i in L + H] + \
        [(i, False) for i in L] + [(i, True) for i in 2 * L + H]
    assert hrm.forward_order == tuple(want)
    assert (hrm.block_runs, hrm.grad_block_runs) == (16, 10)
    assert hrm.layer_runs(0) == (6, 3) and hrm.layer_runs(3) == (2, 2)


def _one_pass(m: Model) -> Model:
    """The same Model (the same blocks and tensors) with every loop run once, with gradients."""
    return replace(m, loops=tuple(replace(l, passes=1, no_grad=()) for l in m.loops))


def _forward_flops(m: Model) -> float:
    """The forward's block FLOPs: the mean block over its runs x the runs (sim/flops.py)."""
    return layer_forward(m, 1).total * m.block_runs


@pytest.mark.parametrize("kind", ("dory", "hrm_text"))
def test_forward_flops_are_the_looped_blocks_times_their_passes(tmp_path, kind):
    """Dory's and HRM's blocks are built alike (at SEQ every sliding window covers the
    sequence), so the forward's block FLOPs are one block's x its runs, exactly: the looped
    part x its passes."""
    _known(kind)
    m = load_model(str(_small(tmp_path, kind)))
    one = _one_pass(m)
    m, one = (replace(x, seq_len=SEQ) for x in (m, one))
    assert one.block_runs == m.n_layers
    assert _forward_flops(m) == pytest.approx(_forward_flops(one) * m.block_runs / m.n_layers,
                                              rel=1e-12)
    assert m.block_runs == {"dory": 1 + 3 * 2 + 1, "hrm_text": 2 * (3 * 2 + 2)}[kind]


def test_each_further_pass_adds_the_same_flops_with_the_message_gates(tmp_path):
    """Inkling2-Loop: F(passes) = F(1) + (passes - 1) x (the loop blocks + their message gates,
    which the first pass skips): linear in the pass count, each pass at least the loop blocks'
    share of a one-pass forward."""
    _known("inkling2_loop_text")
    m = replace(load_model(str(_small(tmp_path, "inkling2_loop_text"))), seq_len=SEQ)
    loop = m.loops[0]
    f = {p: _forward_flops(replace(m, loops=(replace(loop, passes=p),))) for p in (1, 2, 3, 5)}
    step = f[2] - f[1]
    assert f[3] - f[2] == pytest.approx(step, rel=1e-9)
    assert f[5] == pytest.approx(f[1] + 4 * step, rel=1e-9)
    gates = sum(2.0 * m.seq_len * i * o for _, i, o in loop.matrices) * len(loop.layers)
    share = len(loop.layers) / m.n_layers
    assert step > gates and step - gates == pytest.approx(share * f[1], rel=0.01)


@pytest.mark.parametrize("kind", KINDS)
def test_a_looped_step_costs_more_than_one_pass_and_stores_more(tmp_path, kind):
    """Step FLOPs: a forward per run, recompute + backward per run with gradients; activation
    memory per run with gradients; parameters and optimizer state once."""
    _known(kind)
    m = replace(load_model(str(_small(tmp_path, kind))), seq_len=SEQ)
    one = _one_pass(m)
    f = layer_forward(m, 1).total
    logits = logits_forward(m, 1)
    assert step_flops(m, 1) == pytest.approx(f * (m.block_runs + 3 * m.grad_block_runs)
                                             + 3 * logits, rel=1e-12)
    assert step_flops(m, 1) > step_flops(one, 1)
    hw, _, s = scenario("zero3-cpu", hardware="dgx-a100", micro_batch=1, seq=SEQ)
    act, act1 = activation_bytes(m, s), activation_bytes(one, s)
    assert act["checkpointed_inputs"] == act1["checkpointed_inputs"] * m.grad_block_runs / \
        m.n_layers
    assert act["recompute_block"] == act1["recompute_block"]
    assert m.n_params == one.n_params
    assert model_state_bytes(m, s) == model_state_bytes(one, s)
    from tierlab.scenario import resolve

    steps = [resolve(x, "dgx-a100", "zero3-cpu", micro_batch=1, seq=SEQ).simulate()
             for x in (m, one)]
    assert steps[0].step_time_s > steps[1].step_time_s
    assert steps[0].memory.model_states == steps[1].memory.model_states


def test_no_grad_passes_cost_their_forward_only(tmp_path):
    """HRM's L runs under torch.no_grad (modeling_hrm_text.py line 503): a forward, no recompute,
    no backward, nothing stored; all of them with gradients (L_bp_cycles = L_cycles) adds 3
    forwards per such run (recompute + 2 x backward) and their checkpointed inputs."""
    _known("hrm_text")
    m = replace(load_model(str(_small(tmp_path, "hrm_text"))), seq_len=SEQ)
    full = replace(load_model(str(_small(tmp_path, "hrm_text", L_bp_cycles=[3, 3]))),
                   seq_len=SEQ)
    assert full.loops[1].no_grad == () and m.block_runs == full.block_runs
    f = layer_forward(m, 1).total
    no_grad = full.grad_block_runs - m.grad_block_runs
    assert no_grad == 3 * 2             # runs 0, 1, 3 of the L stack's 2 blocks
    assert step_flops(full, 1) - step_flops(m, 1) == pytest.approx(3 * f * no_grad, rel=1e-9)
    _, _, s = scenario("zero3-cpu", hardware="dgx-a100", micro_batch=1, seq=SEQ)
    assert activation_bytes(full, s)["checkpointed_inputs"] > \
        activation_bytes(m, s)["checkpointed_inputs"]


@pytest.mark.parametrize("kind", KINDS)
def test_zero3_uses_each_looped_block_once_per_pass_each_way(tmp_path, kind):
    """The trace: a forward use per run, a recompute and a backward use per run with gradients,
    the backward in reverse; the gradient reduced once (byte conservation against the closed
    form, whose gradient terms count each parameter once)."""
    _known(kind)
    m = replace(load_model(str(_small(tmp_path, kind))), seq_len=SEQ)
    hw, _, s = scenario("zero3-cpu", hardware="dgx-a100", micro_batch=1, seq=SEQ)
    mods = modules(m, s)
    uses = trace(mods, s, False, forward_uses(m))
    for i in range(m.n_layers):
        kinds = [u.kind for u in uses if u.module == i + 1]
        runs, grad = m.layer_runs(i)
        assert (kinds.count("fwd"), kinds.count("recompute"), kinds.count("bwd")) == \
            (runs, grad, grad)
    fwd = [u.module for u in uses if u.kind == "fwd"]
    bwd = [u.module for u in uses if u.kind == "bwd"]
    assert fwd[1:-1] == [i + 1 for i, _ in m.forward_order]
    assert bwd[1:-1] == [i + 1 for i, g in reversed(m.forward_order) if g]
    ops = wl.build_workload(hw, m, s).ops
    assert sum(op.work == "block.fwd" for op in ops) == m.block_runs
    assert sum(op.work == "block.bwd" for op in ops) == m.grad_block_runs
    got, want = wl.bytes_by_resource(ops), wl.expected_bytes(hw, m, s)
    for key, value in want.items():
        assert got.get(key, 0.0) == pytest.approx(value, rel=1e-9, abs=1e-6), key


@pytest.mark.parametrize("kind, key, value, fragment", [
    ("dory", "n_recurrent_loops", 0, "must be >= 1"),
    ("dory", "n_recurrent_loops", -2, "must be >= 1"),
    ("dory", "n_recurrent_loops", True, "expected a number"),
    ("dory", "n_recurrent_loops", 10 ** 9, "beyond the bound"),
    ("dory", "n_recurrent_loops", 2.5, "whole number"),
    ("inkling2_loop_text", "loop_num_passes", 0, "must be >= 1"),
    ("inkling2_loop_text", "loop_num_passes", 10 ** 6, "beyond the bound"),
    ("hrm_text", "H_cycles", 0, "must be >= 1"),
    ("hrm_text", "L_cycles", False, "expected a number"),
    ("hrm_text", "L_cycles", 5000, "beyond the bound"),
    ("hrm_text", "L_bp_cycles", [-1], "L_bp_cycles[0]"),
    ("hrm_text", "L_bp_cycles", "two", "L_bp_cycles"),
])
def test_bad_pass_counts_are_one_line_naming_file_and_key(tmp_path, kind, key, value, fragment):
    _known(kind)
    path = _small(tmp_path, kind, **{key: value})
    assert_user_error(run("simulate", "-m", str(path), "-H", "dgx-a100", "-c", "zero3-cpu"),
                      path.name, key, fragment)


def test_looped_blocks_outside_the_model_name_the_keys(tmp_path):
    """transformers checks that Dory's sections add up, not their signs."""
    _known("dory")
    path = _small(tmp_path, "dory", n_input_layers=-1, n_recurrent_layers=4)
    assert_user_error(run("memory", "-m", str(path)), path.name, "n_input_layers",
                      "not blocks of the model")


def test_a_loop_key_no_reader_reads_is_refused_in_one_line(tmp_path):
    _known("dory")
    path = _small(tmp_path, "dory", extra_passes=3)
    assert_user_error(run("simulate", "-m", str(path)), path.name, "extra_passes = 3",
                      "runs blocks more than once per token")


@pytest.mark.parametrize("fields, fragment", [
    (dict(layers=(1, 3), passes=2), "consecutive"),
    (dict(layers=(), passes=2), "consecutive"),
    (dict(layers=5, passes=2), "Loop.layers"),
    (dict(layers=(0,), passes=0), "Loop.passes"),
    (dict(layers=(0,), passes=True), "Loop.passes"),
    (dict(layers=(0,), passes=10 ** 6), "Loop.passes"),
    (dict(layers=(0,), passes=2, no_grad=(1, 1)), "Loop.no_grad"),
    (dict(layers=(0,), passes=2, matrices=(("g", 0, 4),)), "Loop.matrices"),
])
def test_loop_fields_are_checked(fields, fragment):
    with pytest.raises(ValueError, match=fragment):
        Loop(**fields)


def _model(**kw) -> Model:
    return Model(name="x", n_layers=4, hidden=64, ffn=128, n_heads=4, n_kv_heads=4, vocab=100,
                 seq_len=16, **kw)


@pytest.mark.parametrize("loops, fragment", [
    ((Loop(layers=(3, 4), passes=2),), "lists block 4"),
    ((Loop(layers=(0, 1, 2), passes=2), Loop(layers=(2, 3), passes=2)), "apart or one inside"),
    ((Loop(layers=(0, 1), passes=2), Loop(layers=(0, 1), passes=3)), "apart or one inside"),
    ((Loop(layers=(0, 1), passes=2, no_grad=(2,)),), "runs its blocks 2 times"),
    ((Loop(layers=(0, 1, 2, 3), passes=2, no_grad=(0,)), Loop(layers=(0,), passes=2)),
     "innermost"),
    ((Loop(layers=(0, 1, 2, 3), passes=1000), Loop(layers=(0,), passes=1000)), "block runs"),
])
def test_model_loops_are_checked(loops, fragment):
    with pytest.raises(ValueError, match=fragment):
        _model(loops=loops)


def test_loops_round_trip_through_json_and_a_profile(tmp_path):
    """asdict -> JSON -> Model (as Zamba2's `shared`), and a model profile's `loops` list."""
    loops = (Loop(layers=(0, 1, 2, 3), passes=2), Loop(layers=(0, 1), passes=3, no_grad=(0, 3),
                                                       matrices=(("gate.down", 128, 8),)))
    m = _model(loops=loops)
    assert Model(**json.loads(json.dumps(asdict(m)))) == m
    text = ("kind: model\nname: looped\nsource: a test\nn_layers: 4\nhidden: 64\nffn: 128\n"
            "n_heads: 4\nn_kv_heads: 4\nvocab: 100\nseq_len: 16\n"
            "loops:\n  - {layers: [1, 2], passes: 3}\n")
    path = tmp_path / "looped.yaml"
    path.write_text(text)
    assert load_model(str(path)).loops == (Loop(layers=(1, 2), passes=3),)
    path.write_text(text.replace("passes: 3", "passes: 0"))
    assert_user_error(run("memory", "-m", str(path)), path.name, "Loop.passes")


def test_the_runner_and_fsdp2_say_they_do_not_loop(tmp_path):
    from tierlab.runner.variants import check_dense
    from tierlab.sim.fsdp2 import simulate_fsdp2

    m = _model(loops=(Loop(layers=(1, 2), passes=2),))
    with pytest.raises(ConfigError, match="2 looped"):
        check_dense(m)
    hw, _, s = scenario("zero3-cpu", hardware="dgx-a100", micro_batch=1, seq=16)
    with pytest.raises(ValueError, match="loops"):
        simulate_fsdp2(hw, m, s)
