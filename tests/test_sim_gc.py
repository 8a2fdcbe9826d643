"""The simulator turns the cyclic garbage collector off while it runs (see Simulator.run): that
is only safe if a replay leaves no reference cycles behind. Each built-in policy replays a
workload with preemptions, reservations and rejections, and no object of corral's may be
found in a garbage cycle afterwards."""

from __future__ import annotations

import gc
import random

import pytest
from simkit import job, load, quota, simulate


def workload() -> dict:
    rng = random.Random(7)
    jobs = []
    for i in range(60):
        extra = {"priority": rng.choice([-5, 5])} if rng.random() < 0.2 else {}
        jobs.append(
            job(
                f"j{i:02d}",
                rng.choice(["a", "b", "c"]),
                rng.choice([1, 2, 4, 8, 16]),  # 16 per worker fits no node: rejected
                workers=rng.choice([1, 2]),
                submit=10.0 * i,
                duration=rng.choice([60, 600, 3000]),
                **extra,
            )
        )
    cluster = [{"name": "n{0..2}", "accelerator": "gpu", "count": 8}]
    q = quota({"a": {"gpu": 2}, "b": {"gpu": 1}, "c": {"gpu": 1}})
    return {"cluster": cluster, "quota": q, "jobs": jobs}


def _ours(obj: object) -> bool:
    module = getattr(obj, "__module__", None) or type(obj).__module__
    return isinstance(module, str) and module.startswith("corral")


@pytest.mark.parametrize("policy", ["fair", "fifo", "las", "srtf"])
def test_a_replay_leaves_no_reference_cycles(policy: str):
    scenario = load({**workload(), "scheduler": {"policy": policy}})
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        result = simulate(scenario)
        assert gc.isenabled()  # turned back on
        gc.collect()
        leaked = [type(o).__name__ for o in gc.garbage if _ours(o)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert result.cycles > 10
    if policy != "fifo":
        assert any(e["event"] == "preempt" for e in result.events)
    assert leaked == []


def test_a_replay_leaves_the_collector_off_if_it_was():
    scenario = load({**workload(), "scheduler": {"policy": "fair"}})
    gc.disable()
    try:
        simulate(scenario)
        assert not gc.isenabled()
    finally:
        gc.enable()
