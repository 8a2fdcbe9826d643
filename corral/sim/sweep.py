"""The metrics' two passes (see metrics.py for what they mean): one over the event log, keeping
each job's state, per-project counters and the levels of the step functions at each instant,
and one over the job table it makes, for the summary. mypyc compiles this module (setup.py):
on a whole trace these loops were most of the metrics' time. It stays plain, typed Python.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from corral.formats.types import FormatError, ScenarioJob
from corral.sim.gcpause import no_cyclic_gc

EVENTS: Final = ("submit", "start", "preempt", "finish", "fail", "reject", "cancel")
END_STATE: Final = {"finish": "finished", "fail": "failed", "cancel": "cancelled",
                    "reject": "rejected"}  # fmt: skip


@dataclass(slots=True)
class JobInfo:
    name: str
    project: str
    user: str
    submit: float
    duration: float  # seconds of running needed to finish
    demand: int  # accelerators held while running
    accelerator: str


def infos_from_jobs(jobs: Iterable[ScenarioJob]) -> dict[str, JobInfo]:
    """JobInfo for each job of a scenario or trace, keyed by job name."""
    infos: dict[str, JobInfo] = {}
    with no_cyclic_gc():  # (one object per job)
        for j in jobs:
            spec = j.spec
            shape = spec.resources
            infos[spec.name] = JobInfo(
                spec.name, spec.project, j.user, j.submit, j.duration, shape.total,
                shape.accelerator,
            )  # fmt: skip
    return infos


class JobRow(NamedTuple):
    name: str
    project: str
    user: str
    accelerator: str
    demand: int
    duration: float
    submit: float
    start: float | None  # first start
    finish: float | None  # finish event only (not fail/cancel/reject)
    end: float | None  # when the job left: finish, fail, cancel or reject
    state: str  # finished | failed | cancelled | rejected | pending | running
    wait: float | None  # all time pending: before the first start and after each preemption
    first_wait: float | None  # submit to first start only
    jct: float | None
    run_time: float  # sum of running intervals
    preemptions: int


class ProjectTrack:
    """One project's pending and running jobs during the sweep, and its starved spells
    (pending work, nothing running)."""

    code: int  # its row in the holdings
    pending: int
    running: int
    starved_since: float | None
    starved_time: float
    starved_longest: float

    def __init__(self, code: int) -> None:
        self.code = code
        self.pending = 0
        self.running = 0
        self.starved_since = None
        self.starved_time = 0.0
        self.starved_longest = 0.0

    def settle(self, t: float) -> None:
        """The project's state holds from `t` on: open or close a starved spell."""
        starved = self.pending > 0 and self.running == 0
        if starved and self.starved_since is None:
            self.starved_since = t
        elif not starved and self.starved_since is not None:
            self.close(t)

    def close(self, t: float) -> None:
        since = self.starved_since
        if since is not None:
            spell = t - since
            self.starved_time += spell
            if spell > self.starved_longest:
                self.starved_longest = spell
            self.starved_since = None


class JobTrack:
    """One job's state during the sweep."""

    info: JobInfo
    project: ProjectTrack
    kind: int  # its accelerator's code (looked up once, not at each start and stop)
    state: str
    start: float | None
    running_since: float | None
    pending_since: float | None
    run_time: float
    waited: float  # pending time in finished spells (before each start)
    end: float | None
    finish: float | None
    preemptions: int

    def __init__(self, info: JobInfo, project: ProjectTrack, kind: int) -> None:
        self.info, self.project, self.kind = info, project, kind
        self.state = "new"
        self.start = None
        self.running_since = None
        self.pending_since = None
        self.run_time = 0.0
        self.waited = 0.0
        self.end = None
        self.finish = None
        self.preemptions = 0

    def stop_pending(self, t: float) -> None:
        """Its pending spell ends at `t`."""
        since = self.pending_since
        assert since is not None
        self.waited += t - since
        self.pending_since = None
        self.project.pending -= 1


class Unsorted(Exception):
    """The log is not in time order (it should be): sweep it again, sorted."""


