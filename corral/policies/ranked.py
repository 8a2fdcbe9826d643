"""Shared machinery of preemptive rank policies (las, srtf): one global order by a rank, and
a pending job may preempt running jobs of strictly worse rank, worst first.

Running ranks change with time, but each policy keys its running jobs by static times (when a
job crosses a threshold, when it ends) in indexes the snapshot keeps (`Snapshot.running_by`):
a cycle reads the first few entries for the worst rank and the next wake-up, and ranks only
the jobs worse than a pending job when it searches for victims, never every running job.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from heapq import heapify, heappop, heappush
from operator import itemgetter
from typing import ClassVar, Final

from mypy_extensions import mypyc_attr

from corral.core import memos, reasons
from corral.core.cycle import Cycle
from corral.core.memos import PolicyMemo
from corral.core.model import Job, Running
from corral.core.pending import Shape
from corral.core.policy import Policy
from corral.core.preempt import Preemption, Protection, could_free_room, find_victims
from corral.core.queues import RunningIndex
from corral.formats.types import SchedulerConfig

INF: Final = float("inf")

run_of = itemgetter(2)  # the run of an Entry


class Keep:
    """Which indexed (so preemptible) running jobs may be victims in a cycle: not stopping,
    past their protection (read from the `protected` index, `ends`, if kept) and not `taken`.
    `every`: no job is stopping, protected or taken, so all are (a caller may skip asking)."""

    def __init__(
        self,
        now: float,
        protection: Protection,
        taken: dict[str, Running],
        every: bool,
        ends: RunningIndex | None,
    ) -> None:
        self.now, self.until, self.taken, self.ends = now, protection.until, taken, ends
        self.every = every and not taken

    def __call__(self, run: Running) -> bool:
        if run.terminating or run.job.id in self.taken:
            return False
        until = None if self.ends is None else self.ends.key_of(run.job.id)
        return self.now >= (self.until(run) if until is None else until)


@mypyc_attr(allow_interpreted_subclasses=True)
class RankPolicy(Policy):
    """Queue keys must start with the job's `pending_rank`, for a job that `moved` leaves at
    its place (the walk reads it from there)."""

    preemptive: ClassVar[bool] = True

    @abstractmethod
    def pending_rank(self, cycle: Cycle, job: Job) -> float:
        """Lower runs first."""

    @abstractmethod
    def running_rank(self, cycle: Cycle, run: Running) -> float:
        """The same scale as pending_rank, for a job that is running now."""

    @abstractmethod
    def worst_indexed(self, cycle: Cycle, keep: Keep) -> float | None:
        """The worst rank now of the preemptible running jobs that `keep` accepts (None:
        none), read from the policy's indexes."""

    @abstractmethod
    def indexed_worse(
        self, cycle: Cycle, accelerator: str, rank: float, keep: Keep
    ) -> list[Running]:
        """The preemptible running jobs of a type that `keep` accepts and whose rank now is
        strictly worse than `rank`, in any order (that `worst_first` expects)."""

    def __init__(self, config: SchedulerConfig | None = None):
        super().__init__(config)
        self.skips = self.runs_own(RankPolicy, "victims")  # see order

    def describe(self, rank: float) -> str:
        return f"rank {rank:g}"

    def moved(self, cycle: Cycle) -> dict[str, tuple[tuple, Job]]:
        """Pending jobs whose place in the order is not given by their queue key: job id ->
        (the key that places them, comparable with queue keys; the job). See Las."""
        return {}

    def order(self, cycle: Cycle) -> Iterator[Job]:
        # Ranks never get better along the order, capacity only shrinks and failed victim
        # searches stay failed: a shape that neither fits nor could preempt at some rank is
        # dead for the rest of the cycle, its queue dropped whole; the walk ends with the last.
        # (A subclass with its own victims is walked job by job: it decides what is dead.)
        failed = cycle.policy_memo(RankCycleMemo).failed
        hopeless: dict[Shape, tuple[int, float]] = {}
        skips = self.skips
        walk = _Walk(cycle, self.moved(cycle))
        for shape, job in walk:
            if skips and not cycle.may_fit(job, long=False):
                if cycle.releasing:
                    if self._hopeless(cycle, job, shape, failed, hopeless):
                        if not self._may_be_capped(cycle, shape):
                            walk.sleep(shape)
                        continue
                elif self._beyond_victims(cycle, self.pending_rank(cycle, job), shape, failed):
                    walk.dead.add(shape)
                    continue
            yield job

    def _beyond_victims(self, cycle: Cycle, rank: float, shape: Shape, failed: dict) -> bool:
        """Would a victim search at this rank surely fail (no candidate ranks worse, or one
        for the shape failed at a rank no worse)?"""
        worst = self._worst(cycle)
        return worst is None or rank >= min(worst, failed.get(shape, INF))

    def _hopeless(self, cycle: Cycle, job: Job, shape: Shape, failed: dict, hopeless: dict) -> bool:
        """While jobs are stopping, may a job that does not fit now be passed over: within its
        limits, it fits neither once they are gone nor by preempting (its failed search is
        recorded here)? It holds for the shape's later jobs until more jobs stop (`hopeless`:
        shape -> stopping jobs then, rank), but limits are per job."""
        if reasons.limit(cycle, job) is not None:  # considering it records the reason
            return False
        rank = self.pending_rank(cycle, job)
        releasing = len(cycle.releasing)
        judged = hopeless.get(shape)
        if judged is not None and judged[0] == releasing and rank >= judged[1]:
            if memos.CHECKING:
                memos.same("hopeless shape", False, cycle.after_release().may_fit(job, False))
            return True  # and failed[shape] is already no worse than rank
        if cycle.after_release().may_fit(job, long=False):
            return False
        if not self._beyond_victims(cycle, rank, shape, failed):
            return False
        failed[shape] = min(rank, failed.get(shape, INF))
        hopeless[shape] = (releasing, rank)
        return True

    def _may_be_capped(self, cycle: Cycle, shape: Shape) -> bool:
        """Might a hard limit stop some pending job of this shape (`reasons.limit`): one in a
        project with a limit on its type, or a non-preemptible one?"""
        snap = cycle.snap
        for project, limits in snap.quota.limits.items():
            if shape[0] in limits and snap.pending.demand.get(project, {}).get(shape):
                return True
        return shape in snap.pending.fixed

    def _worst(self, cycle: Cycle) -> float | None:
        """The worst rank of a running job that may be a victim (victims taken included)."""
        memo = cycle.policy_memo(RankCycleMemo)
        if not memo.worst_known:
            memo.worst, memo.worst_known = self.worst_indexed(cycle, self._candidate(cycle)), True
        elif memos.CHECKING:
            memos.same("worst rank", memo.worst, self.worst_indexed(cycle, self._candidate(cycle)))
        return memo.worst

    def _candidate(self, cycle: Cycle, untaken: bool = False) -> Keep:
        """May an indexed (so preemptible) running job be a victim in this cycle? Victims
        already taken count, unless `untaken`: they were candidates when the cycle began."""
        taken = cycle.victims if untaken else {}
        snap = cycle.snap
        every = not snap.terminating and self.all_of_age(snap)
        return Keep(snap.now, self.protection, taken, every, snap.running_by.get("protected"))

    def may_preempt_for(self, cycle: Cycle, job: Job) -> bool:
        # The worst rank running once the cycle's starts are applied: las ranks change only at
        # the wake-ups it asks for, and srtf's only get better as jobs run, so it holds for
        # every arrival until the next cycle (erring on the side of a cycle). (An arrival at a
        # wake-up's instant is followed by that cycle: the check looks at one instant only.)
        memo, now = cycle.policy_memo(RankCycleMemo), cycle.snap.now
        if memo.after_at is None:
            memo.after, memo.after_at = self._worst_after(cycle), now
        elif memos.CHECKING and memo.after_at == now:
            memos.same("worst rank after", memo.after, self._worst_after(cycle))
        worst = memo.after
        return worst is not None and self.pending_rank(cycle, job) < worst

    def _worst_after(self, cycle: Cycle) -> float | None:
        """The worst rank of a preemptible job of `cycle.running_after()`: the indexed jobs
        still running, and the ones the cycle starts. Protected ones count: they come of age
        before the next cycle, and the answer must hold for every arrival until then."""
        started = [r for r in cycle.started if r.job.preemptible]
        ranks = self.running_ranks(cycle, started)
        keep = Keep(INF, self.protection, cycle.victims, False, None)
        worst = self.worst_indexed(cycle, keep)
        if worst is not None:
            ranks.append(worst)
        return max(ranks, default=None)

    def victims(self, cycle: Cycle, job: Job) -> Preemption | None:
        # Ranks are fixed within a cycle and capacity only shrinks as it goes on: a search that
        # failed for a shape fails again for any job of that shape ranked no better.
        failed = cycle.policy_memo(RankCycleMemo).failed
        shape = job.shape
        rank = self.pending_rank(cycle, job)
        if rank >= failed.get(shape, INF):
            if memos.CHECKING:
                memos.same("failed victim search", None, self._search(cycle, job, rank))
            return None
        found = self._search(cycle, job, rank)
        if found is None:
            failed[shape] = min(rank, failed.get(shape, INF))
            return None
        found.why = f"preempted by job {job.name} ({self.name}: {self.describe(rank)})"
        return found

    def _search(self, cycle: Cycle, job: Job, rank: float) -> Preemption | None:
        """The victims among the jobs ranked worse than `rank`, worst first. (The order matters
        only once they could free room.)"""
        worse = self.indexed_worse(cycle, job.accelerator, rank, self._candidate(cycle, True))
        if could_free_room(cycle, job, worse):
            return find_victims(cycle, job, self.worst_first(cycle, worse))
        return None

    def worst_first(self, cycle: Cycle, runs: list[Running]) -> Iterator[Running]:
        """`runs` (as `indexed_worse` gave them) worst rank first, then the most recently
        started, lazily (heapified once, then popped): a search mostly needs the first few."""
        ranks = self.running_ranks(cycle, runs)
        heap = [(-k, -r.started_at, r.job.id, r) for k, r in zip(ranks, runs, strict=True)]
        heapify(heap)  # ids are unique: runs are never compared
        while heap:
            yield heappop(heap)[3]

    def running_ranks(self, cycle: Cycle, runs: list[Running]) -> list[float]:
        """`running_rank` of each run (a policy may compute them all at once, faster)."""
        return [self.running_rank(cycle, r) for r in runs]


