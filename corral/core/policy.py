"""The interface every scheduling policy implements, and the defaults most of them share.

A policy decides four things (its decision methods): the order pending jobs are considered in
(`queue_key` or `order`), which running jobs a blocked job may preempt (`victims`), whether a
blocked job holds a reservation (`may_reserve`) and when the decision may change with no event
(`wake_at`); the rest of the cycle is common (decide.py). The shortcuts only let a driver skip
cycles, safely (`Shortcuts`). To try an idea, subclass `Policy` in one file (docs/policies.md).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import ClassVar

from mypy_extensions import mypyc_attr

from corral.core.cycle import Cycle
from corral.core.model import Job
from corral.core.preempt import MAX_PREEMPTIONS, Preemption, Protection
from corral.core.queues import RunningIndex, RunningKey
from corral.core.snapshot import Snapshot, default_queue_key
from corral.formats.types import Node, Quota, SchedulerConfig


@mypyc_attr(allow_interpreted_subclasses=True)
class Policy:
    name: ClassVar[str] = "base"
    # Whether the policy may preempt; also true of any that overrides `victims`.
    preemptive: ClassVar[bool] = False

    def __init__(self, config: SchedulerConfig | None = None):
        config = self.config = config or SchedulerConfig()
        self.spread = config.placement == "spread"
        self.protection = Protection(config.preempt_min_runtime, config.project_min_runtime)
        self.preempts = self.preemptive or not self.runs_own(Policy, "victims")
        # Whether a reservation not known to be due lends what it holds (reserve.borrows): only
        # where the victim search reclaims it for the reserved job.
        self.lends = False
        self.shortcuts = Shortcuts(type(self))

    def option(self, key: str, default):
        return self.config.options.get(key, default)

    # --- Decision methods: what a policy decides --------------------------------------------

    def queue_key(self, job: Job) -> tuple:
        """Static sort key of a pending job; the snapshot keeps its queues sorted by it."""
        return default_queue_key(job)

    def order(self, cycle: Cycle) -> Iterator[Job]:
        """Pending jobs in the order they may be admitted. May stop early when nothing else
        could be admitted: the jobs not yielded get a derived reason."""
        yield from cycle.snap.pending.all

    def victims(self, cycle: Cycle, job: Job) -> Preemption | None:
        """Running jobs to preempt so that `job` fits, with the reason; None: no preemption."""
        return None

    def may_reserve(self, cycle: Cycle, job: Job) -> bool:
        """May this blocked job hold a reservation (only the first such job gets one)?"""
        return False

    def wake_at(self, cycle: Cycle) -> float | None:
        """A time at which the decision may change even if nothing happens (None: never),
        besides when a running job comes of age to be a victim (`protection_ends`)."""
        return None

    def protection_ends(self, cycle: Cycle) -> float | None:
        """When the next job running after this cycle becomes old enough (its `protection`)
        to be a victim, if any job waits: a time the decision may change at."""
        snap = cycle.snap
        if not self.preempts or not len(snap.pending):
            return None
        index = snap.running_by.get("protected")
        if index is None:  # a subclass keeps its own indexes only
            until = self.protection.until
            later = [until(r) for r in cycle.running_after() if r.job.preemptible]
        else:
            later = next_keys(index, cycle)
        later = [t for t in later if snap.now < t < math.inf]  # (min() of a generator: slow)
        return min(later) if later else None

    def all_of_age(self, snap: Snapshot) -> bool:
        """Is every preemptible running job past its protection (may any be a victim)?"""
        index = snap.running_by.get("protected")
        if index is None:
            return False
        return all(not entries or entries[-1][0] <= snap.now for entries in index.by_type.values())

    # --- What the snapshot keeps for the policy -------------------------------------------------

    def snapshot(self, nodes: Sequence[Node], quota: Quota) -> Snapshot:
        """An empty snapshot whose indexes follow this policy's keys."""
        revisits = not self.runs_own(Policy, "revisit_at")  # else no job ever has one
        return Snapshot(
            nodes,
            quota,
            queue_key=self.queue_key,
            revisit_at=self.revisit_at if revisits else None,
            running_keys=self.running_keys(),
            half_life=self.config.usage_half_life,
        )

    def revisit_at(self, job: Job) -> float | None:
        """When a waiting job's rank changes by itself (None: never). Fixed while it waits;
        the snapshot indexes pending jobs by it (see Las)."""
        return None

    def running_keys(self) -> dict[str, RunningKey]:
        """Static keys by which the snapshot keeps running jobs sorted for this policy, by name
        (`Snapshot.running_by`; None leaves a job out). A preempting policy keeps the jobs that
        `may_be_victim` by the end of their protection (`protection_ends`, `all_of_age`)."""
        if not self.preempts:
            return {}
        until = self.protection.until
        return {"protected": lambda run: until(run) if may_be_victim(run.job) else None}

    def runs_own(self, kind: type, method: str) -> bool:
        """Does this policy run `kind`'s own `method` (no subclass below `kind` overrides it)?
        A walk that skips jobs by what `kind`'s victim search would do asks it first."""
        return _owner(type(self), method) is kind

    # --- The shortcut layer -------------------------------------------------------------------
    # Optional answers that let a driver skip a cycle whose outcome it knows. Each may rely
    # only on the decision methods its class names in `ASSUMES`: where a subclass overrides one
    # of those (and not the shortcut), the driver uses the safe answer instead (`Shortcuts`).

    ASSUMES: ClassVar[dict[str, tuple[str, ...]]] = {
        "idle": ("victims", "wake_at"),
        "settled": (),
        "may_precede": (),
        "may_preempt_for": ("victims",),
    }

    def idle(self, snap: Snapshot) -> bool:
        """Would a cycle on this state surely decide nothing: start no job, preempt none and
        ask for no wake-up? A cheap sufficient condition (safe answer: False). A policy that
        never preempts knows it when no pending job fits (whatever its order)."""
        return not self.preempts and nothing_fits(snap)

    def settled(self, cycle: Cycle) -> bool:
        """Once this cycle's decision is applied, would another cycle with no job new decide
        nothing? A driver skips the cycle of an arrival that cannot act only then (safe
        answer: False). Surely when this one started nothing: jobs it started may be victims,
        or change the order or the reservation the next cycle plans."""
        return not cycle.started

    def may_precede(self, cycle: Cycle, job: Job, other: Job) -> bool:
        """Might `job` come before `other` (both pending) in the order of a cycle like this
        one? (Safe answer: True.) A driver then runs a cycle for an arrival that could take the
        reservation `other` holds."""
        return True

    def may_preempt_for(self, cycle: Cycle, job: Job) -> bool:
        """After `cycle`, might a job that just arrived preempt something? A cheap necessary
        condition (safe answer: True): False lets a driver skip the cycle for an arrival that
        cannot fit either."""
        return self.preempts


