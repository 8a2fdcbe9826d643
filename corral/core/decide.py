"""`decide(snapshot, policy) -> Decision`: one scheduling cycle. Pure: no I/O, no clock.

For each pending job in the policy's order: hard limits, then fit (backfill: a job that does
not fit never blocks the ones behind it), then preemption, then a reason. The first blocked
job the policy allows gets a reservation, computed only when a later job would otherwise take
capacity it needs (most cycles never pay for it).
"""

from __future__ import annotations

from corral.core import reasons
from corral.core.cycle import Cycle
from corral.core.fit import place_unless_failed
from corral.core.model import Decision, Job
from corral.core.policy import Policy
from corral.core.preempt import place_after_release
from corral.core.reserve import outlasts, plan_reservation
from corral.core.snapshot import Snapshot


class _Reserver:
    """Plans the reservation of the cycle's reserver (the first blocked job allowed one)
    once, when it first matters."""

    __slots__ = ("planned",)

    def __init__(self) -> None:
        self.planned = False

    def before_admitting(self, cycle: Cycle) -> bool:
        """Plan the reservation if still pending. True when one now constrains placement."""
        if cycle.reserver is None or self.planned:
            return False
        self.planned = True
        reservation = plan_reservation(cycle, cycle.reserver)
        if reservation is None:
            return False
        cycle.reserve(reservation)
        return True


def decide(snap: Snapshot, policy: Policy) -> Decision:
    cycle = Cycle(snap, spread=policy.spread)
    reserver = _Reserver()
    for job in policy.order(cycle):
        _consider(cycle, policy, reserver, job)
    decision = cycle.decision
    # The closures below keep the cycle; the cycle lets go of the decision, so no reference
    # loop keeps both alive until the cyclic GC (a simulator makes 100,000s of them).
    cycle.decision = Decision()
    decision.fallback = lambda job: _fallback(cycle, job)
    decision.wake_at = policy.wake_at(cycle)
    decision.arrival_may_act = lambda job: _arrival_may_act(cycle, policy, reserver, job)
    return decision


def _consider(cycle: Cycle, policy: Policy, reserver: _Reserver, job: Job) -> None:
    capped = reasons.limit(cycle, job)
    if capped is not None:
        cycle.wait(job, capped.code, capped.message)
        return
    if not cycle.releasing:
        # Plan the reservation (if any) before placing: it would be planned before this job
        # is admitted or looks for victims anyway, and placing once is cheaper than twice.
        # (With jobs stopping, a promise made first must come before the plan.)
        reserver.before_admitting(cycle)
    nodes = _fit(cycle, job)
    if nodes is not None and reserver.before_admitting(cycle):
        nodes = _fit(cycle, job)
    if nodes is not None:
        cycle.admit(job, nodes)
        return
    soon = place_after_release(cycle, job)
    if soon is not None:  # hold what it needs beside the stopping jobs' accelerators
        cycle.promise(job, soon)
        why = reasons.releasing(cycle)
        cycle.wait(job, why.code, why.message)
        return
    reserver.before_admitting(cycle)  # victims must not be chosen to free held capacity
    found = policy.victims(cycle, job)
    if found is not None:
        cycle.preempt(found.victims, found.nodes, job, found.why)
        return
    if cycle.reserver is None and policy.may_reserve(cycle, job):
        cycle.reserver = job
    # Blocked: its reason (capacity, quota or reserved) is derived when asked for, from the
    # cycle's final state, like the reasons of the jobs the policy did not need to examine.


def _fit(cycle: Cycle, job: Job) -> tuple[int, ...] | None:
    long = outlasts(cycle, job)
    if not cycle.may_fit(job, long) or not cycle.under_cap(job):
        return None
    return place_unless_failed(cycle, job, long)


def _arrival_may_act(cycle: Cycle, policy: Policy, reserver: _Reserver, job: Job) -> bool:
    """Might a new job change the next cycle: fit in what this cycle left free, preempt, or
    take the reservation over (which frees what was held for its holder)? Each shortcut the
    policy may not use (`Policy.shortcuts`) takes its safe answer."""
    shortcuts = policy.shortcuts
    if not (shortcuts.settled and _settled(cycle, policy)):
        return True
    holder = cycle.reserver
    if holder is not None and (not shortcuts.may_precede or policy.may_precede(cycle, job, holder)):
        # Considered before the reservation is planned: held capacity counts as free for it.
        return (
            policy.may_reserve(cycle, job)
            or cycle.may_fit(job, long=False)
            or _may_preempt_for(cycle, policy, job)
        )
    reserver.before_admitting(cycle)  # the reservation the next cycle would hold
    return cycle.may_fit(job, outlasts(cycle, job)) or _may_preempt_for(cycle, policy, job)


def _may_preempt_for(cycle: Cycle, policy: Policy, job: Job) -> bool:
    return not policy.shortcuts.may_preempt_for or policy.may_preempt_for(cycle, job)


def _settled(cycle: Cycle, policy: Policy) -> bool:
    """Would a cycle run now, with no job new, decide nothing? Asked once per decision."""
    settled = cycle.scratch.get("settled")
    if settled is None:
        settled = cycle.scratch["settled"] = policy.settled(cycle)
    return bool(settled)


def _blocked(cycle: Cycle, job: Job):
    res = cycle.reservation
    long = outlasts(cycle, job)
    if long and res is not None and cycle.may_fit(job, long=False):  # but for the reservation
        return reasons.reserved(job, res.job)
    return reasons.blocked(cycle, job, long=long)


def _fallback(cycle: Cycle, job: Job):
    """Reason for a blocked job, or one the cycle skipped because nothing could change for it."""
    capped = reasons.limit(cycle, job)
    return capped if capped is not None else _blocked(cycle, job)
