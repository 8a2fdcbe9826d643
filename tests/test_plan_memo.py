"""The memoised reservation plan (`Snapshot.memos.plan`) is always the plan made afresh.

A blocked head job usually keeps its reservation for many cycles, so `plan_reservation`
reuses the previous plan when what it read is unchanged. Here every plan of busy random
scenarios is made twice, with the memo and without it, and the two must be equal.
"""

from __future__ import annotations

import random

import pytest
from simkit import job, load, quota, simulate

from corral.core.cycle import Cycle, Reservation
from corral.core.model import Job
from corral.core.policy import Policy
from corral.core.reserve import plan_reservation
from corral.policies.fair import Fair
from corral.policies.fifo import Fifo


def busy(seed: int, policy: str, domains: int) -> dict:
    """Gangs of every size on a small pool (one or two domains); some exclusive, some with a
    max_runtime, durations that often end at one instant."""
    rng = random.Random(seed)
    jobs = []
    for i in range(90):
        extra = {}
        if rng.random() < 0.2:
            extra["max_runtime"] = rng.choice([300, 4000])
        if rng.random() < 0.1:
            extra["priority"] = 5
        jobs.append(
            job(
                f"j{i:02d}",
                rng.choice(["p0", "p1"]),
                rng.choice([1, 1, 2, 4, 8]),
                workers=rng.choice([1, 1, 1, 2, 3]),
                slices=rng.choice([1, 1, 1, 2]) if domains > 1 else 1,
                exclusive=domains > 1 and rng.random() < 0.1,
                submit=rng.choice([0, 0, 10, 50]) + 40 * (i // 10),
                duration=rng.choice([100, 100, 250, 900]),
                **extra,
            )
        )
    last = 6 // domains - 1
    cluster = [
        {"name": f"n{d}x{{0..{last}}}", "accelerator": "gpu", "count": 8, "domain": f"d{d}"}
        for d in range(domains)
    ]
    q = quota({"p0": {"gpu": 1}, "p1": {"gpu": 1}})
    return {"cluster": cluster, "quota": q, "scheduler": {"policy": policy}, "jobs": jobs}


def _key(res: Reservation | None) -> tuple | None:
    return None if res is None else (res.job.id, res.nodes, res.due, res.held)


def _checking(base: type[Policy], reused: list[bool]) -> Policy:
    """`base`, planning each reservation both ways (memoised and afresh) when a job becomes
    the reserver: the plan decide makes next, with nothing changed in between. A subclass,
    not a patch of `decide`, so the check also runs on the compiled core."""

    class Checking(base):  # type: ignore[misc, valid-type]
        def may_reserve(self, cycle: Cycle, job: Job) -> bool:
            allowed = super().may_reserve(cycle, job)
            if allowed and cycle.reserver is None and not cycle.releasing:
                _plan_both_ways(cycle, job, reused)
            return allowed

    return Checking()


def _plan_both_ways(cycle: Cycle, job: Job, reused: list[bool]) -> None:
    snap = cycle.snap
    before = snap.memos.plan
    planned = plan_reservation(cycle, job)
    kept = snap.memos.plan
    reused.append(planned is not None and before is not None and kept is before)
    snap.memos.plan = None
    fresh = plan_reservation(cycle, job)
    assert _key(planned) == _key(fresh), f"t={snap.now} job={job.id}"
    snap.memos.plan = kept


@pytest.mark.parametrize("policy", [Fifo, Fair])
@pytest.mark.parametrize("domains", [1, 2])
def test_a_memoised_plan_is_the_fresh_plan(policy, domains):
    reused: list[bool] = []
    for seed in range(6):
        scenario = load(busy(seed, policy.name, domains))
        simulate(scenario, _checking(policy, reused))
    assert any(reused) and not all(reused)  # the memo was used, and also found stale
