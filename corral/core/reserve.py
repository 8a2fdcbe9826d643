"""Reservations: where and when a blocked job will fit, so later jobs cannot starve it.

Running jobs are released in the order they are expected to end (`RunningByEnd`) until the
job fits. The nodes it would then take are held: a later job may use them only if it ends
before the reservation is due (DESIGN.md §3.6), or, while that is unknown, if the reserved job
can take them back (`borrows`).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import compress
from operator import ne
from typing import Final

from corral.core import memos
from corral.core.cycle import Cycle, Reservation, freed_by
from corral.core.fit import from_histogram, place
from corral.core.memos import PlanMemo
from corral.core.model import Job, Running
from corral.core.slots import release_until_placed

FREE_PREEMPTIONS: Final = 2  # preemptions of a job before its protection grows (preempt.Protection)


def plan_reservation(cycle: Cycle, job: Job) -> Reservation | None:
    # With jobs stopping, the plan starts from what they free: not memoised.
    memoised = not cycle.releasing
    memo = cycle.snap.memos.plan
    if memoised and memo is not None and _same_plan(cycle, job, memo):
        waits = _waits_for(memo.releases, memo.nodes)
        kept = Reservation(job, memo.nodes, _due(cycle, memo.releases), memo.held, waits)
        if memos.CHECKING:
            memos.same("reservation plan", plan_of(kept), plan_of(_plan(cycle, job, [])))
        return kept
    released: list[Running] = []
    reservation = _plan(cycle, job, released)
    if memoised and reservation is not None:
        cycle.snap.memos.plan = _memo(cycle, job, reservation, released)
    return reservation


def plan_of(reservation: Reservation | None) -> tuple | None:
    """What a plan decides: where, what it holds, when."""
    if reservation is None:
        return None
    return (reservation.nodes, reservation.held, reservation.due)


def _plan(cycle: Cycle, job: Job, released: list[Running]) -> Reservation | None:
    """Plan from scratch; `released` gets the running jobs released."""
    probe = cycle.probe(released=True)  # what stopping jobs free is there by `now`
    nodes = place(probe, job, long=False) if probe.may_fit(job, long=False) else None
    if nodes is None:  # release running jobs, soonest to end first, until it fits
        nodes = release_until_placed(probe, job, False, _releases(cycle, job), released)
        if nodes is None:
            return None
    held = _held(cycle, probe, job, nodes)
    return Reservation(job, nodes, _due(cycle, released), held, _waits_for(released, nodes))


def _waits_for(released: list[Running], nodes: tuple[int, ...]) -> set[str]:
    """The released jobs that free room where the job will go: those it waits for."""
    where = set(nodes)
    return {run.job.id for run in released if not where.isdisjoint(run.nodes)}


def _due(cycle: Cycle, released: list[Running]) -> float | None:
    """When the job is expected to fit: now, or when the last job released ends."""
    return released[-1].expected_end() if released else cycle.snap.now


def _memo(cycle: Cycle, job: Job, reservation: Reservation, released: list[Running]) -> PlanMemo:
    after = list(cycle.free)
    for i, amount in freed_by(released).items():
        after[i] += amount
    return PlanMemo(
        job=job,
        spread=cycle.spread,
        exclusive=dict(cycle.exclusive),
        node_jobs=list(cycle.node_jobs),
        free=list(cycle.free),
        after=after,
        releases=released,
        inserts=cycle.snap.running_by_end.inserts,
        nodes=reservation.nodes,
        held=reservation.held,
        one_domain=from_histogram(cycle, job),
        touched=_changed(cycle.free, cycle.snap.free),
    )


def _same_plan(cycle: Cycle, job: Job, memo: PlanMemo) -> bool:
    """Would planning again give the memo's answer? Yes when the job, the running jobs it
    released (in order, none released before them) and what placement reads are the same.
    The memo then stands for this cycle's free map (the next check looks at what changed
    since this one)."""
    if memo.job is not job or memo.spread != cycle.spread or memo.exclusive != cycle.exclusive:
        return False
    if not _same_releases(cycle, memo):
        return False
    free, was = cycle.free, memo.free
    if free == was:
        return memo.one_domain or memo.node_jobs == cycle.node_jobs
    if not memo.one_domain:
        return False
    changed = list(memo.touched) if cycle.pristine else _changed(free, was)
    # Placed from a histogram, the plan reads only nodes with room for a worker, so a node
    # whose free accelerators changed is no matter if it has no room for one after the
    # releases, then or now (nor at any point of the walk: releases only add room).
    after, per = memo.after, job.per_worker
    if any(max(after[i], after[i] + free[i] - was[i]) >= per for i in changed):
        return False
    for i in changed:
        memo.after[i] += free[i] - was[i]
        was[i] = free[i]
    memo.touched = set() if cycle.pristine else _changed(free, cycle.snap.free)
    return True


def _changed(free: list[int], other: list[int]) -> set[int]:
    """Nodes where two free maps differ (compared in C)."""
    return set(compress(range(len(free)), map(ne, free, other)))


def _same_releases(cycle: Cycle, memo: PlanMemo) -> bool:
    """Do the memo's releases still lead the release order? Yes when every one of them still
    runs and is not stopping, and no job was added in front of any since (`inserts`): jobs
    left out of the order then (another type, stopping) are left out still."""
    if cycle.snap.running_by_end.inserts != memo.inserts:
        return False
    running = cycle.snap.running
    return all(running.get(run.job.id) is run and not run.terminating for run in memo.releases)


def _releases(cycle: Cycle, job: Job) -> Iterator[Running]:
    """Running jobs of the job's type not stopping yet, soonest to end first."""
    accel = job.accelerator
    for run in cycle.snap.running_by_end:
        if run.job.accelerator == accel and not run.terminating and run.job.id not in cycle.victims:
            yield run


