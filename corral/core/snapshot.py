"""The state the core decides on, with indexes that drivers keep up to date incrementally.

A driver (simulator or server) owns one Snapshot and calls `submit`, `withdraw`, `start`,
`stop` and `set_time` as things happen; `decide` only reads it. Keeping the indexes here means
a cycle costs what changed, not the size of the queue or of the job history.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sortedcontainers import SortedKeyList

from corral.core.model import Job, Running
from corral.formats.types import Node, Quota

QueueKey = Callable[[Job], tuple]


def default_queue_key(job: Job) -> tuple:
    """Priority (higher first), then submit time, then name: the order within one user."""
    return (-job.priority, job.submit_time, job.name, job.id)


@dataclass(slots=True)
class Cluster:
    nodes: tuple[Node, ...]
    index: dict[str, int]  # node name -> position
    domains: dict[str, tuple[int, ...]]  # domain -> node positions, in name order
    domain_of: tuple[str, ...]  # node position -> domain
    by_type: dict[str, tuple[int, ...]]  # accelerator -> node positions
    capacity: dict[str, int]  # accelerator -> inventory count
    largest_node: dict[str, int]  # accelerator -> most accelerators on one node

    @classmethod
    def build(cls, nodes: Sequence[Node]) -> Cluster:
        ordered = tuple(sorted(nodes, key=lambda n: n.name))
        domains: dict[str, list[int]] = defaultdict(list)
        by_type: dict[str, list[int]] = defaultdict(list)
        capacity: Counter[str] = Counter()
        largest: dict[str, int] = {}
        for i, n in enumerate(ordered):
            domains[n.domain].append(i)
            by_type[n.accelerator].append(i)
            capacity[n.accelerator] += n.count
            largest[n.accelerator] = max(largest.get(n.accelerator, 0), n.count)
        return cls(
            nodes=ordered,
            index={n.name: i for i, n in enumerate(ordered)},
            domains={d: tuple(v) for d, v in sorted(domains.items())},
            domain_of=tuple(n.domain for n in ordered),
            by_type={t: tuple(v) for t, v in sorted(by_type.items())},
            capacity=dict(capacity),
            largest_node=largest,
        )

    def domains_with(self, accelerator: str) -> list[str]:
        return [d for d, idx in self.domains.items() if any(
            self.nodes[i].accelerator == accelerator for i in idx)]


class PendingQueue:
    """Pending jobs kept sorted by the policy's static key: per project and user, and overall."""

    __slots__ = ("key", "jobs", "all", "by_user", "demand")

    def __init__(self, key: QueueKey):
        self.key = key
        self.jobs: dict[str, Job] = {}
        self.all = SortedKeyList(key=key)
        self.by_user: dict[str, dict[str, SortedKeyList]] = {}  # project -> user -> jobs
        # project -> (accelerator, demand) -> count: lets a cycle see at once whether any of a
        # project's jobs could fit, without walking its queue.
        self.demand: dict[str, Counter[tuple[str, int, int]]] = defaultdict(Counter)

    def __len__(self) -> int:
        return len(self.jobs)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self.jobs

    def add(self, job: Job) -> None:
        if job.id in self.jobs:
            raise ValueError(f"job {job.id} is already pending")
        self.jobs[job.id] = job
        self.all.add(job)
        users = self.by_user.setdefault(job.project, {})
        users.setdefault(job.user, SortedKeyList(key=self.key)).add(job)
        r = job.resources
        self.demand[job.project][(r.accelerator, r.per_worker, r.total)] += 1

    def remove(self, job_id: str) -> Job:
        job = self.jobs.pop(job_id)
        self.all.remove(job)
        users = self.by_user[job.project]
        queue = users[job.user]
        queue.remove(job)
        if not queue:
            del users[job.user]
            if not users:
                del self.by_user[job.project]
        r = job.resources
        counts = self.demand[job.project]
        shape = (r.accelerator, r.per_worker, r.total)
        counts[shape] -= 1
        if not counts[shape]:
            del counts[shape]
            if not counts:
                del self.demand[job.project]
        return job