class Sweep:
    """Walks the log once, keeping job states, per-project counters, the levels of the step
    functions at each instant and every change of holdings (metrics.py builds arrays of them).
    One loop with the state in locals: it runs over every event of a whole-trace log."""

    infos: Mapping[str, JobInfo]
    jobs: dict[str, JobTrack]
    projects: dict[str, ProjectTrack]
    accelerators: dict[str, int]
    times: list[float]
    busy: list[int]
    queue: list[int]
    active: list[int]  # jobs pending or running
    # Holdings changes: instant (index into times), project code, accelerator code, delta.
    at: list[int]
    by_project: list[int]
    by_type: list[int]
    delta: list[int]
    last_t: float

    def __init__(self, infos: Mapping[str, JobInfo]) -> None:
        self.infos = infos
        self.jobs, self.projects, self.accelerators = {}, {}, {}
        self.times, self.busy, self.queue, self.active = [], [], [], []
        self.at, self.by_project, self.by_type, self.delta = [], [], [], []
        self.last_t = 0.0

    def run(self, events: Sequence[Mapping[str, Any]]) -> Sweep:
        try:
            return self._run(events)
        except Unsorted:
            return Sweep(self.infos)._run(sorted(events, key=_time))

    def _run(self, events: Sequence[Mapping[str, Any]]) -> Sweep:  # noqa: C901 (one loop)
        jobs, times = self.jobs, self.times
        at, by_project, by_type, delta = self.at, self.by_project, self.by_type, self.delta
        touched: list[ProjectTrack] = []  # projects whose jobs changed at the current instant
        now_busy = now_queue = now_running = 0
        i, last = -1, -math.inf
        kind: str  # (typed, so that compiled their comparisons are a string's)
        name: str
        for n, ev in enumerate(events):
            try:
                t, kind, name = float(ev["t"]), ev["event"], ev["job"]
                if not (isinstance(kind, str) and isinstance(name, str)):
                    raise TypeError  # (compiled, the assignment raises it already)
            except (KeyError, TypeError, ValueError):
                raise FormatError(f"event log: event {n}: needs t, event and job: {ev!r}") from None
            if t != last:  # events at one time share one point
                if t < last:
                    raise Unsorted
                if i >= 0:
                    self._point(now_busy, now_queue, now_running, touched, last)
                times.append(t)
                i += 1
                last = t
            job = jobs.get(name)
            if job is None:
                job = self._track(name)
            project, state = job.project, job.state
            touched.append(project)
            if kind == "start":
                if state == "pending":
                    now_queue -= 1
                    job.stop_pending(t)
                if state != "running":  # (a repeated start: already holding)
                    job.state, job.running_since = "running", t
                    now_running += 1
                    project.running += 1
                    demand = job.info.demand
                    now_busy += demand
                    at.append(i)
                    by_project.append(project.code)
                    by_type.append(job.kind)
                    delta.append(demand)
                if job.start is None:
                    job.start = t
                continue
            if kind == "preempt":
                if state != "running":
                    continue
            elif kind == "submit":
                if state == "pending":
                    continue
            elif kind in END_STATE:
                if state == "pending":
                    now_queue -= 1
                    job.stop_pending(t)
            else:
                raise FormatError(
                    f"event log: event {n}: unknown event {kind!r} ({', '.join(EVENTS)})"
                )
            running_since = job.running_since
            if state == "running" and running_since is not None:  # release its holding
                job.run_time += t - running_since
                job.running_since = None
                now_running -= 1
                project.running -= 1
                demand = job.info.demand
                now_busy -= demand
                at.append(i)
                by_project.append(project.code)
                by_type.append(job.kind)
                delta.append(-demand)
            if kind in END_STATE:
                job.state = END_STATE[kind]
                job.end = t
                job.finish = t if kind == "finish" else None
                continue
            if kind == "preempt":
                job.preemptions += 1
            job.state, job.pending_since = "pending", t
            now_queue += 1
            project.pending += 1
        if i >= 0:
            self._point(now_busy, now_queue, now_running, touched, last)
        self.last_t = times[-1] if times else 0.0
        for each in self.projects.values():  # spells still open when the log ends
            each.close(self.last_t)
        return self

    def _point(
        self, busy: int, queue: int, running: int, touched: list[ProjectTrack], t: float
    ) -> None:
        """Close the instant `t`: the levels from then on, and its projects' starved spells."""
        self.busy.append(busy)
        self.queue.append(queue)
        self.active.append(queue + running)
        for project in touched:
            project.settle(t)
        touched.clear()

    def _track(self, name: str) -> JobTrack:
        info = self.infos.get(name)
        if info is None:
            raise FormatError(f"event log: job {name!r} has no JobInfo (unknown job)")
        project = self.projects.get(info.project)
        if project is None:
            project = self.projects[info.project] = ProjectTrack(len(self.projects))
        track = self.jobs[name] = JobTrack(info, project, self._accelerator(info.accelerator))
        return track

    def _accelerator(self, name: str) -> int:
        code = self.accelerators.get(name)
        if code is None:
            code = self.accelerators[name] = len(self.accelerators)
        return code

    def rows(self) -> list[JobRow]:
        return [_row(track, self.last_t) for track in self.jobs.values()]

    def starved(self) -> dict[str, tuple[float, float]]:
        """project -> (starved time, longest starved spell)."""
        return {n: (p.starved_time, p.starved_longest) for n, p in self.projects.items()}


