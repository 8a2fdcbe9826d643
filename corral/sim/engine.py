"""The simulator: the same core, driven on a virtual clock.

Event-driven by default: a cycle runs after each batch of arrivals and completions at one
instant (and again at once while a decision preempts, since victims free capacity at once).
Two kinds of instant run no cycle, since its outcome is known: one whose only events are
arrivals that the last decision says change nothing (it is settled, and they can neither start,
preempt nor take the reservation over), and one the policy finds idle (`Policy.idle`: no job
can start or preempt, say nothing fits and no project may reclaim).
With `round_s`, cycles run only on multiples of the round, like Gavel or Blox. A preempted
job keeps its progress (checkpointing), plus `restart_penalty` seconds on each resume.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from corral.core.admission import check_admissible
from corral.core.decide import CycleRun, run_cycle
from corral.core.model import Job
from corral.core.policy import Policy
from corral.core.reserve import outlasts
from corral.core.snapshot import Snapshot
from corral.formats.types import Node, Quota, ScenarioJob
from corral.sim.gcpause import no_cyclic_gc

FINISH: Final = 1  # at one instant: arrivals, then completions, then wake-ups
WAKE: Final = 2
MAX_CYCLES_PER_INSTANT: Final = 1_000  # guards against a policy that preempts in a loop


@dataclass(slots=True)
class SimOptions:
    round_s: float | None = None  # fixed scheduling rounds instead of event-driven cycles
    restart_penalty: float = 0.0  # seconds lost on each resume after a preemption
    slowdown: float = 0.0  # extra run time fraction for a gang spread over more nodes than needed
    max_sim_time: float | None = None  # stop the clock here; jobs still queued stay unfinished
    # Skip the cycles whose outcome the policy's shortcuts say is nothing (the events are the
    # same either way: off, `corral simulate --no-shortcuts`, runs a cycle at every event).
    shortcuts: bool = True


@dataclass(slots=True, init=False)
class SimJob:
    """What the driver tracks about a job beyond the core's view. (Its own __init__: mypyc
    compiles it, not the one @dataclass makes; see core/model.py.)"""

    job: Job
    duration: float
    attempt: int
    started_at: float | None
    run_end: float | None  # when the current attempt completes
    timed_out: bool  # current attempt is cut by max_runtime
    state: str

    def __init__(self, job: Job, duration: float) -> None:
        self.job, self.duration, self.attempt = job, duration, 0
        self.started_at, self.run_end, self.timed_out, self.state = None, None, False, "pending"


@dataclass(slots=True)
class SimResult:
    events: list[dict]
    jobs: dict[str, SimJob]
    end_time: float
    cycles: int
    capacity: dict[str, int]
    guarantees: dict[str, dict[str, float]]
    stalls: int = 0  # instants where the policy kept preempting and the clock moved on


class Simulator:
    def __init__(
        self,
        nodes: Sequence[Node],
        quota: Quota,
        jobs: Sequence[ScenarioJob],
        policy: Policy,
        options: SimOptions | None = None,
    ):
        self.policy = policy
        self.options = options or SimOptions()
        self.snap = policy.snapshot(nodes, quota)
        self.jobs: dict[str, SimJob] = {}
        self.events: list[dict] = []
        self.cycles = 0
        self.stalls = 0
        # Completions and wake-ups; arrivals are known up front and kept apart, in order, so
        # the heap stays as small as the number of running jobs.
        self._queue: list[tuple[float, int, int, str, int]] = []
        self._seq = 0
        self._wakes: set[float] = set()
        self._last: CycleRun | None = None  # the latest cycle, its starts applied
        self._admission: dict[tuple, str | None] = {}
        self._arrivals: list[tuple[float, str]] = []
        with no_cyclic_gc():
            for sj in sorted(jobs, key=lambda sj: (sj.submit, sj.spec.name)):  # file order no tie
                self._arrivals.append((sj.submit, sj.spec.name))
                self.jobs[sj.spec.name] = SimJob(job=core_job(sj, quota), duration=sj.duration)

    def resume(
        self,
        now: float,
        running: Iterable[tuple[Job, tuple[str, ...], float, float]],
        pending: Iterable[tuple[Job, float]],
    ) -> None:
        """Go on from a given state rather than an empty pool (a forecast: sim/forecast.py):
        each running (job, nodes, started_at, end) holds its nodes until `end` (inf: beyond
        any horizon), each pending (job, duration) is queued with `duration` seconds of work
        in all, and the first cycle runs at `now`. Call before `run`."""
        snap = self.snap
        snap.set_time(now)
        for job, nodes, started_at, end in running:
            sim = self.jobs[job.id] = SimJob(job, job.run_time + end - started_at)
            sim.state, sim.started_at, sim.run_end = "running", started_at, end
            snap.submit(job)
            snap.start(job.id, nodes, started_at)
            if end != math.inf:
                self._push(end, FINISH, job.id)
        for job, duration in pending:
            self.jobs[job.id] = SimJob(job, duration)
            snap.submit(job)
        self._wake(now)

    def _push(self, t: float, kind: int, job_id: str = "", attempt: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (t, kind, self._seq, job_id, attempt))

    def run(self, progress: Callable[[int], None] | None = None) -> SimResult:
        with no_cyclic_gc():
            return self._run(progress)

    def _run(self, progress: Callable[[int], None] | None) -> SimResult:
        done = 0
        limit = self.options.max_sim_time
        now = 0.0
        queue, arrivals, n = self._queue, self._arrivals, len(self._arrivals)
        a = 0  # next arrival
        while queue or a < n:
            now = min(queue[0][0] if queue else math.inf, arrivals[a][0] if a < n else math.inf)
            if limit is not None and now > limit:
                now = limit
                break
            self.snap.set_time(now)
            dirty = False
            while a < n and arrivals[a][0] == now:  # arrivals first, then completions
                changed, ended = self._arrive(self.jobs[arrivals[a][1]], now)
                a += 1
                dirty |= changed
                done += ended
            while queue and queue[0][0] == now:
                _, kind, _, job_id, attempt = heapq.heappop(queue)
                changed, ended = self._handle(kind, job_id, attempt, now)
                dirty |= changed
                done += ended
            if dirty and self._cycle_due(now):
                self._schedule(now)
            if progress is not None:
                progress(done)
        return SimResult(
            events=self.events,
            jobs=self.jobs,
            end_time=now,
            cycles=self.cycles,
            capacity=dict(self.snap.capacity),
            guarantees=self.snap.guarantee,
            stalls=self.stalls,
        )

    def _cycle_due(self, now: float) -> bool:
        step = self.options.round_s
        if step is None:
            return True
        boundary = math.ceil(now / step - 1e-9) * step
        if boundary > now + 1e-9:
            self._wake(boundary)
            return False
        return True

    def _handle(self, kind: int, job_id: str, attempt: int, now: float) -> tuple[bool, int]:
        """Apply one event; returns (scheduling state changed, jobs that ended)."""
        if kind == WAKE:
            self._wakes.discard(now)
            return True, 0
        sim = self.jobs[job_id]
        if attempt != sim.attempt or sim.state != "running":
            return False, 0  # the attempt this completion belonged to was preempted
        self.snap.stop(job_id)
        self._account(sim, now)
        if sim.timed_out:
            sim.state = "failed"
            self._log(now, "fail", sim.job)["reason"] = "max_runtime exceeded"
        else:
            sim.state = "finished"
            self._log(now, "finish", sim.job)
        return True, 1

    def _arrive(self, sim: SimJob, now: float) -> tuple[bool, int]:
        job = sim.job
        self._log(now, "submit", job)
        why = self._admissible(job)
        if why is not None:
            sim.state = "rejected"
            self._log(now, "reject", job)["reason"] = why
            return False, 1
        self.snap.submit(job)
        # An arrival that changes no decision needs no cycle.
        last = self._last
        if last is None or not self.options.shortcuts:
            return True, 0
        return arrival_may_act(last, self.policy, job), 0

    def _admissible(self, job: Job) -> str | None:
        """check_admissible, once per kind of job: the pool and quota are fixed in a replay."""
        r = job.resources  # (its fields: hashing the dataclass runs Python code)
        kind = (job.user, job.project, job.shape, r.slices, r.exclusive, job.preemptible)
        if kind not in self._admission:
            self._admission[kind] = check_admissible(self.snap, job)
        return self._admission[kind]

    def _schedule(self, now: float) -> None:
        policy = self.policy
        if self.options.shortcuts and policy.shortcuts.idle and policy.idle(self.snap):
            self._last = None  # (its state is older than the snapshot's now)
            return
        for _ in range(MAX_CYCLES_PER_INSTANT):
            last = self._last = run_cycle(self.snap, policy)
            self.snap.preemptors.clear()  # each had its first pick (its victims were gone)
            decision = last.decision
            self.cycles += 1
            for start in decision.starts:
                self._start(start.job_id, start.nodes, now)
            for preempt in decision.preemptions:
                self._preempt(preempt.job_id, preempt.reason, now)
                # What the victims free is the preemptor's (DESIGN.md §3.9): the next cycle
                # starts it before the order, which may put another job first (live: the store
                # keeps it until a cycle has given it its pick).
                self.snap.preemptors.add(preempt.preemptor)
            if decision.wake_at is not None:
                self._wake(decision.wake_at)
            if not decision.preemptions:
                return
        # A policy that keeps preempting at one instant would stall the clock: let time move
        # on (the next event reruns the cycle) and count it, so the summary can show it.
        self.stalls += 1

    def _wake(self, t: float) -> None:
        step = self.options.round_s
        if step is not None:
            t = math.ceil(t / step - 1e-9) * step
        if t not in self._wakes:
            self._wakes.add(t)
            self._push(t, WAKE)

    def _start(self, job_id: str, nodes: tuple[str, ...], now: float) -> None:
        sim = self.jobs[job_id]
        self.snap.start(job_id, nodes, now)
        job = sim.job
        sim.state, sim.started_at = "running", now
        work = sim.duration - job.run_time
        if job.preemptions:
            work += self.options.restart_penalty
        if self.options.slowdown:
            work *= 1 + self.options.slowdown * _spread(self.snap, job, nodes)
        limit = job.max_runtime
        sim.timed_out = limit is not None and work > limit
        sim.run_end = now + (limit if limit is not None and sim.timed_out else work)
        self._push(sim.run_end, FINISH, job_id, sim.attempt)
        self._log(now, "start", job)["nodes"] = list(nodes)

    def _preempt(self, job_id: str, reason: str, now: float) -> None:
        sim = self.jobs[job_id]
        self.snap.stop(job_id)
        self._account(sim, now)
        job = sim.job
        job.preemptions += 1
        job.wait_since = now
        sim.attempt += 1
        sim.state = "pending"
        self.snap.submit(job)
        self._log(now, "preempt", job)["reason"] = reason

    def _account(self, sim: SimJob, now: float) -> None:
        """Credit the attempt that just stopped: progress (minus any restart penalty)."""
        job = sim.job
        wall = now - (now if sim.started_at is None else sim.started_at)
        ran = wall - self.options.restart_penalty if job.preemptions else wall
        job.run_time = min(sim.duration, job.run_time + max(0.0, ran))
        job.attained += wall * job.demand

    def _log(self, t: float, event: str, job: Job) -> dict[str, object]:
        """Record an event; the caller adds its details to the entry returned."""
        entry = {"t": t, "event": event, "job": job.id, "project": job.project}
        self.events.append(entry)
        return entry


def core_job(sj: ScenarioJob, quota: Quota) -> Job:
    """The core's view of a scenario or trace job, as submitted."""
    spec = sj.spec
    priority = quota.resolve_priority(spec.priority)
    return Job.from_spec(spec, spec.name, sj.user, priority, sj.submit, sj.duration)


