"""The rule and scenario tests once more in check mode (CORRAL_CHECK_MEMOS=1): every memoised
answer with a check (corral/core/memos.py) is computed again from scratch where it is used,
and a difference fails the run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from corral.core.memos import same

TESTS = Path(__file__).parent
CHECKED = [
    "test_rules.py",
    "test_examples.py",
    "test_skipped_cycles.py",
    "test_plan_memo.py",
    "test_fair_walk.py",
    "test_fair_jump.py",
    "test_rank_walk_held.py",
    "test_fair_traces.py",
]


def test_a_memo_that_differs_from_scratch_fails_loudly():
    same("plan", (1, 2), (1, 2))
    with pytest.raises(AssertionError, match=r"memo plan: kept \(1, 2\), from scratch \(1, 3\)"):
        same("plan", (1, 2), (1, 3))


def test_rules_and_scenarios_in_check_mode():
    env = {**os.environ, "CORRAL_CHECK_MEMOS": "1"}
    args = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]
    run = subprocess.run(
        [*args, *(str(TESTS / name) for name in CHECKED)],
        env=env,
        cwd=TESTS.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout
