"""The compiled build: CI runs the tests on it, and a stale one refuses to load."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import corral
from corral.core import cycle


def test_core_runs_compiled_unless_installed_plain():
    # The default install compiles the core with mypyc (setup.py): the tests must run on what
    # users run. CORRAL_PURE=1 at install time (and in the environment here) opts out.
    plain = os.environ.get("CORRAL_PURE") == "1"
    assert cycle.__file__.endswith(".py") == plain, f"CORRAL_PURE={plain}, core {cycle.__file__}"


def _checkout(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "setup.py").write_text("")
    core = tmp_path / "corral" / "core"
    core.mkdir(parents=True)
    source, built = core / "cycle.py", core / "cycle.cpython-311-x86_64-linux-gnu.so"
    source.write_text("")
    built.write_bytes(b"")
    return source, built


def test_a_source_edited_after_the_build_is_refused(tmp_path):
    source, built = _checkout(tmp_path)
    later = time.time() + 10
    os.utime(source, (later, later))
    with pytest.raises(ImportError, match=r"cycle\.py changed after it was compiled"):
        corral.refuse_stale_build(tmp_path / "corral")


def test_a_fresh_build_loads(tmp_path):
    source, built = _checkout(tmp_path)
    later = time.time() + 10
    os.utime(built, (later, later))
    corral.refuse_stale_build(tmp_path / "corral")  # no error
    os.utime(source, (later + 10, later + 10))
    (tmp_path / "setup.py").unlink()  # an installed wheel: not checked
    corral.refuse_stale_build(tmp_path / "corral")


def test_the_profile_workload_runs_every_policy():
    # setup.py replays pgo_train.py on the instrumented core and falls back to a build without
    # a profile (only a warning) if it fails: this is where a break in it shows.
    script = Path(__file__).parent.parent / "pgo_train.py"
    out = subprocess.run(
        [sys.executable, str(script), "200"], capture_output=True, text=True, check=True
    ).stdout
    runs = re.findall(r"pgo_train: (\w+), (\d+) jobs, mixed=(\w+): (\d+) cycles", out)
    policies = {"fair", "fifo", "las", "srtf"}
    assert {(p, mixed) for p, _, mixed, _ in runs} == {
        (p, m) for p in policies for m in ("False", "True")
    }
    assert all(int(cycles) > 0 for *_, cycles in runs), out
