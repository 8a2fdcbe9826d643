"""The compiled build: CI runs the tests on it, and a stale one falls back to the sources."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import corral
from corral.core import cycle


def test_core_runs_compiled_unless_installed_plain():
    # The default install compiles the core with mypyc (setup.py): the tests must run on what
    # users run. CORRAL_PURE=1 at install time (and in the environment here) opts out.
    plain = os.environ.get("CORRAL_PURE") == "1"
    assert cycle.__file__.endswith(".py") == plain, f"CORRAL_PURE={plain}, core {cycle.__file__}"


def _checkout(tmp_path: Path, edited: str | None) -> Path:
    """A source checkout of corral whose compiled modules are empty files: loading one fails,
    so a run that gets through loaded every module from its source. `edited`: the module
    changed after the build (else the build is the newer)."""
    shutil.copytree(Path(corral.__file__).parent, tmp_path / "corral", ignore=_built)
    (tmp_path / "setup.py").write_text("")
    built = time.time() + 10
    for module in ("core/cycle", "core/decide", "policies/fair"):
        so = tmp_path / "corral" / f"{module}.cpython-311-x86_64-linux-gnu.so"
        so.write_bytes(b"")
        os.utime(so, (built, built))
    if edited is not None:
        os.utime(tmp_path / "corral" / f"{edited}.py", (built + 10, built + 10))
    return tmp_path


def _built(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if n.endswith((".so", ".pyd")) or n == "__pycache__"]


def _load(checkout: Path) -> subprocess.CompletedProcess:
    code = "from corral.policies.fair import Fair; import corral.core.cycle as c; print(c.__file__)"
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=checkout, env=env, capture_output=True, text=True
    )


def test_a_source_edited_after_the_build_runs_the_core_from_source(tmp_path):
    run = _load(_checkout(tmp_path, edited="core/decide"))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().endswith("cycle.py")
    warning = run.stderr.splitlines()
    assert len(warning) == 1 and "decide.py changed after it was compiled" in warning[0]
    assert "plain Python" in warning[0]


def test_a_fresh_build_is_loaded(tmp_path):
    run = _load(_checkout(tmp_path, edited=None))
    assert run.returncode != 0 and ".so" in run.stderr  # the (empty) compiled module
