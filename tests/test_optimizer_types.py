"""optimizer.type and the parallelism keys as DeepSpeed 0.19.8 judges them (dsconfig/optimizer.py,
dsconfig/parallel.py): the names and classes DeepSpeed builds, ZeRO's supported list, the state
count per parameter, each held against the installed DeepSpeed and torch; refused by name on the
command line, `preflight` included, never simulated as Adam or as pure data parallelism."""
import inspect
import json

import pytest

from tierlab.dsconfig import optimizer as opt
from tierlab.dsconfig import parallel
from tierlab.errors import ConfigError
from tierlab.sim.strategy import Flags, parse_ds_config
from tests._dshelp import ranks_seen_by_deepspeed

ZERO2_CPU = {"stage": 2, "offload_optimizer": {"device": "cpu"}}


def _cfg(type_, zero=None, **top):
    return {"zero_optimization": zero or {"stage": 2}, "train_micro_batch_size_per_gpu": 1,
            "optimizer": {"type": type_, "params": {"lr": 1e-4}}, **top}


def test_names_are_deepspeeds_and_torchs():
    import torch
    from deepspeed.runtime import config as dsc

    assert opt.DEEPSPEED_OPTIMIZERS == tuple(dsc.DEEPSPEED_OPTIMIZERS)
    classes = sorted(n for n in torch.optim.__all__ if isinstance(getattr(torch.optim, n), type)
                     and issubclass(getattr(torch.optim, n), torch.optim.Optimizer)
                     and n != "Optimizer")
    assert sorted(opt.TORCH_OPTIMIZERS) == classes


def test_zero_supported_is_deepspeeds():
    import torch
    from deepspeed.runtime.zero import utils

    names = {f"torch.optim.{c.__name__}" if c.__module__.startswith("torch.optim") else c.__name__
             for c in utils.ZERO_SUPPORTED_OPTIMIZERS}
    # MuonWithAuxAdam joins the list when is_zero_supported_optimizer first runs (utils.py:71)
    assert names | {"MuonWithAuxAdam"} == set(opt.ZERO_SUPPORTED)
    assert "MuonWithAuxAdam" in inspect.getsource(utils.is_zero_supported_optimizer)
    assert torch.optim.SGD not in utils.ZERO_SUPPORTED_OPTIMIZERS


def test_built_class_is_engines():
    """The class named for each of DeepSpeed's names is the one engine.py's
    _configure_basic_optimizer constructs (its source: no optimizer is built here, which would
    JIT-compile DeepSpeed's ops)."""
    from deepspeed.runtime.engine import DeepSpeedEngine

    src = inspect.getsource(DeepSpeedEngine._configure_basic_optimizer)
    src += inspect.getsource(DeepSpeedEngine.get_optimizer_configuration)
    for name in opt.DEEPSPEED_OPTIMIZERS:
        for offloaded in (False, True):
            cls = opt.built({"type": name}, offloaded).cls.split(".")[-1]
            assert cls in src or cls == "MuonWithAuxAdam" and "MuonWithAuxAdam(" in src, cls
    assert "getattr(torch.optim, self.optimizer_name())" in src
    assert "'max_grad_norm' is not supported" in src


@pytest.mark.parametrize("name", ["Adam", "ADAM", "adamw", "AdamW", "Lamb", "LION", "Muon", "SGD",
                                  "sgd", "RMSprop", "OneBitAdam", "OnebitAdam", "ZeroOneAdam",
                                  "OneBitLamb", "PagedAdamW", "Adafactor"])
def test_name_kept_as_deepspeed_keeps_it(name, monkeypatch):
    """DeepSpeedConfig lowercases its own names only (config.py:519); a name neither its own nor
    torch.optim's is one DeepSpeed 0.19.8 builds nothing for (engine.py:2548 AttributeError)."""
    import torch

    dsc = ranks_seen_by_deepspeed(monkeypatch, 1)
    kept = dsc.DeepSpeedConfig(_cfg(name)).optimizer_name
    b = opt.built({"type": name}, False)
    if kept in opt.DEEPSPEED_OPTIMIZERS or hasattr(torch.optim, kept):
        assert b is not None and b.name == kept
    else:
        assert b is None
        with pytest.raises(ConfigError, match=rf"optimizer\.type='{name}': DeepSpeed 0\.19\.8 "
                           "builds no optimizer of that name"):
            parse_ds_config(_cfg(name))


