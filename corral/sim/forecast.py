"""Predicted starts of pending jobs (Slurm's `squeue --start`): a what-if replay.

From a snapshot (the control plane's, or a replay's at some instant) the simulator goes on with
a fresh instance of the same policy and no new arrivals: each running job ends at its start plus
its max_runtime, each pending job, once started, runs its whole max_runtime. A job without a
max_runtime holds what it gets beyond the horizon, so any job that would need its accelerators
never starts in the replay: a pending job's predicted start is its first start there, and it
is known only when every end it waits for is known (as Slurm shows N/A). Beyond the horizon, or
past where the replay got in its time budget, nothing is known either. The policy may preempt
within the replay.

A job that is stopping (its grace) is taken as stopped: its accelerators are free at once, and
the job itself is not forecast until it is back in the queue.

`error_figures` measures a forecast against what happened: during a whole replay, at sample
instants, it forecasts every pending job and compares with the job's next actual start.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import math
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from corral.core.model import Job, Running
from corral.core.policy import Policy
from corral.core.snapshot import Snapshot
from corral.formats.types import Node, Quota, ScenarioJob
from corral.sim.engine import SimOptions, Simulator

HORIZON = 7 * 86400.0  # seconds ahead a forecast looks
# Wall seconds a replay may take: fair's cycles on a queue of 10,000 take tens of ms each, and
# the control plane must not spend minutes on one forecast.
BUDGET = 2.0


class _OutOfTime(Exception):
    """The replay ran past its budget: the starts so far stand, the rest are not known."""


@dataclass(frozen=True, slots=True)
class Forecast:
    """Predicted starts (absolute times) of the pending jobs whose start is known."""

    starts: dict[str, float]
    at: float  # the time of the state it was made from
    seconds: float  # wall time it took


class WhatIf:
    """A forecast set up from a snapshot. `__init__` only takes references to what it reads, so
    that a driver may hold its lock for that alone: the jobs must not change afterwards (the
    control plane makes a new Job when one is queued again; the simulator's jobs are copied
    before its replay goes on). `run` copies them and replays."""

    def __init__(
        self,
        snap: Snapshot,
        policy: Policy,
        now: float | None = None,
        horizon: float = HORIZON,
        budget: float = BUDGET,
    ):
        self.now = snap.now if now is None else now
        self.horizon = horizon
        self.budget = budget
        self.nodes, self.quota = snap.cluster.nodes, snap.quota
        self.policy = type(policy)(policy.config)  # a policy may keep memos of its snapshot
        self.pending = list(snap.pending.jobs.values())
        self.running = [
            (run.job, snap.node_names(run.nodes), run.started_at, self._end(run))
            for run in snap.running.values()
            if not run.terminating
        ]

    def _end(self, run: Running) -> float:
        end = run.expected_end()
        if end is None:
            return math.inf
        return max(self.now, end)  # overdue: about to be stopped

    def run(self) -> Forecast:
        t0 = time.perf_counter()
        # (A finite end even with no horizon: the jobs with no max_runtime end at infinity.)
        until = min(self.now + self.horizon, sys.float_info.max)
        sim = Simulator(self.nodes, self.quota, (), self.policy, SimOptions(max_sim_time=until))
        running = [(_copy(job), nodes, t, end) for job, nodes, t, end in self.running]
        sim.resume(self.now, running, [(_copy(job), _work(job)) for job in self.pending])
        deadline = t0 + self.budget

        def check_time(_done: int) -> None:  # called after each instant's cycle
            if time.perf_counter() > deadline:
                raise _OutOfTime

        with contextlib.suppress(_OutOfTime):  # the starts so far stand
            sim.run(progress=check_time if math.isfinite(deadline) else None)
        waiting = {job.id for job in self.pending}
        starts: dict[str, float] = {}
        for event in sim.events:
            job_id = event["job"]
            if event["event"] == "start" and job_id in waiting and job_id not in starts:
                starts[job_id] = event["t"]  # type: ignore[assignment]
        return Forecast(starts, self.now, time.perf_counter() - t0)


def _copy(job: Job) -> Job:
    """A copy the replay may change (progress, preemptions) without touching the driver's."""
    return dataclasses.replace(job)


