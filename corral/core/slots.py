"""Counting worker slots on the side: a what-if search (victims, reservations) releases
running jobs on a copy of the free map first (`FreeMap.counter`) and changes its probe only
once the job could fit."""

from __future__ import annotations

from corral.core.cycle import Cycle
from corral.core.model import Job, Running


class SlotCounter:
    """Free worker slots of a job's size on a cycle as running jobs are released on the side,
    so a what-if search changes its probe (`apply`) and places only once the job could fit.
    With `long`, capacity held for the reservation does not count. `enough` is a bound, not
    an answer: slots in all, whatever domain they lie in (placement says the rest)."""

    def __init__(self, cycle: Cycle, job: Job, long: bool):
        self.cycle = cycle
        self.per, self.need = job.per_worker, job.gang
        # The map the job sees (with `long`, beside held capacity), releases counted in.
        self.map = cycle.long_map(long).counter(job.accelerator, self.per)
        self.slots = self.map.slots[job.accelerator]  # per_worker -> worker slots
        self.batch: list[Running] = []  # the runs counted since the last `apply`

    def enough(self) -> bool:
        return self.slots[self.per] >= self.need

    def release(self, run: Running) -> bool:
        """Count a run's accelerators as free; True when the job could fit (`enough`)."""
        self.batch.append(run)
        more = run.job.per_worker
        for i in run.nodes:
            self.map.take(i, -more)
        return self.enough()

    def release_amounts(self, amounts: dict[int, int]) -> bool:
        """Count accelerators as free, per node (for a count only: `apply` does not see
        them); True when the job could fit."""
        for i, more in amounts.items():
            self.map.take(i, -more)
        return self.enough()

    def apply(self) -> None:
        """Release the runs counted so far on the cycle (a probe): its free map catches up."""
        self.cycle.release_all(self.batch)
        self.batch = []
