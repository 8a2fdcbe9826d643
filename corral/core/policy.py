"""The interface every scheduling policy implements, and the defaults most of them share.

A policy decides three things: the order pending jobs are considered in, which running jobs a
blocked job may preempt, and whether a blocked job holds a reservation. Placement, backfill,
reasons and the cycle itself are common (see decide.py). Subclass `Policy` in one file to try
an idea: `corral simulate --policy mymodule:MyPolicy`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import ClassVar

from mypy_extensions import mypyc_attr

from corral.core.cycle import Cycle
from corral.core.model import Job
from corral.core.preempt import Preemption
from corral.core.snapshot import RunningKey, Snapshot, default_queue_key
from corral.formats.types import Node, Quota, SchedulerConfig


@mypyc_attr(allow_interpreted_subclasses=True)
class Policy:
    name: ClassVar[str] = "base"
    # The simulator and server only need victims from preemptive policies.
    preemptive: ClassVar[bool] = False

    def __init__(self, config: SchedulerConfig | None = None):
        self.config = config or SchedulerConfig()
        self.spread = self.config.placement == "spread"
        self.min_runtime = self.config.preempt_min_runtime

    def option(self, key: str, default):
        return self.config.options.get(key, default)

    def queue_key(self, job: Job) -> tuple:
        """Static sort key of a pending job; the snapshot keeps its queues sorted by it."""
        return default_queue_key(job)

    def snapshot(self, nodes: Sequence[Node], quota: Quota) -> Snapshot:
        """An empty snapshot whose indexes follow this policy's keys."""
        revisits = not self.is_default("revisit_at")  # else no job ever has one
        return Snapshot(
            nodes,
            quota,
            queue_key=self.queue_key,
            revisit_at=self.revisit_at if revisits else None,
            running_keys=self.running_keys(),
        )

    def revisit_at(self, job: Job) -> float | None:
        """When a waiting job's rank changes by itself (None: never). Fixed while it waits;
        the snapshot indexes pending jobs by it (see Las)."""
        return None

    def running_keys(self) -> dict[str, RunningKey]:
        """Static keys by which the snapshot keeps running jobs sorted for this policy, by name
        (`Snapshot.running_by`); a key may be None for jobs it leaves out. See Las, Srtf."""
        return {}

    def order(self, cycle: Cycle) -> Iterator[Job]:
        """Pending jobs in the order they may be admitted. May stop early when nothing else
        could be admitted: the jobs not yielded get a derived reason."""
        yield from cycle.snap.pending.all

    def victims(self, cycle: Cycle, job: Job) -> Preemption | None:
        """Running jobs to preempt so that `job` fits, with the reason; None: no preemption."""
        return None

    def may_preempt_for(self, cycle: Cycle, job: Job) -> bool:
        """After `cycle`, might a job that just arrived preempt something? A cheap necessary
        condition: False lets a driver skip the cycle for an arrival that cannot fit either.
        Policies that preempt must override it."""
        return self.preemptive

    def settled(self, cycle: Cycle) -> bool:
        """Once this cycle's decision is applied, would another cycle with no job new decide
        nothing? A driver skips the cycle of an arrival that cannot act only then. Surely
        when this one started nothing (it changed nothing); otherwise the jobs it started may
        be victims, or change the order or the reservation the next cycle plans."""
        return not cycle.started

    def may_precede(self, cycle: Cycle, job: Job, other: Job) -> bool:
        """Might `job` come before `other` (both pending) in the order of a cycle like this
        one? True unless the policy is sure: a driver then runs a cycle for an arrival that
        could take the reservation `other` holds."""
        return True

    def may_reserve(self, cycle: Cycle, job: Job) -> bool:
        """May this blocked job hold a reservation (only the first such job gets one)?"""
        return False

    def idle(self, snap: Snapshot) -> bool:
        """Would a cycle on this state surely decide nothing: start no job, preempt none and
        ask for no wake-up? A cheap sufficient condition (False: cannot tell); a driver may
        skip such a cycle. A policy that never preempts knows it when no pending job fits.
        A subclass that may start or preempt where its parent would not must override it
        (returning False is always safe)."""
        return not self.preemptive and self.is_default("wake_at") and nothing_fits(snap)

    def queue_key_is_default(self) -> bool:
        """Does the queue keep `default_queue_key` order? (A subclass may say no.)"""
        return self.is_default("queue_key")

    def is_default(self, method: str) -> bool:
        """Is `method` this class's own, not overridden by a subclass?"""
        return getattr(type(self), method) is getattr(Policy, method)

    def wake_at(self, cycle: Cycle) -> float | None:
        """A time at which the decision may change even if nothing happens: here, when a job
        running after this cycle becomes old enough (preempt_min_runtime) to be a victim."""
        snap = cycle.snap
        if not self.preemptive or self.min_runtime <= 0 or not len(snap.pending):
            return None
        ages = (r.started_at + self.min_runtime for r in cycle.running_after() if r.job.preemptible)
        return min((t for t in ages if t > snap.now), default=None)


def nothing_fits(snap: Snapshot) -> bool:
    """Does no pending job fit in what is free, reservations aside, with no job stopping?
    (Then no job can start: a fit is the first thing a start needs.)"""
    if snap.terminating:
        return False
    slots = snap.slots
    for (accelerator, per_worker), workers in snap.pending.summary_all().fewest_workers.items():
        counts = slots.get(accelerator)
        found = None if counts is None else counts.get(per_worker)
        if found is None or found >= workers:
            return False
    return True
