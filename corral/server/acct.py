"""Accounting (`corral acct`, `GET /v1/acct`), Slurm's sacct/sreport for corral: per project,
user and accelerator type, and optionally per day or week, the accelerator-hours used, the
jobs submitted and ended, the wait, and the preemptions, all read from the store, so they
cover the control plane's whole history, across restarts.

The wait is all the time a job was pending, as the simulator counts it (corral/sim/metrics.py):
from submission to its first start, and from the end of each attempt that sent it back to the
queue (a preemption, a restart after a failure) to the next start. The mean is over the jobs
that started.

Each figure is counted in the window (and period) where it happened: a run's hours are split
at the window's and the periods' edges; a job counts as submitted where it was submitted,
as ended where it ended, as started where it first started, each pending spell where it
ended (a start, or the job's end while pending), a preemption where it was decided.
Days and weeks (ISO, Monday first) are the control plane's local calendar.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from corral.server.store import FINAL_STATES, Store

PERIODS = ("total", "day", "week")


@dataclass(slots=True)
class AcctRow:
    period: str  # "" for the whole window, 2026-11-24 for a day, 2026-W48 for a week
    project: str
    user: str
    accelerator: str
    accelerator_hours: float = 0.0
    jobs: int = 0  # submitted
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    started: int = 0  # first starts: the jobs the mean wait is over
    wait_seconds: float = 0.0  # pending spells (see pending_spells), summed
    preemptions: int = 0

    @property
    def mean_wait(self) -> float | None:
        return self.wait_seconds / self.started if self.started else None

    def as_dict(self) -> dict[str, object]:
        return asdict(self) | {"mean_wait_seconds": self.mean_wait}


def _period_start(t: float, by: str) -> datetime:
    day = datetime.fromtimestamp(t).replace(hour=0, minute=0, second=0, microsecond=0)
    return day - timedelta(days=day.weekday()) if by == "week" else day


def _label(start: datetime, by: str) -> str:
    if by == "week":
        year, week, _ = start.isocalendar()
        return f"{year}-W{week:02d}"
    return start.date().isoformat()


def _pieces(begin: float, end: float, by: str) -> Iterator[tuple[str, float]]:
    """(period, seconds) of [begin, end) cut at period edges."""
    if by == "total":
        yield "", end - begin
        return
    step = timedelta(days=7 if by == "week" else 1)
    start = _period_start(begin, by)
    while begin < end:
        edge = min(end, (start + step).timestamp())  # DST days are 23 or 25 hours: fine
        yield _label(start, by), edge - begin
        begin, start = edge, start + step


def pending_spells(
    submitted: float, runs: Sequence[tuple[float, float | None]], ended: float | None
) -> Iterator[tuple[float, float]]:
    """(when it ended, seconds) of each spell a job spent pending, given its attempts' (start,
    end) in order and when the job ended (None: not yet): submission to the first start, each
    attempt's end to the next start, and the last attempt's end to the job's end when it ended
    pending (cancelled in the queue). Only for a job that started: as in the simulator, a job
    that never ran has no wait. A spell still open is not over and not counted."""
    if not runs:
        return
    began = submitted
    for start, end in runs:
        yield start, max(0.0, start - began)
        if end is None:
            return
        began = end
    if ended is not None:
        yield ended, max(0.0, ended - began)


def _period(t: float, by: str) -> str:
    return "" if by == "total" else _label(_period_start(t, by), by)


def account(
    store: Store,
    since: float,
    until: float,
    by: str = "total",
    projects: list[str] | None = None,
    user: str | None = None,
    now: float | None = None,
) -> list[AcctRow]:
    """The figures of [since, until), one row per (period, project, user, accelerator)."""
    now = time.time() if now is None else now
    rows: dict[tuple[str, str, str, str], AcctRow] = {}

    def row(t: float | str, project: str, who: str, accel: str) -> AcctRow:
        period = t if isinstance(t, str) else _period(t, by)
        key = (period, project, who, accel)
        if key not in rows:
            rows[key] = AcctRow(period, project, who, accel)
        return rows[key]

    for a in store.acct_attempts(since, until, projects, user):
        begin, end = max(a.started_at, since), min(a.finished_at or now, until)
        for period, seconds in _pieces(begin, end, by) if end > begin else ():
            row(period, a.project, a.user, a.accelerator).accelerator_hours += (
                seconds * a.accelerators / 3600
            )
    for j in store.acct_jobs(since, until, projects, user):
        if since <= j.submitted_at < until:
            row(j.submitted_at, j.project, j.user, j.accelerator).jobs += 1
        if j.state in FINAL_STATES and j.finished_at is not None and since <= j.finished_at < until:
            r = row(j.finished_at, j.project, j.user, j.accelerator)
            setattr(r, j.state, getattr(r, j.state) + 1)
        if j.runs and since <= j.runs[0][0] < until:
            row(j.runs[0][0], j.project, j.user, j.accelerator).started += 1
        ended = j.finished_at if j.state in FINAL_STATES else None
        for t, seconds in pending_spells(j.submitted_at, j.runs, ended):
            if since <= t < until:
                row(t, j.project, j.user, j.accelerator).wait_seconds += seconds
    for p in store.acct_preemptions(since, until, projects, user):
        row(p.t, p.project, p.user, p.accelerator).preemptions += 1
    for r in rows.values():
        r.accelerator_hours = round(r.accelerator_hours, 6)
    return sorted(rows.values(), key=lambda r: (r.period, r.project, r.user, r.accelerator))
