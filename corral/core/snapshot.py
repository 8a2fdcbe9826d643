"""The state the core decides on, with indexes that drivers keep up to date incrementally.

A driver (simulator or server) owns one Snapshot and calls `submit`, `withdraw`, `start`,
`stop` and `set_time` as things happen; `decide` only reads it. Keeping the indexes here means
a cycle costs what changed, not the size of the queue or of the job history.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import mul
from types import MappingProxyType
from typing import ClassVar, Generic, TypeVar

from sortedcontainers import SortedKeyList, SortedList

from corral.core import memos
from corral.core.memos import SnapshotMemos
from corral.core.model import Job, Running
from corral.formats.types import Node, Quota

QueueKey = Callable[[Job], tuple]
Shape = tuple[str, int, int]  # (accelerator, per_worker, gang)
INF = float("inf")
NONE: Mapping = MappingProxyType({})  # an empty mapping to look things up in
RunningKey = Callable[[Running], float | None]
T = TypeVar("T")
K = TypeVar("K")


def default_queue_key(job: Job) -> tuple:
    """Priority (higher first), then submit time, then name: the order within one user."""
    return (-job.priority, job.submit_time, job.name, job.id)


def victim_order(run: Running) -> tuple:
    """Lowest priority first, then most recently started (DESIGN.md section 3.7)."""
    return (run.job.priority, -run.started_at, run.job.id)


def _end_key(run: Running) -> tuple:
    end = run.expected_end()
    assert end is not None  # only jobs with a max_runtime are kept by end
    return (end, run.started_at, run.job.id)


class SortedQueue(Generic[T]):
    """Items in the order of the keys given with them (equal keys: first added first), read
    like a list: iteration, `len`, `queue[i]`. Made for queues that items mostly join at the
    end and leave at the front: two plain lists, keys and items, and the items that left the
    front are counted off (`head`) rather than shifted out one by one, until they are half the
    lists. Keys compare as tuples in C; a SortedKeyList would call a key function in Python.
    Like a list, it must not change while it is iterated (drivers change it between cycles)."""

    SHIFT_ON_READ: ClassVar[int] = 2048  # at most this many items shifted to read a queue

    def __init__(self) -> None:
        self.keys: list[tuple] = []
        self.items: list[T] = []
        self.head = 0  # items before it have left
        self.changes = 0  # items added and taken out so far: a memo of its content checks it

    def add(self, key: tuple, item: T) -> None:
        self.changes += 1
        keys = self.keys
        if keys and key < keys[-1]:
            at = bisect_right(keys, key, self.head)
            keys.insert(at, key)
            self.items.insert(at, item)
        else:
            keys.append(key)
            self.items.append(item)

    def remove(self, key: tuple, item: T) -> None:
        """Take out an item added with this key (ValueError if it is not there)."""
        self.changes += 1
        items, head = self.items, self.head
        if head < len(items) and items[head] is item:  # the usual case: the first one leaves
            self.head = head + 1
            if 2 * self.head >= len(items):
                self._shift()
            return
        at = bisect_left(self.keys, key, head)
        while at < len(items) and items[at] is not item:
            at += 1
        if at == len(items):
            raise ValueError("not in the queue")
        del items[at]
        del self.keys[at]

    def __len__(self) -> int:
        return len(self.items) - self.head

    def __getitem__(self, index: int) -> T:
        size = len(self.items) - self.head
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("queue index out of range")
        return self.items[self.head + index]

    def __iter__(self) -> Iterator[T]:
        # A list iterator is several times faster than a generator: shift out the items that
        # left when that is cheap (short queues, the most read), else skip them.
        if self.head and len(self.items) <= self.SHIFT_ON_READ:
            self._shift()
        if self.head == 0:
            return iter(self.items)
        return _from(self.items, self.head)

    def _shift(self) -> None:
        """Drop the items that left the front."""
        del self.items[: self.head]
        del self.keys[: self.head]
        self.head = 0

    def first_from(self, key: tuple) -> tuple[tuple, T] | None:
        """(key, item) of the first item whose key is `key` or after it, if any."""
        at = bisect_left(self.keys, key, self.head)
        return (self.keys[at], self.items[at]) if at < len(self.keys) else None

    def irange_key(
        self, min_key: tuple | None = None, inclusive: tuple[bool, bool] = (True, True)
    ) -> Iterator[T]:
        """The items from `min_key` on (after it unless inclusive[0]), as SortedKeyList's."""
        start = self.head
        if min_key is not None:
            find = bisect_left if inclusive[0] else bisect_right
            start = find(self.keys, min_key, start)
        return _from(self.items, start)


