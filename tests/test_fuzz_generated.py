"""Issue 34: the audit is part of the tests. The generated fuzz suite (tests/_fuzzgen.py: over
1,000 seeded cases across every CPU verb and every input kind, plus the training verbs'
refusals before training) runs in-process, each case under a 20 s alarm, and every case must be
`ok` by the oracle: no traceback, no hang, no silent acceptance of bad input, no file lost,
touched or half-written, and every exit 2 is one `error:` line naming its culprit.

The cases run in batches of BATCH (one pytest item each: the per-item overhead is larger than a
case); a failing batch lists every failing case with its id, its class and what it printed.
`bench/fuzz_audit.py` prints the class table over the same cases.
"""
from __future__ import annotations

import collections
import shutil

import pytest

import _fuzzgen

CASES = _fuzzgen.cases()
BATCH = 60
BATCHES = [CASES[i:i + BATCH] for i in range(0, len(CASES), BATCH)]


def test_the_suite_is_big_deterministic_and_covers_every_verb_and_kind():
    assert len(CASES) >= 1000
    assert [c.id for c in _fuzzgen.cases()] == [c.id for c in CASES]
    assert len({c.id for c in CASES}) == len(CASES)
    verbs = {c.verb for c in CASES}
    assert verbs >= {"simulate", "memory", "plan", "sweep", "plot", "preflight", "profiles",
                     "validate", "run", "compare", "calibrate"}
    kinds = collections.Counter(c.kind for c in CASES)
    assert set(kinds) >= {"ds_config", "hf_config", "model_yaml", "hw_system", "hw_gpu",
                          "hw_cpu", "hw_nvme", "software", "set", "vary", "hw_flag", "number",
                          "output", "measurement", "raw", "hostile", "pretrain"}
    assert sum(c.expect == "refuse" for c in CASES) > 500


@pytest.mark.parametrize("batch", range(len(BATCHES)),
                         ids=[f"{b[0].id}..{b[-1].id}" for b in BATCHES])
def test_generated_cases(tmp_path, batch):
    bad = []
    for i, case in enumerate(BATCHES[batch]):
        out = _fuzzgen.run_case(case, tmp_path / str(i))
        shutil.rmtree(tmp_path / str(i), ignore_errors=True)
        if out.cls != "ok":
            bad.append(f"{out.cls}: {case.id}: {' '.join(case.args)[:200]}\n    {out.detail}\n"
                       f"    {out.output.strip()[-300:]}")
    assert not bad, f"{len(bad)} of {len(BATCHES[batch])} cases failed:\n" + "\n".join(bad)
