"""`fifo`: one global queue by submit time, no fair share, EASY backfill.

The first job that does not fit holds a reservation; later jobs start when they fit around it.
No preemption.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

from corral.core.cycle import Cycle
from corral.core.model import Job
from corral.core.order import fits_shape, merged_by_shape
from corral.core.policy import Policy


class Fifo(Policy):
    name = "fifo"

    def queue_key(self, job: Job) -> tuple:
        return (job.submit_time, job.name, job.id)

    def order(self, cycle: Cycle) -> Iterator[Job]:
        head = None
        for job in cycle.snap.pending.all:  # the head of the queue, up to its first blocked job
            started = len(cycle.decision.starts)
            yield job
            if len(cycle.decision.starts) == started:
                head = job
                break
        if head is not None:  # then backfill: only jobs of shapes that can still fit
            viable = partial(fits_shape, cycle)
            yield from merged_by_shape(cycle, viable, after=cycle.snap.pending.keys[head.id])

    def may_reserve(self, cycle: Cycle, job: Job) -> bool:
        return True
