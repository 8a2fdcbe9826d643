"""fair's walk over the queue: projects' queues merged across users (`_ProjectQueue`) or read
in place (`_UserQueue`), and the walk's questions, each answered once while what it reads
stays the same (`_Answers`)."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable
from heapq import heappop, heappush
from typing import TYPE_CHECKING

from corral.core import memos
from corral.core.cycle import Cycle
from corral.core.model import Job
from corral.core.pending import Shape
from corral.core.queues import SortedQueue
from corral.policies.fair_memos import FairCycleMemo

if TYPE_CHECKING:
    from corral.policies.fair import Fair

PASS, STOP, ACT = 0, 1, 2  # what the walk does with a job (_Answers.verdict)


def queue_of(
    cycle: Cycle, project: str, users: dict[str, SortedQueue[Job]], jumps: bool
) -> _UserQueue | _ProjectQueue:
    """A project's queue for the walk; `jumps`: the policy's queue key is the default."""
    pending = cycle.snap.pending
    if len(users) > 1:
        return _ProjectQueue(users)
    # One user: no round-robin, its queue is already in order. With one priority and the
    # default queue key, each shape's jobs are in submit order: a walk may jump over them.
    for user, jobs in users.items():  # (the only one: a loop reads it without a copy)
        shapes = None
        if len(pending.priorities[project]) == 1 and jumps:
            shapes = pending.by_user_shape[(project, user)]
        return _UserQueue(jobs, shapes)
    raise ValueError(f"project {project} has no pending job")


class _ProjectQueue:
    """A project's pending jobs merged across users: priority, then the user with the least
    already ahead in the queue, then submit time, then name (weighted round-robin)."""

    def __init__(self, users: dict):
        self.iters = {user: iter(jobs) for user, jobs in users.items()}
        self.ahead: Counter[str] = Counter()
        self.heap: list[tuple] = []
        for user in sorted(self.iters):
            self._push(user)

    def _push(self, user: str) -> None:
        job = next(self.iters[user], None)
        if job is not None:
            entry = (-job.priority, self.ahead[user], job.submit_time, job.name, job.id, user, job)
            heappush(self.heap, entry)

    def peek(self) -> Job | None:
        return self.heap[0][-1] if self.heap else None

    def pop(self) -> Job:
        *_, user, job = heappop(self.heap)
        self.ahead[user] += job.demand
        self._push(user)
        return job


class _Answers:
    """The walk's questions about projects and kinds of job, each answered once while what
    they read stays the same. Only decide's handling of a yielded job changes the cycle's
    state; a job passed over changes nothing. `after_yield` forgets what the handling may
    have changed, `new_pass` what the reclaim flag decides."""

    def __init__(self, fair: Fair, cycle: Cycle):
        self.fair, self.cycle = fair, cycle
        self.mark = cycle.changes  # see Cycle.changes
        # The snapshot's running jobs and queue do not change during a cycle: nor do these.
        self.outranks: dict[str, bool] = {}
        self.outranking = cycle.snap.outrank_possible()
        self._capacity_changed()

    def after_yield(self) -> None:
        mark = self.cycle.changes
        if mark != self.mark:
            self.mark = mark
            self._capacity_changed()
        else:  # a victim search may have failed, which rules out reclaim or outrank
            self.new_pass()

    def _capacity_changed(self) -> None:
        self.any_fit = self.cycle.may_fit_any()  # else no project's jobs may fit either
        self.fitting: set[str] | None = None  # Cycle.projects_may_fit, once asked
        self.heads: dict[tuple[str, str, int], tuple] = {}
        self.within: dict[tuple, bool] = {}
        self.reserve: dict[tuple, bool] = {}
        self.new_pass()

    def new_pass(self) -> None:
        """Forget what the reclaim flag and failed victim searches decide."""
        self.reclaims: dict[str, bool] = {}
        self.act: dict[tuple, bool] = {}
        memo = self.cycle.policy_memo(FairCycleMemo)
        self.reclaiming, self.deferred = memo.reclaim, memo.deferred

    def key(self, project: str, head: Job) -> tuple:
        """The project's place in the heap with `head` as its next job."""
        which = (project, head.accelerator, head.demand)
        part = self.heads.get(which)
        if part is None:
            part = self.fair._key_head(self.cycle, project, head.accelerator, head.demand)
            self.heads[which] = part
        elif memos.CHECKING:
            again = self.fair._key_head(self.cycle, project, head.accelerator, head.demand)
            memos.same("fair key", part, again)
        return (part[0], part[1], head.submit_time, project)

    def candidates(self, within: bool) -> Iterable[str]:
        """The projects whose jobs may do anything in this pass. (What they may do only shrinks
        as the pass goes on, so a project left out now would be skipped later anyway.) First
        pass: those with room within their guarantee (no reserver is chosen yet); second:
        those whose jobs may start, reclaim or outrank, and those whose head ended their first
        pass (it may take the reservation)."""
        if within:
            return self.cycle.snap.projects_with_room()
        if not self.any_fit and not self.outranking and not self.deferred:
            return ()
        deferred = self.deferred
        return [p for p in self.cycle.snap.pending.by_user if p in deferred or self.may_progress(p)]

    def may_progress(self, project: str) -> bool:
        """Might any job of the project start, reclaim or outrank now? (Not memoised itself:
        its parts are, and it is mostly asked once between two yields.)"""
        return (
            self.may_fit(project)
            or ((self.reclaiming or project in self.deferred) and self.may_reclaim(project))
            or (self.outranking and self.may_outrank(project))
        )

    # Each answer below is memoised in its own table (inline: these run per popped job).

    def may_fit(self, project: str) -> bool:
        if memos.CHECKING:
            memos.same("fair any fit", self.any_fit, self.cycle.may_fit_any())
        if not self.any_fit:
            return False
        if self.fitting is None:
            self.fitting = self.cycle.projects_may_fit()
        elif memos.CHECKING:
            memos.same("fair fitting", self.fitting, self.cycle.projects_may_fit())
        return project in self.fitting

    def may_reclaim(self, project: str) -> bool:
        found = self.reclaims.get(project)
        if found is None:
            found = self.reclaims[project] = self.fair._may_reclaim(self.cycle, project)
        elif memos.CHECKING:
            memos.same("fair may_reclaim", found, self.fair._may_reclaim(self.cycle, project))
        return found

    def may_outrank(self, project: str) -> bool:
        found = self.outranks.get(project)
        if found is None:
            found = self.outranks[project] = self.fair._may_outrank(self.cycle.snap, project)
        elif memos.CHECKING:
            memos.same("fair may_outrank", found, self.fair._may_outrank(self.cycle.snap, project))
        return found

    def within_guarantee(self, job: Job) -> bool:
        which = (job.project, job.accelerator, job.demand)
        found = self.within.get(which)
        if found is None:
            found = self.within[which] = self.cycle.within_guarantee(job)
        elif memos.CHECKING:
            memos.same("fair within", found, self.cycle.within_guarantee(job))
        return found

    def may_act(self, job: Job) -> bool:
        which = (job.project, job.shape, job.priority)
        found = self.act.get(which)
        if found is None:
            found = self.act[which] = self.fair._may_act(self.cycle, job)
        elif memos.CHECKING:
            memos.same("fair may_act", found, self.fair._may_act(self.cycle, job))
        return found

    def may_reserve(self, job: Job) -> bool:
        if not self.fair.own_reserve or self.fair.aged(self.cycle, job):
            return self.fair.may_reserve(self.cycle, job)
        which = (job.project, job.accelerator, job.demand)
        found = self.reserve.get(which)
        if found is None:
            found = self.reserve[which] = self.fair.may_reserve(self.cycle, job)
        elif memos.CHECKING:
            memos.same("fair may_reserve", found, self.fair.may_reserve(self.cycle, job))
        return found

    def verdict(self, job: Job, within: bool, progress: bool) -> int:
        """What the walk does with a job: ACT, it may start or preempt now, or it is the first
        blocked one allowed the reservation (rule 6); else PASS, its reason is derived. In the
        first pass a job beyond its project's guarantee waits for the second: it STOPs the
        project's first pass if it may hold the reservation then (the jobs behind it must not
        take what it waits for), else it is passed over (a head too big for the guarantee, or
        a project borrowing, does not hold back its jobs that may reclaim)."""
        if within and not self.within_guarantee(job):
            return STOP if self.may_reserve(job) else PASS
        if (progress and self.may_act(job)) or (
            self.cycle.reserver is None and self.may_reserve(job)
        ):
            return ACT
        return PASS

    def next_stop(
        self, queue: _UserQueue, project: str, bound: tuple | None, within: bool
    ) -> tuple | None:
        """The queue key of the first job from the queue's head on that the walk would not
        pass over before the heap's next entry, `bound`, comes first (None: no such job).
        The jobs before it are passed over: no state changes, so nothing is lost."""
        head = queue.head
        assert head is not None and queue.shapes is not None
        at = self.cycle.snap.pending.keys[head.id]
        stop: tuple | None = None
        for jobs in queue.shapes.values():
            found = jobs.first_from(at)
            if found is None or (stop is not None and found[0] >= stop):
                continue
            first, job = found
            if self.verdict(job, within, True) != PASS:
                stop = first  # it may act (or end the pass): looked at one by one
                continue
            if bound is None:
                continue  # every job of the kind is passed over
            part, other = self.key(project, job)[:2], bound[:2]
            if part < other:
                continue  # all of the kind sort before the bound: passed over
            if part > other:
                stop = first  # the project waits behind the bound from this job on
                continue
            # The same share part: the submit time (then the project name) decides.
            t = bound[2] if project > bound[3] else math.nextafter(bound[2], math.inf)
            found = jobs.first_from(max(first, (first[0], t)))
            if found is not None and (stop is None or found[0] < stop):
                stop = found[0]
        return stop


class _UserQueue:
    """A project's pending jobs when they all belong to one user: that user's queue, read in
    place by position (the queue does not change during a cycle), and the same by shape when
    a walk may jump over some (see queue_of)."""

    def __init__(self, queue: SortedQueue, shapes: dict[Shape, SortedQueue] | None):
        self.items, self.keys, self.shapes = queue.items, queue.keys, shapes
        self.at = 0  # the position of `head`
        self.head: Job | None = self._move(queue.head)

    def _move(self, at: int) -> Job | None:
        self.at = at
        self.head = self.items[at] if at < len(self.items) else None
        return self.head

    def jump_to(self, key: tuple | None) -> Job | None:
        """Go on from the job with this queue key, at or after the head (None: past the
        last job)."""
        return self._move(len(self.items) if key is None else bisect_left(self.keys, key, self.at))

    def peek(self) -> Job | None:
        return self.head

    def pop(self) -> Job:
        job = self.head
        assert job is not None
        self._move(self.at + 1)
        return job
