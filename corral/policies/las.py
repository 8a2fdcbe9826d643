"""`las`: least attained service first, discretised as in Tiresias (NSDI '19).

Attained service is counted in accelerator-seconds over all attempts. Jobs fall into queues at
`thresholds`; a job in a lower queue preempts running jobs in higher queues; within a queue,
first come first served. A job that has waited longer than `starve_factor` times the time it
has run is promoted to queue 0, so long jobs are not starved.

Options ([scheduler.options]): las_thresholds (accelerator-seconds, default [3600, 36000]),
starve_factor (default 4; 0 turns promotion off).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterator

from corral.core.cycle import Cycle
from corral.core.model import Job, Running
from corral.policies.ranked import RankPolicy


class Las(RankPolicy):
    name = "las"

    def __init__(self, config=None):
        super().__init__(config)
        self.thresholds = sorted(float(x) for x in self.option("las_thresholds", [3600, 36000]))
        self.starve_factor = float(self.option("starve_factor", 4))

    def level(self, attained: float) -> int:
        return bisect_right(self.thresholds, attained)

    def queue_key(self, job: Job) -> tuple:
        return (self.level(job.attained), job.submit_time, job.name, job.id)

    def revisit_at(self, job: Job) -> float | None:
        """When a waiting job in a lower queue is promoted to queue 0 (None: never)."""
        if self.starve_factor <= 0 or job.run_time <= 0 or self.level(job.attained) == 0:
            return None
        return job.wait_since + self.starve_factor * job.run_time

    def pending_rank(self, cycle: Cycle, job: Job) -> float:
        promote = self.revisit_at(job)
        if promote is not None and cycle.snap.now >= promote:
            return 0
        return self.level(job.attained)

    def running_rank(self, cycle: Cycle, run: Running) -> float:
        attained = run.job.attained + (cycle.snap.now - run.started_at) * run.job.demand
        return self.level(attained)

    def running_ranks(self, cycle: Cycle, runs: list[Running]) -> list[float]:
        now, thresholds = cycle.snap.now, self.thresholds
        return [
            bisect_right(thresholds, r.job.attained + (now - r.started_at) * r.job.demand)
            for r in runs
        ]

    def describe(self, rank: float) -> str:
        return f"queue {rank:g}"

    def ranked_pending(self, cycle: Cycle) -> Iterator[Job]:
        """Queue 0, with starving jobs promoted into it by submit time, then the rest."""
        pending = cycle.snap.pending
        first_later = pending.all.bisect_key_left((1,))
        due = pending.by_revisit.bisect_key_right((cycle.snap.now, "\uffff"))
        promoted = sorted(pending.by_revisit.islice(0, due), key=_arrival)
        chosen = {j.id for j in promoted}
        zero = pending.all.islice(0, first_later)
        yield from heapq.merge(zero, promoted, key=_arrival)
        yield from (j for j in pending.all.islice(first_later) if j.id not in chosen)

    def wake_at(self, cycle: Cycle) -> float | None:
        """Next time a running job crosses a queue threshold, or a waiting job is promoted."""
        now = cycle.snap.now
        later = []
        thresholds, top = self.thresholds, len(self.thresholds)
        for run in cycle.running_after():
            job = run.job
            level = bisect_right(thresholds, job.attained)
            if level < top and job.demand:
                crossing = run.started_at + (thresholds[level] - job.attained) / job.demand
                if crossing > now:
                    later.append(crossing)
        waiting = cycle.snap.pending.by_revisit
        i = waiting.bisect_key_right((now, "\uffff"))
        if i < len(waiting):
            later.append(self.revisit_at(waiting[i]))
        aged = super().wake_at(cycle)
        if aged is not None:
            later.append(aged)
        return min(later) if later else None


def _arrival(job: Job) -> tuple:
    """Order inside a queue: first come, first served (the queue key without the level)."""
    return (job.submit_time, job.name, job.id)
