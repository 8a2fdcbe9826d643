"""Victim search shared by all preempting policies.

Candidates are freed one at a time, in the policy's order, until the job fits; then victims
that turned out not to be needed are given back, latest choice first. A job is never preempted
when freeing every allowed candidate would still not make room (no useless preemption).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from corral.core.cycle import Cycle
from corral.core.fit import place
from corral.core.model import Job, Running
from corral.core.reserve import is_short


def eligible(cycle: Cycle, run: Running, min_runtime: float) -> bool:
    """May this running job be a victim at all?"""
    return (
        run.job.preemptible
        and not run.terminating
        and run.job.id not in cycle.victims
        and cycle.snap.now - run.started_at >= min_runtime
    )


@dataclass(slots=True)
class Preemption:
    victims: list[Running]
    nodes: tuple[int, ...]  # where the job will go once they are gone
    why: str = ""


def find_victims(cycle: Cycle, job: Job, candidates: Iterable[Running]) -> Preemption | None:
    """The smallest prefix-then-pruned set of candidates whose release lets `job` fit.

    Capacity held for a reservation stays held: preempting to land on it would be useless.
    What jobs already stopping will release, and nobody was promised, counts as free.
    """
    probe = cycle.probe(released=True)
    long = probe.reservation is not None and not is_short(job, probe.reservation, cycle.snap.now)
    chosen: list[Running] = []
    freed = probe.free_total(job.accelerator)
    nodes = None
    for run in candidates:
        probe.release(run)
        chosen.append(run)
        freed += run.job.demand
        if freed >= job.demand and probe.may_fit(job, long):
            nodes = place(probe, job, long)
            if nodes is not None:
                break
    if nodes is None:
        return None
    for run in reversed(chosen[:-1]):
        probe.occupy(run.job, run.nodes)
        fewer = place(probe, job, long) if probe.may_fit(job, long) else None
        if fewer is not None:
            chosen.remove(run)
            nodes = fewer
        else:
            probe.release(run)
    return Preemption(chosen, nodes)


def could_free_room(cycle: Cycle, job: Job, runs: Iterable[Running]) -> bool:
    """Would freeing all of `runs` leave enough per_worker-sized blocks for the job? A cheap
    necessary condition (domains and reservations aside) to try before `find_victims`, whose
    walk costs a probe step per candidate."""
    base = cycle.after_release() if cycle.releasing else cycle
    per = job.resources.per_worker
    extra: dict[int, int] = {}
    for run in runs:
        for i in run.nodes:
            extra[i] = extra.get(i, 0) + run.job.resources.per_worker
    blocks = base.blocks(job.accelerator, per, long=False)
    free = base.free
    for i, more in extra.items():
        blocks += (free[i] + more) // per - free[i] // per
    return blocks >= job.resources.gang


def place_after_release(cycle: Cycle, job: Job) -> tuple[int, ...] | None:
    """Where the job would fit once the jobs already told to stop are gone, if anywhere."""
    if not cycle.releasing:
        return None
    return place(cycle.after_release(), job, long=False)