def _held(cycle: Cycle, probe: Cycle, job: Job, nodes: tuple[int, ...]) -> dict[int, int]:
    """Per node, the free accelerators a job outlasting the reservation may not take."""
    if job.resources.exclusive:
        cluster = cycle.snap.cluster
        domains = {cluster.domain_of[i] for i in nodes}
        return {i: cycle.free[i] for d in domains for i in cluster.domains[d] if cycle.free[i]}
    need: dict[int, int] = {}
    for i in nodes:
        need[i] = need.get(i, 0) + job.resources.per_worker
    held = {}
    for i, amount in need.items():
        now_free = cycle.free[i]
        usable = min(now_free, max(0, probe.free[i] - amount))
        if now_free - usable:
            held[i] = now_free - usable
    return held


def outlasts(cycle: Cycle, job: Job) -> bool:
    """Must the job keep off the capacity held for the cycle's reservation (`long`)?"""
    res = cycle.reservation
    if res is None:
        return False
    end, due = job.max_runtime, res.due  # a job ending before it is due may use it
    if end is not None and due is not None and cycle.snap.now + end <= due:
        return False
    return not borrows(cycle, job, res)


def borrows(cycle: Cycle, job: Job, res: Reservation) -> bool:
    """May the job use what a reservation not known to be due holds (`lends`, see may_lend)?
    If it is later, preemptible and of a project holding its guarantee: the reserved job
    reclaims it once the jobs it waits for are gone, so the capacity is not idle until then.
    Not if its protection has grown: the reserved job would wait past preempt_min_runtime."""
    return (
        job.preemptible
        and job.preemptions <= FREE_PREEMPTIONS
        and (res.job.submit_time, res.job.id) < (job.submit_time, job.id)
        and cycle.lends_to(job.project)
    )


def may_lend(cycle: Cycle, res: Reservation) -> bool:
    """Might a reservation lend what it holds (the policy preempting)? Only while not known
    to be due, its job can take it back (by reclaim: within its guarantee) and it waits for a
    job started before its own was submitted: not only for jobs it lent to (else it would
    lend on to new ones while it could start as soon as those are gone)."""
    running, first = cycle.snap.running, res.job
    return (
        res.due is None
        and cycle.within_guarantee(first)
        and any(running[i].started_at < first.submit_time for i in res.waits_for)
    )
