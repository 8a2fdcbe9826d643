"""The simulator's skipped cycles are exact: an instant whose only events are arrivals that the
last decision says change nothing runs no cycle, nor does one the policy finds idle, and the
event log must be the one a cycle at every event gives. Each random workload is run both ways
under every built-in policy.

The skip must also hold when a new job comes before the job holding the reservation: it may
fit in held capacity, or take the reservation over and free what was held for others.
"""

from __future__ import annotations

import random

import pytest
from simkit import job, load, quota, simulate

from corral.core.snapshot import Snapshot
from corral.policies.fair import Fair
from corral.policies.fifo import Fifo


def workload(seed: int) -> dict:
    """Three projects with unequal shares on a small pool; small and whole-node gangs,
    priorities, some max_runtimes, arrivals spread out so that many come alone."""
    rng = random.Random(seed)
    jobs = []
    t = 0.0
    for i in range(80):
        t += rng.choice([0, 5, 30, 60, 120])
        extra = {}
        if rng.random() < 0.15:
            extra["priority"] = rng.choice([-5, 5])
        if rng.random() < 0.2:
            extra["max_runtime"] = rng.choice([300, 3000])
        jobs.append(
            job(
                f"j{i:02d}",
                rng.choice(["a", "a", "b", "c"]),
                rng.choice([1, 1, 2, 4, 8]),
                workers=rng.choice([1, 1, 2]),
                submit=t,
                duration=rng.choice([60, 200, 600, 2000]),
                **extra,
            )
        )
    cluster = [{"name": "n{0..3}", "accelerator": "gpu", "count": 8}]
    q = quota({"a": {"gpu": 2}, "b": {"gpu": 1}, "c": {"gpu": 1}})
    return {"cluster": cluster, "quota": q, "jobs": jobs}


@pytest.mark.parametrize("policy", ["fair", "fifo", "las", "srtf"])
def test_skipped_arrival_cycles_change_no_event(policy: str):
    skipped = 0
    for seed in range(12):
        scenario = load({**workload(seed), "scheduler": {"policy": policy}})
        every = simulate(scenario, shortcuts=False)
        fewer = simulate(scenario)
        assert fewer.events == every.events, f"seed {seed}"
        skipped += every.cycles - fewer.cycles
    assert skipped > 0  # the skip is exercised, not just allowed


def counting(kind: type) -> type:
    """The policy class, counting the cycles it finds idle (those the simulator skips)."""

    class Counting(kind):
        def __init__(self, config=None) -> None:
            super().__init__(config)
            self.idle_cycles = 0

        def idle(self, snap: Snapshot) -> bool:
            found = super().idle(snap)
            self.idle_cycles += found
            return found

    return Counting


@pytest.mark.parametrize("kind", [Fair, Fifo])
def test_idle_cycles_skipped_change_no_event(kind):
    """Idle cycles are skipped (the count is of cycles skipped) and change no event: fair's
    reclaims by projects back within their guarantee and its outranking jobs still happen."""
    idle = preempted = 0
    for seed in range(12):
        scenario = load(workload(seed))
        every = simulate(scenario, kind(), shortcuts=False)
        policy = counting(kind)()
        fewer = simulate(scenario, policy)
        assert fewer.events == every.events, f"seed {seed}"
        idle += policy.idle_cycles
        preempted += sum(e["event"] == "preempt" for e in fewer.events)
    assert idle > 20
    assert preempted > 0 or kind is Fifo