def _from(items: list[T], start: int) -> Iterator[T]:
    for i in range(start, len(items)):
        yield items[i]


class RunningByEnd:
    """Running jobs in the order a reservation expects their accelerators back: by declared
    end (started_at + max_runtime), then the jobs with no max_runtime, oldest first, ties by
    id. Starts usually come in time order, so those are kept in a plain dict (O(1) per start
    and stop) until a start comes out of order; then they are kept sorted."""

    __slots__ = ("bounded", "unbounded", "_latest", "_sorted", "inserts")

    def __init__(self) -> None:
        self.bounded = SortedKeyList(key=_end_key)
        self.unbounded: dict[str, Running] = {}  # in start order while `_sorted` is None
        self._latest = float("-inf")
        self._sorted: SortedKeyList | None = None
        # Jobs added that may not come after every job present: while it stays the same, the
        # jobs that lead the order still lead it, unless they stopped (see reserve._same_plan).
        self.inserts = 0

    def add(self, run: Running) -> None:
        if run.job.max_runtime is not None:
            self.inserts += 1
            self.bounded.add(run)
        elif self._sorted is not None:
            self.inserts += 1
            self._sorted.add(run)
        elif run.started_at < self._latest:
            self.inserts += 1
            self._sorted = SortedKeyList(self.unbounded.values(), key=_start_key)
            self._sorted.add(run)
            self.unbounded = {}
        else:
            if run.started_at == self._latest:  # ties at one instant are ordered by id
                self.inserts += 1
            self._latest = run.started_at
            self.unbounded[run.job.id] = run

    def remove(self, run: Running) -> None:
        if run.job.max_runtime is not None:
            self.bounded.remove(run)
        elif self._sorted is not None:
            self._sorted.remove(run)
        else:
            del self.unbounded[run.job.id]

    def __iter__(self) -> Iterator[Running]:
        yield from self.bounded
        if self._sorted is not None:
            yield from self._sorted
            return
        same: list[Running] = []  # jobs started at one instant, in start order: sort by id
        for run in self.unbounded.values():
            if same and run.started_at != same[0].started_at:
                yield from _by_id(same)
                same = []
            same.append(run)
        yield from _by_id(same)


def _start_key(run: Running) -> tuple:
    return (run.started_at, run.job.id)


def _by_id(runs: list[Running]) -> list[Running]:
    return sorted(runs, key=lambda run: run.job.id) if len(runs) > 1 else runs