def next_keys(index: RunningIndex, cycle: Cycle) -> list[float]:
    """The keys of the jobs the cycle starts, and per type the first key after now of a job
    still running after the cycle (not stopping, not a victim): the index's next times."""
    later = [t for t in map(index.key, cycle.started) if t is not None]
    after = math.nextafter(cycle.snap.now, math.inf)
    for entries in index.by_type.values():
        for i in range(bisect_left(entries, (after,)), len(entries)):
            key, job_id, run = entries[i]
            if not run.terminating and job_id not in cycle.victims:
                later.append(key)
                break
    return later


def may_be_victim(job: Job) -> bool:
    """Preemptible, and below MAX_PREEMPTIONS: the running jobs a preempting policy's indexes
    keep. (A capped job kept would be protected for ever, `all_of_age` false while it runs.)"""
    return job.preemptible and job.preemptions < MAX_PREEMPTIONS


class Shortcuts:
    """Which of a policy class's shortcuts a driver may use (else it runs the cycle): each is
    trusted unless a decision method it assumes (`ASSUMES`) is overridden below its class."""

    def __init__(self, kind: type[Policy]) -> None:
        self.idle = _trusted(kind, "idle")
        self.settled = _trusted(kind, "settled")
        self.may_precede = _trusted(kind, "may_precede")
        self.may_preempt_for = _trusted(kind, "may_preempt_for")


def _trusted(kind: type[Policy], shortcut: str) -> bool:
    owner = _owner(kind, shortcut)
    assumes: dict[str, tuple[str, ...]] = getattr(owner, "ASSUMES")  # noqa: B009 (a Policy)
    return all(issubclass(owner, _owner(kind, m)) for m in assumes[shortcut])


def _owner(kind: type, method: str) -> type:
    """The class in `kind`'s hierarchy whose own `method` it runs."""
    return next(c for c in kind.__mro__ if method in vars(c))


def nothing_fits(snap: Snapshot) -> bool:
    """Does no pending job fit in what is free, reservations aside, with no job stopping?
    (Then no job can start: a fit is the first thing a start needs.)"""
    if snap.terminating:
        return False
    for (accelerator, per_worker), workers in snap.pending.summary().fewest_workers.items():
        if snap.map.slots_of(accelerator, per_worker) >= workers:  # (counted on submission)
            return False
    return True
