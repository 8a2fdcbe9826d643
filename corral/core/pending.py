"""The pending jobs, sorted by the policy's static key overall, per shape and per project
and user, with the counts a cycle reads instead of walking the queue."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sortedcontainers import SortedKeyList

from corral.core import memos
from corral.core.model import Job
from corral.core.queues import SortedQueue, decrement, discard, inner, queue_in

QueueKey = Callable[[Job], tuple]
Shape = tuple[str, int, int]  # (accelerator, per_worker, gang)


class PendingQueue:
    """Pending jobs kept sorted by the policy's static key: per shape, and per project and
    user; overall (`all`: a SortedKeyList, slower) only once a policy asks for it."""

    def __init__(self, key: QueueKey, revisit_at: Callable[[Job], float | None] | None = None):
        self.key = key
        self.jobs: dict[str, Job] = {}
        self.keys: dict[str, tuple] = {}  # job id -> its key, computed once on arrival
        self._all: SortedKeyList | None = None
        self.by_user: dict[str, dict[str, SortedQueue[Job]]] = {}  # project -> user -> queue
        self.by_shape: dict[Shape, SortedQueue[Job]] = {}
        # (project, user) -> shape -> queue: lets a walk of a user's queue jump over jobs of
        # shapes that can do nothing.
        self.by_user_shape: dict[tuple[str, str], dict[Shape, SortedQueue[Job]]] = {}
        # Jobs whose rank changes at a time of their own (LAS promotion), by that time.
        self.revisit_at = revisit_at
        self.by_revisit = SortedKeyList(key=lambda job: (revisit_at(job), job.id))  # type: ignore[misc]
        # Counts are plain dicts, not Counters: mypyc compiles typed dict operations to direct
        # C calls. A count that reaches 0 is deleted, except in `bounded`.
        # project -> shape -> count: could any of a project's jobs fit? (no walk of its queue)
        self.demand: dict[str, dict[Shape, int]] = {}
        # project (None: all of them) -> its shapes summed up (see `summary`), until a shape
        # comes or goes.
        self._summaries: dict[str | None, ShapeSummary] = {}
        self.bounded: dict[str, int] = {}  # project -> pending jobs with a max_runtime
        self.any_bounded = 0  # pending jobs with a max_runtime, over all projects
        self.priorities: dict[str, dict[int, int]] = {}  # project -> priority -> n
        self.priority_counts: dict[int, int] = {}  # priority -> n, over all projects
        self.shapes: dict[Shape, int] = {}  # shape -> n, over all projects
        self.fixed: dict[Shape, int] = {}  # non-preemptible jobs per shape

    def __len__(self) -> int:
        return len(self.jobs)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self.jobs

    @property
    def all(self) -> SortedKeyList:
        """Every pending job in key order."""
        if self._all is None:
            keys = self.keys
            self._all = SortedKeyList(self.jobs.values(), key=lambda job: keys[job.id])
        return self._all

    def summary(self, project: str | None = None) -> ShapeSummary:
        """What a cycle asks of a project's pending shapes (None: of all projects) again and
        again, kept until it has a shape it had not, or has no job of one left (rare next to
        arrivals)."""
        found = self._summaries.get(project)
        if found is None or memos.CHECKING:  # (a project's shapes: looked up only then)
            fresh = ShapeSummary(self.shapes if project is None else self.demand.get(project, {}))
            if found is not None:
                memos.same(f"pending summary {project}", found, fresh)
            found = self._summaries[project] = fresh
        return found

    def add(self, job: Job) -> None:
        if job.id in self.jobs:
            raise ValueError(f"job {job.id} is already pending")
        self.jobs[job.id] = job
        key = self.keys[job.id] = self.key(job)
        if self._all is not None:
            self._all.add(job)
        queue_in(inner(self.by_user, job.project), job.user).add(key, job)
        queue_in(self.by_shape, job.shape).add(key, job)
        queue_in(inner(self.by_user_shape, (job.project, job.user)), job.shape).add(key, job)
        if self.revisit_at is not None and self.revisit_at(job) is not None:
            self.by_revisit.add(job)
        shape, project, priority = job.shape, job.project, job.priority
        counts = inner(self.demand, project)
        n = counts.get(shape, 0)
        counts[shape] = n + 1
        if n == 0:
            self._summaries.pop(project, None)
        priorities = inner(self.priorities, project)
        priorities[priority] = priorities.get(priority, 0) + 1
        self.priority_counts[priority] = self.priority_counts.get(priority, 0) + 1
        n = self.shapes.get(shape, 0)
        self.shapes[shape] = n + 1
        if n == 0:
            self._summaries.pop(None, None)
        if not job.preemptible:
            self.fixed[shape] = self.fixed.get(shape, 0) + 1
        if job.max_runtime is not None:
            self.bounded[project] = self.bounded.get(project, 0) + 1
            self.any_bounded += 1

    def remove(self, job_id: str) -> Job:
        job = self.jobs[job_id]
        key = self.keys[job_id]
        if self._all is not None:
            self._all.remove(job)
        users = self.by_user[job.project]
        discard(users, job.user, key, job)
        if not users:
            del self.by_user[job.project]
        discard(self.by_shape, job.shape, key, job)
        owner = (job.project, job.user)
        shapes = self.by_user_shape[owner]
        discard(shapes, job.shape, key, job)
        if not shapes:
            del self.by_user_shape[owner]
        if self.revisit_at is not None and self.revisit_at(job) is not None:
            self.by_revisit.remove(job)
        if job.max_runtime is not None:
            self.bounded[job.project] -= 1  # (kept at 0: readers take 0 and absent alike)
            self.any_bounded -= 1
        decrement(self.shapes, job.shape)
        if job.shape not in self.shapes:
            self._summaries.pop(None, None)
        if not job.preemptible:
            decrement(self.fixed, job.shape)
        counts = self.demand[job.project]
        decrement(counts, job.shape)
        if job.shape not in counts:
            self._summaries.pop(job.project, None)
        if not counts:
            del self.demand[job.project]
        priorities = self.priorities[job.project]
        decrement(priorities, job.priority)
        if not priorities:
            del self.priorities[job.project]
        decrement(self.priority_counts, job.priority)
        del self.jobs[job_id], self.keys[job_id]
        return job


@dataclass(slots=True, init=False)  # (compared field by field in check mode)
class ShapeSummary:
    """A project's pending shapes, summed up: per type and worker size the fewest workers
    (could any job fit?), and per type the smallest demand (could any stay within a share?)."""

    fewest_workers: dict[tuple[str, int], int]
    least_demand: dict[str, int]

    def __init__(self, shapes: Iterable[Shape]) -> None:
        self.fewest_workers = {}
        self.least_demand = {}
        for accel, per_worker, workers in shapes:
            size = (accel, per_worker)
            self.fewest_workers[size] = min(workers, self.fewest_workers.get(size, workers))
            need = per_worker * workers
            self.least_demand[accel] = min(need, self.least_demand.get(accel, need))