@dataclass(slots=True)
class Cluster:
    nodes: tuple[Node, ...]
    index: dict[str, int]  # node name -> position
    domains: dict[str, tuple[int, ...]]  # domain -> node positions, in name order
    domain_of: tuple[str, ...]  # node position -> domain
    domain_number: tuple[int, ...]  # node position -> its domain's place in `domains`
    accelerator_of: tuple[str, ...]  # node position -> its accelerator type
    by_type: dict[str, tuple[int, ...]]  # accelerator -> node positions
    capacity: dict[str, int]  # accelerator -> inventory count
    largest_node: dict[str, int]  # accelerator -> most accelerators on one node
    typed_domains: dict[str, dict[str, tuple[int, ...]]]  # accelerator -> domain -> its nodes
    _slots: dict[tuple[str, int], dict[str, int]] = field(default_factory=dict)
    _weights: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)

    def block_weights(self, accelerator: str, per_worker: int) -> tuple[int, ...]:
        """k // per_worker for k in 0..largest node: workers that fit beside k free (cached;
        dotted with a free histogram it counts the worker slots of a type in C)."""
        key = (accelerator, per_worker)
        found = self._weights.get(key)
        if found is None:
            size = self.largest_node.get(accelerator, 0)
            found = self._weights[key] = tuple(k // per_worker for k in range(size + 1))
        return found

    def worker_slots(self, accelerator: str, per_worker: int) -> dict[str, int]:
        """Per domain, how many workers of this size fit on an empty pool (cached)."""
        key = (accelerator, per_worker)
        if key not in self._slots:
            self._slots[key] = {
                d: sum(self.nodes[i].count // per_worker for i in nodes)
                for d, nodes in self.typed_domains.get(accelerator, {}).items()
            }
        return self._slots[key]

    @classmethod
    def build(cls, nodes: Sequence[Node]) -> Cluster:
        ordered = tuple(sorted(nodes, key=lambda n: n.name))
        domains: dict[str, list[int]] = defaultdict(list)
        by_type: dict[str, list[int]] = defaultdict(list)
        capacity: dict[str, int] = {}
        largest: dict[str, int] = {}
        for i, n in enumerate(ordered):
            domains[n.domain].append(i)
            by_type[n.accelerator].append(i)
            capacity[n.accelerator] = capacity.get(n.accelerator, 0) + n.count
            largest[n.accelerator] = max(largest.get(n.accelerator, 0), n.count)
        typed: dict[str, dict[str, tuple[int, ...]]] = defaultdict(dict)
        for d, idx in domains.items():
            for accel in sorted({ordered[i].accelerator for i in idx}):
                typed[accel][d] = tuple(i for i in idx if ordered[i].accelerator == accel)
        number = {d: k for k, d in enumerate(sorted(domains))}
        return cls(
            nodes=ordered,
            index={n.name: i for i, n in enumerate(ordered)},
            domains={d: tuple(v) for d, v in sorted(domains.items())},
            domain_of=tuple(n.domain for n in ordered),
            domain_number=tuple(number[n.domain] for n in ordered),
            accelerator_of=tuple(n.accelerator for n in ordered),
            by_type={t: tuple(v) for t, v in sorted(by_type.items())},
            capacity=capacity,
            largest_node=largest,
            typed_domains=dict(typed),
        )


class RunningIndex:
    """Running jobs of each accelerator type sorted by a static key a policy gives (None: left
    out), e.g. when a job crosses a rank threshold: the policy reads the first few entries
    instead of ranking every running job in every cycle. Entries are (key, job id, run)."""

    __slots__ = ("key", "by_type", "_entries")

    def __init__(self, key: RunningKey):
        self.key = key
        self.by_type: dict[str, SortedList] = {}
        self._entries: dict[str, tuple[float, str, Running]] = {}  # job id -> its entry

    def add(self, run: Running) -> None:
        key = self.key(run)
        if key is not None:
            entry = self._entries[run.job.id] = (key, run.job.id, run)
            entries = self.by_type.get(run.job.accelerator)
            if entries is None:
                entries = self.by_type[run.job.accelerator] = SortedList()
            entries.add(entry)

    def remove(self, run: Running) -> None:
        entry = self._entries.pop(run.job.id, None)
        if entry is not None:  # its stored key: the job may have changed since it started
            self.by_type[run.job.accelerator].remove(entry)


class PendingQueue:
    """Pending jobs kept sorted by the policy's static key: overall, per shape, and per project
    and user. Each sorted index is built the first time a policy asks for it and kept up to
    date from then on, so a driver pays only for the indexes its policy reads."""

    __slots__ = (
        "key",
        "jobs",
        "keys",
        "_all",
        "_by_user",
        "_by_shape",
        "_by_user_shape",
        "demand",
        "_summaries",
        "_summary_all",
        "_by_size",
        "_listed",
        "_resized",
        "bounded",
        "any_bounded",
        "priorities",
        "priority_counts",
        "shapes",
        "fixed",
        "revisit_at",
        "by_revisit",
    )

    def __init__(self, key: QueueKey, revisit_at: Callable[[Job], float | None] | None = None):
        self.key = key
        self.jobs: dict[str, Job] = {}
        self.keys: dict[str, tuple] = {}  # job id -> its key, computed once on arrival
        self._all: SortedKeyList | None = None
        self._by_user: dict[str, dict[str, SortedQueue[Job]]] | None = None
        self._by_shape: dict[tuple[str, int, int], SortedQueue[Job]] | None = None
        self._by_user_shape: dict[tuple[str, str], dict[Shape, SortedQueue[Job]]] | None = None
        # Jobs whose rank changes at a time of their own (LAS promotion), by that time.
        self.revisit_at = revisit_at
        self.by_revisit = SortedKeyList(key=lambda job: (revisit_at(job), job.id))  # type: ignore[misc]
        # Counts are plain dicts, not Counters: mypyc compiles typed dict operations to direct
        # C calls. A count that reaches 0 is deleted, except in `bounded`.
        # project -> (accelerator, demand) -> count: lets a cycle see at once whether any of a
        # project's jobs could fit, without walking its queue.
        self.demand: dict[str, dict[Shape, int]] = {}
        # project -> its shapes summed up (see `summary`), until a shape comes or goes.
        self._summaries: dict[str, ShapeSummary] = {}
        self._summary_all: ShapeSummary | None = None  # the same over all projects
        self._by_size: dict[tuple[str, int], list[tuple[int, str]]] = {}
        self._listed: dict[str, list[tuple[str, int]]] = {}  # project -> its sizes in _by_size
        self._resized: set[str] = set()  # projects whose entries in _by_size are out of date
        self.bounded: dict[str, int] = {}  # project -> pending jobs with a max_runtime
        self.any_bounded = 0  # pending jobs with a max_runtime, over all projects
        self.priorities: dict[str, dict[int, int]] = {}  # project -> priority -> n
        self.priority_counts: dict[int, int] = {}  # priority -> n, over all projects
        self.shapes: dict[Shape, int] = {}  # the same over all projects
        self.fixed: dict[Shape, int] = {}  # non-preemptible jobs per shape

    def __len__(self) -> int:
        return len(self.jobs)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self.jobs

    def _sorted(self, jobs=()) -> SortedKeyList:
        keys = self.keys
        return SortedKeyList(jobs, key=lambda job: keys[job.id])

    @property
    def all(self) -> SortedKeyList:
        """Every pending job in key order."""
        if self._all is None:
            self._all = self._sorted(self.jobs.values())
        return self._all

    @property
    def by_user(self) -> dict[str, dict[str, SortedQueue[Job]]]:
        """project -> user -> that user's pending jobs in key order."""
        if self._by_user is None:
            self._by_user = {}
            for job in self.jobs.values():
                self._add_by_user(job, self.keys[job.id])
        return self._by_user

    @property
    def by_shape(self) -> dict[tuple[str, int, int], SortedQueue[Job]]:
        """(accelerator, per_worker, gang) -> pending jobs of that shape in key order."""
        if self._by_shape is None:
            self._by_shape = {}
            for job in self.jobs.values():
                self._add_by_shape(job, self.keys[job.id])
        return self._by_shape

    @property
    def by_user_shape(self) -> dict[tuple[str, str], dict[Shape, SortedQueue[Job]]]:
        """(project, user) -> shape -> that user's pending jobs of the shape in key order: lets
        a walk of a user's queue jump over jobs of shapes that can do nothing."""
        if self._by_user_shape is None:
            self._by_user_shape = {}
            for job in self.jobs.values():
                self._add_by_user_shape(job, self.keys[job.id])
        return self._by_user_shape

    def summary(self, project: str) -> ShapeSummary:
        """What a cycle asks of a project's pending shapes again and again, kept until the
        project has a shape it had not, or has no job of one left (rare next to arrivals)."""
        found = self._summaries.get(project)
        if found is None:
            found = self._summaries[project] = ShapeSummary(self.demand.get(project, {}))
        return found

    def summary_all(self) -> ShapeSummary:
        """`summary` over all projects: could any pending job fit at all?"""
        if self._summary_all is None:
            self._summary_all = ShapeSummary(self.shapes)
        return self._summary_all

    def fewest_by_size(self) -> dict[tuple[str, int], list[tuple[int, str]]]:
        """(accelerator, per_worker) -> (fewest workers, project) for each project with a
        pending job of that worker size, fewest first: which projects have a job that may fit
        in so many free blocks, read without asking each project. Brought up to date for the
        projects whose summary changed since the last read."""
        by_size, listed = self._by_size, self._listed
        for project in self._resized:
            for size in listed.pop(project, ()):  # (only the sizes it is listed under)
                needs = [need for need in by_size[size] if need[1] != project]
                if needs:
                    by_size[size] = needs
                else:
                    del by_size[size]
            if project in self.demand:
                fewest = self.summary(project).fewest_workers
                for size, workers in fewest.items():
                    insort(by_size.setdefault(size, []), (workers, project))
                listed[project] = list(fewest)
        self._resized.clear()
        return by_size

    def _forget_summary(self, project: str) -> None:
        self._summaries.pop(project, None)
        self._resized.add(project)

    def add(self, job: Job) -> None:
        if job.id in self.jobs:
            raise ValueError(f"job {job.id} is already pending")
        self.jobs[job.id] = job
        key = self.keys[job.id] = self.key(job)
        if self._all is not None:
            self._all.add(job)
        if self._by_user is not None:
            self._add_by_user(job, key)
        if self._by_shape is not None:
            self._add_by_shape(job, key)
        if self._by_user_shape is not None:
            self._add_by_user_shape(job, key)
        if self.revisit_at is not None and self.revisit_at(job) is not None:
            self.by_revisit.add(job)
        shape, project, priority = job.shape, job.project, job.priority
        counts = self.demand.get(project)
        if counts is None:
            counts = self.demand[project] = {}
        n = counts.get(shape, 0)
        counts[shape] = n + 1
        if n == 0:
            self._forget_summary(project)
        priorities = self.priorities.get(project)
        if priorities is None:
            priorities = self.priorities[project] = {}
        priorities[priority] = priorities.get(priority, 0) + 1
        self.priority_counts[priority] = self.priority_counts.get(priority, 0) + 1
        n = self.shapes.get(shape, 0)
        self.shapes[shape] = n + 1
        if n == 0:
            self._summary_all = None
        if not job.preemptible:
            self.fixed[shape] = self.fixed.get(shape, 0) + 1
        if job.max_runtime is not None:
            self.bounded[project] = self.bounded.get(project, 0) + 1
            self.any_bounded += 1

    def _add_by_user(self, job: Job, key: tuple) -> None:
        assert self._by_user is not None
        users = self._by_user.get(job.project)
        if users is None:
            users = self._by_user[job.project] = {}
        queue = users.get(job.user)
        if queue is None:
            queue = users[job.user] = SortedQueue()
        queue.add(key, job)

    def _add_by_shape(self, job: Job, key: tuple) -> None:
        assert self._by_shape is not None
        queue = self._by_shape.get(job.shape)
        if queue is None:
            queue = self._by_shape[job.shape] = SortedQueue()
        queue.add(key, job)

    def _add_by_user_shape(self, job: Job, key: tuple) -> None:
        assert self._by_user_shape is not None
        owner = (job.project, job.user)
        shapes = self._by_user_shape.get(owner)
        if shapes is None:
            shapes = self._by_user_shape[owner] = {}
        queue = shapes.get(job.shape)
        if queue is None:
            queue = shapes[job.shape] = SortedQueue()
        queue.add(key, job)

    def remove(self, job_id: str) -> Job:
        job = self.jobs[job_id]
        key = self.keys[job_id]
        if self._all is not None:
            self._all.remove(job)
        if self._by_user is not None:
            users = self._by_user[job.project]
            _discard(users, job.user, key, job)
            if not users:
                del self._by_user[job.project]
        if self._by_shape is not None:
            _discard(self._by_shape, job.shape, key, job)
        if self._by_user_shape is not None:
            owner = (job.project, job.user)
            shapes = self._by_user_shape[owner]
            _discard(shapes, job.shape, key, job)
            if not shapes:
                del self._by_user_shape[owner]
        if self.revisit_at is not None and self.revisit_at(job) is not None:
            self.by_revisit.remove(job)
        if job.max_runtime is not None:
            self.bounded[job.project] -= 1  # (kept at 0: readers take 0 and absent alike)
            self.any_bounded -= 1
        _decrement(self.shapes, job.shape)
        if job.shape not in self.shapes:
            self._summary_all = None
        if not job.preemptible:
            _decrement(self.fixed, job.shape)
        counts = self.demand[job.project]
        _decrement(counts, job.shape)
        if job.shape not in counts:
            self._forget_summary(job.project)
        if not counts:
            del self.demand[job.project]
        priorities = self.priorities[job.project]
        _decrement(priorities, job.priority)
        if not priorities:
            del self.priorities[job.project]
        _decrement(self.priority_counts, job.priority)
        del self.jobs[job_id], self.keys[job_id]
        return job


class ShapeSummary:
    """A project's pending shapes, summed up: per type and worker size the fewest workers
    (could any job fit?), and per type the smallest demand (could any stay within a share?)."""

    __slots__ = ("fewest_workers", "least_demand")

    def __init__(self, shapes: Iterable[Shape]) -> None:
        self.fewest_workers: dict[tuple[str, int], int] = {}
        self.least_demand: dict[str, int] = {}
        for accel, per_worker, workers in shapes:
            size = (accel, per_worker)
            self.fewest_workers[size] = min(workers, self.fewest_workers.get(size, workers))
            need = per_worker * workers
            self.least_demand[accel] = min(need, self.least_demand.get(accel, need))


def _discard(queues: dict, name: object, key: tuple, item: Job | Running) -> None:
    """Take an item out of the named queue, and the queue out when it is left empty."""
    queue: SortedQueue = queues[name]
    queue.remove(key, item)
    if len(queue) == 0:
        del queues[name]


def _add_size(sizes: dict[str, dict[str, dict[int, int]]], run: Running) -> None:
    job = run.job
    by_project = sizes.get(job.accelerator)
    if by_project is None:  # (not setdefault: it would build a dict on every call)
        by_project = sizes[job.accelerator] = {}
    counts = by_project.get(job.project)
    if counts is None:
        counts = by_project[job.project] = {}
    counts[job.demand] = counts.get(job.demand, 0) + 1


def within(held: float, amount: float, guarantee: float) -> bool:
    """Would `amount` more than `held` stay within `guarantee`? (Guarantees are fractions
    of the pool: a little slack keeps a sum of shares from rounding below a whole job.) The
    one comparison with a guarantee: every rule asks it."""
    return held + amount <= guarantee + 1e-9


def share_ratio(held: float, guarantee: float) -> float:
    """Usage over guarantee: infinite for usage with no guarantee, 0 for none."""
    if guarantee <= 0:
        return float("inf") if held > 0 else 0.0
    return held / guarantee


def shape_of(job: Job) -> tuple[str, int, int]:
    return job.shape


def _decrement(counts: dict[K, int], key: K) -> None:
    """One less of `key` (present); a count that reaches 0 is deleted."""
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]


class Snapshot:
    """Cluster, quota, pending and running jobs, and the time: everything `decide` reads."""

    def __init__(
        self,
        nodes: Sequence[Node],
        quota: Quota,
        queue_key: QueueKey | None = None,
        revisit_at: Callable[[Job], float | None] | None = None,
        running_keys: dict[str, RunningKey] | None = None,
    ):
        self.cluster = Cluster.build(nodes)
        self.quota = quota
        self.now = 0.0
        n = len(self.cluster.nodes)
        self.free: list[int] = [node.count for node in self.cluster.nodes]
        self.node_jobs: list[int] = [0] * n  # running workers on each node
        # accelerator -> [number of nodes with k free for k in 0..largest node]: lets a cycle
        # tell at once whether a shape can fit anywhere.
        self.free_hist: dict[str, list[int]] = {}
        for accel, size in self.cluster.largest_node.items():
            self.free_hist[accel] = [0] * (size + 1)
        for node in self.cluster.nodes:
            self.free_hist[node.accelerator][node.count] += 1
        # accelerator -> per_worker -> free worker slots of that size, for every size a pending
        # job has asked for: a cycle starts with them instead of counting them again. (Nested,
        # not keyed by tuples: a string's hash is kept, a tuple's is computed on every lookup.)
        self.slots: dict[str, dict[int, int]] = {}
        self.terminating: dict[str, Running] = {}
        self.exclusive_domains: dict[str, str] = {}  # domain -> job id holding it alone
        self.running: dict[str, Running] = {}
        self._preemptible: dict[str, dict[str, SortedQueue[Running]]] | None = None
        # Built when a policy first asks (see `preemptible_sizes`, `running_priorities`); the
        # second two together.
        self._sizes: dict[str, dict[str, dict[int, int]]] | None = None
        self._priorities: dict[str, dict[int, int]] | None = None
        self._priority_counts: dict[int, int] | None = None
        # Running jobs by when they will end at the latest (declared max_runtime), unknown ends
        # last and oldest first: the order in which a reservation expects capacity back.
        self.running_by_end = RunningByEnd()
        # The policy's own indexes of running jobs, by name (see RunningIndex).
        self.running_by = {name: RunningIndex(key) for name, key in (running_keys or {}).items()}
        self.pending = PendingQueue(queue_key or default_queue_key, revisit_at)
        # project -> type -> held. A project stays (maybe empty) once it has run a job: the
        # server lists the projects in it.
        self.usage: dict[str, dict[str, int]] = {}
        self.in_use: dict[str, int] = {}  # type -> held by all projects (0s kept)
        self.capacity = self._capacity()
        self.guarantee = self._guarantees()
        self.memos = SnapshotMemos()  # the only part `decide` writes (see memos.py)

    # -- quota -------------------------------------------------------------------------------

    def _capacity(self) -> dict[str, int]:
        cap = dict(self.cluster.capacity)
        total = self.quota.total_resources
        if total is not None:
            cap = {t: min(c, total.get(t, 0)) for t, c in cap.items()}
        return cap

    def _guarantees(self) -> dict[str, dict[str, float]]:
        """share[p][r] / sum_q share[q][r] * capacity[r], per DESIGN.md section 2."""
        out: dict[str, dict[str, float]] = defaultdict(dict)
        for accel, cap in self.capacity.items():
            for project, frac in self.quota.fractions(accel).items():
                out[project][accel] = frac * cap
        return dict(out)

    def set_quota(self, quota: Quota) -> None:
        self.quota = quota
        self.capacity = self._capacity()
        self.guarantee = self._guarantees()
        for reader in self.memos.readers:  # every reader starts over
            reader.projects = None

    def guarantee_of(self, project: str, accelerator: str) -> float:
        shares = self.guarantee.get(project)  # (typed lookups: fast once compiled)
        return 0.0 if shares is None else shares.get(accelerator, 0.0)

    def limit_of(self, project: str, accelerator: str) -> float:
        return self.quota.limits.get(project, NONE).get(accelerator, INF)

    # -- changes, called by drivers ----------------------------------------------------------

    def set_time(self, now: float) -> None:
        self.now = now

    def submit(self, job: Job) -> None:
        if job.id in self.running:
            raise ValueError(f"job {job.id} is already running")
        self.pending.add(job)
        self._touch(job.project)
        counts = self.slots.get(job.accelerator)
        if counts is None or job.per_worker not in counts:
            self._count_slots(job.accelerator, job.per_worker)

    def withdraw(self, job_id: str) -> Job:
        """Take a job out of the queue (cancelled, or about to start)."""
        job = self.pending.remove(job_id)
        self._touch(job.project)
        return job

    def start(self, job_id: str, nodes: Iterable[str], now: float) -> Running:
        """Run a pending job on the named nodes (one per worker). Checks before it changes
        anything: an unknown job or node is a KeyError, a node short of room a ValueError."""
        job = self.pending.jobs[job_id]
        index, free, per = self.cluster.index, self.free, job.per_worker
        where = tuple([index[name] for name in nodes])
        for i in where:
            if free[i] < per:
                raise ValueError(f"node {self.cluster.nodes[i].name} lacks {per} free")
        self.pending.remove(job_id)
        self._touch(job.project)
        for i in where:
            self._change_free(i, -per)
            self.node_jobs[i] += 1
        if job.resources.exclusive:
            for i in where:
                self.exclusive_domains[self.cluster.domain_of[i]] = job.id
        accel, demand = job.accelerator, job.demand
        held = self.usage.get(job.project)
        if held is None:
            held = self.usage[job.project] = {}
        held[accel] = held.get(accel, 0) + demand
        self.in_use[accel] = self.in_use.get(accel, 0) + demand
        run = Running(job=job, nodes=where, started_at=now)
        self.running[job.id] = run
        self.running_by_end.add(run)
        for by in self.running_by.values():
            by.add(run)
        if job.preemptible:
            if self._priorities is not None:
                self._add_priority(job)
            if self._sizes is not None:
                _add_size(self._sizes, run)
            if self._preemptible is not None:
                self._add_preemptible(run)
        return run

    def stop(self, job_id: str) -> Running:
        """Release a running job's accelerators (it finished, failed, or was preempted)."""
        run = self.running.pop(job_id)
        self.running_by_end.remove(run)
        for by in self.running_by.values():
            by.remove(run)
        job = run.job
        if job.preemptible:
            if self._priorities is not None:
                # (a project's dict stays when it empties: readers take {} and absent alike)
                _decrement(self._priorities[job.project], job.priority)
                assert self._priority_counts is not None
                _decrement(self._priority_counts, job.priority)
            if self._preemptible is not None:
                _discard(self._preemptible[job.accelerator], job.project, victim_order(run), run)
            if self._sizes is not None:
                sizes = self._sizes[job.accelerator]
                _decrement(sizes[job.project], job.demand)
                if not sizes[job.project]:
                    del sizes[job.project]
        per = job.per_worker
        self.terminating.pop(job_id, None)
        for i in run.nodes:
            self._change_free(i, per)
            self.node_jobs[i] -= 1
        if job.resources.exclusive:
            for i in run.nodes:
                self.exclusive_domains.pop(self.cluster.domain_of[i], None)
        self.in_use[job.accelerator] -= job.demand
        held = self.usage[job.project]
        held[job.accelerator] -= job.demand
        if not held[job.accelerator]:
            del held[job.accelerator]
        self._touch(job.project)
        return run

    @property
    def preemptible(self) -> dict[str, dict[str, SortedQueue[Running]]]:
        """accelerator -> project -> its preemptible running jobs in victim order (lowest
        priority, then most recently started, first): candidates without sorting per cycle.
        Built when a policy first asks (non-preemptive policies never pay for it)."""
        if self._preemptible is None:
            self._preemptible = defaultdict(dict)
            for run in self.running.values():
                if run.job.preemptible:
                    self._add_preemptible(run)
        return self._preemptible

    @property
    def preemptible_sizes(self) -> dict[str, dict[str, dict[int, int]]]:
        """accelerator -> project -> demand -> how many preemptible running jobs: the smallest
        victim. Built when a policy first asks, like `preemptible`. A type none has run on is
        absent."""
        if self._sizes is None:
            self._sizes = {}
            for run in self.running.values():
                if run.job.preemptible:
                    _add_size(self._sizes, run)
        return self._sizes

    @property
    def running_priorities(self) -> dict[str, dict[int, int]]:
        """project -> priority -> preemptible running jobs: can a pending job outrank one?
        Built when a policy first asks, like `preemptible`."""
        if self._priorities is None:
            self._build_priorities()
        assert self._priorities is not None
        return self._priorities

    @property
    def running_priority_counts(self) -> dict[int, int]:
        """priority -> preemptible running jobs, over all projects. Built with
        `running_priorities`."""
        if self._priority_counts is None:
            self._build_priorities()
        assert self._priority_counts is not None
        return self._priority_counts

    def _build_priorities(self) -> None:
        self._priorities, self._priority_counts = {}, {}
        for run in self.running.values():
            if run.job.preemptible:
                self._add_priority(run.job)

    def _add_priority(self, job: Job) -> None:
        assert self._priorities is not None and self._priority_counts is not None
        counts = self._priorities.get(job.project)
        if counts is None:
            counts = self._priorities[job.project] = {}
        priority = job.priority
        counts[priority] = counts.get(priority, 0) + 1
        self._priority_counts[priority] = self._priority_counts.get(priority, 0) + 1

    def outrank_possible(self) -> bool:
        """Might some pending job outrank a preemptible running job of its own project? False
        when the highest pending priority is not above the lowest running one: then no project
        has such a pair. A necessary condition only (a True does not say which project, if any,
        has one), read in O(priority levels)."""
        lowest: int | None = None  # (loops: compiled, they beat the generic min and max)
        for priority in self.running_priority_counts:
            if lowest is None or priority < lowest:
                lowest = priority
        return lowest is not None and any(p > lowest for p in self.pending.priority_counts)

    def _add_preemptible(self, run: Running) -> None:
        assert self._preemptible is not None
        by_project = self._preemptible[run.job.accelerator]
        runs = by_project.get(run.job.project)
        if runs is None:
            runs = by_project[run.job.project] = SortedQueue()
        runs.add(victim_order(run), run)

    def mark_terminating(self, job_id: str) -> None:
        run = self.running[job_id]
        run.terminating = True
        self.terminating[job_id] = run

    def _change_free(self, node: int, amount: int) -> None:
        accel = self.cluster.accelerator_of[node]
        hist = self.free_hist[accel]
        before = self.free[node]
        after = self.free[node] = before + amount
        hist[before] -= 1
        hist[after] += 1
        plan = self.memos.plan
        if plan is not None:
            plan.touched.add(node)
        counts = self.slots.get(accel)
        if counts is not None:
            for per, count in counts.items():
                counts[per] = count + after // per - before // per

    def _count_slots(self, accelerator: str, per_worker: int) -> None:
        weights = self.cluster.block_weights(accelerator, per_worker)
        hist = self.free_hist.get(accelerator, [0])
        counts = self.slots.get(accelerator)
        if counts is None:
            counts = self.slots[accelerator] = {}
        counts[per_worker] = sum(map(mul, hist, weights))

    # -- reads -------------------------------------------------------------------------------

    def _touch(self, project: str) -> None:
        for reader in self.memos.readers:
            if reader.projects is not None:
                reader.projects.add(project)

    def projects_with_room(self) -> set[str]:
        """Projects with a pending job that would keep them within their guarantee of its
        type (their smallest job of each type is enough to ask about). Read it, do not change
        it: it is kept up to date as jobs come, start and stop, one project at a time."""
        rooms, pending = self.memos.rooms, self.pending
        touched = self.memos.rooms_touched.take()
        if touched is None:
            rooms.clear()
            touched = set(pending.demand)
        for project in touched:
            if self._has_room(project):
                rooms.add(project)
            else:
                rooms.discard(project)
        if memos.CHECKING:
            fresh = {p for p in pending.demand if self._has_room(p)}
            memos.same("projects with room", rooms, fresh)
        return rooms

    def _has_room(self, project: str) -> bool:
        pending = self.pending
        least = pending.summary(project).least_demand if project in pending.demand else {}
        return any(self.room_within(project, accel, need) for accel, need in least.items())

    def room_within(self, project: str, accelerator: str, amount: int) -> bool:
        """Would `amount` more keep the project within its guarantee (see Cycle.room_within)?"""
        return within(
            self.held(project, accelerator), amount, self.guarantee_of(project, accelerator)
        )

    def held(self, project: str, accelerator: str) -> int:
        held = self.usage.get(project)
        return 0 if held is None else held.get(accelerator, 0)

    def node_names(self, positions: Iterable[int]) -> tuple[str, ...]:
        nodes = self.cluster.nodes
        return tuple([nodes[i].name for i in positions])
