"""Builds the scheduling core, the policies and the simulator's event loop with mypyc.

They stay plain Python (typed), and compiled they run about twice as fast: the simulator replays
a whole trace in seconds. Without a C compiler, or with CORRAL_PURE=1, corral installs as plain
Python and behaves the same, only slower. GCC compiles the C twice, the second time guided by a
profile of pgo_train.py (about 15 % faster; CORRAL_PGO=0 skips it). Metadata lives in
pyproject.toml.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError

HERE = Path(__file__).resolve().parent
# Standard flags for a shared library whose own calls need no interposition (as CPython is
# built): calls between compiled functions go direct and may be inlined.
CFLAGS = ["-fno-semantic-interposition"]

COMPILED = [
    "corral/core/admission.py",
    "corral/core/cycle.py",
    "corral/core/decide.py",
    "corral/core/fit.py",
    "corral/core/model.py",
    "corral/core/order.py",
    "corral/core/policy.py",
    "corral/core/preempt.py",
    "corral/core/reasons.py",
    "corral/core/reserve.py",
    "corral/core/snapshot.py",
    "corral/policies/fair.py",
    "corral/policies/fifo.py",
    "corral/policies/las.py",
    "corral/policies/ranked.py",
    "corral/policies/srtf.py",
    "corral/sim/engine.py",
]


def extensions() -> list:
    if os.environ.get("CORRAL_PURE") == "1":
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("corral: mypyc is not available, installing as plain Python", file=sys.stderr)
        return []
    flags = ["--ignore-missing-imports", "--follow-imports=silent"]
    return mypycify(flags + COMPILED, opt_level="3")


class BuildWithProfile(build_ext):
    """Profile-guided build (PGO), as CPython's own: compile with instrumentation, replay
    pgo_train.py on it, compile again with GCC using the profile. CORRAL_PGO=0 skips the
    profile (half the build time, a slower core); so does any failure to collect or use it
    (another compiler, say)."""

    def run(self) -> None:
        self.mypyc_flags = [ext.extra_compile_args for ext in self.extensions]  # kept for each
        if not self.extensions or os.environ.get("CORRAL_PGO") == "0":
            self._compile([], [])
            return
        profile = Path(self.build_temp).resolve() / "pgo"
        shutil.rmtree(profile, ignore_errors=True)
        try:
            self._compile([f"-fprofile-generate={profile}"], [f"-fprofile-generate={profile}"])
            self._train(profile)
            use = [f"-fprofile-use={profile}", "-fprofile-correction", "-Wno-missing-profile"]
            self._compile(use, [])
        except (OSError, subprocess.CalledProcessError, CCompilerError) as err:
            print(f"corral: no profile-guided build ({err}); building without", file=sys.stderr)
            self._compile([], [])

    def _compile(self, cflags: list[str], ldflags: list[str]) -> None:
        for ext, own in zip(self.extensions, self.mypyc_flags, strict=True):
            ext.extra_compile_args = [*own, *CFLAGS, *cflags]
            ext.extra_link_args = ldflags
        self.force = True  # the same sources, other flags
        compiler = self.compiler  # (run sets it to the compiler it made from this name)
        super().run()
        self.compiler = compiler

    def _train(self, profile: Path) -> None:
        """Run pgo_train.py on the instrumented build: corral's sources with it beside them."""
        with tempfile.TemporaryDirectory() as tree:
            shutil.copytree(HERE / "corral", Path(tree) / "corral", ignore=_built)
            shutil.copy2(HERE / "pgo_train.py", tree)  # (run from there: its folder comes first)
            for ext in self.extensions:
                built = Path(tree) / self.get_ext_filename(ext.name)
                built.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(self.get_ext_fullpath(ext.name), built)
            path = os.pathsep.join([tree, *sys.path])
            subprocess.run(
                [sys.executable, "pgo_train.py"],
                env={**os.environ, "PYTHONPATH": path},
                cwd=tree,
                check=True,
                stdout=subprocess.DEVNULL,
            )
        if not any(profile.rglob("*.gcda")):
            raise OSError("the replay wrote no profile")


def _built(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if n.endswith((".so", ".pyd")) or n == "__pycache__"]


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildWithProfile})