@pytest.mark.parametrize("cls, params, states", [
    ("Adam", {}, 2), ("AdamW", {}, 2), ("Adagrad", {}, 1), ("SGD", {}, 0),
    ("SGD", {"momentum": 0.9}, 1), ("RMSprop", {}, 1), ("RMSprop", {"momentum": 0.9}, 2),
    ("RMSprop", {"momentum": 0.9, "centered": True}, 3), ("Adadelta", {}, 2), ("NAdam", {}, 2),
    ("RAdam", {}, 2), ("Adamax", {}, 2)])
def test_state_count_is_torchs(cls, params, states):
    """States per parameter: the parameter-sized tensors torch's optimizer keeps after a step."""
    import torch

    p = torch.nn.Parameter(torch.ones(8, 4))
    o = getattr(torch.optim, cls)([p], lr=1e-3, **params)
    p.grad = torch.ones_like(p)
    o.step()
    kept = sum(1 for v in o.state[p].values() if torch.is_tensor(v) and v.shape == p.shape)
    assert kept == states == opt.fp32_states(opt.built({"type": cls}, False).name, params)


@pytest.mark.parametrize("cfg", [_cfg("AdamW"), _cfg("Adam", ZERO2_CPU), _cfg("adam"),
                                 _cfg("AdamW", {"stage": 3, "offload_optimizer": {"device": "cpu"}}),
                                 {**_cfg("AdamW"), "optimizer": {"type": "AdamW", "params": {
                                     "torch_adam": True}}}])
def test_adam_is_simulated(cfg):
    s, _ = parse_ds_config(cfg)
    assert s.raw["optimizer"]["type"] == cfg["optimizer"]["type"]


@pytest.mark.parametrize("cfg, fragment", [
    (_cfg("Lamb"), "builds FusedLamb, which ZeRO refuses unless zero_allow_untested_optimizer"),
    (_cfg("SGD"), "builds torch.optim.SGD, which ZeRO refuses"),
    (_cfg("Lamb", zero_allow_untested_optimizer=True), "builds FusedLamb (2 fp32 state(s)"),
    (_cfg("Lion"), "builds FusedLion (1 fp32 state(s) per parameter), but tierlab"),
    (_cfg("Lion", ZERO2_CPU), "builds DeepSpeedCPULion on the host"),
    (_cfg("Adagrad", ZERO2_CPU), "builds DeepSpeedCPUAdagrad on the host (offload_optimizer) "
                                 "(1 fp32 state(s)"),
    (_cfg("SGD", {"stage": 0}), "builds torch.optim.SGD (0 fp32 state(s)"),
    (_cfg("Muon"), "builds MuonWithAuxAdam"),
    ({**_cfg("AdamW", ZERO2_CPU), "optimizer": {"type": "AdamW", "params": {"torch_adam": True}}},
     "builds torch.optim.AdamW on the host"),
    (_cfg("OnebitAdam"), "builds no optimizer of that name"),
    (_cfg("ZeroOneAdam", ZERO2_CPU), "builds no optimizer of that name"),
    (_cfg("PagedAdamW"), "builds no optimizer of that name"),
    (_cfg("sgd", {"stage": 0}), "(did you mean 'SGD'?)"),
    ({**_cfg("AdamW"), "optimizer": {"type": "AdamW", "params": {"max_grad_norm": 1.0}}},
     "optimizer.params.max_grad_norm: DeepSpeed 0.19.8 refuses it"),
])
def test_other_optimizers_refused_by_name(cfg, fragment):
    with pytest.raises(ConfigError) as e:
        parse_ds_config(cfg, where="mine.json")
    text = str(e.value)
    assert text.startswith("mine.json: optimizer.") and fragment in text and "\n" not in text


