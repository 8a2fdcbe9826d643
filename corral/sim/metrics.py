"""Metrics of a simulated (or live) run, computed from its event log.

Input: the event log as a list of dicts (DESIGN.md §2: {"t", "event", "job", "project", ...},
event one of submit, start, preempt, finish, fail, reject, cancel) in time order, and
`infos`: job name -> JobInfo (what the job asked for). A job holds `demand` accelerators from
each start until the next preempt, finish, fail or cancel; a preempted job is pending again.

Conventions (written down because results depend on them):
- Percentiles use numpy's "linear" method (type 7 of Hyndman & Fan: interpolate between the
  two nearest ranks), the numpy and pandas default.
- jct = finish - submit, for finished jobs only. wait = all the time a job was pending: submit
  to first start plus each preemption to the next start (a job pending when the log ends,
  until then), for jobs that started at least once; first_wait = first start - submit only.
- makespan = last finish - first submit (with no finish: last event - first submit). Busy
  accelerator-seconds and shares are counted until that same end. work_time = the seconds
  until then in which some job was pending or running; utilisation = busy accelerator-seconds
  / (capacity x work_time), so an idle stretch with no work (a late last arrival) does not
  count against a policy; utilisation_of_makespan divides by capacity x makespan instead.
- A project is starved while it has a pending job and none running; its starved_time is the
  sum of those spells and starved_longest the longest (both to the log's end, for a spell
  still open there). A state counts from the instant all of its events are applied, so a job
  preempted and restarted at one instant breaks no spell and opens none.
- A job still running when the log ends has run until the log's last event.
- Guarantees are in accelerators (DESIGN.md §2: fraction x capacity), project -> type -> count;
  `guarantees_from_quota` computes them from a Quota.

Everything is one O(events) sweep plus numpy (`analyse`): about 0.6 s for the 258,000-event
log of fair on the whole Philly trace.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from corral.formats.types import FormatError, Quota, ScenarioJob
from corral.sim.gcpause import no_cyclic_gc

EVENTS = ("submit", "start", "preempt", "finish", "fail", "reject", "cancel")
PERCENTILES = (50, 95, 99)


@dataclass(slots=True)
class JobInfo:
    name: str
    project: str
    user: str
    submit: float
    duration: float  # seconds of running needed to finish
    demand: int  # accelerators held while running
    accelerator: str


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


@dataclass(slots=True)
class Series:
    """Step functions: value[i] holds from times[i] until times[i + 1] (the last, onwards)."""

    times: np.ndarray
    busy: np.ndarray  # accelerators held, all types
    queue: np.ndarray  # pending jobs (submitted or preempted, not yet (re)started)
    held: dict[str, np.ndarray]  # project -> accelerators held
    by_accelerator: dict[str, np.ndarray]  # type -> accelerators held
    capacity: int  # all types together
    active: np.ndarray | None = None  # jobs pending or running (None: not counted)

    @property
    def utilisation(self) -> np.ndarray:
        return self.busy / self.capacity if self.capacity else np.zeros_like(self.busy)

    def integral(self, values: np.ndarray, end: float | None = None) -> float:
        """Area under a step function of this series from times[0] to `end` (default: last)."""
        if end is None:
            end = float(self.times[-1]) if len(self.times) else 0.0
        return float(step_area(self.times, values, np.array([end]))[0])

    def work_time(self, end: float | None = None) -> float:
        """Seconds until `end` in which the pool had work: some job pending or running."""
        active = self.busy if self.active is None else self.active
        return self.integral((active > 0).astype(float), end)


def infos_from_jobs(jobs: Iterable[ScenarioJob]) -> dict[str, JobInfo]:
    """JobInfo for each job of a scenario or trace, keyed by job name."""
    info, infos = JobInfo, {}
    with no_cyclic_gc():  # (one object per job)
        for j in jobs:  # (positional, spec and resources read once: once per job of a trace)
            spec = j.spec
            shape = spec.resources
            infos[spec.name] = info(
                spec.name, spec.project, j.user, j.submit, j.duration, shape.total,
                shape.accelerator,
            )  # fmt: skip
    return infos


def guarantees_from_quota(quota: Quota, capacity: Mapping[str, int]) -> dict[str, dict[str, float]]:
    """project -> type -> guaranteed accelerators, as DESIGN.md §2 defines them."""
    out: dict[str, dict[str, float]] = {p: {} for p in quota.projects}
    for kind, count in capacity.items():
        cap = count  # like the core's Snapshot: total_resources caps, a type it omits gets 0
        if quota.total_resources is not None:
            cap = min(cap, quota.total_resources.get(kind, 0))
        for project, fraction in quota.fractions(kind).items():
            out.setdefault(project, {})[kind] = fraction * cap
    return out


def read_events(path: str | Path) -> list[dict[str, Any]]:
    """An event log file (JSON Lines) as a list of dicts."""
    events = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if line.strip():
                try:
                    events.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise FormatError(
                        f"{Path(path).name}:{line_no}: invalid JSON: {err.msg}"
                    ) from None
    return events


# --- the sweep ---------------------------------------------------------------------------------


class _Track:
    """One job's state during the sweep."""

    __slots__ = ("info", "project", "kind", "state", "start", "running_since", "pending_since",
                 "run_time", "waited", "end", "finish", "preemptions")  # fmt: skip

    def __init__(self, info: JobInfo, project: _Project, kind: int) -> None:
        self.info, self.project = info, project
        self.kind = kind  # its accelerator's code (looked up once, not at each start and stop)
        self.state = "new"
        self.start: float | None = None
        self.running_since: float | None = None
        self.pending_since: float | None = None
        self.run_time = 0.0
        self.waited = 0.0  # pending time in finished spells (before each start)
        self.end: float | None = None
        self.finish: float | None = None
        self.preemptions = 0


