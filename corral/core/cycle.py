"""One scheduling cycle's scratch state: a copy-on-write overlay of the snapshot, so that
choices made earlier in the cycle are seen by later ones while the snapshot stays untouched
(`decide` is pure). It works on its own copy of the snapshot's `FreeMap`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

from corral.core import memos
from corral.core.freemap import FreeMap
from corral.core.memos import PolicyMemo
from corral.core.model import Decision, Job, Preempt, Reason, ReasonCode, Running, Start
from corral.core.snapshot import Snapshot, within

M = TypeVar("M", bound=PolicyMemo)


@dataclass(slots=True, init=False)  # its own __init__: compiled (see model.py)
class Reservation:
    job: Job
    nodes: tuple[int, ...]  # where the job will start
    due: float | None  # when the capacity is expected to be there; None: not known
    held: dict[int, int]  # node -> accelerators that jobs outlasting `due` may not take
    waits_for: set[str]  # the running jobs it waits for (released by the plan)
    lends: bool  # may later borrowers use what it holds (see reserve.borrows)

    def __init__(
        self,
        job: Job,
        nodes: tuple[int, ...],
        due: float | None,
        held: dict[int, int],
        waits_for: set[str],
    ) -> None:
        self.job, self.nodes, self.due, self.held = job, nodes, due, held
        self.waits_for, self.lends = waits_for, False


def freed_by(runs: list[Running]) -> dict[int, int]:
    """Per node, the accelerators the runs free."""
    amounts: dict[int, int] = {}
    for run in runs:
        per = run.job.per_worker
        for i in run.nodes:
            amounts[i] = amounts.get(i, 0) + per
    return amounts


class Cycle:
    def __init__(self, snap: Snapshot, spread: bool = False, base: Cycle | None = None):
        """A cycle on the snapshot; with `base`, a probe of that cycle (see `probe`)."""
        self.snap = snap
        self.spread = spread
        self.map: FreeMap = (snap.map if base is None else base.map).copy()
        self.free = self.map.free  # (the map's own list, read in every placement)
        self.node_jobs: list[int] = (snap.node_jobs if base is None else base.node_jobs).copy()
        self.exclusive: dict[str, str] = (
            snap.exclusive_domains if base is None else base.exclusive
        ).copy()
        # Copied per project on first write (`_copied`).
        self.usage: dict[str, dict[str, int]] = snap.usage if base is None else base.usage
        self._copied: set[str] = set() if base is None else set(base._copied)
        self.victims: dict[str, Running] = {}  # chosen for preemption in this cycle
        # Jobs told to stop (before or in this cycle): their accelerators are free soon, at no
        # further cost. `soon` counts them per node; `promised`, those already held for a
        # waiting job, so two jobs never count on the same ones.
        self.releasing: list[Running] = []
        self.soon: dict[int, int] = {}
        self.promised: dict[int, int] = {}
        self._after: Cycle | None = None  # the free map once they are gone (lazy)
        self.reserver: Job | None = None if base is None else base.reserver  # (rule 6)
        self.reservation: Reservation | None = None if base is None else base.reservation
        self.decision = Decision()  # (a probe only places: nothing reads its own)
        # What a job outlasting the reservation may take (`long_map`), kept by `_take` from
        # when first asked until the reservation changes.
        self._long: FreeMap | None = None
        if base is not None and base._long is not None:
            self._long = base._long.copy()
        # No change yet (nothing admitted, promised or released): the map is the snapshot's.
        self.pristine: bool = base is None or base.pristine
        self.memo: PolicyMemo | None = None  # the policy's own, for this cycle (memos.py)
        self.admitted: dict[str, int] = {} if base is None else base.admitted  # per type
        self.started: list[Running] = []  # jobs this cycle starts
        # Counts admissions, preemptions, promises and the reservation: a policy may keep
        # answers within a cycle while this stays the same (nothing else changes capacity).
        self.changes = 0
        # Placements that failed, by what placement reads (fit.place_unless_failed), as of
        # `changes` then (`unplaced_at`): until it moves.
        self.unplaced: set[tuple] | None = None
        self.unplaced_at = 0
        if base is None:
            for run in snap.terminating.values():
                self._releasing(run)

    def policy_memo(self, kind: type[M]) -> M:
        """The policy's memo of this cycle (`memo`), made on first use."""
        memo = self.memo
        if not isinstance(memo, kind):
            memo = self.memo = kind()
        return memo

    def probe(self, released: bool = False) -> Cycle:
        """A scratch copy of the free map for what-if placement (preemption, reservation);
        `released`: as it will be once the stopping jobs are gone and the promises kept."""
        if released and self.releasing:
            return self.after_release().probe()
        return Cycle(self.snap, self.spread, base=self)

    def after_release(self) -> Cycle:
        """The free map once the stopping jobs are gone and the promises kept, kept up to date
        (read it, do not change it): rebuilt for each blocked job, it would cost O(stopping)."""
        if self._after is None:
            self._after = self._released()
        elif memos.CHECKING:
            memos.same("after release", self._after.free, self._released().free)
        return self._after

    def _released(self) -> Cycle:
        after = self.probe()
        after.release_all(self.releasing)
        for i, amount in self.promised.items():
            after._take(i, amount)
        return after

    def release(self, run: Running) -> None:
        """What-if: give back a running job's accelerators (on a probe)."""
        self.release_all([run])

    def release_all(self, runs: list[Running]) -> None:
        """What-if: `release` each of `runs`, one change per node."""
        for run in runs:
            for i in run.nodes:
                self.node_jobs[i] -= 1
            if run.job.resources.exclusive:  # its domains, unless promised to another job
                for i in run.nodes:
                    domain = self.snap.cluster.domain_of[i]
                    if self.exclusive.get(domain) == run.job.id:
                        del self.exclusive[domain]
        for i, amount in freed_by(runs).items():
            self._take(i, -amount)

    def occupy(self, job: Job, nodes: tuple[int, ...]) -> None:
        per = job.per_worker
        for i in nodes:
            self._take(i, per)
            self.node_jobs[i] += 1
        if job.resources.exclusive:
            for i in nodes:
                self.exclusive[self.snap.cluster.domain_of[i]] = job.id

    def held(self, project: str, accelerator: str) -> int:
        held = self.usage.get(project)  # (typed lookups: fast once compiled)
        return 0 if held is None else held.get(accelerator, 0)

    def _add_usage(self, project: str, accelerator: str, amount: int) -> None:
        if self.usage is self.snap.usage:
            self.usage = dict(self.snap.usage)
        if project not in self._copied:
            self.usage[project] = dict(self.usage.get(project, ()))
            self._copied.add(project)
        held = self.usage[project]
        held[accelerator] = held.get(accelerator, 0) + amount

    def within_guarantee(self, job: Job) -> bool:
        return self.room_within(job.project, job.accelerator, job.demand)

    def room_within(self, project: str, accelerator: str, amount: int) -> bool:
        """Would `amount` more keep the project within its guarantee?"""
        guarantee = self.snap.guarantee_of(project, accelerator)
        return within(self.held(project, accelerator), amount, guarantee)

    def long_map(self, long: bool) -> FreeMap:
        """The free map a job sees: for a `long` one (outlasting the reservation), beside the
        capacity it holds."""
        if not long or self.reservation is None:
            return self.map
        if self._long is None:
            self._long = self.map.beside(self.reservation.held)
        return self._long

    def histogram(self, accelerator: str, long: bool) -> list[int]:
        """Nodes of a type by free accelerators (for `long` jobs, those not held)."""
        return self.long_map(long).hist.get(accelerator, [0])

    def free_total(self, accelerator: str) -> int:
        hist = self.histogram(accelerator, False)
        return sum(k * n for k, n in enumerate(hist))

    def may_fit(self, job: Job, long: bool) -> bool:
        """Cheap necessary condition: enough per_worker-sized blocks of the job's type."""
        return self.blocks(job.accelerator, job.per_worker, long) >= job.gang

    def blocks(self, accelerator: str, per_worker: int, long: bool = True) -> int:
        """Free per_worker-sized blocks of a type, over all nodes (kept by the map)."""
        free = self.long_map(long)
        found = free.slots_of(accelerator, per_worker)
        if memos.CHECKING:  # the slot counts and histograms, against the free map
            nodes = self.snap.cluster.by_type.get(accelerator, ())
            memos.same("worker slots", found, sum(free.avail(i) // per_worker for i in nodes))
        return found

    def projects_may_fit(self) -> set[str]:
        """The projects with a pending job that could fit in what is free now (in what is not
        held for the reservation, unless the project has jobs with a max_runtime or borrows)."""
        pending = self.snap.pending
        found: set[str] = set()
        for project in pending.demand:
            long = not pending.bounded.get(project) and not self.lends_to(project)
            for (accelerator, per), workers in pending.summary(project).fewest_workers.items():
                if self.blocks(accelerator, per, long) >= workers:
                    found.add(project)
                    break
        return found

    def lends_to(self, project: str) -> bool:
        """Might the reservation lend what it holds to a job of the project: does the project
        hold at least its guarantee of the type (borrowing)? (See reserve.borrows.)"""
        res = self.reservation
        if res is None or not res.lends:
            return False
        accel = res.job.accelerator
        return self.held(project, accel) + 1e-9 >= self.snap.guarantee_of(project, accel)

    def may_fit_any(self) -> bool:
        """Could any pending job fit? (Held capacity counts as free: conservative.)"""
        fewest = self.snap.pending.summary().fewest_workers
        for (accelerator, per_worker), workers in fewest.items():
            if self.blocks(accelerator, per_worker, False) >= workers:
                return True
        return False

    def _take(self, node: int, amount: int) -> None:
        """Move `amount` accelerators of a node between free and used, keeping the indexes."""
        self.pristine = False
        if self._long is not None:
            self._long.take(node, amount)
        self.map.take(node, amount)

    def under_cap(self, job: Job) -> bool:
        """total_resources caps what corral hands out of a type, whatever the inventory."""
        cap = self.snap.capacity.get(job.accelerator, 0)
        accel = job.accelerator
        return self.snap.in_use.get(accel, 0) + self.admitted.get(accel, 0) + job.demand <= cap

    def admit(self, job: Job, nodes: tuple[int, ...]) -> None:
        self.changes += 1
        accel = job.accelerator
        self.admitted[accel] = self.admitted.get(accel, 0) + job.demand
        self.occupy(job, nodes)
        if self._after is not None:
            self._after.occupy(job, nodes)
        self._add_usage(job.project, job.accelerator, job.demand)
        self.decision.starts.append(Start(job.id, self.snap.node_names(nodes)))
        self.started.append(Running(job, nodes, self.snap.now))

    def running_after(self) -> Iterator[Running]:
        """The jobs that run once this cycle's decision is applied."""
        victims = self.victims
        for run in self.snap.running.values():
            if not run.terminating and run.job.id not in victims:
                yield run
        yield from self.started

    def preempt(self, victims: list[Running], nodes: tuple[int, ...], preemptor: Job, why: str):
        self.changes += 1
        for run in victims:
            self.victims[run.job.id] = run
            self._releasing(run)
            self._add_usage(run.job.project, run.job.accelerator, -run.job.demand)
            self.decision.preemptions.append(Preempt(run.job.id, why, preemptor.id))
        self.promise(preemptor, nodes)
        n = len(victims)
        why = f"preempting {n} job{'s' * (n > 1)} to make room"
        self.wait(preemptor, Reason(ReasonCode.PREEMPTING, why))

    def _releasing(self, run: Running) -> None:
        self.releasing.append(run)
        if self._after is not None:
            self._after.release(run)
        soon, per = self.soon, run.job.per_worker
        for i in run.nodes:
            soon[i] = soon.get(i, 0) + per

    def promise(self, job: Job, nodes: tuple[int, ...]) -> None:
        """Hold `nodes` for a job that starts once the stopping jobs are gone (first what they
        release, free accelerators for the rest), so no later job in the cycle leaves it short."""
        self.changes += 1
        self._add_usage(job.project, job.accelerator, job.demand)
        if self._after is not None:
            self._after.occupy(job, nodes)
        per, soon, promised = job.per_worker, self.soon, self.promised
        for i in nodes:
            self.node_jobs[i] += 1
            from_soon = min(per, soon.get(i, 0) - promised.get(i, 0))
            promised[i] = promised.get(i, 0) + from_soon
            if per > from_soon:
                self._take(i, per - from_soon)
        if job.resources.exclusive:
            for i in nodes:
                self.exclusive[self.snap.cluster.domain_of[i]] = job.id

    def wait(self, job: Job, reason: Reason) -> None:
        self.decision.reasons[job.id] = reason

    def reserve(self, reservation: Reservation) -> None:
        self.changes += 1
        self._long = None  # what long jobs may take changed
        self.reservation = reservation
        if self._after is not None:
            self._after.reserve(reservation)