def _time(event: Mapping[str, Any]) -> float:
    return float(event.get("t", 0.0))


def _row(track: JobTrack, log_end: float) -> JobRow:
    info = track.info
    run_time = track.run_time
    running_since = track.running_since
    if running_since is not None:  # still running when the log ends
        run_time += log_end - running_since
    waited = track.waited
    pending_since = track.pending_since
    if pending_since is not None:  # still pending when the log ends
        waited += log_end - pending_since
    start, finish = track.start, track.finish
    return JobRow(
        info.name,
        info.project,
        info.user,
        info.accelerator,
        info.demand,
        info.duration,
        info.submit,
        start,
        finish,
        track.end,
        "pending" if track.state == "new" else track.state,
        None if start is None else waited,
        None if start is None else start - info.submit,
        None if finish is None else finish - info.submit,
        run_time,
        track.preemptions,
    )


class ProjectTally:
    """One project's figures from the job table."""

    jobs: int
    finished: int
    jcts: list[float]
    waits: list[float]

    def __init__(self) -> None:
        self.jobs, self.finished, self.jcts, self.waits = 0, 0, [], []


class Tally:
    """What the summary needs of the job table, in one pass over it (a pass per figure was a
    fifth of the metrics' time on a whole trace). Lists keep the rows' order, so means and
    percentiles are those of the same values in the same order."""

    states: dict[str, int]
    preemptions: int
    first_submit: float
    last_finish: float | None
    jcts: list[float]  # of finished jobs
    durations: list[float]  # of finished jobs
    waits: list[float]
    first_waits: list[float]
    projects: dict[str, ProjectTally]

    def __init__(self, rows: Sequence[JobRow]) -> None:
        self.states = dict.fromkeys(
            ("finished", "failed", "rejected", "cancelled", "pending", "running"), 0
        )
        self.jcts, self.durations, self.waits, self.first_waits = [], [], [], []
        self.projects = {}
        states, projects, jcts, durations = self.states, self.projects, self.jcts, self.durations
        waits, first_waits = self.waits, self.first_waits
        first_submit = 0.0 if not rows else math.inf
        last_finish, preemptions = -math.inf, 0
        for r in rows:
            state = r.state
            states[state] = states.get(state, 0) + 1
            preemptions += r.preemptions
            if r.submit < first_submit:
                first_submit = r.submit
            finish = r.finish
            if finish is not None and finish > last_finish:
                last_finish = finish
            mine = projects.get(r.project)
            if mine is None:
                mine = projects[r.project] = ProjectTally()
            mine.jobs += 1
            jct, wait, first_wait = r.jct, r.wait, r.first_wait
            if state == "finished":
                mine.finished += 1
                if jct is not None:
                    jcts.append(jct)
                durations.append(r.duration)
            if jct is not None:
                mine.jcts.append(jct)
            if wait is not None:
                waits.append(wait)
                mine.waits.append(wait)
            if first_wait is not None:
                first_waits.append(first_wait)
        self.first_submit, self.preemptions = first_submit, preemptions
        self.last_finish = None if last_finish == -math.inf else last_finish
