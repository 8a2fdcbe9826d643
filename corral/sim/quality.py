"""What an operator would ask of a schedule that the event log alone does not answer: was
capacity left idle while a pending job fitted, and did the policy leave a project within its
guarantee waiting when one preemption would have let it in? (`bench/bench_quality.py`.)

The log is replayed into the core's own Snapshot (the policy's, as the engine builds it), so
fit is the core's placement: per-worker accelerators on one node, slices within a domain,
exclusive domains. At sample instants a fresh Snapshot is rebuilt from the jobs pending and
running then, and the policy's `decide` is asked what it would do.

Definitions (docs/scheduling.md, Metrics):
- preempted soon: attempts preempted within `short_s` seconds of their start; at start: in
  the instant they started (the policy undid its own decision at once).
- idle while a job fits: time during which some pending job would have fitted in the free
  accelerators as they were (reservations and quota aside), and the free accelerators of
  the types such a job asks for, over that time (accelerator-seconds).
- missed reclaim, at a sample instant: a project P has a pending job J within its guarantee
  (P's holding plus J's demand is at most its guarantee), J would fit if one running job R
  were preempted, where R is preemptible, old enough for the policy (`preempt_min_runtime`)
  and belongs to another project that stays at or above its guarantee without R; and the
  policy's decision starts no job of P and preempts nothing for one. Rule 6 (DESIGN.md §3.6)
  stands: if J outlasts the decision's reservation, J fits beside the capacity held for it,
  and R is not a job the reservation waits for. An instant counts once however many
  projects miss out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from corral.core.cycle import Cycle
from corral.core.decide import run_cycle
from corral.core.fit import place
from corral.core.model import Job, Running
from corral.core.policy import Policy
from corral.core.preempt import eligible
from corral.core.reserve import outlasts
from corral.core.snapshot import Snapshot, within
from corral.formats.types import Node, Quota, ScenarioJob
from corral.sim.engine import core_job

SLACK = 1e-9  # the core's slack on guarantees (snapshot.within)


@dataclass(slots=True)
class Miss:
    """A missed reclaim: `job` of `project` would fit if `victim` were preempted. `behind`:
    the job is not its project's first in the queue (issue 19, item 2: a head job beyond the
    guarantee holds back the jobs behind it)."""

    t: float
    project: str
    job: str
    victim: str
    behind: bool


@dataclass(slots=True)
class Quality:
    most_preemptions: int = 0
    most_preempted_job: str | None = None
    preempted_soon: int = 0  # attempts preempted within short_s of their start
    preempted_at_start: int = 0  # ... in the instant they started
    idle_fit_s: float = 0.0  # seconds with a pending job that fitted in the free accelerators
    idle_fit_accel_s: float = 0.0  # free accelerators over those seconds
    samples: int = 0
    missed_instants: int = 0
    missed_behind: int = 0  # instants with a miss, all of them behind their project's head
    misses: list[Miss] = field(default_factory=list)  # every missed project, instant by instant


def audit(
    events: Sequence[Mapping[str, Any]],
    nodes: Sequence[Node],
    quota: Quota,
    jobs: Sequence[ScenarioJob],
    new_policy: Callable[[], Policy],
    every_s: float = 6 * 3600.0,
    short_s: float = 60.0,
    restart_penalty: float = 0.0,
) -> Quality:
    """Replay `events` (an engine log, in time order) of `jobs` on `nodes` under `quota`.
    `new_policy()` makes the policy that produced the log (a fresh one per sample: a policy
    may keep memos in its snapshot). Samples fall every `every_s` from the first event to the
    last, the state as it was after all events at or before the instant."""
    quality = Quality()
    replay = _LogReplay(nodes, quota, jobs, new_policy(), restart_penalty)
    next_sample = events[0]["t"] if events else 0.0
    for t, until in replay.instants(events, quality, short_s):
        if until > t and replay.snap.pending:
            free = replay.free_where_a_job_fits()
            if free:
                quality.idle_fit_s += until - t
                quality.idle_fit_accel_s += free * (until - t)
        while next_sample < until or (until == t and next_sample <= t):
            quality.samples += 1
            misses = missed_reclaims(replay.rebuild(next_sample, new_policy()), new_policy())
            quality.missed_instants += bool(misses)
            quality.missed_behind += bool(misses) and all(m[3] for m in misses)
            quality.misses += [Miss(next_sample, *m) for m in misses]
            next_sample += every_s
    return quality


def missed_reclaims(snap: Snapshot, policy: Policy) -> list[tuple[str, str, str, bool]]:
    """(project, pending job, victim, behind its project's first job) for each project the
    decision on `snap` leaves out of a reclaim one preemption would allow (see the module
    docstring); one example each, the first such job in the queue."""
    ran = run_cycle(snap, policy, reasons=True)
    decision = ran.decision
    pending = snap.pending.jobs
    served = {pending[s.job_id].project for s in decision.starts}
    served |= {pending[p.preemptor].project for p in decision.preemptions}
    cycle = Cycle(snap)
    cycle.reservation = ran.cycle.reservation  # (what later jobs must leave alone)
    found = []
    for project, jobs in _pending_by_project(snap).items():
        if project in served:
            continue
        for n, job in enumerate(jobs):
            if not within(cycle.held(project, job.accelerator), job.demand,
                          snap.guarantee_of(project, job.accelerator)):  # fmt: skip
                continue
            victim = _one_victim_lets_in(cycle, policy, job)
            if victim is not None:
                found.append((project, job.id, victim.job.id, n > 0))
                break
    return found


def _pending_by_project(snap: Snapshot) -> dict[str, list[Job]]:
    """Pending jobs by project in queue order, the first of each kind of resources (the rest
    would fit alike): the project's first job comes first."""
    out: dict[str, dict[tuple, Job]] = {}
    for job in snap.pending.all:
        out.setdefault(job.project, {}).setdefault(_kind(job), job)
    return {p: list(kinds.values()) for p, kinds in sorted(out.items())}


def _one_victim_lets_in(cycle: Cycle, policy: Policy, job: Job) -> Running | None:
    snap = cycle.snap
    long = outlasts(cycle, job)
    awaited = cycle.reservation.waits_for if long and cycle.reservation else set()
    tried: set[tuple] = set()
    for run in snap.running.values():
        victim = run.job
        if victim.project == job.project or victim.accelerator != job.accelerator:
            continue
        if victim.id in awaited:
            continue  # its place is the reservation's
        if not eligible(cycle, run, policy.protection):
            continue
        held = cycle.held(victim.project, victim.accelerator)
        if held - victim.demand < snap.guarantee_of(victim.project, victim.accelerator) - SLACK:
            continue  # its project would fall below its guarantee
        where = (run.nodes, victim.per_worker, victim.resources.exclusive)
        if where in tried:  # freeing the same room again changes nothing
            continue
        tried.add(where)
        probe = cycle.probe()
        probe.release(run)
        if probe.may_fit(job, long) and place(probe, job, long) is not None:
            return run
    return None


class _LogReplay:
    """The scheduler's state along an event log: the engine's changes, applied to a Snapshot
    and to the jobs' own counters (run time, attained service, preemptions, wait_since)."""

    def __init__(self, nodes, quota: Quota, jobs: Sequence[ScenarioJob], policy: Policy, penalty):
        self.nodes, self.quota, self.penalty = nodes, quota, penalty
        self.snap = policy.snapshot(nodes, quota)
        self.jobs = {sj.spec.name: core_job(sj, quota) for sj in jobs}
        self.attempts: dict[str, tuple[float, tuple[str, ...]]] = {}  # running: start, nodes
        # Pending jobs by kind of resources (insertion-ordered sets): fit is asked per kind.
        self.kinds: dict[tuple, dict[str, None]] = {}

    def instants(
        self, events: Sequence[Mapping[str, Any]], quality: Quality, short_s: float
    ) -> Iterator[tuple[float, float]]:
        """Apply the log instant by instant; yields (instant, next instant) after each (the
        last: (instant, instant))."""
        i, n = 0, len(events)
        while i < n:
            t = events[i]["t"]
            self.snap.set_time(t)
            while i < n and events[i]["t"] == t:
                self._apply(events[i], t, quality, short_s)
                i += 1
            yield t, events[i]["t"] if i < n else t

    def _apply(self, ev: Mapping[str, Any], t: float, quality: Quality, short_s: float) -> None:
        kind, name = ev["event"], ev["job"]
        snap, job = self.snap, self.jobs[name]
        if kind == "submit":
            self._submit(job)
        elif kind == "start":
            nodes = tuple(ev["nodes"])
            snap.start(name, nodes, t)
            self._left_queue(job)
            self.attempts[name] = (t, nodes)
        elif kind == "preempt":
            began = self._stop(job, t)
            quality.preempted_soon += t - began <= short_s
            quality.preempted_at_start += t == began
            job.preemptions += 1
            job.wait_since = t
            self._submit(job)
            if job.preemptions > quality.most_preemptions:
                quality.most_preemptions, quality.most_preempted_job = job.preemptions, name
        elif name in snap.running:  # finish, fail, cancel
            self._stop(job, t)
        elif name in snap.pending:  # reject, cancel
            snap.withdraw(name)
            self._left_queue(job)

    def _submit(self, job: Job) -> None:
        self.snap.submit(job)
        self.kinds.setdefault(_kind(job), {})[job.id] = None

    def _left_queue(self, job: Job) -> None:
        kind = _kind(job)
        names = self.kinds[kind]
        del names[job.id]
        if not names:
            del self.kinds[kind]

    def _stop(self, job: Job, t: float) -> float:
        """Release a running job and credit its attempt as the engine does; its start."""
        self.snap.stop(job.id)
        began, _ = self.attempts.pop(job.id)
        wall = t - began
        ran = wall - self.penalty if job.preemptions else wall
        job.run_time = min(job.duration or 0.0, job.run_time + max(0.0, ran))
        job.attained += wall * job.demand
        return began

    def free_where_a_job_fits(self) -> int:
        """Free accelerators of the types for which some pending job fits now (0: none)."""
        snap = self.snap
        capacity = snap.cluster.capacity
        fitting: set[str] = set()
        cycle: Cycle | None = None
        for names in self.kinds.values():
            job = self.jobs[next(iter(names))]
            accel = job.accelerator
            if accel in fitting or capacity.get(accel, 0) - snap.in_use.get(accel, 0) < job.demand:
                continue
            if snap.map.slots.get(accel, {}).get(job.per_worker, 0) < job.gang:
                continue  # too few free worker slots of its size: a quick no
            cycle = cycle or Cycle(snap)
            if cycle.may_fit(job, False) and place(cycle, job, False) is not None:
                fitting.add(accel)
        return sum(capacity[a] - snap.in_use.get(a, 0) for a in fitting)

    def rebuild(self, now: float, policy: Policy) -> Snapshot:
        """A fresh Snapshot with the jobs pending and running now, as a driver would build
        it after a restart."""
        snap = policy.snapshot(self.nodes, self.quota)
        snap.set_time(now)
        for job in self.snap.pending.jobs.values():
            snap.submit(job)
        for name, (began, nodes) in self.attempts.items():
            snap.submit(self.jobs[name])
            snap.start(name, nodes, began)
        return snap


def _kind(job: Job) -> tuple:
    """What placement depends on: jobs of one kind fit alike."""
    r = job.resources
    return (job.accelerator, r.per_worker, r.workers, r.slices, r.exclusive)
