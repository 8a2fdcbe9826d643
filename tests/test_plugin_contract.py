"""The plug-in contract (docs/policies.md): a policy replayed with the simulator's shortcuts
gives the event log it gives with a cycle at every event, as a live server would run it. For
every built-in policy, and for user policies that override each decision method (`order`,
`queue_key`, `victims`, `may_reserve`, `wake_at`) without touching the shortcuts they inherit:
those must fall back to their safe defaults on their own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from simkit import load, simulate
from test_skipped_cycles import workload

from corral.core.cycle import Cycle
from corral.core.model import Job
from corral.core.policy import Policy
from corral.core.preempt import Preemption, eligible, find_victims
from corral.policies.fair import Fair
from corral.policies.fifo import Fifo
from corral.policies.las import Las
from corral.policies.srtf import Srtf

WAIT = 900.0  # Aging: seconds after which a waiting job goes first


class SmallestFirst(Fifo):
    """The issue's example: fewest accelerators first, by overriding `order` only."""

    def order(self, cycle: Cycle) -> Iterator[Job]:
        yield from sorted(cycle.snap.pending.all, key=lambda j: (j.demand, j.submit_time, j.id))


class ByDemand(Fifo):
    """The same rule through `queue_key`."""

    def queue_key(self, job: Job) -> tuple:
        return (job.demand, job.submit_time, job.name, job.id)


class Aging(Fifo):
    """Jobs that waited WAIT seconds go first: an order that changes with time, and the
    wake-up (`wake_at`) that tells the simulator when it does."""

    def order(self, cycle: Cycle) -> Iterator[Job]:
        now = cycle.snap.now
        return iter(
            sorted(
                cycle.snap.pending.all,
                key=lambda j: (now - j.wait_since < WAIT, j.submit_time, j.id),
            )
        )

    def wake_at(self, cycle: Cycle) -> float | None:
        now = cycle.snap.now
        due = [j.wait_since + WAIT for j in cycle.snap.pending.all if j.wait_since + WAIT > now]
        return min(due, default=None)


class PriorityPreempting(Fifo):
    """Priority first, then fifo; a job preempts running jobs of lower priority, the most
    recently started first."""

    def queue_key(self, job: Job) -> tuple:
        return (-job.priority, job.submit_time, job.name, job.id)

    def victims(self, cycle: Cycle, job: Job) -> Preemption | None:
        runs = [
            r
            for r in cycle.snap.running.values()
            if r.job.priority < job.priority and eligible(cycle, r, self.protection)
        ]
        runs.sort(key=lambda r: (-r.started_at, r.job.id))
        return find_victims(cycle, job, runs) if runs else None


class FairNoPreemption(Fair):
    def victims(self, cycle: Cycle, job: Job) -> Preemption | None:
        return None


class LasNoPreemption(Las):
    def victims(self, cycle: Cycle, job: Job) -> Preemption | None:
        return None


class FifoNoReservation(Fifo):
    def may_reserve(self, cycle: Cycle, job: Job) -> bool:
        return False


class FairReservesBig(Fair):
    def may_reserve(self, cycle: Cycle, job: Job) -> bool:
        return job.demand >= 8


class SrtfNoWake(Srtf):
    def wake_at(self, cycle: Cycle) -> float | None:
        return None


USER = [
    SmallestFirst,
    ByDemand,
    Aging,
    PriorityPreempting,
    FairNoPreemption,
    LasNoPreemption,
    FifoNoReservation,
    FairReservesBig,
    SrtfNoWake,
]


@pytest.mark.parametrize("kind", [Fair, Fifo, Las, Srtf, *USER], ids=lambda k: k.__name__)
def test_shortcuts_change_no_event(kind: type[Policy]):
    for seed in range(12):
        scenario = load(workload(seed))
        every = simulate(scenario, kind(), shortcuts=False)
        fewer = simulate(scenario, kind())
        assert fewer.events == every.events, f"seed {seed}"
        assert fewer.cycles <= every.cycles


def test_overridden_decision_methods_turn_off_what_assumes_them():
    assert Fifo().shortcuts.settled and Fifo().shortcuts.may_precede
    for kind in (SmallestFirst, ByDemand, PriorityPreempting, FifoNoReservation):
        assert not kind().shortcuts.settled, kind.__name__
    assert not SmallestFirst().shortcuts.may_precede
    assert SmallestFirst().shortcuts.idle  # nothing fits: no order starts anything
    assert not Aging().shortcuts.idle  # a wake-up may be due
    assert Fair().shortcuts.idle and Fair().shortcuts.may_preempt_for
    assert not FairNoPreemption().shortcuts.idle
    assert not FairNoPreemption().shortcuts.may_preempt_for
    assert not LasNoPreemption().shortcuts.may_preempt_for


class LasOwnVictims(Las):
    """Las's victim search, as the subclass's own."""

    def victims(self, cycle: Cycle, job: Job) -> Preemption | None:
        self.asked = getattr(self, "asked", 0) + 1
        return super().victims(cycle, job)


def test_the_rank_walk_asks_an_overridden_victims_about_every_job():
    """Las's walk drops shapes its own victim search could not act for; with a subclass's
    own `victims` it asks it, and decides the same when that decides the same."""
    for seed in range(6):
        scenario = load(workload(seed))
        own = LasOwnVictims()
        assert simulate(scenario, own).events == simulate(scenario, Las()).events
        assert own.asked > 0
