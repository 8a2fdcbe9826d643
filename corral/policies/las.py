"""`las`: least attained service first, discretised as in Tiresias (NSDI '19).

Attained service is counted in accelerator-seconds over all attempts. Jobs fall into queues at
`thresholds`; a job in a lower queue preempts running jobs in higher queues; within a queue,
first come first served. A job that has waited longer than `starve_factor` times the time it
has run is promoted to queue 0, so long jobs are not starved.

Options ([scheduler.options]): las_thresholds (accelerator-seconds, default [3600, 36000]),
starve_factor (default 4; 0 turns promotion off).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from functools import partial
from typing import ClassVar

from mypy_extensions import mypyc_attr

from corral.core import memos
from corral.core.cycle import Cycle
from corral.core.model import Job, Running
from corral.core.policy import may_be_victim, next_keys
from corral.core.queues import Entry, RunningKey
from corral.policies.ranked import INF, Keep, RankCycleMemo, RankPolicy, run_of


@mypyc_attr(allow_interpreted_subclasses=True)
class Las(RankPolicy):
    name: ClassVar[str] = "las"

    def __init__(self, config=None):
        super().__init__(config)
        self.thresholds = sorted(float(x) for x in self.option("las_thresholds", [3600, 36000]))
        self.starve_factor = float(self.option("starve_factor", 4))
        # The index of the jobs in queue k or a later one, by k (0: none).
        self.reach_names = ["", *(f"reach{k}" for k in range(1, len(self.thresholds) + 1))]

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

    def running_keys(self) -> dict[str, RunningKey]:
        # reach{k}: when a preemptible job reaches queue k (k >= 1); wake: when a running job
        # crosses the first threshold above the service it had when it started.
        keys = super().running_keys()
        for k, threshold in enumerate(self.thresholds, start=1):
            keys[self.reach_names[k]] = partial(_reach, threshold=threshold)
        keys["wake"] = self._first_crossing
        return keys

    def _first_crossing(self, run: Running) -> float | None:
        job = run.job
        level = bisect_right(self.thresholds, job.attained)
        if level == len(self.thresholds) or not job.demand:
            return None
        return run.started_at + (self.thresholds[level] - job.attained) / job.demand

    def worst_indexed(self, cycle: Cycle, keep: Keep) -> float | None:
        # Queue 0 is the best rank a pending job can have: a worst of 0 lets no job preempt,
        # as None does, so only the higher queues are looked at.
        indexes = cycle.snap.running_by
        for level in range(len(self.thresholds), 0, -1):
            for accelerator in indexes[self.reach_names[level]].by_type:
                if any(map(keep, map(run_of, self._reached(cycle, accelerator, level)))):
                    return level
        return None

    def indexed_worse(
        self, cycle: Cycle, accelerator: str, rank: float, keep: Keep
    ) -> list[Running]:
        level = math.floor(rank) + 1  # the queues worse than `rank`: this one and later
        return [run for _, _, run in self._reached(cycle, accelerator, level) if keep(run)]

    def _reached(self, cycle: Cycle, accelerator: str, level: int) -> Iterator[Entry]:
        """The index entries of the preemptible jobs of a type in queue `level` (at least 1)
        or a later one now."""
        if level > len(self.thresholds):
            return iter(())
        entries = cycle.snap.running_by[self.reach_names[level]].by_type.get(accelerator)
        if not entries:
            return iter(())
        # Entries are (reach time, id, run): those before (the float after now,) reached it.
        return iter(entries[: bisect_left(entries, (math.nextafter(cycle.snap.now, INF),))])

    def describe(self, rank: float) -> str:
        return f"queue {rank:g}"

    def moved(self, cycle: Cycle) -> dict[str, tuple[tuple, Job]]:
        """Starving jobs, promoted to queue 0: placed there by submit time."""
        due = self._due(cycle)
        if not due:  # the common case
            return {}
        waiting = cycle.snap.pending.by_revisit
        return {
            job.id: ((0, job.submit_time, job.name, job.id), job) for job in waiting.islice(0, due)
        }

    def _due(self, cycle: Cycle) -> int:
        """How many waiting jobs are promoted now: the first ones by revisit time (asked by
        the walk and by wake_at)."""
        memo = cycle.policy_memo(RankCycleMemo)
        key = (cycle.snap.now, "\uffff")  # by_revisit keys are (revisit time, job id)
        if memo.due < 0:
            memo.due = cycle.snap.pending.by_revisit.bisect_key_right(key)
        elif memos.CHECKING:
            memos.same("las due", memo.due, cycle.snap.pending.by_revisit.bisect_key_right(key))
        return memo.due

    def wake_at(self, cycle: Cycle) -> float | None:
        """Next time a running job crosses a queue threshold, or a waiting job is promoted."""
        now = cycle.snap.now
        later = [t for t in next_keys(cycle.snap.running_by["wake"], cycle) if t > now]
        waiting, due = cycle.snap.pending.by_revisit, self._due(cycle)
        if due < len(waiting):
            later.append(self.revisit_at(waiting[due]))  # type: ignore[arg-type]
        return min(later) if later else None


def _reach(run: Running, threshold: float) -> float | None:
    """The first time at which the attained service of a job that may be a victim, computed
    as `running_rank` does, is at least `threshold` (None: never; -inf: from its start).
    Exact, not just close: the level a cycle reads from the index is the level it computes."""
    job, start = run.job, run.started_at
    if not may_be_victim(job):
        return None
    if not job.demand:
        return -INF if job.attained >= threshold else None

    def reached(t: float) -> bool:
        return job.attained + (t - start) * job.demand >= threshold

    estimate = start + (threshold - job.attained) / job.demand
    if reached(estimate) != reached(math.nextafter(estimate, -INF)):  # mostly: exact
        return estimate
    # Float steps of the time can be far finer than those of the attained service (a start at
    # 0, service just below the threshold): bracket, then bisect down to adjacent floats.
    scale = abs(start) + abs(estimate) + (abs(threshold) + abs(job.attained)) / job.demand
    step, below, above = scale * 2.0**-52, estimate, estimate
    while reached(below):
        below, step = estimate - step, step * 2
    while not reached(above):
        above, step = estimate + step, step * 2
    while math.nextafter(below, INF) < above:  # reached(above) and not reached(below)
        middle = below + (above - below) / 2
        if not below < middle < above:  # (rounded onto an end)
            middle = math.nextafter(below, INF)
        if reached(middle):
            above = middle
        else:
            below = middle
    return above