def test_optimizer_block_without_type_is_no_optimizer():
    """An optimizer block without a type builds none (engine.py has_optimizer): tierlab's AdamW,
    said as for a config without the block."""
    s, w = parse_ds_config({"zero_optimization": {"stage": 2},
                            "optimizer": {"params": {"lr": 3e-4}}})
    assert s.raw["optimizer"]["type"] == "AdamW" and s.raw["optimizer"]["params"] == {"lr": 3e-4}
    assert any("has no optimizer type" in x for x in w)


PARALLEL = [({"tensor_parallel": {"autotp_size": 2}}, "tensor_parallel.autotp_size=2"),
            ({"sequence_parallel_size": 4}, "sequence_parallel_size=4"),
            ({"compile": {"deepcompile": True, "passes": ["autosp"]}}, "compile.passes=['autosp']"),
            ({"compile": {"deepcompile": True}}, "compile.deepcompile=true"),
            ({"pipeline": {"stages": 2}}, "pipeline.stages=2"),
            ({"expert_parallel": {"enabled": True, "autoep_size": 2}}, "expert_parallel=")]


@pytest.mark.parametrize("keys, fragment", PARALLEL)
def test_parallelism_refused_by_key(keys, fragment, monkeypatch):
    """DeepSpeedConfig accepts each key (it is DeepSpeed's), and tierlab refuses it by name."""
    dsc = ranks_seen_by_deepspeed(monkeypatch, 8)
    dsc.DeepSpeedConfig({**keys, "train_micro_batch_size_per_gpu": 1})
    with pytest.raises(ConfigError, match="tierlab") as e:
        parse_ds_config({"zero_optimization": {"stage": 2}, **keys}, Flags(world_size=8),
                        where="mine.json")
    assert str(e.value).startswith(f"mine.json: {fragment}")


def test_parallelism_off_is_data_parallel():
    for keys in ({"tensor_parallel": {"autotp_size": 1}}, {"tensor_parallel": {"autotp_size": 0}},
                 {"sequence_parallel_size": 1}, {"compile": {"deepcompile": False}},
                 {"pipeline": {"stages": "auto"}}, {"expert_parallel": {"enabled": False}}):
        assert parallel.refusals(keys) == []
        parse_ds_config({"zero_optimization": {"stage": 2}, **keys})


def test_every_problem_in_one_line():
    cfg = {**_cfg("Lion"), "sequence_parallel_size": 2, "tensor_parallel": {"autotp_size": 2}}
    with pytest.raises(ConfigError) as e:
        parse_ds_config(cfg, where="mine.json")
    text = str(e.value)
    assert "\n" not in text and text.count("; ") >= 2
    for key in ("optimizer.type='Lion'", "sequence_parallel_size=2", "tensor_parallel.autotp_size"):
        assert key in text


@pytest.mark.parametrize("name, fragment", [("OnebitAdam", "builds no optimizer of that name"),
                                            ("Lion", "tierlab times and sizes only Adam's")])
def test_preflight_does_not_say_ok(tmp_path, name, fragment):
    from _cli import assert_user_error, run

    p = tmp_path / "c.json"
    p.write_text(json.dumps(_cfg(name, ZERO2_CPU)))
    args = ["-m", "tinyllama-1.1b", "-H", "dgx-a100", "--gpus", "1", "-c", str(p)]
    r = run("preflight", "--no-probe", *args)
    assert "ok" not in r.output.split("error:")[0]
    assert_user_error(r, str(p), f"optimizer.type='{name}'", fragment)
    assert_user_error(run("simulate", *args), str(p), f"optimizer.type='{name}'")
    p.write_text(json.dumps(_cfg("AdamW", ZERO2_CPU)))
    assert run("preflight", "--no-probe", *args).exit_code == 0
