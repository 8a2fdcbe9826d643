"""Walking a global queue without walking all of it.

The snapshot keeps pending jobs grouped by shape (accelerator, per_worker, workers). Merging
the shape queues by the policy's key gives the global order; a shape whose jobs can no longer
start in this cycle is dropped whole. A cycle then costs what it admits plus one look per
shape, not one per pending job: what lets the simulator replay a busy trace in seconds.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

from corral.core.cycle import Cycle
from corral.core.model import Job

Shape = tuple[str, int, int]


def merged_by_shape(cycle: Cycle, viable: Callable[[Shape], bool]) -> Iterator[Job]:
    """Pending jobs in queue-key order, skipping shapes no longer viable."""
    pending = cycle.snap.pending
    keys = pending.keys
    heap = []
    for shape, jobs in pending.by_shape.items():
        if viable(shape):
            rest = iter(jobs)
            job = next(rest)  # a shape's queue is never empty
            heap.append((keys[job.id], shape, job, rest))
    heapq.heapify(heap)
    while heap:
        _, shape, job, rest = heap[0]
        if not viable(shape):
            heapq.heappop(heap)
            continue
        yield job
        job = next(rest, None)
        if job is None:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (keys[job.id], shape, job, rest))


def fits_shape(cycle: Cycle, shape: Shape) -> bool:
    """May a job of this shape fit now? Jobs with a max_runtime may use held capacity."""
    long = cycle.reservation is not None and not cycle.snap.pending.any_bounded
    accelerator, per_worker, workers = shape
    return cycle.may_fit_shape(accelerator, per_worker, workers, long)