def _work(job: Job) -> float:
    """Seconds of work in all that a pending job is taken to need: one whole max_runtime more."""
    return math.inf if job.max_runtime is None else job.run_time + job.max_runtime


# --- measuring the error in a replay ------------------------------------------------------------


def declare_runtimes(
    jobs: Sequence[ScenarioJob], factor: float, fraction: float = 1.0, seed: int = 0
) -> list[ScenarioJob]:
    """The jobs with a declared max_runtime of `factor` times their duration, for a `fraction`
    of them drawn at random (the rest declare none), as users would estimate."""
    draw = random.Random(seed)
    out = []
    for sj in jobs:
        if draw.random() < fraction:
            spec = dataclasses.replace(sj.spec, max_runtime=sj.duration * factor)
            sj = dataclasses.replace(sj, spec=spec)
        out.append(sj)
    return out


@dataclass(slots=True)
class Sample:
    """One pending job at one sample instant: its prediction (None: unknown) and its start."""

    t: float
    job: str
    predicted: float | None
    actual: float


@dataclass(slots=True)
class ErrorFigures:
    samples: list[Sample]
    instants: int
    forecast_seconds: list[float]  # wall time of each forecast

    def summary(self) -> dict[str, float]:
        """Median and p90 absolute error (s); over the jobs with a prediction, the fractions
        within 1 h, within 10 % of the actual wait from the instant, and started later."""
        known = [(s.predicted, s.actual, s.t) for s in self.samples if s.predicted is not None]
        errors = sorted(abs(predicted - actual) for predicted, actual, _ in known)
        n = len(known) or math.nan
        return {
            "instants": self.instants,
            "pending": len(self.samples),
            "predicted": len(known),
            "median_error": _quantile(errors, 0.5),
            "p90_error": _quantile(errors, 0.9),
            "within_1h": sum(e <= 3600 for e in errors) / n,
            "within_10pct": sum(abs(p - a) <= 0.1 * (a - t) for p, a, t in known) / n,
            "late": sum(a > p for p, a, _ in known) / n,
            "forecast_mean_s": statistics.fmean(self.forecast_seconds or [math.nan]),
            "forecast_max_s": max(self.forecast_seconds, default=math.nan),
        }


def _quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def error_figures(
    nodes: Sequence[Node],
    quota: Quota,
    jobs: Sequence[ScenarioJob],
    policy: Policy,
    every: float = 6 * 3600.0,
    horizon: float = math.inf,
    budget: float = math.inf,
) -> ErrorFigures:
    """Replay `jobs`; every `every` seconds of simulated time (at the first instant from then
    on, after its cycle), forecast the pending jobs and compare each prediction with the job's
    next start in the replay."""
    sim = Simulator(nodes, quota, jobs, policy)
    forecasts: list[tuple[float, list[str], Forecast]] = []
    next_at = [every]

    def sample(_done: int) -> None:
        snap = sim.snap
        if snap.now < next_at[0] or not len(snap.pending):
            return
        next_at[0] = (snap.now // every + 1) * every
        what_if = WhatIf(snap, sim.policy, horizon=horizon, budget=budget)
        forecasts.append((snap.now, list(snap.pending.jobs), what_if.run()))

    result = sim.run(progress=sample)
    starts: dict[str, list[float]] = {}
    for event in result.events:
        if event["event"] == "start":
            starts.setdefault(event["job"], []).append(event["t"])  # type: ignore[arg-type]
    samples = []
    for t, pending, made in forecasts:
        for job_id in pending:
            times = starts.get(job_id, [])
            i = bisect.bisect_right(times, t)
            if i < len(times):  # (a job that never started has nothing to compare with)
                samples.append(Sample(t, job_id, made.starts.get(job_id), times[i]))
    return ErrorFigures(samples, len(forecasts), [f.seconds for _, _, f in forecasts])
