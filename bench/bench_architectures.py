"""Issue 30's audit: every model_type the installed transformers maps to a causal LM
(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES), its default config class written to a config.json and
loaded by tierlab as a user's file is (`tierlab.profiles.load.load_model`): how many load, how
many are refused in one line (and why, grouped), and any traceback or hang. A loaded model is
counted within 0.5% of transformers' own meta-device count, total and active: the loader checks
that itself (profiles/hf_build.py COUNT_TOLERANCE) and refuses otherwise.

    .venv/bin/python bench/bench_architectures.py [--verbose] [--only TYPE ...] [--timeout-s S]

Default configs are transformers' own (often a large model's sizes; a few are incomplete and
transformers cannot build them: reported as such). The causal-LM classes of BERT-style models
(BertLMHeadModel and kin) and of encoder-decoders (BartForCausalLM and kin: the decoder alone)
load as the decoders they are. Prints; asserts nothing. About 30 s on a 2-core machine.
"""
from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

OUTCOMES = ("ok", "refused", "no default config", "traceback", "hang")


class _Hang(Exception):
    pass


def _alarm(*_):
    raise _Hang()


def judge(model_type: str, folder: Path, timeout_s: int) -> tuple[str, str]:
    """(outcome, detail) of one model_type's default config through tierlab's loader."""
    from transformers import AutoConfig

    from tierlab.errors import ConfigError
    from tierlab.profiles.load import load_model

    try:
        text = AutoConfig.for_model(model_type).to_json_string()
    except Exception as e:  # noqa: BLE001 - transformers' own validators refuse some defaults
        return "no default config", f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
    path = folder / f"{model_type}.json"
    path.write_text(text)
    signal.alarm(timeout_s)
    try:
        m = load_model(str(path))
        active = f" ({m.active_params:,} active)" if m.active_params != m.n_params else ""
        return "ok", f"{m.n_params:,} parameters{active}"
    except ConfigError as e:
        return "refused", str(e).split("not modelled: ")[-1].replace(str(path) + ": ", "")[:160]
    except _Hang:
        return "hang", f"no answer in {timeout_s} s"
    except Exception as e:  # noqa: BLE001 - the defect this audit looks for
        return "traceback", f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    finally:
        signal.alarm(0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verbose", action="store_true", help="one line per model_type")
    ap.add_argument("--only", nargs="*", default=None, metavar="TYPE", help="these types only")
    ap.add_argument("--timeout-s", type=int, default=60, help="a load slower than this is a hang")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    signal.signal(signal.SIGALRM, _alarm)
    types = sorted(args.only or MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    results, t0 = {}, time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for kind in types:
            results[kind] = judge(kind, Path(tmp), args.timeout_s)
            if args.verbose:
                print(f"{kind:28s} {results[kind][0]:18s} {results[kind][1]}", flush=True)
    counts = Counter(outcome for outcome, _ in results.values())
    print(f"transformers {transformers.__version__}: {len(types)} causal-LM model types, "
          f"default configs, in {time.perf_counter() - t0:.0f} s")
    print("  " + ", ".join(f"{o} {counts.get(o, 0)}" for o in OUTCOMES))
    for outcome in ("traceback", "hang"):
        for kind, (o, detail) in results.items():
            if o == outcome:
                print(f"  {outcome}: {kind}: {detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
