"""Shared machinery of preemptive rank policies (las, srtf): one global order by a rank, and
a pending job may preempt running jobs of strictly worse rank, worst first."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from itertools import takewhile

from corral.core.cycle import Cycle
from corral.core.model import Job, Running
from corral.core.policy import Policy
from corral.core.preempt import Preemption, could_free_room, eligible, find_victims
from corral.core.snapshot import shape_of

INF = float("inf")


class RankPolicy(Policy):
    preemptive = True

    @abstractmethod
    def pending_rank(self, cycle: Cycle, job: Job) -> float:
        """Lower runs first."""

    @abstractmethod
    def running_rank(self, cycle: Cycle, run: Running) -> float:
        """The same scale as pending_rank, for a job that is running now."""

    def describe(self, rank: float) -> str:
        return f"rank {rank:g}"

    def ranked_pending(self, cycle: Cycle) -> Iterator[Job]:
        yield from cycle.snap.pending.all

    def order(self, cycle: Cycle) -> Iterator[Job]:
        # Ranks never get better along the order, capacity only shrinks and failed victim
        # searches stay failed: a shape that neither fits nor could preempt at some rank is
        # dead for the rest of the cycle, and when every pending shape is dead the walk ends.
        failed = cycle.scratch.setdefault(f"{self.name}.failed", {})
        dead: set[tuple[str, int, int]] = set()
        shapes = cycle.snap.pending.shapes
        for job in self.ranked_pending(cycle):
            shape = shape_of(job)
            if shape in dead:
                continue
            if not cycle.may_fit(job, long=False) and not cycle.releasing:
                rank = self.pending_rank(cycle, job)
                worst = self._worst(cycle)
                if worst is None or rank >= min(worst, failed.get(shape, INF)):
                    dead.add(shape)
                    if len(dead) == len(shapes):
                        return
                    continue
            yield job

    def _worst(self, cycle: Cycle) -> float | None:
        """The worst rank of a running job that may be a victim (victims taken included)."""
        ranked = (self._ranked_running(cycle, accel) for accel in cycle.snap.cluster.by_type)
        return max((r[0][0] for r in ranked if r), default=None)

    def may_preempt_for(self, cycle: Cycle, job: Job) -> bool:
        # The worst rank running once the cycle's starts are applied: las ranks change only at
        # the wake-ups it asks for, and srtf's only get better as jobs run, so it holds for
        # every arrival until the next cycle (erring on the side of a cycle).
        if "rank.after" not in cycle.scratch:
            runs = [r for r in cycle.running_after() if eligible(cycle, r, self.min_runtime)]
            cycle.scratch["rank.after"] = max(self.running_ranks(cycle, runs), default=None)
        worst = cycle.scratch["rank.after"]
        return worst is not None and self.pending_rank(cycle, job) < worst

    def victims(self, cycle: Cycle, job: Job) -> Preemption | None:
        # Ranks are fixed within a cycle and capacity only shrinks as it goes on: a search that
        # failed for a shape fails again for any job of that shape ranked no better.
        failed = cycle.scratch.setdefault(f"{self.name}.failed", {})
        shape = shape_of(job)
        rank = self.pending_rank(cycle, job)
        if rank >= failed.get(shape, INF):
            return None
        worse = takewhile(lambda kr: kr[0] > rank, self._ranked_running(cycle, job.accelerator))
        candidates = [r for _, r in worse if r.job.id not in cycle.victims]
        found = None
        if could_free_room(cycle, job, candidates):
            found = find_victims(cycle, job, candidates)
        if found is None:
            failed[shape] = min(rank, failed.get(shape, INF))
            return None
        found.why = f"preempted by job {job.name} ({self.name}: {self.describe(rank)})"
        return found

    def _ranked_running(self, cycle: Cycle, accelerator: str) -> list[tuple[float, Running]]:
        """Running jobs of a type that may be victims, worst rank first (then the most
        recently started), computed once per cycle."""
        cache = cycle.scratch.setdefault(f"{self.name}.ranked", {})
        ranked = cache.get(accelerator)
        if ranked is None:
            runs = [
                r
                for by_project in cycle.snap.preemptible.get(accelerator, {}).values()
                for r in by_project
                if eligible(cycle, r, self.min_runtime)
            ]
            ranked = list(zip(self.running_ranks(cycle, runs), runs, strict=True))
            ranked.sort(key=lambda kr: (-kr[0], -kr[1].started_at, kr[1].job.id))
            cache[accelerator] = ranked
        return ranked

    def running_ranks(self, cycle: Cycle, runs: list[Running]) -> list[float]:
        """`running_rank` of each run (a policy may compute them all at once, faster)."""
        return [self.running_rank(cycle, r) for r in runs]
