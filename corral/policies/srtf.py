"""`srtf`: shortest remaining time first, preemptive.

Remaining time is the known duration (the simulator knows it) or else the declared
max_runtime, minus the time already run; jobs with neither rank last. A pending job preempts
running jobs with strictly more time left, the longest first.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import ClassVar

from mypy_extensions import mypyc_attr

from corral.core.cycle import Cycle
from corral.core.model import Job, Running
from corral.core.policy import may_be_victim
from corral.core.queues import RunningKey
from corral.policies.ranked import INF, Keep, RankPolicy, run_of, slack


def remaining(job: Job) -> float:
    total = job.duration if job.duration is not None else job.max_runtime
    return INF if total is None else max(0.0, total - job.run_time)


@mypyc_attr(allow_interpreted_subclasses=True)
class Srtf(RankPolicy):
    name: ClassVar[str] = "srtf"

    def queue_key(self, job: Job) -> tuple:
        return (remaining(job), job.submit_time, job.name, job.id)

    def pending_rank(self, cycle: Cycle, job: Job) -> float:
        return remaining(job)

    def running_rank(self, cycle: Cycle, run: Running) -> float:
        return remaining(run.job) - (cycle.snap.now - run.started_at)

    def running_keys(self) -> dict[str, RunningKey]:
        # end: when a job that may be a victim will be done; time left now is about end - now.
        keys = super().running_keys()
        keys["end"] = lambda run: (
            run.started_at + remaining(run.job) if may_be_victim(run.job) else None
        )
        return keys

    def indexed_worse(
        self, cycle: Cycle, accelerator: str, rank: float, keep: Keep
    ) -> list[Running]:
        """Latest end first."""
        entries = cycle.snap.running_by["end"].by_type.get(accelerator)
        if not entries or rank == INF:
            return []
        # Time left is about end - now: only ends this close to now + rank need the exact
        # formula to tell whether they are worse.
        now = cycle.snap.now
        margin = slack(now, rank)
        surely, lowest = (now + rank) + margin, (now + rank) - margin
        # Entries are (end, id, run): past (the float after surely,) all are worse.
        past = bisect_left(entries, (math.nextafter(surely, INF),))
        worse = list(map(run_of, reversed(entries[past:])))
        if not keep.every:
            worse = [run for run in worse if keep(run)]
        for _, _, run in reversed(entries[bisect_left(entries, (lowest,)) : past]):
            if keep(run) and self.running_rank(cycle, run) > rank:
                worse.append(run)
        return worse

    def worst_indexed(self, cycle: Cycle, keep: Keep) -> float | None:
        worst = None
        now = cycle.snap.now
        for entries in cycle.snap.running_by["end"].by_type.values():
            latest = next((end for end, _, run in reversed(entries) if keep(run)), None)
            if latest is None:
                continue
            # Rounding may put a job ending a hair earlier ahead on time left: rank the ends
            # close to the latest with the exact formula.
            lowest = latest - slack(latest, now)
            for end, _, run in reversed(entries):
                if end < lowest:
                    break
                if keep(run):
                    rank = self.running_rank(cycle, run)
                    if worst is None or rank > worst:
                        worst = rank
        return worst

    def describe(self, rank: float) -> str:
        return f"{rank:g} s left"
