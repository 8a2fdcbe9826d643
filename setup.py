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
import sysconfig
import tempfile
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import BaseError, CCompilerError

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


def extensions() -> list[Extension]:
    """What setup() is told to build: a stand-in that BuildWithProfile replaces by mypyc's
    extensions, so that mypyc runs once per install, in the build, not each time pip runs
    this file (for its requirements, its metadata and the wheel)."""
    if os.environ.get("CORRAL_PURE") == "1":
        return []
    return [Extension("corral._compiled_core", sources=[])]


def compiler_found() -> bool:
    """Is the C compiler Python was built with (or $CC) on this machine?"""
    if os.name != "posix":
        return True  # (MSVC is looked up by setuptools itself; a failure is caught below)
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shutil.which(cc.split()[0]) is not None


class BuildWithProfile(build_ext):
    """Profile-guided build (PGO), as CPython's own: compile with instrumentation, replay
    pgo_train.py on it, compile again with GCC using the profile. CORRAL_PGO=0 skips the
    profile (half the build time, a slower core); so does any failure to collect or use it
    (another compiler, say). Without mypyc or a working C compiler, corral installs as plain
    Python."""

    def finalize_options(self) -> None:
        # Only a build finalizes this command: mypyc runs here, once.
        self.distribution.ext_modules = self._mypyc_extensions()
        super().finalize_options()

    def run(self) -> None:
        if not self.extensions:
            return
        self.compiler_name = self.compiler  # (build_ext.run replaces it by the compiler it made)
        self.mypyc_flags = [ext.extra_compile_args for ext in self.extensions]  # kept for each
        try:
            self._build()
        except (OSError, CCompilerError, BaseError) as err:
            print(f"corral: cannot compile the core ({err}); installing as plain Python",
                  file=sys.stderr)  # fmt: skip
            for ext in self.extensions:
                Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)
            self.extensions = []

    def _mypyc_extensions(self) -> list[Extension]:
        try:
            from mypyc.build import mypycify
        except ImportError:
            print("corral: mypyc is not available, installing as plain Python", file=sys.stderr)
            return []
        if not compiler_found():
            print("corral: no C compiler found, installing as plain Python", file=sys.stderr)
            return []
        flags = ["--ignore-missing-imports", "--follow-imports=silent"]
        return mypycify(flags + COMPILED, opt_level="3")

    def _build(self) -> None:
        if os.environ.get("CORRAL_PGO") == "0":
            self._compile([], [])
            return
        profile = Path(self.build_temp).resolve() / "pgo"
        shutil.rmtree(profile, ignore_errors=True)
        try:
            self._compile([f"-fprofile-generate={profile}"], [f"-fprofile-generate={profile}"])
            self._train(profile)
            use = [f"-fprofile-use={profile}", "-fprofile-correction", "-Wno-missing-profile"]
            self._compile(use, [])
        except (OSError, subprocess.CalledProcessError, CCompilerError, BaseError) as err:
            print(f"corral: no profile-guided build ({err}); building without", file=sys.stderr)
            self._compile([], [])

    def _compile(self, cflags: list[str], ldflags: list[str]) -> None:
        for ext, own in zip(self.extensions, self.mypyc_flags, strict=True):
            ext.extra_compile_args = [*own, *CFLAGS, *cflags]
            ext.extra_link_args = ldflags
        self.force = True  # the same sources, other flags
        self.compiler = self.compiler_name  # a name for build_ext.run, even after a failure
        super().run()

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