class _Project:
    """One project's pending and running jobs during the sweep, and its starved spells
    (pending work, nothing running)."""

    __slots__ = ("code", "pending", "running", "starved_since", "starved_time", "starved_longest")

    def __init__(self, code: int) -> None:
        self.code = code  # its row in the holdings
        self.pending = 0
        self.running = 0
        self.starved_since: float | None = None
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
        if self.starved_since is not None:
            spell = t - self.starved_since
            self.starved_time += spell
            self.starved_longest = max(self.starved_longest, spell)
            self.starved_since = None


class _Unsorted(Exception):
    """The log is not in time order (it should be): sweep it again, sorted."""


class _Replay:
    """Walks the log once, keeping job states, per-project counters, the levels of the step
    functions at each instant and every change of holdings (built into arrays at the end).
    One loop with the state in locals: it runs over every event of a whole-trace log."""

    def __init__(self, infos: Mapping[str, JobInfo]) -> None:
        self.infos = infos
        self.jobs: dict[str, _Track] = {}
        self.projects: dict[str, _Project] = {}
        self.accelerators: dict[str, int] = {}
        self.times: list[float] = []
        self.busy: list[int] = []
        self.queue: list[int] = []
        self.active: list[int] = []  # jobs pending or running
        # Holdings changes: instant (index into times), project code, accelerator code, delta.
        self.changes: tuple[list[int], list[int], list[int], list[int]] = ([], [], [], [])
        self.last_t = 0.0

    def run(self, events: Sequence[Mapping[str, Any]]) -> _Replay:
        try:
            return self._run(events)
        except _Unsorted:
            return _Replay(self.infos)._run(sorted(events, key=lambda e: e.get("t", 0.0)))

    def _run(self, events: Sequence[Mapping[str, Any]]) -> _Replay:  # noqa: C901 (one loop)
        jobs, times = self.jobs, self.times
        at, by_project, by_type, delta = self.changes
        touched: list[_Project] = []  # projects whose jobs changed at the current instant
        now_busy = now_queue = now_running = 0
        i, last = -1, -math.inf
        for n, ev in enumerate(events):
            try:
                t, kind, name = float(ev["t"]), ev["event"], ev["job"]
            except (KeyError, TypeError, ValueError):
                raise FormatError(f"event log: event {n}: needs t, event and job: {ev!r}") from None
            if t != last:  # events at one time share one point
                if t < last:
                    raise _Unsorted
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
                    project.pending -= 1
                    job.waited += t - job.pending_since  # type: ignore[operator]
                    job.pending_since = None
                if state != "running":  # (a repeated start: already holding)
                    job.state, job.running_since = "running", t
                    now_running += 1
                    project.running += 1
                    info = job.info
                    now_busy += info.demand
                    at.append(i)
                    by_project.append(project.code)
                    by_type.append(job.kind)
                    delta.append(info.demand)
                if job.start is None:
                    job.start = t
                continue
            if kind == "preempt":
                if state != "running":
                    continue
            elif kind == "submit":
                if state == "pending":
                    continue
            elif kind in _END_STATE:
                if state == "pending":
                    now_queue -= 1
                    project.pending -= 1
                    job.waited += t - job.pending_since  # type: ignore[operator]
                    job.pending_since = None
            else:
                raise FormatError(
                    f"event log: event {n}: unknown event {kind!r} ({', '.join(EVENTS)})"
                )
            if state == "running" and job.running_since is not None:  # release its holding
                job.run_time += t - job.running_since
                job.running_since = None
                now_running -= 1
                project.running -= 1
                info = job.info
                now_busy -= info.demand
                at.append(i)
                by_project.append(project.code)
                by_type.append(job.kind)
                delta.append(-info.demand)
            if kind in _END_STATE:
                job.state = _END_STATE[kind]
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
        for project in self.projects.values():  # spells still open when the log ends
            project.close(self.last_t)
        return self

    def _point(self, busy: int, queue: int, running: int, touched: list[_Project], t: float):
        """Close the instant `t`: the levels from then on, and its projects' starved spells."""
        self.busy.append(busy)
        self.queue.append(queue)
        self.active.append(queue + running)
        for project in touched:
            project.settle(t)
        touched.clear()

    def _track(self, name: str) -> _Track:
        info = self.infos.get(name)
        if info is None:
            raise FormatError(f"event log: job {name!r} has no JobInfo (unknown job)")
        project = self.projects.get(info.project)
        if project is None:
            project = self.projects[info.project] = _Project(len(self.projects))
        track = self.jobs[name] = _Track(info, project, self._accelerator(info.accelerator))
        return track

    def _accelerator(self, name: str) -> int:
        code = self.accelerators.get(name)
        if code is None:
            code = self.accelerators[name] = len(self.accelerators)
        return code

    def rows(self) -> list[JobRow]:
        return [_row(track, self.last_t) for track in self.jobs.values()]

    def series(self, capacity: int) -> Series:
        n = len(self.times)
        at, by_project, by_type, delta = (np.asarray(c, dtype=np.int64) for c in self.changes)
        return Series(
            times=np.asarray(self.times, dtype=float),
            busy=np.asarray(self.busy, dtype=float),
            queue=np.asarray(self.queue, dtype=float),
            held=_levels({p: v.code for p, v in self.projects.items()}, at, by_project, delta, n),
            by_accelerator=_levels(self.accelerators, at, by_type, delta, n),
            capacity=capacity,
            active=np.asarray(self.active, dtype=float),
        )

    def starved(self) -> dict[str, tuple[float, float]]:
        """project -> (starved time, longest starved spell)."""
        return {n: (p.starved_time, p.starved_longest) for n, p in self.projects.items()}


