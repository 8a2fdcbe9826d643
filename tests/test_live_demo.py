"""`corral demo --fast` runs end to end: a reclaim happens and the summary is printed."""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import CLI

pytestmark = pytest.mark.live


def test_demo_fast_shows_a_reclaim_and_a_summary():
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    done = subprocess.run(
        [*CLI, "demo", "--fast"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "summary" in out and "makespan" in out
    assert "preempted for vision/finetune" in out
    assert out.count("succeeded") >= 9 and "failed" in out  # lint-data exits 1 on purpose
    # It says what it will show and how to read it, and piped it tells the story line by
    # line rather than printing only its last frame.
    assert out.startswith("corral demo: a real control plane")
    assert "GPUS 2x2" in out and "ATT " in out and "| marks the" in out
    assert "exits 1 on purpose" in out and "What to try next" in out
    assert "nlp/sweep-1       preempted: its GPUs go back to vision" in out
    assert "vision/finetune   started, attempt 0" in out
    assert "nlp/sweep-1       started, attempt 1" in out
