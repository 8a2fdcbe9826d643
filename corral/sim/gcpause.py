"""`no_cyclic_gc()`: the cyclic garbage collector paused for a block of work that makes many
long-lived objects and no reference cycles (loading a trace, making the simulator's jobs, the
replay, the metrics' sweep; tests/test_sim_gc.py checks that they make none). With it on,
each generation-2 pass walks every object made so far again: about twice the time to load
the Philly table, half the sweep's, a third of making its jobs, 5 % of a replay."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """The cyclic collector off for the block, then back as it was."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
