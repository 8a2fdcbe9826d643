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
from corral.core.reserve import plan_of, plan_reservation


@mypyc_attr(allow_interpreted_subclasses=True)
class Fifo(Policy):
    name: ClassVar[str] = "fifo"
    ASSUMES: ClassVar[dict[str, tuple[str, ...]]] = {
        **Policy.ASSUMES,
        "settled": ("queue_key", "order", "victims", "may_reserve"),
        "may_precede": ("queue_key", "order"),
    }

    def queue_key(self, job: Job) -> tuple:
        return (job.submit_time, job.name, job.id)

    def order(self, cycle: Cycle) -> Iterator[Job]:
        # The queue in order up to its first blocked job (the head); after it, backfill: only
        # jobs of shapes that can still fit. One merge of the per-shape queues serves both.
        return queue_then_backfill(cycle)

    def settled(self, cycle: Cycle) -> bool:
        # The order is static and a job passed over does not fit in less room: only the
        # reservation may differ, planned again with the jobs started running.
        res = cycle.reservation
        if not cycle.started or res is None:  # none planned yet: it will be on the end state
            return True
        again = plan_reservation(Cycle(cycle.snap, spread=self.spread), res.job)
        return plan_of(again) == plan_of(res)

    def may_precede(self, cycle: Cycle, job: Job, other: Job) -> bool:
        # The queue comes first, and `other`, blocked, ends it: later jobs only backfill.
        keys = cycle.snap.pending.keys
        return bool(keys[job.id] < keys[other.id])

    def may_reserve(self, cycle: Cycle, job: Job) -> bool:
        return True
