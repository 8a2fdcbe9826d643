"""Prometheus metrics of one control plane, in a registry of its own (never the global one, so
two control planes in one process, as in tests and the demo, never collide).

Gauges are read at scrape time from the control plane (`PoolState`), so they can never drift
from the truth; every project of the quota gets a row, 0 when idle, so a panel never loses a
line. Counters count from this process's start, as Prometheus counters do (rate() takes the
reset of a restart in its stride).
"""

from __future__ import annotations

import platform
import threading
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

JOB_STATES = ("pending", "running", "succeeded", "failed", "cancelled")
FINAL_STATES = ("succeeded", "failed", "cancelled")
# Why a job was preempted: its project's guarantee was reclaimed by another, a higher-priority
# job of its project needed the room, its attempt was lost while the control plane was down;
# under a ranked policy (las, srtf), the policy's name.
PREEMPT_REASONS = ("reclaim", "priority", "lost")

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# Up to a week: on a busy shared pool waits of many hours are the norm (Philly's mean is 12 h).
_WAIT_BUCKETS = (
    *(0.01, 0.1, 1, 10, 30),
    *(60, 300, 900, 1800),  # minutes
    *(3600, 7200, 14400, 28800, 43200),  # hours
    *(86400, 172800, 345600, 604800),  # days
)


@dataclass(slots=True)
class ProjectRow:
    """One project's figures for one accelerator type."""

    project: str
    accelerator: str
    guarantee: float
    limit: int  # the quota's limit, or the pool's capacity where it sets none
    in_use: int
    borrowed: float
    pending: int  # accelerators asked for by pending jobs
    pending_jobs: int


@dataclass(slots=True)
class PoolState:
    jobs_by_state: dict[str, int]
    capacity: dict[str, int]
    rows: list[ProjectRow]
    oldest_pending: dict[str, float]  # project -> seconds its oldest pending job has waited
    projects: list[str]


def _gauge(name: str, doc: str, labels: list[str], values: Iterable[tuple[list[str], float]]):
    family = GaugeMetricFamily(name, doc, labels=labels)
    for label_values, value in values:
        family.add_metric(label_values, value)
    return family


class _Pool(Collector):
    def __init__(self, state: Callable[[], PoolState]):
        self._state = state

    def collect(self) -> Iterator[GaugeMetricFamily]:
        s = self._state()
        yield _gauge(
            "corral_jobs",
            "Jobs in the store by state",
            ["state"],
            (([st], s.jobs_by_state.get(st, 0)) for st in JOB_STATES),
        )
        yield _gauge(
            "corral_pool_capacity",
            "Accelerators in the pool",
            ["accelerator"],
            (([a], n) for a, n in sorted(s.capacity.items())),
        )
        per_project = (
            ("guarantee", "Accelerators guaranteed to the project (its share of the pool)"),
            ("limit", "Most accelerators the project may hold (its limit, else the pool size)"),
            ("in_use", "Accelerators held by the project's running jobs"),
            ("borrowed", "Accelerators held above the project's guarantee"),
            ("pending", "Accelerators asked for by the project's pending jobs"),
            ("pending_jobs", "The project's pending jobs"),
        )
        for attr, doc in per_project:
            yield _gauge(
                f"corral_project_{attr}",
                doc,
                ["project", "accelerator"],
                (([r.project, r.accelerator], getattr(r, attr)) for r in s.rows),
            )
        yield _gauge(
            "corral_oldest_pending_seconds",
            "How long the project's longest-waiting pending job has waited (0: none waits)",
            ["project"],
            (([p], s.oldest_pending.get(p, 0.0)) for p in s.projects),
        )


class _Tallies(Collector):
    """Counters whose rows exist for every project from the start (0 until something happens)."""

    def __init__(self, projects: Callable[[], list[str]]):
        self._projects = projects
        self.lock = threading.Lock()  # the loop counts while a scrape reads
        self.finished: Tally[tuple[str, str]] = Tally()
        self.preempted: Tally[tuple[str, str]] = Tally()

    def collect(self) -> Iterator[CounterMetricFamily]:
        projects = self._projects()
        with self.lock:
            finished_now, preempted_now = Tally(self.finished), Tally(self.preempted)
        finished = CounterMetricFamily(
            "corral_jobs_finished", "Jobs that reached a final state", labels=["project", "state"]
        )
        keys = {(p, st) for p in projects for st in FINAL_STATES} | set(finished_now)
        for key in sorted(keys):
            finished.add_metric(list(key), finished_now[key])
        yield finished
        preempted = CounterMetricFamily(
            "corral_preemptions", "Attempts preempted, by why", labels=["project", "reason"]
        )
        keys = {(p, r) for p in projects for r in PREEMPT_REASONS} | set(preempted_now)
        for key in sorted(keys):
            preempted.add_metric(list(key), preempted_now[key])
        yield preempted


class _BuildInfo(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        from importlib.metadata import PackageNotFoundError, version

        import corral.core.cycle

        try:
            ours = version("corral")
        except PackageNotFoundError:
            ours = "unknown"
        compiled = "false" if corral.core.cycle.__file__.endswith(".py") else "true"
        family = GaugeMetricFamily(
            "corral_build_info",
            "corral's version, Python's, and whether the core is compiled (always 1)",
            labels=["version", "python", "compiled"],
        )
        family.add_metric([ours, platform.python_version(), compiled], 1)
        yield family


class Metrics:
    def __init__(self, state: Callable[[], PoolState], projects: Callable[[], list[str]]):
        self.registry = CollectorRegistry()
        self.registry.register(_Pool(state))
        self._tallies = _Tallies(projects)
        self.registry.register(self._tallies)
        self.registry.register(_BuildInfo())
        self.cycle_seconds = Histogram(
            "corral_cycle_seconds",
            "Time to run one scheduling cycle (poll exits, decide, apply)",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.submit_to_running = Histogram(
            "corral_submit_to_running_seconds",
            "Time from submission to the first start of a job",
            buckets=_WAIT_BUCKETS,
            registry=self.registry,
        )
        self.events = Counter(
            "corral_events", "Job events recorded", labelnames=["event"], registry=self.registry
        )

    def finished(self, project: str, state: str) -> None:
        with self._tallies.lock:
            self._tallies.finished[(project, state)] += 1

    def preempted(self, project: str, reason: str) -> None:
        with self._tallies.lock:
            self._tallies.preempted[(project, reason)] += 1

    def render(self) -> bytes:
        return generate_latest(self.registry)


def preempt_reason(why: str, policy: str) -> str:
    """The bounded label for a preemption, from the policy's words for it."""
    if why.startswith("reclaimed"):
        return "reclaim"
    if why.startswith("preempted by higher-priority"):
        return "priority"
    return policy
