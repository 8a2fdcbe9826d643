"""Walking a global queue without walking all of it: merging the snapshot's per-shape queues
by the policy's key gives the global order, and a shape whose jobs can no longer start in this
cycle is dropped whole. A cycle then costs what it admits plus one look per shape, not one per
pending job: what lets the simulator replay a busy trace in seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from heapq import heapify, heappop, heapreplace

from corral.core import memos
from corral.core.cycle import Cycle
from corral.core.model import Job
from corral.core.pending import Shape

Entry = tuple[tuple, Shape, Job, Iterator[Job]]  # a shape queue's next job, by its key


def queue_then_backfill(cycle: Cycle) -> Iterator[Job]:
    """Pending jobs in queue-key order up to the first one that does not start; after it,
    only jobs of shapes that may still fit (backfill). That changes only with the cycle
    (`Cycle.changes`), from yes to no: shapes are looked at again only after a change."""
    pending = cycle.snap.pending
    keys = pending.keys
    heap: list[Entry] = []
    for shape, jobs in pending.by_shape.items():
        rest = iter(jobs)
        job = next(rest)  # a shape's queue is never empty
        heap.append((keys[job.id], shape, job, rest))
    heapify(heap)
    starts = cycle.decision.starts
    while heap:
        started = len(starts)
        yield _pop(heap, keys)
        if len(starts) == started:
            break
    seen = -1  # the cycle's changes when the shapes were last looked at
    dropped: set[Shape] = set()  # (check mode: they must never fit again in this cycle)
    while heap:
        if seen != cycle.changes:
            seen = cycle.changes
            heap = _fitting(cycle, heap, dropped)
        else:
            yield _pop(heap, keys)


def _pop(heap: list[Entry], keys: dict[str, tuple]) -> Job:
    """The first job of the merge; its shape's next job takes its place."""
    _, shape, job, rest = heap[0]
    following = next(rest, None)
    if following is None:
        heappop(heap)
    else:
        heapreplace(heap, (keys[following.id], shape, following, rest))
    return job


def _fitting(cycle: Cycle, heap: list[Entry], dropped: set[Shape]) -> list[Entry]:
    """The entries whose shape may fit now. Jobs with a max_runtime may use held capacity."""
    long = cycle.reservation is not None and not cycle.snap.pending.any_bounded
    blocks = cycle.blocks
    kept = [entry for entry in heap if blocks(entry[1][0], entry[1][1], long) >= entry[1][2]]
    if memos.CHECKING:
        for shape in dropped:
            memos.same("fifo dropped shape", False, blocks(shape[0], shape[1], long) >= shape[2])
        fitting = {entry[1] for entry in kept}
        dropped.update(entry[1] for entry in heap if entry[1] not in fitting)
    if len(kept) < len(heap):
        heapify(kept)
    return kept
