"""`fair`: the AXLearn bastion order with Kueue-style reclaim. The default (DESIGN.md §3).

Across projects: next is the project whose usage/guarantee ratio, maximised over accelerator
types, would be lowest after admitting its head job; among borrowers (beyond it), the least
usage decayed with usage_half_life first; projects with no guarantee come last.
Within a project: priority, then round-robin over users weighted by what each already has
ahead in the queue, then submit time, then name. A job that keeps its project within its
guarantee reclaims from projects above theirs; a job may also preempt lower-priority jobs of
its own project. The first blocked job within its guarantee, or past the aging limit, holds a
reservation; the longest-waiting aged job of a project that holds nothing is asked first.
"""

from __future__ import annotations

from collections.abc import Iterator
from heapq import heapify, heappop, heappushpop
from itertools import takewhile
from typing import ClassVar, Final

from mypy_extensions import mypyc_attr

from corral.core import memos
from corral.core.cycle import Cycle, freed_by
from corral.core.model import Job, Running
from corral.core.policy import Policy, nothing_fits
from corral.core.preempt import (
    Preemption,
    awaited,
    could_free_room,
    eligible,
    find_victims,
    free_room_counter,
    guarantees_kept,
)
from corral.core.reserve import outlasts
from corral.core.snapshot import Snapshot, share_ratio, within
from corral.formats.types import SchedulerConfig
from corral.policies.fair_memos import (
    FairCycleMemo,
    _found_short,
    _Giver,
    _givers,
    _kept,
    _note_unfreed,
    _reclaim_failed,
    reclaim_key,
)
from corral.policies.fair_walk import ACT, PASS, STOP, _Answers, _ProjectQueue, _UserQueue, queue_of

INF: Final = float("inf")
LEND_WAIT: Final = 600.0  # the longest a reserved job may wait past due for a job it lent to
JUMP_AFTER: Final = 1  # jobs passed over in a row before a walk looks for the next one that matters