_END_STATE = {"finish": "finished", "fail": "failed", "cancel": "cancelled", "reject": "rejected"}


def _levels(codes: Mapping[str, int], at, which, delta, n: int) -> dict[str, np.ndarray]:
    """Per name (sorted), the level at each of the n instants of the holdings changes whose
    `which` is its code: the running sum of its changes up to and including the instant."""
    out = {}
    for name, code in sorted(codes.items()):
        mine = which == code
        if not mine.any():
            continue  # (a project that never held anything has no line, as before)
        out[name] = np.bincount(at[mine], weights=delta[mine], minlength=n).cumsum()
    return out


def _row(track: _Track, log_end: float) -> JobRow:
    info = track.info
    run_time = track.run_time
    if track.running_since is not None:  # still running when the log ends
        run_time += log_end - track.running_since
    waited = track.waited
    if track.pending_since is not None:  # still pending when the log ends
        waited += log_end - track.pending_since
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


def step_area(times: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Area under the step function (times, values) from times[0] to each point of `at`."""
    if len(times) == 0:
        return np.zeros(len(at))
    cum = np.concatenate([[0.0], np.cumsum(values[:-1] * np.diff(times))])
    at = np.clip(at, times[0], None)
    k = np.searchsorted(times, at, side="right") - 1
    return cum[k] + values[k] * (at - times[k])


def resample(times: np.ndarray, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Time-weighted mean of a step function over each bin [edges[i], edges[i+1])."""
    area = step_area(times, values, edges)
    width = np.diff(edges)
    return np.divide(np.diff(area), width, out=np.zeros(len(width)), where=width > 0)


# --- public API --------------------------------------------------------------------------------


def job_table(events: Sequence[Mapping[str, Any]], infos: Mapping[str, JobInfo]) -> list[JobRow]:
    """One row per job that appears in the log, in order of first appearance."""
    return _Replay(infos).run(events).rows()


def timeseries(
    events: Sequence[Mapping[str, Any]], infos: Mapping[str, JobInfo], capacity: Mapping[str, int]
) -> Series:
    """Busy accelerators, queue length and per-project holdings over time, in one sweep."""
    return _Replay(infos).run(events).series(sum(capacity.values()))


def summarize(
    events: Sequence[Mapping[str, Any]],
    infos: Mapping[str, JobInfo],
    capacity: Mapping[str, int],
    guarantees: Mapping[str, Mapping[str, float]],
) -> dict[str, Any]:
    """The run's headline numbers (see the module docstring for the conventions)."""
    return analyse(events, infos, capacity, guarantees).summary


@dataclass(slots=True)
class Analysis:
    """Everything the outputs need from one sweep of a log."""

    rows: list[JobRow]
    series: Series
    summary: dict[str, Any]


def analyse(
    events: Sequence[Mapping[str, Any]],
    infos: Mapping[str, JobInfo],
    capacity: Mapping[str, int],
    guarantees: Mapping[str, Mapping[str, float]],
    swept: Callable[[Series], object] | None = None,
) -> Analysis:
    """The job table, the time series and the summary, from one sweep of the log; `swept` is
    given the time series as soon as it is made (charts can be drawn from it meanwhile)."""
    with no_cyclic_gc():
        replay = _Replay(infos).run(events)
        series = replay.series(sum(capacity.values()))
        if swept is not None:
            swept(series)
        rows = replay.rows()
    tally = _Tally(rows)
    end = tally.last_finish if tally.last_finish is not None else replay.last_t
    span = max(end - tally.first_submit, 0.0)
    worked = series.work_time(end)
    busy = series.integral(series.busy, end)
    counts = tally.states
    starved = replay.starved()
    summary = {
        "jobs": len(rows),
        **{state: counts[state] for state in ("finished", "failed", "rejected", "cancelled")},
        "unfinished": counts["pending"] + counts["running"],
        "preemptions": tally.preemptions,
        "jct": stats(tally.jcts),
        "wait": stats(tally.waits),
        "first_wait": stats(tally.first_waits),
        "mean_duration": _mean(tally.durations),
        "makespan": span,
        "work_time": worked,
        "utilisation": _ratio(busy, series.capacity * worked),
        "utilisation_of_makespan": _ratio(busy, series.capacity * span),
        "utilisation_by_accelerator": {
            k: _ratio(series.integral(v, end), capacity.get(k, 0) * worked)
            for k, v in series.by_accelerator.items()
        },
        "busy_accel_seconds": busy,
        "capacity": dict(capacity),
        "starved_time": sum(total for total, _ in starved.values()),
        "starved_longest": _longest(starved),
        "per_project": _per_project(tally, series, end, span, guarantees, starved),
    }
    return Analysis(rows, series, summary)


def _longest(starved: Mapping[str, tuple[float, float]]) -> dict[str, Any]:
    """The longest starved spell of any project, and whose (the first name on a tie)."""
    project = min(starved, key=lambda p: (-starved[p][1], p), default=None)
    spell = starved[project][1] if project is not None else 0.0
    return {"project": project if spell > 0 else None, "seconds": spell}


def stats(values: Sequence[float]) -> dict[str, float | None]:
    """mean, p50, p95, p99 (numpy "linear" percentiles); all None for no values."""
    if not values:
        return {"mean": None, **{f"p{q}": None for q in PERCENTILES}}
    arr = np.asarray(values, dtype=float)
    pct = np.percentile(arr, PERCENTILES, method="linear")
    return {
        "mean": float(arr.mean()),
        **{f"p{q}": float(v) for q, v in zip(PERCENTILES, pct, strict=True)},
    }


class _Tally:
    """What the summary needs of the job table, in one pass over it (a pass per figure was a
    fifth of the metrics' time on a whole trace). Lists keep the rows' order, so means and
    percentiles are those of the same values in the same order."""

    def __init__(self, rows: Sequence[JobRow]) -> None:
        self.states = dict.fromkeys(
            ("finished", "failed", "rejected", "cancelled", "pending", "running"), 0
        )
        self.preemptions = 0
        self.first_submit = 0.0 if not rows else math.inf
        self.last_finish: float | None = None
        self.jcts: list[float] = []  # of finished jobs
        self.durations: list[float] = []  # of finished jobs
        self.waits: list[float] = []
        self.first_waits: list[float] = []
        # project -> [jobs, finished, jcts, waits]
        self.projects: dict[str, list] = {}
        states, projects, jcts, durations = self.states, self.projects, self.jcts, self.durations
        waits, first_waits = self.waits, self.first_waits
        first_submit, last_finish, preemptions = self.first_submit, -math.inf, 0
        for r in rows:
            state = r.state
            states[state] = states.get(state, 0) + 1
            preemptions += r.preemptions
            if r.submit < first_submit:
                first_submit = r.submit
            if r.finish is not None and r.finish > last_finish:
                last_finish = r.finish
            mine = projects.get(r.project)
            if mine is None:
                mine = projects[r.project] = [0, 0, [], []]
            mine[0] += 1
            jct, wait = r.jct, r.wait
            if state == "finished":
                mine[1] += 1
                if jct is not None:
                    jcts.append(jct)
                durations.append(r.duration)
            if jct is not None:
                mine[2].append(jct)
            if wait is not None:
                waits.append(wait)
                mine[3].append(wait)
            if r.first_wait is not None:
                first_waits.append(r.first_wait)
        self.first_submit, self.preemptions = first_submit, preemptions
        self.last_finish = None if last_finish == -math.inf else last_finish


def _per_project(tally: _Tally, series: Series, end: float, span: float, guarantees, starved):
    out = {}
    none = (0, 0, [], [])
    for project in sorted(set(tally.projects) | set(guarantees)):
        jobs, finished, jcts, waits = tally.projects.get(project, none)
        held = series.held.get(project)
        used = series.integral(held, end) if held is not None else 0.0
        out[project] = {
            "jobs": jobs,
            "finished": finished,
            "jct_mean": _mean(jcts),
            "wait_mean": _mean(waits),
            "accel_seconds": used,
            "mean_share": _ratio(used, series.capacity * span),
            "guarantee_share": _ratio(sum(guarantees.get(project, {}).values()), series.capacity),
            "starved_time": starved.get(project, (0.0, 0.0))[0],
            "starved_longest": starved.get(project, (0.0, 0.0))[1],
        }
    return out


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _ratio(a: float, b: float) -> float:
    return float(a / b) if b > 0 else 0.0


# --- output ------------------------------------------------------------------------------------


def write_job_csv(rows: Sequence[JobRow], path: str | Path) -> None:
    """One line per job; None is written as an empty cell."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(JobRow._fields)
        out.writerows(rows)  # (the csv module writes None as an empty cell)


# Per-project figures side by side (OUT/per_project.csv), in this order; see _per_project.
PROJECT_FIELDS = ("jobs", "finished", "jct_mean", "wait_mean", "starved_time",
                  "starved_longest", "accel_seconds", "mean_share", "guarantee_share")  # fmt: skip


def write_project_csv(summaries: Mapping[str, Mapping[str, Any]], path: str | Path) -> None:
    """One line per policy and project with its per-project figures (None: an empty cell)."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(("policy", "project", *PROJECT_FIELDS))
        for policy, summary in summaries.items():
            for project, figures in summary["per_project"].items():
                out.writerow((policy, project, *(figures[k] for k in PROJECT_FIELDS)))


def write_summary(summary: Mapping[str, Any], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(_plain(summary), f, indent=2)
        f.write("\n")


def _plain(value: Any) -> Any:
    """numpy scalars -> Python numbers, NaN/inf -> None, so the JSON is strict."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def fmt_seconds(value: float | None) -> str:
    """A duration for people: 42 s, 12.5 min, 3.2 h, 4.1 d."""
    if value is None:
        return "-"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} s"


def _percent(value: float) -> str:
    return f"{100 * value:.1f} %"


# (label, how to read it from a summary, how to print it, which way is better: -1 lower, +1 higher)
_ROWS = (
    ("jobs", lambda s: s["jobs"], str, 0),
    ("finished", lambda s: s["finished"], str, 1),
    ("unfinished", lambda s: s["unfinished"], str, -1),
    ("rejected", lambda s: s["rejected"], str, 0),
    ("preemptions", lambda s: s["preemptions"], str, -1),
    ("JCT mean", lambda s: s["jct"]["mean"], fmt_seconds, -1),
    ("JCT p50", lambda s: s["jct"]["p50"], fmt_seconds, -1),
    ("JCT p95", lambda s: s["jct"]["p95"], fmt_seconds, -1),
    ("JCT p99", lambda s: s["jct"]["p99"], fmt_seconds, -1),
    ("wait mean", lambda s: s["wait"]["mean"], fmt_seconds, -1),
    ("wait p95", lambda s: s["wait"]["p95"], fmt_seconds, -1),
    ("first wait mean", lambda s: s["first_wait"]["mean"], fmt_seconds, -1),
    ("makespan", lambda s: s["makespan"], fmt_seconds, -1),
    ("utilisation", lambda s: s["utilisation"], _percent, 1),
    ("util. of makespan", lambda s: s["utilisation_of_makespan"], _percent, 1),
    ("starved, all projects", lambda s: s["starved_time"], fmt_seconds, -1),
    ("longest starved", lambda s: s["starved_longest"]["seconds"], fmt_seconds, -1),
    ("  (project)", lambda s: s["starved_longest"]["project"], lambda v: v or "-", 0),
)


def comparison_table(summaries: Mapping[str, Mapping[str, Any]]):
    """Policies side by side, one column each; the best value of each row in bold."""
    from rich.table import Table  # rich is only needed when printing

    table = Table(title="Policy comparison", show_lines=False)
    table.add_column("metric", style="bold")
    for policy in summaries:
        table.add_column(policy, justify="right")
    for label, get, show, better in _ROWS:
        values = [get(s) for s in summaries.values()]
        best = _best(values, better)
        cells = [
            f"[bold green]{show(v)}[/]" if (v is not None and v == best) else show(v)
            for v in values
        ]
        table.add_row(label, *cells)
    return table


def _best(values: list[Any], better: int) -> Any:
    present = [v for v in values if v is not None]
    if better == 0 or len(present) < 2 or len(set(present)) == 1:
        return None  # nothing to single out
    return min(present) if better < 0 else max(present)
