"""`decide(snapshot, policy) -> Decision`: one scheduling cycle. Pure: no I/O, no clock.

For each pending job in the policy's order: hard limits, then fit (backfill: a job that does
not fit never blocks the ones behind it), then preemption, then a reason. The first blocked
job the policy allows gets a reservation, planned only once it matters (`before_admitting`).
"""

from __future__ import annotations

from corral.core import reasons
from corral.core.cycle import Cycle
from corral.core.fit import place_unless_failed
from corral.core.model import Decision, Job, Reason
from corral.core.policy import Policy
from corral.core.reserve import may_lend, outlasts, plan_reservation
from corral.core.snapshot import Snapshot


def decide(snap: Snapshot, policy: Policy) -> Decision:
    """One cycle, and a reason for every job left pending (what a control plane shows)."""
    return run_cycle(snap, policy, reasons=True).decision


class CycleRun:
    """A cycle and its decision: what a driver that asks about the cycle afterwards keeps (the
    simulator: may a job that arrives now act? see engine.arrival_may_act)."""

    def __init__(self, cycle: Cycle, lends: bool = False) -> None:
        self.cycle = cycle
        self.decision = cycle.decision
        self.planned = False  # the reservation (see before_admitting)
        self.lends = lends  # the policy's (Policy.lends)
        # policy.settled(cycle), once asked: it does not change (the cycle is over).
        self.settled: bool | None = None

    def before_admitting(self) -> bool:
        """Plan the reservation of the cycle's reserver (the first blocked job allowed one),
        once, when it first matters. True when one now constrains placement."""
        cycle = self.cycle
        if cycle.reserver is None or self.planned:
            return False
        self.planned = True
        reservation = plan_reservation(cycle, cycle.reserver)
        if reservation is None:
            return False
        reservation.lends = self.lends and may_lend(cycle, reservation)
        cycle.reserve(reservation)
        return True


def run_cycle(snap: Snapshot, policy: Policy, reasons: bool = False) -> CycleRun:
    """One cycle. With `reasons`, the decision gives every pending job its reason; without
    (the simulator, which never reads them), only the jobs the cycle examined have one, and
    the cycle costs what it changes, not the length of the queue."""
    ran = CycleRun(Cycle(snap, spread=policy.spread), policy.lends)
    cycle = ran.cycle
    first = {job.id for job in _preemptors(snap) if _keep_room(cycle, job)}
    for job in policy.order(cycle):
        if job.id not in first:
            _consider(ran, policy, job)
    if reasons:
        _explain_the_rest(cycle, ran.decision.reasons)
    wake, ends = policy.wake_at(cycle), policy.protection_ends(cycle)
    ran.decision.wake_at = ends if wake is None or (ends is not None and ends < wake) else wake
    return ran


def _preemptors(snap: Snapshot) -> list[Job]:
    """The pending jobs that preempted others and have not started (live: their victims may
    still be in their grace period), in submit order."""
    pending = snap.pending.jobs
    found = [pending[i] for i in snap.preemptors if i in pending]
    return sorted(found, key=lambda j: (j.submit_time, j.id))


def _keep_room(cycle: Cycle, job: Job) -> bool:
    """Start a preemptor, or hold its room beside its stopping victims, before the policy's
    order, which may now put another job first: what its victims free stays its own until
    they are gone (DESIGN.md §3.9). False: neither (the order considers it as usual)."""
    if reasons.limit(cycle, job) is not None:
        return False
    nodes = _fit(cycle, job)
    if nodes is not None:
        cycle.admit(job, nodes)
        return True
    return _promise(cycle, job)


def _consider(ran: CycleRun, policy: Policy, job: Job) -> None:
    cycle = ran.cycle
    capped = reasons.limit(cycle, job)
    if capped is not None:
        cycle.wait(job, capped)
        return
    if not cycle.releasing:
        # Plan the reservation (if any) before placing: it would be planned before this job
        # is admitted or looks for victims anyway, and placing once is cheaper than twice.
        # (With jobs stopping, a promise made first must come before the plan.)
        ran.before_admitting()
    nodes = _fit(cycle, job)
    if nodes is not None and ran.before_admitting():
        nodes = _fit(cycle, job)
    if nodes is not None:
        cycle.admit(job, nodes)
        return
    if _promise(cycle, job):
        return
    ran.before_admitting()  # victims must not be chosen to free held capacity
    found = policy.victims(cycle, job)
    if found is not None:
        cycle.preempt(found.victims, found.nodes, job, found.why)
        return
    if cycle.reserver is None and policy.may_reserve(cycle, job):
        cycle.reserver = job
    # Blocked: its reason (capacity, quota or reserved) is derived at the end of the cycle,
    # from its final state, like the reasons of the jobs the policy did not need to examine.


def _promise(cycle: Cycle, job: Job) -> bool:
    """Hold what the job needs beside the stopping jobs' accelerators, if it fits once they
    are gone."""
    if not cycle.releasing:
        return False
    soon = place_unless_failed(cycle, job, False, on=cycle.after_release())
    if soon is None:
        return False
    cycle.promise(job, soon)
    cycle.wait(job, reasons.releasing(cycle))
    return True


def _fit(cycle: Cycle, job: Job) -> tuple[int, ...] | None:
    long = outlasts(cycle, job)
    if not cycle.may_fit(job, long) or not cycle.under_cap(job):
        return None
    return place_unless_failed(cycle, job, long)


def _explain_the_rest(cycle: Cycle, given: dict[str, Reason]) -> None:
    """The reason of each pending job the cycle gave none (blocked, or not examined), from the
    cycle's final state: once per kind of job (its project, resources, limits and length)."""
    kinds: dict[tuple, Reason] = {}
    for job in cycle.snap.pending.jobs.values():
        if job.id in given:
            continue
        r, long = job.resources, outlasts(cycle, job)
        kind: tuple = (job.project, job.shape, r.slices, r.exclusive)
        kind += (job.preemptible, job.interactive, job.max_runtime, long)
        found = kinds.get(kind)
        if found is None:
            found = kinds[kind] = reasons.limit(cycle, job) or reasons.blocked(cycle, job, long)
        given[job.id] = found
