"""Victim search shared by all preempting policies.

Candidates are freed one at a time, in the policy's order, until the job fits; then victims
that turned out not to be needed are given back, latest choice first. A job is never preempted
when freeing every allowed candidate would still not make room (no useless preemption).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from corral.core.cycle import Cycle
from corral.core.fit import place
from corral.core.model import Job, Running
from corral.core.reserve import FREE_PREEMPTIONS, outlasts
from corral.core.slots import SlotCounter, release_until_placed
from corral.core.snapshot import share_ratio, within

# Stability (DESIGN.md §3.9). An attempt is safe from preemption for its project's
# preempt_min_runtime, never less than FIRST_CYCLE (so never in the cycle, or at the instant,
# that started it), doubled for each preemption of the job beyond FREE_PREEMPTIONS, up to
# MAX_PROTECTION: a job preempted again and again is left to run longer and longer; after
# MAX_PREEMPTIONS it is never preempted again (it still never runs beyond its guarantee's
# rules when it starts: only its running attempt is kept).
FIRST_CYCLE: Final = 1.0
MAX_PROTECTION: Final = 24 * 3600.0
MAX_PREEMPTIONS: Final = 10


@dataclass(slots=True)
class Protection:
    """How long each attempt is safe from preemption, from the [scheduler] default and the
    quota's per-project [project_preempt_min_runtime]."""

    default: float
    per_project: dict[str, float]

    def of(self, job: Job) -> float:
        if job.preemptions >= MAX_PREEMPTIONS:
            return math.inf
        base = self.per_project.get(job.project, self.default) if self.per_project else self.default
        extra = job.preemptions - FREE_PREEMPTIONS
        if extra > 0 and base > 0:  # (a shift: 2.0 ** n is a generic power, once compiled)
            base = min(max(base, MAX_PROTECTION), base * (1 << min(extra, 32)))
        return base if base > FIRST_CYCLE else FIRST_CYCLE

    def until(self, run: Running) -> float:
        """When the attempt may first be preempted."""
        return run.started_at + self.of(run.job)


def eligible(cycle: Cycle, run: Running, protection: Protection) -> bool:
    """May this running job be a victim at all?"""
    return (
        run.job.preemptible
        and not run.terminating
        and run.job.id not in cycle.victims
        and cycle.snap.now >= protection.until(run)
    )


@dataclass(slots=True)
class Preemption:
    victims: list[Running]
    nodes: tuple[int, ...]  # where the job will go once they are gone
    why: str = ""


def find_victims(cycle: Cycle, job: Job, candidates: Iterable[Running]) -> Preemption | None:
    """The smallest prefix-then-pruned set of candidates whose release lets `job` fit. Held
    capacity stays held (landing on it would be useless), and a job outlasting the reservation
    never preempts one it waits for: it would take their place (DESIGN.md §3.6). What stopping
    jobs release, and nobody was promised, counts as free."""
    probe = cycle.probe(released=True)
    long = outlasts(probe, job)
    skip = awaited(probe, job)
    if skip:
        candidates = (run for run in candidates if run.job.id not in skip)
    chosen: list[Running] = []
    nodes = release_until_placed(probe, job, long, candidates, chosen)
    if nodes is None:
        return None
    kept = chosen[-1:]  # (not list.remove per victim given back: a scan each)
    for run in reversed(chosen[:-1]):
        probe.occupy(run.job, run.nodes)
        fewer = place(probe, job, long) if probe.may_fit(job, long) else None
        if fewer is not None:
            nodes = fewer
        else:
            probe.release(run)
            kept.append(run)
    kept.reverse()
    return Preemption(kept, nodes)


def awaited(cycle: Cycle, job: Job) -> set[str]:
    """The running jobs the cycle's reservation waits for, if `job` outlasts it: never its
    victims, whose place it would take."""
    res = cycle.reservation
    return res.waits_for if res is not None and outlasts(cycle, job) else _NONE


_NONE: set[str] = set()


def guarantees_kept(cycle: Cycle, job: Job, victims: list[Running]) -> bool:
    """Does each victim project keep its guarantee, or fall below it by less than one of its
    victims while the preemptor's project stays further below its own (usage/guarantee after
    the swap), so that neither can take it back (DESIGN.md §3.7)?"""
    accel, snap = job.accelerator, cycle.snap
    freed: dict[str, int] = {}
    smallest: dict[str, int] = {}
    for run in victims:
        project, demand = run.job.project, run.job.demand
        freed[project] = freed.get(project, 0) + demand
        smallest[project] = min(demand, smallest.get(project, demand))
    mine = share_ratio(
        cycle.held(job.project, accel) + job.demand, snap.guarantee_of(job.project, accel)
    )
    for project, amount in freed.items():
        guarantee = snap.guarantee_of(project, accel)
        after = cycle.held(project, accel) - amount
        if within(0, guarantee, after):  # (after >= guarantee, rounding aside)
            continue
        if not within(0, guarantee, after + smallest[project] - 1e-6):
            return False  # more than one job below
        if share_ratio(after, guarantee) <= mine:
            return False
    return True


def could_free_room(cycle: Cycle, job: Job, runs: Iterable[Running]) -> bool:
    """Would freeing all of `runs` leave enough per_worker-sized blocks for the job, beside
    capacity held for a reservation it outlasts? A cheap necessary condition to try before
    `find_victims`, whose walk costs a probe step per candidate."""
    counter = free_room_counter(cycle, job)
    skip = awaited(cycle, job)
    if skip:
        runs = [r for r in runs if r.job.id not in skip]
    return counter.enough() or any(map(counter.release, runs))


def free_room_counter(cycle: Cycle, job: Job) -> SlotCounter:
    """Worker slots of the job's size once the stopping jobs are gone, beside capacity held
    for a reservation it outlasts: what `could_free_room` counts releases on."""
    return SlotCounter(
        cycle.after_release() if cycle.releasing else cycle, job, outlasts(cycle, job)
    )
