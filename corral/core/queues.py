"""The sorted indexes a snapshot keeps of its jobs: queues read like lists (`SortedQueue`),
running jobs in the order a reservation expects them back (`RunningByEnd`) and by a key a
policy gives (`RunningIndex`)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterator
from typing import ClassVar, Generic, TypeVar

from sortedcontainers import SortedKeyList

from corral.core.model import Job, Running

RunningKey = Callable[[Running], float | None]
Entry = tuple[float, str, Running]  # a RunningIndex entry: (key, job id, run)
T = TypeVar("T")
K = TypeVar("K")


class SortedQueue(Generic[T]):
    """Items in the order of the keys given with them (equal keys: first added first), read
    like a list (iteration, `len`), for queues that items mostly join at the end and leave at
    the front: two plain lists, keys and items, whose left items are counted off (`head`) until
    they are half the lists. Keys compare as tuples in C (a SortedKeyList would call a key
    function in Python). It must not change while it is iterated (drivers change it between
    cycles)."""

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

    def __iter__(self) -> Iterator[T]:
        # A list iterator is several times faster than a generator: shift out the items that
        # left when that is cheap (short queues, the most read), else skip them.
        if self.head and len(self.items) <= self.SHIFT_ON_READ:
            self._shift()
        if self.head == 0:
            return iter(self.items)
        return _from(self.items, self.head)

    def _shift(self) -> None:
        del self.items[: self.head]
        del self.keys[: self.head]
        self.head = 0

    def first_from(self, key: tuple) -> tuple[tuple, T] | None:
        """(key, item) of the first item whose key is `key` or after it, if any."""
        at = bisect_left(self.keys, key, self.head)
        return (self.keys[at], self.items[at]) if at < len(self.keys) else None

    def after(self, key: tuple | None) -> Iterator[T]:
        """The items whose key comes after `key` (None: all of them)."""
        start = self.head if key is None else bisect_right(self.keys, key, self.head)
        return _from(self.items, start)


def _from(items: list[T], start: int) -> Iterator[T]:
    for i in range(start, len(items)):
        yield items[i]


class RunningByEnd:
    """Running jobs in the order a reservation expects their accelerators back: by declared
    end, then those with no max_runtime, oldest first, ties by id. Starts mostly come in time
    order: those are kept in a plain dict (O(1)) until one comes out of order, then sorted."""

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
            self._sorted = SortedKeyList(
                self.unbounded.values(), key=lambda run: (run.started_at, run.job.id)
            )
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


def _by_id(runs: list[Running]) -> list[Running]:
    return sorted(runs, key=lambda run: run.job.id) if len(runs) > 1 else runs


def _end_key(run: Running) -> tuple:
    end = run.expected_end()
    assert end is not None  # only jobs with a max_runtime are kept by end
    return (end, run.started_at, run.job.id)


class RunningIndex:
    """Running jobs of each accelerator type sorted by a static key a policy gives (None: left
    out), e.g. when a job crosses a rank threshold: the policy reads the first few entries
    instead of ranking every running job in every cycle. Entries are (key, job id, run), per
    type in a plain list kept sorted: bisect and a memmove per change, in C, cost less than a
    SortedList's Python code at the scale of a pool's running jobs."""

    def __init__(self, key: RunningKey):
        self.key = key
        self.by_type: dict[str, list[Entry]] = {}
        self._entries: dict[str, Entry] = {}  # job id -> its entry

    def add(self, run: Running) -> None:
        key = self.key(run)
        if key is not None:
            entry = self._entries[run.job.id] = (key, run.job.id, run)
            entries = self.by_type.get(run.job.accelerator)
            if entries is None:
                entries = self.by_type[run.job.accelerator] = []
            insort(entries, entry)

    def key_of(self, job_id: str) -> float | None:
        """The key a running job is kept by (None: not kept)."""
        entry = self._entries.get(job_id)
        return None if entry is None else entry[0]

    def remove(self, run: Running) -> None:
        entry = self._entries.pop(run.job.id, None)
        if entry is not None:  # its stored key: the job may have changed since it started
            entries = self.by_type[run.job.accelerator]
            del entries[bisect_left(entries, entry)]


def discard(queues: dict, name: object, key: tuple, item: Job | Running) -> None:
    """Take an item out of the named queue, and the queue out when it is left empty."""
    queue: SortedQueue = queues[name]
    queue.remove(key, item)
    if len(queue) == 0:
        del queues[name]


def inner(outer: dict[K, dict], key: K) -> dict:
    """The dict under `key`, added empty if absent (not setdefault: it would build a dict on
    every call)."""
    found = outer.get(key)
    if found is None:
        found = outer[key] = {}
    return found


def queue_in(queues: dict[K, SortedQueue], name: K) -> SortedQueue:
    """The named queue, added empty if absent (see `inner`)."""
    found = queues.get(name)
    if found is None:
        found = queues[name] = SortedQueue()
    return found


def decrement(counts: dict[K, int], key: K) -> None:
    """One less of `key` (present); a count that reaches 0 is deleted."""
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]
