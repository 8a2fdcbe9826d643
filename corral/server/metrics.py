"""Prometheus metrics of one control plane, in a registry of its own (never the global one, so
two control planes in one process, as in tests and the demo, never collide)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

JOB_STATES = ("pending", "running", "succeeded", "failed", "cancelled")

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_WAIT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600)


class _JobsByState(Collector):
    """Read at scrape time from the store, so it can never drift from the truth."""

    def __init__(self, counts: Callable[[], dict[str, int]]):
        self._counts = counts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = self._counts()
        family = GaugeMetricFamily("corral_jobs", "Jobs by state", labels=["state"])
        for state in JOB_STATES:
            family.add_metric([state], counts.get(state, 0))
        yield family


class _Accelerators(Collector):
    def __init__(self, usage: Callable[[], dict[str, dict[str, int]]]):
        self._usage = usage

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "corral_accelerators_in_use",
            "Accelerators held by running jobs",
            labels=["project", "accelerator"],
        )
        for project, by_type in sorted(self._usage().items()):
            for accel, n in sorted(by_type.items()):
                family.add_metric([project, accel], n)
        yield family


class Metrics:
    def __init__(
        self,
        counts: Callable[[], dict[str, int]],
        usage: Callable[[], dict[str, dict[str, int]]],
    ):
        self.registry = CollectorRegistry()
        self.registry.register(_JobsByState(counts))
        self.registry.register(_Accelerators(usage))
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

    def render(self) -> bytes:
        return generate_latest(self.registry)
