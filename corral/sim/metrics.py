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

Everything is one O(events) sweep (sweep.py, compiled) plus numpy (`analyse`): about 0.6 s for
the 270,000-event log of fair on the whole Philly trace.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from corral.formats.types import FormatError, Quota
from corral.sim.gcpause import no_cyclic_gc
from corral.sim.sweep import JobInfo, JobRow, ProjectTally, Sweep, Tally
from corral.sim.sweep import infos_from_jobs as infos_from_jobs  # (part of this API)

PERCENTILES = (50, 95, 99)


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
    bin_s: float | None = None  # values are means over bins this wide (plots.binned); None: exact

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


# --- the time series ------------------------------------------------------------------------------


def _series(sweep: Sweep, capacity: int) -> Series:
    n = len(sweep.times)
    at, by_project, by_type, delta = (
        np.asarray(c, dtype=np.int64)
        for c in (sweep.at, sweep.by_project, sweep.by_type, sweep.delta)
    )
    return Series(
        times=np.asarray(sweep.times, dtype=float),
        busy=np.asarray(sweep.busy, dtype=float),
        queue=np.asarray(sweep.queue, dtype=float),
        held=_levels({p: v.code for p, v in sweep.projects.items()}, at, by_project, delta, n),
        by_accelerator=_levels(sweep.accelerators, at, by_type, delta, n),
        capacity=capacity,
        active=np.asarray(sweep.active, dtype=float),
    )


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
    return Sweep(infos).run(events).rows()


def timeseries(
    events: Sequence[Mapping[str, Any]], infos: Mapping[str, JobInfo], capacity: Mapping[str, int]
) -> Series:
    """Busy accelerators, queue length and per-project holdings over time, in one sweep."""
    return _series(Sweep(infos).run(events), sum(capacity.values()))


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
        replay = Sweep(infos).run(events)
        series = _series(replay, sum(capacity.values()))
        if swept is not None:
            swept(series)
        rows = replay.rows()
    tally = Tally(rows)
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


def _per_project(tally: Tally, series: Series, end: float, span: float, guarantees, starved):
    out = {}
    for project in sorted(set(tally.projects) | set(guarantees)):
        mine = tally.projects.get(project) or ProjectTally()
        held = series.held.get(project)
        used = series.integral(held, end) if held is not None else 0.0
        out[project] = {
            "jobs": mine.jobs,
            "finished": mine.finished,
            "jct_mean": _mean(mine.jcts),
            "wait_mean": _mean(mine.waits),
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
