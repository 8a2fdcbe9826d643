"""Jobs that can never run are refused at submission, saying which limit they break
(DESIGN.md §3.10), instead of waiting in the queue forever."""

from __future__ import annotations

from corral.core.model import Job
from corral.core.snapshot import Snapshot, within


def check_admissible(snap: Snapshot, job: Job) -> str | None:
    """None if the job could run on an empty pool; else why it never can."""
    r = job.resources
    cluster = snap.cluster
    if r.accelerator not in cluster.capacity:
        have = ", ".join(sorted(cluster.capacity)) or "none"
        return f"unknown accelerator {r.accelerator!r} (this pool has: {have})"
    if not snap.quota.is_member(job.user, job.project):
        return f"user {job.user} is not a member of project {job.project}"
    largest = cluster.largest_node[r.accelerator]
    if r.per_worker > largest:
        return f"needs {r.per_worker} {r.accelerator} per worker; the largest node has {largest}"
    capacity = snap.capacity.get(r.accelerator, 0)
    if r.total > capacity:
        return f"needs {r.total} {r.accelerator} in all; the pool has {capacity}"
    return _topology(snap, job) or _quota(snap, job)


def _topology(snap: Snapshot, job: Job) -> str | None:
    r = job.resources
    nodes = snap.cluster.nodes  # per domain, the workers that fit on an empty pool:
    slots = [
        sum(nodes[i].count // r.per_worker for i in domain)
        for domain in snap.cluster.typed_domains[r.accelerator].values()
    ]
    fitting = sum(1 for s in slots if s >= r.workers)
    if fitting == 0:
        most = max(slots)
        return (
            f"a slice needs {r.workers} workers with {r.per_worker} {r.accelerator} each in one"
            f" domain; the largest domain holds {most}"
        )
    if r.exclusive and r.slices > fitting:
        return (
            f"needs {r.slices} exclusive domains that each hold {r.workers} workers;"
            f" the pool has {fitting}"
        )
    if not r.exclusive and sum(s // r.workers for s in slots) < r.slices:
        return f"needs {r.slices} slices of {r.workers} workers; the pool holds fewer"
    return None


def _quota(snap: Snapshot, job: Job) -> str | None:
    limit = snap.limit_of(job.project, job.accelerator)
    if job.demand > limit:
        return (
            f"needs {job.demand} {job.accelerator}; project {job.project} is limited to {limit:g}"
        )
    cap = snap.quota.interactive_limits.get(job.project, {}).get(job.accelerator)
    if job.interactive and cap is not None and job.demand > cap:
        return (
            f"needs {job.demand} {job.accelerator}; project {job.project}'s interactive jobs"
            f" are limited to {cap}"
        )
    guarantee = snap.guarantee_of(job.project, job.accelerator)
    if not job.preemptible and not within(0, job.demand, guarantee):
        return (
            f"non-preemptible jobs run only within the guarantee: needs {job.demand}"
            f" {job.accelerator}, project {job.project} is guaranteed {guarantee:g}"
        )
    return None
