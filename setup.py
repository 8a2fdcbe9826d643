"""Builds the scheduling core, the policies, the simulator's event loop and the metrics' sweep
with mypyc.

They stay plain Python (typed), and compiled they run about twice as fast: the simulator replays
a whole trace in seconds. Without mypyc or a C compiler, or with CORRAL_PURE=1, corral installs
as plain Python and behaves the same, only slower. (A profile-guided build was measured against
this one on the whole-trace replay, side by side: under 10 % faster for twice the build time,
so it went; README, Benchmarks.) Metadata lives in pyproject.toml.
"""

import os
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import BaseError, CCompilerError

# Standard flags for a shared library whose own calls need no interposition (as CPython is
# built): calls between compiled functions go direct and may be inlined.
CFLAGS = ["-fno-semantic-interposition"]

COMPILED = [
    "corral/core/admission.py",
    "corral/core/cycle.py",
    "corral/core/decide.py",
    "corral/core/fit.py",
    "corral/core/freemap.py",
    "corral/core/memos.py",
    "corral/core/model.py",
    "corral/core/order.py",
    "corral/core/pending.py",
    "corral/core/policy.py",
    "corral/core/preempt.py",
    "corral/core/queues.py",
    "corral/core/reasons.py",
    "corral/core/reserve.py",
    "corral/core/slots.py",
    "corral/core/snapshot.py",
    "corral/policies/fair.py",
    "corral/policies/fair_memos.py",
    "corral/policies/fair_walk.py",
    "corral/policies/fifo.py",
    "corral/policies/las.py",
    "corral/policies/ranked.py",
    "corral/policies/srtf.py",
    "corral/sim/engine.py",
    "corral/sim/sweep.py",
]


def extensions() -> list[Extension]:
    """What setup() is told to build: a stand-in that BuildCore replaces by mypyc's
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


class BuildCore(build_ext):
    """mypyc's extensions, or none (plain Python) without mypyc, without a C compiler or
    when compiling fails."""

    def finalize_options(self) -> None:
        # Only a build finalizes this command: mypyc runs here, once.
        self.distribution.ext_modules = self._mypyc_extensions()
        super().finalize_options()

    def run(self) -> None:
        for ext in self.extensions:
            ext.extra_compile_args = [*ext.extra_compile_args, *CFLAGS]
        try:
            super().run()
        except (OSError, CCompilerError, BaseError) as err:
            print(f"corral: cannot compile the core ({err}); installing as plain Python",
                  file=sys.stderr)  # fmt: skip
            for ext in self.extensions:
                Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)
            self.extensions = []

    def _mypyc_extensions(self) -> list[Extension]:
        if os.environ.get("CORRAL_PURE") == "1":
            return []
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


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildCore})
