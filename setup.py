"""Builds the scheduling core, the policies and the simulator's event loop with mypyc.

They stay plain Python (typed), and compiled they run about twice as fast: the simulator replays
a whole trace in seconds. Without a C compiler, or with CORRAL_PURE=1, corral installs as plain
Python and behaves the same, only slower. Metadata lives in pyproject.toml.
"""

import os
import sys

from setuptools import setup

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


setup(ext_modules=extensions())
