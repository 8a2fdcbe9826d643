"""Counting worker slots on the side, for a what-if search (victims, reservations)."""

from __future__ import annotations

from collections.abc import Iterable

from corral.core.cycle import Cycle
from corral.core.fit import place
from corral.core.model import Job, Running


def release_until_placed(
    probe: Cycle, job: Job, long: bool, runs: Iterable[Running], released: list[Running]
) -> tuple[int, ...] | None:
    """Release `runs` in turn on the probe until the job fits: where it goes (`released` gets
    them). The releases are counted on the side, put on the probe only once it could fit."""
    counter = SlotCounter(probe, job, long)
    for run in runs:
        released.append(run)
        if counter.release(run):
            counter.apply()
            nodes = place(probe, job, long)
            if nodes is not None:
                return nodes
    return None


class SlotCounter:
    """Free worker slots of a job's size on a cycle as running jobs are released on the side
    (on a `FreeMap.counter` copy), so a what-if search changes its probe (`apply`) only once
    the job could fit. With `long`, capacity held for the reservation does not count. Where a
    slice could be refused a domain (below), the count is also kept per domain (`DomainSlots`)
    from the first time the total is enough: then `enough` is what placement finds, not just
    a bound, and a search does not place after every release."""

    def __init__(self, cycle: Cycle, job: Job, long: bool):
        self.cycle, self.job = cycle, job
        self.per, self.need = job.per_worker, job.gang
        # The map the job sees (with `long`, beside held capacity), releases counted in.
        self.map = cycle.long_map(long).counter(job.accelerator, self.per)
        self.slots = self.map.slots[job.accelerator]  # per_worker -> worker slots
        self.batch: list[Running] = []  # the runs counted since the last `apply`
        # A slice may be refused a domain if its workers need one with room for them all, the
        # job is exclusive or a domain is closed by an exclusive job; else the total says all.
        r = job.resources
        typed = cycle.snap.cluster.typed_domains.get(job.accelerator, {})
        closed = bool(cycle.exclusive) and any(d in cycle.exclusive for d in typed)
        self.by_domain = r.exclusive or closed or (len(typed) > 1 and r.workers > 1)
        self.domains: DomainSlots | None = None  # once asked for (`enough`)
        self.loose = False  # amounts were released: which domains they open is not known

    def enough(self) -> bool:
        if self.slots[self.per] < self.need:
            return False
        if not self.by_domain:
            return True
        if self.domains is None:
            self.domains = DomainSlots(self)
        return self.domains.fits >= self.domains.slices

    def release(self, run: Running) -> bool:
        """Count a run's accelerators as free; True when the job could fit (`enough`)."""
        self.batch.append(run)
        more = run.job.per_worker
        for i in run.nodes:
            self._count(i, more)
        if self.domains is not None:
            self.domains.release(run)
        return self.enough()

    def release_amounts(self, amounts: dict[int, int]) -> bool:
        """Count accelerators as free, per node (for a count only: `apply` does not see
        them); True when the job could fit. Which jobs they come from is not known, so from
        now on no domain counts as closed or busy (`enough` is then only a bound)."""
        self.loose = True
        if self.domains is not None:
            self.domains.open_all()
        for i, more in amounts.items():
            self._count(i, more)
        return self.enough()

    def _count(self, node: int, more: int) -> None:
        free, domains = self.map, self.domains
        if domains is None:
            free.take(node, -more)
            return
        before = free.avail(node) // self.per
        free.take(node, -more)
        gained = free.avail(node) // self.per - before
        if gained:
            domains.gain(node, gained)

    def apply(self) -> None:
        """Release the runs counted so far on the cycle (a probe): its free map catches up."""
        self.cycle.release_all(self.batch)
        self.batch = []


class DomainSlots:
    """A SlotCounter's count per domain, as of its releases so far: worker slots, what keeps
    a slice off the domain (closed by an exclusive job; for an exclusive job, also each worker
    on its nodes) and `fits`, how many of the job's slices the usable domains hold (an
    exclusive job's slices each need a domain of their own; others share, a slot a worker)."""

    def __init__(self, counter: SlotCounter):
        cycle, job = counter.cycle, counter.job
        cluster = cycle.snap.cluster
        number, per, avail = cluster.domain_number, counter.per, counter.map.avail
        self.counter, self.number = counter, number  # node -> its domain's place
        self.workers, self.slices = job.resources.workers, job.resources.slices
        self.exclusive = job.resources.exclusive
        n = len(cluster.domains)
        self.slots = [0] * n
        # Per domain, what keeps a slice off it; None: nothing does (the common case).
        self.blocked: list[int] | None = None
        if not counter.loose and (self.exclusive or cycle.exclusive):
            self.blocked = [0] * n
        self.fits = 0
        for d, nodes in cluster.typed_domains.get(job.accelerator, {}).items():
            k = number[nodes[0]]
            slots = self.slots[k] = sum([avail(i) // per for i in nodes])
            if self.blocked is not None:
                self.blocked[k] = int(d in cycle.exclusive)
                if self.exclusive:
                    self.blocked[k] += sum(cycle.node_jobs[i] for i in cluster.domains[d])
            self.fits += self._holds(k, slots)
        if self.blocked is not None:
            for run in counter.batch:  # released, not applied yet
                self.release(run)

    def _holds(self, k: int, slots: int) -> int:
        """Slices the domain holds with `slots` free slots."""
        blocked = self.blocked
        if blocked is not None and blocked[k] > 0:
            return 0
        if self.exclusive:
            return 1 if slots >= self.workers else 0
        return slots // self.workers

    def gain(self, node: int, slots: int) -> None:
        k = self.number[node]
        had = self.slots[k]
        self.slots[k] = had + slots
        self.fits += self._holds(k, had + slots) - self._holds(k, had)

    def release(self, run: Running) -> None:
        """The run's workers leave their nodes; an exclusive run opens the domains it holds."""
        if self.blocked is None:
            return
        cycle, number = self.counter.cycle, self.number
        if self.exclusive:
            for i in run.nodes:
                self._unblock(number[i])
        if run.job.resources.exclusive:
            owner, domain_of = cycle.exclusive, cycle.snap.cluster.domain_of
            opened: set[int] = set()  # (a run may have several workers in a domain)
            for i in run.nodes:
                k = number[i]
                if k not in opened and owner.get(domain_of[i]) == run.job.id:
                    opened.add(k)
                    self._unblock(k)

    def _unblock(self, k: int) -> None:
        blocked = self.blocked
        assert blocked is not None
        before = self._holds(k, self.slots[k])
        blocked[k] -= 1
        self.fits += self._holds(k, self.slots[k]) - before

    def open_all(self) -> None:
        """Count every domain as usable from now on (what may open them is not known)."""
        self.blocked = None
        self.fits = sum([self._holds(k, slots) for k, slots in enumerate(self.slots)])