class Snapshot:
    """Cluster, quota, pending and running jobs, and the time: everything `decide` reads."""

    def __init__(self, nodes: Sequence[Node], quota: Quota, queue_key: QueueKey | None = None):
        self.cluster = Cluster.build(nodes)
        self.quota = quota
        self.now = 0.0
        n = len(self.cluster.nodes)
        self.free: list[int] = [node.count for node in self.cluster.nodes]
        self.node_jobs: list[int] = [0] * n  # running workers on each node
        self.exclusive_domains: dict[str, str] = {}  # domain -> job id holding it alone
        self.running: dict[str, Running] = {}
        self.pending = PendingQueue(queue_key or default_queue_key)
        self.usage: dict[str, Counter[str]] = defaultdict(Counter)  # project -> type -> held
        self.capacity = self._capacity()
        self.guarantee = self._guarantees()

    # -- quota -------------------------------------------------------------------------------

    def _capacity(self) -> dict[str, int]:
        cap = dict(self.cluster.capacity)
        total = self.quota.total_resources
        if total is not None:
            cap = {t: min(c, total.get(t, 0)) for t, c in cap.items()}
        return cap

    def _guarantees(self) -> dict[str, dict[str, float]]:
        """share[p][r] / sum_q share[q][r] * capacity[r], per DESIGN.md section 2."""
        out: dict[str, dict[str, float]] = defaultdict(dict)
        for accel, cap in self.capacity.items():
            for project, frac in self.quota.fractions(accel).items():
                out[project][accel] = frac * cap
        return dict(out)

    def set_quota(self, quota: Quota) -> None:
        self.quota = quota
        self.capacity = self._capacity()
        self.guarantee = self._guarantees()

    def guarantee_of(self, project: str, accelerator: str) -> float:
        return self.guarantee.get(project, {}).get(accelerator, 0.0)

    def limit_of(self, project: str, accelerator: str) -> float:
        return self.quota.limits.get(project, {}).get(accelerator, float("inf"))

    # -- changes, called by drivers ----------------------------------------------------------

    def set_time(self, now: float) -> None:
        self.now = now

    def submit(self, job: Job) -> None:
        if job.id in self.running:
            raise ValueError(f"job {job.id} is already running")
        self.pending.add(job)

    def withdraw(self, job_id: str) -> Job:
        """Take a job out of the queue (cancelled, or about to start)."""
        return self.pending.remove(job_id)

    def start(self, job_id: str, nodes: Iterable[str], now: float) -> Running:
        job = self.pending.remove(job_id)
        where = tuple(self.cluster.index[name] for name in nodes)
        per = job.resources.per_worker
        for i in where:
            if self.free[i] < per:
                self.pending.add(job)
                raise ValueError(f"node {self.cluster.nodes[i].name} lacks {per} free")
        for i in where:
            self.free[i] -= per
            self.node_jobs[i] += 1
        if job.resources.exclusive:
            for i in where:
                self.exclusive_domains[self.cluster.domain_of[i]] = job.id
        self.usage[job.project][job.accelerator] += job.demand
        run = Running(job=job, nodes=where, started_at=now)
        self.running[job.id] = run
        return run

    def stop(self, job_id: str) -> Running:
        """Release a running job's accelerators (it finished, failed, or was preempted)."""
        run = self.running.pop(job_id)
        job = run.job
        per = job.resources.per_worker
        for i in run.nodes:
            self.free[i] += per
            self.node_jobs[i] -= 1
        if job.resources.exclusive:
            for i in run.nodes:
                self.exclusive_domains.pop(self.cluster.domain_of[i], None)
        held = self.usage[job.project]
        held[job.accelerator] -= job.demand
        if not held[job.accelerator]:
            del held[job.accelerator]
        return run

    def mark_terminating(self, job_id: str) -> None:
        self.running[job_id].terminating = True

    # -- reads -------------------------------------------------------------------------------

    def held(self, project: str, accelerator: str) -> int:
        return self.usage.get(project, {}).get(accelerator, 0)

    def node_names(self, positions: Iterable[int]) -> tuple[str, ...]:
        nodes = self.cluster.nodes
        return tuple(nodes[i].name for i in positions)