@mypyc_attr(allow_interpreted_subclasses=True)
class Fair(Policy):
    name: ClassVar[str] = "fair"
    preemptive: ClassVar[bool] = True
    ASSUMES: ClassVar[dict[str, tuple[str, ...]]] = {
        **Policy.ASSUMES,
        "idle": ("queue_key", "order", "victims", "wake_at"),
        "may_preempt_for": ("order", "victims"),
    }

    def __init__(self, config: SchedulerConfig | None = None):
        super().__init__(config)
        # Whether the walk may ask may_reserve once per project and size (a subclass's own is
        # asked per job), and jump over a user's jobs (see queue_of): asked once, not per queue.
        self.own_reserve = self.runs_own(Fair, "may_reserve")
        self.jumps = self.runs_own(Policy, "queue_key")
        # A reservation lends what it holds (reserve.borrows) where the reserved job takes it
        # back by reclaim, and soon: a borrower is safe for its preempt_min_runtime.
        wait = max([self.config.preempt_min_runtime, *self.config.project_min_runtime.values()])
        self.lends = self.runs_own(Fair, "victims") and wait <= LEND_WAIT

    def order(self, cycle: Cycle) -> Iterator[Job]:
        # Each project's jobs that keep it within its guarantee go first (a job beyond it that
        # may not reserve, a head too big for the guarantee say, does not hold back the ones
        # behind it), then everything else, each pass in bastion order. Reclaim happens in the
        # first pass, where the preemptor is sure to be first in line for the capacity it
        # frees (else a borrower ranked ahead of it could take it back, and the two would
        # trade places forever); and in the second for the jobs behind a head that ended its
        # project's first pass (`deferred`): that head has had its turn at the reservation,
        # which their placement and victims then leave alone (rule 6).
        seen: set[str] = set()
        memo = cycle.policy_memo(FairCycleMemo)
        memo.reclaim = True
        answers = _Answers(self, cycle)
        starved = self._starved_head(cycle)
        if starved is not None:  # first, so that it may take the reservation (rule 6)
            seen.add(starved.id)
            yield starved
            answers.after_yield()
        yield from self._pass(cycle, seen, answers, within=True)
        memo.reclaim = False
        answers.new_pass()
        yield from self._pass(cycle, seen, answers, within=False)

    def _starved_head(self, cycle: Cycle) -> Job | None:
        """The longest-waiting job past the aging limit that is next in its user's queue, of
        a project that holds nothing."""
        limit, snap = self.config.aging_limit, cycle.snap
        found: Job | None = None
        if limit <= 0:
            return found
        for project, users in snap.pending.by_user.items():
            if snap.usage.get(project):
                continue
            for jobs in users.values():
                job = next(iter(jobs))
                if job.submit_time <= snap.now - limit and (
                    found is None or (job.submit_time, job.id) < (found.submit_time, found.id)
                ):
                    found = job
        return found

    def _pass(self, cycle: Cycle, seen: set[str], answers: _Answers, within: bool) -> Iterator[Job]:
        # A heap merge of the projects' queues by key. Most jobs popped are passed over: they
        # change nothing, so the answers about them are memoised until the next yield (see
        # _Answers), and a project whose next key is still the smallest goes on at once.
        queues: dict[str, _UserQueue | _ProjectQueue] = {}
        heap = []
        by_user = cycle.snap.pending.by_user
        for project in answers.candidates(within):  # (the heap sets the order)
            queue = queues[project] = queue_of(cycle, project, by_user[project], self.jumps)
            heap.append(answers.key(project, queue.peek()))  # type: ignore[arg-type]
        heapify(heap)
        top = heappop(heap) if heap else None
        passed = 0  # jobs of the top project passed over in a row
        while top is not None:
            project = top[-1]
            queue = queues[project]
            progress = answers.may_progress(project)
            # Without progress, nothing of the project can start now: once a reserver is
            # chosen the rest get derived reasons; before, its next job may still reserve.
            keep = progress or cycle.reserver is None
            if keep:
                job = queue.pop()
                passed += 1
                verdict = PASS if job.id in seen else answers.verdict(job, within, progress)
                if verdict == STOP:
                    keep = False
                    if _has_room(cycle, project):  # (jobs behind it may reclaim in the second)
                        cycle.policy_memo(FairCycleMemo).deferred.add(project)
                elif verdict == ACT:
                    passed = 0
                    seen.add(job.id)
                    yield job
                    answers.after_yield()
            head = queue.peek() if keep and progress else None
            if head is not None and passed >= JUMP_AFTER and isinstance(queue, _UserQueue):
                # A long run of jobs that do nothing: jump to the next one that may matter.
                passed = 0
                if queue.shapes is not None:
                    bound = heap[0] if heap else None
                    head = queue.jump_to(self._next_stop(answers, queue, project, bound, within))
            if head is not None:  # push and pop at once: no heap change if still the smallest
                top = heappushpop(heap, answers.key(project, head))
            else:
                top = heappop(heap) if heap else None
            if top is not None and top[-1] != project:
                passed = 0

    def _next_stop(
        self, answers: _Answers, queue: _UserQueue, project: str, bound: tuple | None, within: bool
    ) -> tuple | None:
        return answers.next_stop(queue, project, bound, within)  # (a hook for tests)

    def _may_act(self, cycle: Cycle, job: Job) -> bool:
        """Might the job start or preempt now? Cheap and conservative (domains aside), so
        that a project's queue is walked past jobs that cannot. (Answered alike for all the
        jobs of a project, shape and priority: see _Answers.may_act.)"""
        if cycle.releasing or self._may_fit(cycle, job):
            return True
        shape = job.shape
        if (
            _reclaiming(cycle, job.project)
            and not _reclaim_failed(cycle, job.project, shape)
            and cycle.within_guarantee(job)
        ):
            return True
        failed = cycle.policy_memo(FairCycleMemo).outrank_failed
        return _outranks(cycle.snap, job.project, job.priority) and (
            (job.project, shape, job.priority) not in failed
        )

    def _may_fit(self, cycle: Cycle, job: Job) -> bool:
        """Enough free blocks for the job; beside held capacity too once a reservation holds
        some, unless the project has jobs that may end before it is due or borrows (as in
        Cycle.projects_may_fit)."""
        if not cycle.may_fit(job, long=False):
            return False
        return (
            cycle.reservation is None
            or bool(cycle.snap.pending.bounded.get(job.project))
            or cycle.lends_to(job.project)
            or cycle.may_fit(job, long=True)
        )

    def _key_head(self, cycle: Cycle, project: str, accel: str, demand: int) -> tuple:
        """The part of a project's key that its head job's type and demand set: rule 3.
        (A plain tuple: its items go into heap keys as they are, not unboxed and boxed.)"""
        shares = cycle.snap.guarantee.get(project)
        usage = cycle.usage.get(project, {})
        if shares is None:  # leftovers only: share them by what each already holds
            return (2, sum(usage.values()) + demand)
        # (usage and shares read once per type, not looked up again through the cycle)
        ratio = share_ratio(usage.get(accel, 0) + demand, shares.get(accel, 0.0))
        for other, held in usage.items():
            if other != accel:
                ratio = max(ratio, share_ratio(held, shares.get(other, 0.0)))
        if within(ratio, 0, 1.0) or cycle.snap.half_life <= 0:
            return (0, ratio)
        # A borrower: the least recent usage for its guarantee first (rule 3).
        return (1, share_ratio(cycle.snap.recent_usage(project), sum(shares.values())))

    def _may_reclaim(self, cycle: Cycle, project: str) -> bool:
        """Might a job of the project reclaim now: in the first pass, within its guarantee,
        of a shape whose reclaim has not failed yet, with another project that has some to give?"""
        if not _reclaiming(cycle, project):
            return False
        snap = cycle.snap
        for accel, least in snap.pending.summary(project).least_demand.items():
            # Not a type without room for even its smallest job, or with no project to give
            # (the project itself, within its guarantee there, is none).
            held, guarantee = cycle.held(project, accel), snap.guarantee_of(project, accel)
            if not within(held, least, guarantee) or not _givers(cycle, accel):
                continue
            for shape in snap.pending.demand[project]:
                if (
                    shape[0] == accel
                    and within(held, shape[1] * shape[2], guarantee)
                    and not _reclaim_failed(cycle, project, shape)
                ):
                    return True
        return False

    def idle(self, snap: Snapshot) -> bool:
        # Nothing fits, nothing is stopping, no wake-up is due (no job protected), and no job
        # may preempt: none reclaims (no project has a job within its guarantee, or none is
        # above its own with a job to give) and none outranks a running job of its project.
        if not nothing_fits(snap) or not self.all_of_age(snap):
            return False
        if snap.projects_with_room() and _any_giver(snap):
            return False
        if snap.outrank_possible():
            return not any(self._may_outrank(snap, project) for project in snap.pending.demand)
        return True

    def _may_outrank(self, snap: Snapshot, project: str) -> bool:
        """Does a user's first pending job outrank one of the project's running jobs? (Each
        user's first job has that user's highest priority: the queue sorts by priority first.)"""
        pending = snap.pending.priorities.get(project)
        return _outranks(snap, project, max(pending)) if pending else False

    def may_preempt_for(self, cycle: Cycle, job: Job) -> bool:
        reclaim = cycle.within_guarantee(job) and self._reclaim_bound(cycle, job) >= job.demand
        return reclaim or _outranks(cycle.snap, job.project, job.priority)

    def may_reserve(self, cycle: Cycle, job: Job) -> bool:
        """Within the guarantee: the job alone fits in it and the project is not borrowing.
        (Its own running jobs may be what it waits for, so they are not added to it.)"""
        g = cycle.snap.guarantee_of(job.project, job.accelerator)
        return (
            within(0, job.demand, g) and within(cycle.held(job.project, job.accelerator), 0, g)
        ) or self.aged(cycle, job)

    def aged(self, cycle: Cycle, job: Job) -> bool:
        """Has the job waited past the aging limit since its submission (rule 6)? Then it may
        hold the reservation as if within its guarantee."""
        limit = self.config.aging_limit
        return limit > 0 and cycle.snap.now - job.submit_time >= limit

    def victims(self, cycle: Cycle, job: Job) -> Preemption | None:
        # A search that failed for a project and shape (reclaim), or also priority (outrank),
        # fails again later in the cycle: capacity and candidates only shrink as it goes on.
        shape, memo = job.shape, cycle.policy_memo(FairCycleMemo)
        if _reclaiming(cycle, job.project) and cycle.within_guarantee(job):
            key = reclaim_key(cycle, job)
            if key not in memo.reclaim_failed:
                found = self._reclaim(cycle, job)
                if found:
                    return found
                memo.reclaim_failed.add(key)
            elif memos.CHECKING:
                memos.same("fair reclaim failed", None, self._take_back(cycle, job))
        attempt = (job.project, shape, job.priority)
        if attempt in memo.outrank_failed:
            if memos.CHECKING:
                memos.same("fair outrank failed", None, self._outrank(cycle, job))
            return None
        found = self._outrank(cycle, job)
        if found is None:
            memo.outrank_failed.add(attempt)
        return found

    def _outrank(self, cycle: Cycle, job: Job) -> Preemption | None:
        """Lower-priority jobs of the project to preempt, if freeing them lets the job fit."""
        runs = cycle.snap.preemptible.get(job.accelerator, {}).get(job.project, ())
        lower = takewhile(lambda r: r.job.priority < job.priority, runs)
        outranked = [r for r in lower if eligible(cycle, r, self.protection)]
        found = None
        if outranked and could_free_room(cycle, job, outranked):
            found = find_victims(cycle, job, outranked)
        if found and self._swap_allowed(cycle, job, found.victims):
            found.why = f"preempted by higher-priority job {job.name} of project {job.project}"
            return found
        return None

    def _reclaim(self, cycle: Cycle, job: Job) -> Preemption | None:
        # What may be freed is the same for every project within its guarantee (none gives):
        # once too little is found for a size, more workers of it find too little as well,
        # until the cycle changes.
        size = (job.accelerator, job.per_worker, outlasts(cycle, job))
        if _found_short(cycle, size, job.gang):
            if memos.CHECKING:
                memos.same("fair unfreed", None, self._take_back(cycle, job))
            return None
        if self._reclaim_bound(cycle, job) >= job.demand and self._may_free(cycle, job):
            found = self._take_back(cycle, job, wide=False)
            if found:
                return found
        # Each project's victims within its budget (above its guarantee) did not make room:
        # try them all, in victim order, and keep the set if it respects the guarantees.
        if not self._may_free(cycle, job, wide=True):
            _note_unfreed(cycle, size, job)  # (fewer workers than any: else short)
            return None
        return self._take_back(cycle, job, wide=True)

    def _take_back(self, cycle: Cycle, job: Job, wide: bool = False) -> Preemption | None:
        """The reclaim's victims, if freeing them lets the job fit: each victim project's jobs
        within what it holds above its guarantee (`_given`); `wide`, any of its jobs (in the
        second pass, or when that set is refused: any it could give up alone), taken in
        victim order until the job fits, the ones not needed given back, and the set kept if
        it leaves each victim project its guarantee (`guarantees_kept`)."""
        second = not cycle.policy_memo(FairCycleMemo).reclaim
        for alone in (True,) if second else (False, True):
            found = find_victims(cycle, job, self._reclaimable(cycle, job, wide, alone))
            if not found or not wide or guarantees_kept(cycle, job, found.victims):
                break
            found = None
        if found:
            found.why = (
                f"reclaimed by project {job.project} for job {job.name}"
                " (within its guarantee; the victim's project is above its own)"
            )
        return found

    def _reclaim_bound(self, cycle: Cycle, job: Job) -> float:
        """Free accelerators (stopping jobs gone) plus what others could give above guarantees."""
        free = cycle.after_release() if cycle.releasing else cycle
        bound = float(free.free_total(job.accelerator))
        for giver in _givers(cycle, job.accelerator):
            if giver.project != job.project:
                bound += giver.held - giver.guarantee
        return bound

    def _reclaimable(
        self, cycle: Cycle, job: Job, wide: bool = False, alone: bool = False
    ) -> Iterator[Running]:
        """Jobs of over-guarantee projects: most over-served project first, then lowest
        priority, then most recently started; never taking a project below its guarantee
        (`wide`: any eligible job, see _take_back). (Each project's share is its own: this
        merges what `_given` takes of each.)"""
        pools: dict[str, Iterator[Running]] = {}
        keys: dict[str, tuple[float, float, float]] = {}  # (ratio, held, guarantee)
        for giver in _givers(cycle, job.accelerator):
            project = giver.project
            if project != job.project:
                given = self._all_given(cycle, giver, alone) if wide else self._given(cycle, giver)
                pools[project], held, guarantee = iter(given), giver.held, giver.guarantee
                keys[project] = (share_ratio(held, guarantee), held, guarantee)
        while keys:  # the largest ratio, then name, gives next (a loop: it beats max())
            project, most = "", -INF
            for name, key in keys.items():
                if key[0] > most or (key[0] == most and name > project):
                    project, most = name, key[0]
            _, held, guarantee = keys[project]
            run = next(pools[project], None)
            if run is None:
                del keys[project]
            else:
                held -= run.job.demand
                keys[project] = (share_ratio(held, guarantee), held, guarantee)
                yield run

    def _may_free(self, cycle: Cycle, job: Job, wide: bool = False) -> bool:
        """`could_free_room` with every job `_reclaimable` would offer (`wide`: every eligible
        job of the projects above their guarantee, see _take_back), taken in no useful order
        (each project's share is its own, so the interleaving does not change the set). A
        loop, not a generator: a blocked whole-node job asks this in most cycles."""
        counter = free_room_counter(cycle, job)
        if counter.enough():
            return True
        # With every preemptible job eligible, what a project gives up depends only on its
        # jobs and what it holds: the same from cycle to cycle while those stay the same.
        # (Not the running jobs the reservation waits for: see find_victims.)
        skip = awaited(cycle, job)
        every = not wide and self._all_eligible(cycle) and not skip
        alone = not cycle.policy_memo(FairCycleMemo).reclaim
        for giver in _givers(cycle, job.accelerator):
            if giver.project == job.project:
                continue
            if every:
                if counter.release_amounts(self._released(cycle, job.accelerator, giver)):
                    return True
                continue
            runs = self._all_given(cycle, giver, alone) if wide else self._given(cycle, giver)
            for run in runs:
                if run.job.id not in skip and counter.release(run):
                    return True
        return False

    def _all_eligible(self, cycle: Cycle) -> bool:
        """May every preemptible running job be a victim (none stopping, taken or protected)?"""
        return not cycle.victims and not cycle.snap.terminating and self.all_of_age(cycle.snap)

    def _all_given(self, cycle: Cycle, giver: _Giver, alone: bool) -> Iterator[Running]:
        """Its eligible jobs; `alone`: only those it could give up alone, keeping its guarantee."""
        room = giver.held - giver.guarantee if alone else INF
        runs, protection = giver.runs, self.protection
        return (r for r in runs if r.job.demand <= room + 1e-9 and eligible(cycle, r, protection))

    def _given(self, cycle: Cycle, giver: _Giver) -> list[Running]:
        """The jobs a project would give up, none taking it below its guarantee."""
        held, floor, smallest = giver.held, giver.guarantee - 1e-9, giver.smallest
        given: list[Running] = []
        for run in giver.runs:
            if held - smallest < floor:
                break  # no job left is small enough to lose (held only shrinks)
            if held - run.job.demand >= floor and eligible(cycle, run, self.protection):
                held -= run.job.demand
                given.append(run)
        return given

    def _released(self, cycle: Cycle, accel: str, giver: _Giver) -> dict[int, int]:
        """Per node, the accelerators `_given` frees (every job eligible), kept on the
        snapshot while the project's preemptible jobs and what it holds stay the same."""
        if giver.released is not None:
            return giver.released
        released = _kept(cycle.snap).released
        which = (accel, giver.project)
        found = released.get(which)
        runs = giver.runs
        read = (runs.changes, giver.held, giver.guarantee)
        if found is not None and found[0] is runs and found[1] == read:
            amounts = found[2]
            if memos.CHECKING:
                memos.same(
                    "fair released " + giver.project, amounts, freed_by(self._given(cycle, giver))
                )
        else:
            amounts = freed_by(self._given(cycle, giver))
            released[which] = (runs, read, amounts)
        giver.released = amounts
        return amounts

    def _swap_allowed(self, cycle: Cycle, job: Job, victims: list[Running]) -> bool:
        freed = sum(r.job.demand for r in victims)
        after = cycle.held(job.project, job.accelerator) - freed + job.demand
        guarantee = cycle.snap.guarantee_of(job.project, job.accelerator)
        return within(after, 0, guarantee) or freed >= job.demand


def _has_room(cycle: Cycle, project: str) -> bool:
    """Has the project a pending job that keeps it within its guarantee, as the cycle goes?"""
    least = cycle.snap.pending.summary(project).least_demand
    return any(cycle.room_within(project, accel, need) for accel, need in least.items())


def _reclaiming(cycle: Cycle, project: str) -> bool:
    """May the project's jobs within its guarantee reclaim in this pass (see Fair.order)?"""
    memo = cycle.policy_memo(FairCycleMemo)
    return memo.reclaim or project in memo.deferred


def _outranks(snap: Snapshot, project: str, priority: int) -> bool:
    """Is `priority` above that of a preemptible running job of the project?"""
    running = snap.running_priorities.get(project)  # (any(): compiled, a loop; min() is not)
    return running is not None and any(lower < priority for lower in running)


def _any_giver(snap: Snapshot) -> bool:
    """Is some project above its guarantee of a type with a preemptible job of it?"""
    for accel, by_project in snap.preemptible_sizes.items():
        for project, counts in by_project.items():
            if counts and snap.held(project, accel) > snap.guarantee_of(project, accel):
                return True
    return False