class RankCycleMemo(PolicyMemo):
    """A rank policy's memos of one cycle (`Cycle.memo`), each with the rule that ends it."""

    def __init__(self) -> None:
        # Per shape, the best rank whose victim search failed (or would, see _hopeless): it
        # fails again for the rest of the cycle at any rank no better (capacity only shrinks).
        self.failed: dict[Shape, float] = {}
        # The worst rank of a candidate victim when the cycle began (`_worst`), and once its
        # decision is applied (`may_preempt_for`, first asked at `after_at`): both kept.
        self.worst: float | None = None
        self.worst_known = False
        self.after: float | None = None
        self.after_at: float | None = None
        self.due = -1  # las: how many waiting jobs are promoted now (-1: not asked yet)


class _Walk:
    """Pending jobs in the policy's order, as (shape, job): the per-shape queues merged, with
    the moved jobs at their own keys. A shape can be dropped for the rest of the cycle, or put
    to sleep until more running jobs stop: then its queue goes on after the last job yielded."""

    def __init__(self, cycle: Cycle, moved: dict[str, tuple[tuple, Job]]):
        self.cycle = cycle
        self.queues = cycle.snap.pending.by_shape
        self.keys = cycle.snap.pending.keys  # the queue keys, computed once per job
        self.moved = moved
        self.dead: set[Shape] = set()  # dropped
        self.asleep: dict[Shape, bool] = {}  # shape -> its queue is out of the heap
        self.releasing = len(cycle.releasing)
        self.rest: dict[Shape, Iterator[Job]] = {}  # what is left of each shape's queue
        # (order key, shape, from the shape's queue (else a moved job), job)
        self.heap: list[tuple[tuple, Shape, bool, Job]] = []
        for shape, queue in self.queues.items():
            self.rest[shape] = iter(queue)
            self._push(shape)
        for key, job in moved.values():
            self.heap.append((key, job.shape, False, job))
        heapify(self.heap)

    def _push(self, shape: Shape) -> None:
        """Put the shape's next queued job (moved ones skipped) on the heap."""
        for job in self.rest[shape]:
            if job.id not in self.moved:
                heappush(self.heap, (self.keys[job.id], shape, True, job))
                return

    def sleep(self, shape: Shape) -> None:
        if not self.asleep:  # counted from here on
            self.releasing = len(self.cycle.releasing)
        self.asleep.setdefault(shape, False)

    def __iter__(self) -> Iterator[tuple[Shape, Job]]:
        heap, dead, asleep = self.heap, self.dead, self.asleep
        last = None
        while heap:
            if asleep and len(self.cycle.releasing) != self.releasing:
                self._wake(last)
            key, shape, queued, job = heappop(heap)
            if shape in dead:
                continue
            if shape in asleep:
                if queued:
                    asleep[shape] = True
                continue
            if queued:
                self._push(shape)
            last = key
            yield shape, job

    def _wake(self, last: tuple | None) -> None:
        """More jobs are stopping: sleeping shapes go on after the last job yielded."""
        self.releasing = len(self.cycle.releasing)
        for shape, out in self.asleep.items():
            if out:
                self.rest[shape] = self.queues[shape].after(last)
                self._push(shape)
        self.asleep.clear()


def slack(a: float, b: float) -> float:
    """A bound, far above rounding error, on how far a float sum or difference of values of
    these magnitudes may be from the exact one: entries this close to a boundary are
    rechecked with the exact formula of the rank. (An infinite value adds no rounding.)"""
    size = abs(a) + abs(b)
    if size == INF:
        size = min(abs(a), abs(b))
    return 1e-9 * (1.0 + size)
