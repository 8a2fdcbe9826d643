"""`srtf`: shortest remaining time first, preemptive.

Remaining time is the known duration (the simulator knows it) or else the declared
max_runtime, minus the time already run; jobs with neither rank last. A pending job preempts
running jobs with strictly more time left, the longest first.
"""

from __future__ import annotations

from corral.core.cycle import Cycle
from corral.core.model import Job, Running
from corral.policies.ranked import RankPolicy

INF = float("inf")


def remaining(job: Job) -> float:
    total = job.duration if job.duration is not None else job.max_runtime
    return INF if total is None else max(0.0, total - job.run_time)


class Srtf(RankPolicy):
    name = "srtf"

    def queue_key(self, job: Job) -> tuple:
        return (remaining(job), job.submit_time, job.name, job.id)

    def pending_rank(self, cycle: Cycle, job: Job) -> float:
        return remaining(job)

    def running_rank(self, cycle: Cycle, run: Running) -> float:
        return remaining(run.job) - (cycle.snap.now - run.started_at)

    def describe(self, rank: float) -> str:
        return f"{rank:g} s left"
