"""The state the core decides on, with indexes that drivers keep up to date incrementally.

A driver (simulator or server) owns one Snapshot and calls `submit`, `withdraw`, `start`,
`stop` and `set_time` as things happen; `decide` only reads it. Keeping the indexes here means
a cycle costs what changed, not the size of the queue or of the job history.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from corral.core.freemap import FreeMap
from corral.core.memos import SnapshotMemos
from corral.core.model import Job, Running
from corral.core.pending import PendingQueue, QueueKey
from corral.core.queues import (
    RunningByEnd,
    RunningIndex,
    RunningKey,
    SortedQueue,
    decrement,
    discard,
    inner,
    queue_in,
)
from corral.formats.types import Node, Quota

INF: Final = float("inf")
LN2: Final = math.log(2.0)
NONE: Mapping = MappingProxyType({})  # an empty mapping to look things up in


def default_queue_key(job: Job) -> tuple:
    """Priority (higher first), then submit time, then name: the order within one user."""
    return (-job.priority, job.submit_time, job.name, job.id)


def victim_order(run: Running) -> tuple:
    """Lowest priority first, then most recently started (DESIGN.md section 3.7)."""
    return (run.job.priority, -run.started_at, run.job.id)


@dataclass(slots=True)
class Cluster:
    nodes: tuple[Node, ...]
    index: dict[str, int]  # node name -> position
    domains: dict[str, tuple[int, ...]]  # domain -> node positions, in name order
    domain_of: tuple[str, ...]  # node position -> domain
    domain_number: tuple[int, ...]  # node position -> its domain's place in `domains`
    accelerator_of: tuple[str, ...]  # node position -> its accelerator type
    by_type: dict[str, tuple[int, ...]]  # accelerator -> node positions
    capacity: dict[str, int]  # accelerator -> inventory count
    largest_node: dict[str, int]  # accelerator -> most accelerators on one node
    typed_domains: dict[str, dict[str, tuple[int, ...]]]  # accelerator -> domain -> its nodes

    @classmethod
    def build(cls, nodes: Sequence[Node]) -> Cluster:
        ordered = tuple(sorted(nodes, key=lambda n: n.name))
        domains: dict[str, list[int]] = defaultdict(list)
        by_type: dict[str, list[int]] = defaultdict(list)
        capacity: dict[str, int] = {}
        largest: dict[str, int] = {}
        for i, n in enumerate(ordered):
            domains[n.domain].append(i)
            by_type[n.accelerator].append(i)
            capacity[n.accelerator] = capacity.get(n.accelerator, 0) + n.count
            largest[n.accelerator] = max(largest.get(n.accelerator, 0), n.count)
        typed: dict[str, dict[str, tuple[int, ...]]] = defaultdict(dict)
        for d, idx in domains.items():
            for accel in sorted({ordered[i].accelerator for i in idx}):
                typed[accel][d] = tuple(i for i in idx if ordered[i].accelerator == accel)
        number = {d: k for k, d in enumerate(sorted(domains))}
        return cls(
            nodes=ordered,
            index={n.name: i for i, n in enumerate(ordered)},
            domains={d: tuple(v) for d, v in sorted(domains.items())},
            domain_of=tuple(n.domain for n in ordered),
            domain_number=tuple(number[n.domain] for n in ordered),
            accelerator_of=tuple(n.accelerator for n in ordered),
            by_type={t: tuple(v) for t, v in sorted(by_type.items())},
            capacity=capacity,
            largest_node=largest,
            typed_domains=dict(typed),
        )


def within(held: float, amount: float, guarantee: float) -> bool:
    """Would `amount` more than `held` stay within `guarantee`? The one comparison with a
    guarantee (a little slack keeps a sum of shares from rounding below a whole job)."""
    return held + amount <= guarantee + 1e-9


def share_ratio(held: float, guarantee: float) -> float:
    """Usage over guarantee: infinite for usage with no guarantee, 0 for none."""
    if guarantee <= 0:
        return float("inf") if held > 0 else 0.0
    return held / guarantee


def decayed(usage: float, held: float, elapsed: float, half_life: float) -> float:
    """Accelerator-seconds of use, each second weighed down by half per `half_life` since
    (Slurm's PriorityDecayHalfLife): `usage` as it was, `elapsed` seconds later, `held`
    accelerators having run all that time. The simulator and the control plane both use it."""
    if half_life <= 0:
        return 0.0
    kept = 0.5 ** (elapsed / half_life)
    return usage * kept + held * (1.0 - kept) * half_life / LN2


class Snapshot:
    """Cluster, quota, pending and running jobs, and the time: everything `decide` reads."""

    def __init__(
        self,
        nodes: Sequence[Node],
        quota: Quota,
        queue_key: QueueKey | None = None,
        revisit_at: Callable[[Job], float | None] | None = None,
        running_keys: dict[str, RunningKey] | None = None,
        half_life: float = 0.0,
    ):
        self.cluster = Cluster.build(nodes)
        self.quota = quota
        self.now = 0.0
        # What is free where, with its worker-slot counts for every size a pending job has
        # asked for: a cycle starts with them instead of counting them again.
        self.map = FreeMap.empty(self.cluster)
        self.free = self.map.free  # (the map's own list, read often)
        self.node_jobs: list[int] = [0] * len(self.cluster.nodes)  # running workers per node
        self.terminating: dict[str, Running] = {}
        # Pending jobs that preempted others and have not started yet: each keeps first pick of
        # what its victims free (decide._keep_room), until it starts or leaves the queue.
        self.preemptors: set[str] = set()
        self.exclusive_domains: dict[str, str] = {}  # domain -> job id holding it alone
        self.running: dict[str, Running] = {}
        # The preemptible running jobs: accelerator -> project -> in victim order (candidates
        # without sorting per cycle); accelerator -> project -> demand -> how many (the
        # smallest victim); project -> priority -> how many (can a pending job outrank one?),
        # and priority -> how many. (A project's dict stays when it empties.)
        self.preemptible: dict[str, dict[str, SortedQueue[Running]]] = {}
        self.preemptible_sizes: dict[str, dict[str, dict[int, int]]] = {}
        self.running_priorities: dict[str, dict[int, int]] = {}
        self.running_priority_counts: dict[int, int] = {}
        self.running_by_end = RunningByEnd()
        # The policy's own indexes of running jobs, by name (see RunningIndex).
        self.running_by = {name: RunningIndex(key) for name, key in (running_keys or {}).items()}
        self.pending = PendingQueue(queue_key or default_queue_key, revisit_at)
        # project -> type -> held. A project stays (maybe empty) once it has run a job: the
        # server lists the projects in it.
        self.usage: dict[str, dict[str, int]] = {}
        self.in_use: dict[str, int] = {}  # type -> held by all projects (0s kept)
        # Usage decayed with `half_life` (see `decayed`): project -> (accelerator-seconds,
        # as of this time); brought up to date when what the project holds changes.
        self.half_life = half_life
        self.recent: dict[str, tuple[float, float]] = {}
        self.set_quota(quota)
        self.memos = SnapshotMemos()  # the only part `decide` writes (see memos.py)

    def set_quota(self, quota: Quota) -> None:
        self.quota = quota
        self.capacity: dict[str, int] = dict(self.cluster.capacity)
        if quota.total_resources is not None:
            total = quota.total_resources
            self.capacity = {t: min(c, total.get(t, 0)) for t, c in self.capacity.items()}
        # share[p][r] / sum_q share[q][r] * capacity[r], per DESIGN.md section 2.
        self.guarantee: dict[str, dict[str, float]] = {}
        for accel, cap in self.capacity.items():
            for project, frac in quota.fractions(accel).items():
                inner(self.guarantee, project)[accel] = frac * cap

    def guarantee_of(self, project: str, accelerator: str) -> float:
        shares = self.guarantee.get(project)  # (typed lookups: fast once compiled)
        return 0.0 if shares is None else shares.get(accelerator, 0.0)

    def limit_of(self, project: str, accelerator: str) -> float:
        return self.quota.limits.get(project, NONE).get(accelerator, INF)

    def set_time(self, now: float) -> None:
        self.now = now

    def submit(self, job: Job) -> None:
        if job.id in self.running:
            raise ValueError(f"job {job.id} is already running")
        self.pending.add(job)
        self.map.slots_of(job.accelerator, job.per_worker)

    def withdraw(self, job_id: str) -> Job:
        """Take a job out of the queue (cancelled, or about to start)."""
        job = self.pending.remove(job_id)
        self.preemptors.discard(job_id)
        return job

    def start(self, job_id: str, nodes: Iterable[str], now: float) -> Running:
        """Run a pending job on the named nodes (one per worker). Checks before it changes
        anything: an unknown job or node is a KeyError, a node short of room a ValueError."""
        job = self.pending.jobs[job_id]
        index, free, per = self.cluster.index, self.free, job.per_worker
        where = tuple([index[name] for name in nodes])
        for i in where:
            if free[i] < per:
                raise ValueError(f"node {self.cluster.nodes[i].name} lacks {per} free")
        self.withdraw(job_id)
        for i in where:
            self._change_free(i, -per)
            self.node_jobs[i] += 1
        if job.resources.exclusive:
            for i in where:
                self.exclusive_domains[self.cluster.domain_of[i]] = job.id
        accel, demand = job.accelerator, job.demand
        self._fold(job.project, now)
        held = inner(self.usage, job.project)
        held[accel] = held.get(accel, 0) + demand
        self.in_use[accel] = self.in_use.get(accel, 0) + demand
        run = Running(job=job, nodes=where, started_at=now)
        self.running[job.id] = run
        self.running_by_end.add(run)
        for by in self.running_by.values():
            by.add(run)
        if job.preemptible:
            queue_in(inner(self.preemptible, accel), job.project).add(victim_order(run), run)
            sizes = inner(inner(self.preemptible_sizes, accel), job.project)
            sizes[demand] = sizes.get(demand, 0) + 1
            priorities, priority = inner(self.running_priorities, job.project), job.priority
            priorities[priority] = priorities.get(priority, 0) + 1
            counts = self.running_priority_counts
            counts[priority] = counts.get(priority, 0) + 1
        return run

    def stop(self, job_id: str) -> Running:
        """Release a running job's accelerators (it finished, failed, or was preempted)."""
        run = self.running.pop(job_id)
        self.running_by_end.remove(run)
        for by in self.running_by.values():
            by.remove(run)
        job = run.job
        if job.preemptible:
            decrement(self.running_priorities[job.project], job.priority)
            decrement(self.running_priority_counts, job.priority)
            discard(self.preemptible[job.accelerator], job.project, victim_order(run), run)
            sizes = self.preemptible_sizes[job.accelerator]
            decrement(sizes[job.project], job.demand)
            if not sizes[job.project]:
                del sizes[job.project]
        per = job.per_worker
        self.terminating.pop(job_id, None)
        for i in run.nodes:
            self._change_free(i, per)
            self.node_jobs[i] -= 1
        if job.resources.exclusive:
            for i in run.nodes:
                self.exclusive_domains.pop(self.cluster.domain_of[i], None)
        self.in_use[job.accelerator] -= job.demand
        self._fold(job.project, self.now)
        held = self.usage[job.project]
        held[job.accelerator] -= job.demand
        if not held[job.accelerator]:
            del held[job.accelerator]
        return run

    def outrank_possible(self) -> bool:
        """Might some pending job outrank a preemptible running job of its own project? False
        when the highest pending priority is not above the lowest running one: then no project
        has such a pair. A necessary condition only (a True does not say which project, if any,
        has one), read in O(priority levels)."""
        lowest: int | None = None  # (loops: compiled, they beat the generic min and max)
        for priority in self.running_priority_counts:
            if lowest is None or priority < lowest:
                lowest = priority
        return lowest is not None and any(p > lowest for p in self.pending.priority_counts)

    def mark_terminating(self, job_id: str, preemptor: str = "") -> None:
        """The job was told to stop (live: SIGTERM, then its grace period); `preemptor`: the
        job it was preempted for, which has first pick of what it frees until it starts."""
        run = self.running[job_id]
        run.terminating = True
        if preemptor:
            self.preemptors.add(preemptor)
        self.terminating[job_id] = run

    def _change_free(self, node: int, amount: int) -> None:
        self.map.take(node, -amount)
        plan = self.memos.plan
        if plan is not None:
            plan.touched.add(node)

    def projects_with_room(self) -> set[str]:
        """Projects with a pending job that would keep them within their guarantee of its
        type (their smallest job of each type is enough to ask about)."""
        found = set()
        for project in self.pending.demand:
            least = self.pending.summary(project).least_demand
            for accel, need in least.items():
                if within(self.held(project, accel), need, self.guarantee_of(project, accel)):
                    found.add(project)
                    break
        return found

    def _fold(self, project: str, now: float) -> None:
        if self.half_life > 0:
            self.recent[project] = (self.recent_usage(project, now), now)

    def recent_usage(self, project: str, now: float | None = None) -> float:
        """The project's decayed usage (accelerator-seconds) at `now` (default: the
        snapshot's time)."""
        then, since = self.recent.get(project, (0.0, 0.0))
        held = self.usage.get(project)
        rate = 0 if held is None else sum(held.values())
        at = self.now if now is None else now
        return decayed(then, rate, at - since, self.half_life)

    def held(self, project: str, accelerator: str) -> int:
        held = self.usage.get(project)
        return 0 if held is None else held.get(accelerator, 0)

    def node_names(self, positions: Iterable[int]) -> tuple[str, ...]:
        nodes = self.cluster.nodes
        return tuple([nodes[i].name for i in positions])
