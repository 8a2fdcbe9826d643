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

    def _promote_at(self, job: Job) -> float | None:
        if self.starve_factor <= 0 or job.run_time <= 0:
            return None
        return job.wait_since + self.starve_factor * job.run_time

    def pending_rank(self, cycle: Cycle, job: Job) -> float:
        promote = self._promote_at(job)
        if promote is not None and cycle.snap.now >= promote:
            return 0
        return self.level(job.attained)

    def running_rank(self, cycle: Cycle, run: Running) -> float:
        attained = run.job.attained + (cycle.snap.now - run.started_at) * run.job.demand
        return self.level(attained)

    def describe(self, rank: float) -> str:
        return f"queue {rank:g}"

    def ranked_pending(self, cycle: Cycle) -> Iterator[Job]:
        """Queue 0, with starving jobs promoted into it by submit time, then the rest."""
        pending = cycle.snap.pending.all
        first_later = pending.bisect_key_left((1,))
        promoted = [j for j in pending.islice(first_later) if self.pending_rank(cycle, j) == 0]
        chosen = {j.id for j in promoted}
        zero = pending.islice(0, first_later)
        yield from heapq.merge(zero, promoted, key=_arrival)
        yield from (j for j in pending.islice(first_later) if j.id not in chosen)

    def wake_at(self, cycle: Cycle) -> float | None:
        """Next time a running job crosses a queue threshold, or a waiting job is promoted."""
        snap = cycle.snap
        times = []
        for run in cycle.running_after():
            job = run.job
            level = self.level(job.attained)
            if level < len(self.thresholds) and job.demand:
                spent = run.started_at + (self.thresholds[level] - job.attained) / job.demand
                times.append(spent)
        pending = snap.pending.all
        for job in pending.islice(pending.bisect_key_left((1,))):
            promote = self._promote_at(job)
            if promote is not None and promote > snap.now:
                times.append(promote)
        later = [t for t in times if t > snap.now]
        aged = super().wake_at(cycle)
        if aged is not None:
            later.append(aged)
        return min(later) if later else None


def _arrival(job: Job) -> tuple:
    """Order inside a queue: first come, first served (the queue key without the level)."""
    return (job.submit_time, job.name, job.id)
