"""`fifo`: one global queue by submit time, no fair share, EASY backfill.

The first job that does not fit holds a reservation; later jobs start when they fit around it.
No preemption.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from mypy_extensions import mypyc_attr

from corral.core.cycle import Cycle
from corral.core.model import Job
from corral.core.order import queue_then_backfill
from corral.core.policy import Policy


@mypyc_attr(allow_interpreted_subclasses=True)
class Fifo(Policy):
    name: ClassVar[str] = "fifo"

    def queue_key(self, job: Job) -> tuple:
        return (job.submit_time, job.name, job.id)

    def order(self, cycle: Cycle) -> Iterator[Job]:
        # The queue in order up to its first blocked job (the head); after it, backfill: only
        # jobs of shapes that can still fit. One merge of the per-shape queues serves both.
        return queue_then_backfill(cycle)

    def may_reserve(self, cycle: Cycle, job: Job) -> bool:
        return True