def arrival_may_act(last: CycleRun, policy: Policy, job: Job) -> bool:
    """Might a job arriving after `last` (its starts applied, nothing else changed) change the
    next cycle: fit in what it left free, preempt, or take the reservation over (which frees
    what was held for its holder)? Each shortcut the policy may not use (`Policy.shortcuts`)
    takes its safe answer: then the cycle runs."""
    shortcuts, cycle = policy.shortcuts, last.cycle
    if not shortcuts.settled:
        return True
    if last.settled is None:
        last.settled = policy.settled(cycle)
    if not last.settled:
        return True
    holder = cycle.reserver
    if holder is not None and (not shortcuts.may_precede or policy.may_precede(cycle, job, holder)):
        # Considered before the reservation is planned: held capacity counts as free for it.
        return (
            policy.may_reserve(cycle, job)
            or cycle.may_fit(job, long=False)
            or _may_preempt_for(last, policy, job)
        )
    last.before_admitting()  # the reservation the next cycle would hold
    return cycle.may_fit(job, outlasts(cycle, job)) or _may_preempt_for(last, policy, job)


def _may_preempt_for(last: CycleRun, policy: Policy, job: Job) -> bool:
    return not policy.shortcuts.may_preempt_for or policy.may_preempt_for(last.cycle, job)


def _spread(snap: Snapshot, job: Job, nodes: tuple[str, ...]) -> float:
    """How many more nodes than necessary a gang spans, relative to the necessary number."""
    r = job.resources
    per_node = snap.cluster.largest_node[r.accelerator] // r.per_worker
    needed = r.slices * math.ceil(r.workers / max(1, per_node))
    return max(0, len(set(nodes)) - needed) / needed
