"""Reservations: where and when a blocked job will fit, so later jobs cannot starve it.

Running jobs are released in the order they are expected to end (declared max_runtime; jobs
with no limit last, oldest first) until the job fits. The nodes it would then take are held:
a later job may use them only if it ends before the reservation is due (DESIGN.md §3.6).
"""

from __future__ import annotations

from collections.abc import Iterator

from corral.core.cycle import Cycle, Reservation, SlotCounter
from corral.core.fit import place
from corral.core.model import Job, Running


def plan_reservation(cycle: Cycle, job: Job) -> Reservation | None:
    probe = cycle.probe(released=True)  # what stopping jobs free is there by `now`
    due: float | None = cycle.snap.now
    nodes = _place(probe, job)
    if nodes is None:
        found = _after_releases(cycle, probe, job)
        if found is None:
            return None
        nodes, due = found
    return Reservation(job, nodes, due, _held(cycle, probe, job, nodes))


def _after_releases(
    cycle: Cycle, probe: Cycle, job: Job
) -> tuple[tuple[int, ...], float | None] | None:
    """Release running jobs on the probe, soonest to end first, until the job fits: where it
    goes and when (the last release's expected end). Worker slots are counted on the side and
    the releases put on the probe only once there could be enough of them."""
    counter = SlotCounter(probe, job, long=False)
    for run in _releases(cycle, job):
        if counter.release(run):
            counter.apply()
            nodes = _place(probe, job)
            if nodes is not None:
                return nodes, run.expected_end()
    return None


def _place(probe: Cycle, job: Job) -> tuple[int, ...] | None:
    return place(probe, job, long=False) if probe.may_fit(job, long=False) else None


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


def is_short(job: Job, reservation: Reservation, now: float) -> bool:
    """A job that will end before the reservation is due may use held capacity."""
    return (
        reservation.due is not None
        and job.max_runtime is not None
        and now + job.max_runtime <= reservation.due
    )
