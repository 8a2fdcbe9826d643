"""Why a job waits: a reason code and one sentence a user can act on (DESIGN.md §3.11)."""

from __future__ import annotations

from corral.core.cycle import Cycle
from corral.core.model import Job, Reason, ReasonCode


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def capacity(cycle: Cycle, job: Job, long: bool = True) -> Reason:
    r = job.resources
    blocks = cycle.blocks(r.accelerator, r.per_worker, long)
    where = " in one domain" if r.slices == 1 and len(cycle.snap.cluster.domains) > 1 else ""
    if r.slices > 1:
        where = f" ({r.slices} slices of {r.workers}, each in one domain)"
    if r.exclusive:
        where = f" ({_plural(r.slices, 'empty domain')}, exclusive)"
    hist = cycle.histogram(r.accelerator, long)
    largest = max([k for k in range(1, len(hist)) if hist[k]], default=0)
    return Reason(
        ReasonCode.CAPACITY,
        f"needs {_plural(r.gang, 'worker')} with {r.per_worker} free {r.accelerator} each{where};"
        f" the largest free block is {largest} {r.accelerator}"
        f" ({_plural(blocks, 'worker slot')} free in all)",
    )


def blocked(cycle: Cycle, job: Job, long: bool) -> Reason:
    """A job that neither fits nor can preempt: kept off capacity held for the reservation
    (reserved), beyond its share with too little idle to borrow (quota), or with enough free
    accelerators but not in the shape it needs (capacity)."""
    res = cycle.reservation
    if long and res is not None and cycle.may_fit(job, long=False):  # but for the reservation
        holder = res.job
        return Reason(ReasonCode.RESERVED, f"capacity held for job {holder.name} ({holder.id})")
    free = cycle.free_total(job.accelerator)
    if free >= job.demand or cycle.within_guarantee(job):
        return capacity(cycle, job, long)
    held = cycle.held(job.project, job.accelerator)
    g = cycle.snap.guarantee_of(job.project, job.accelerator)
    pool = "the pool is full" if free == 0 else f"only {free} are free (it needs {job.demand})"
    return Reason(
        ReasonCode.QUOTA,
        f"project {job.project} holds {held} of its {g:g} {job.accelerator} and {pool}",
    )


def limit(cycle: Cycle, job: Job) -> Reason | None:
    """Hard caps that hold whatever the free capacity: project_limits, non-preemptible jobs."""
    if job.preemptible and not job.interactive and job.project not in cycle.snap.quota.limits:
        return None  # the common case, asked for every job a cycle looks at
    capped = interactive_limit(cycle, job) if job.interactive else None
    if capped is not None:
        return capped
    held = cycle.held(job.project, job.accelerator)
    cap = cycle.snap.limit_of(job.project, job.accelerator)
    if held + job.demand > cap:
        return Reason(
            ReasonCode.LIMIT,
            f"project {job.project} holds {held} of its limit {cap:g} {job.accelerator};"
            f" this job needs {job.demand} more",
        )
    if not job.preemptible and not cycle.within_guarantee(job):
        g = cycle.snap.guarantee_of(job.project, job.accelerator)
        return Reason(
            ReasonCode.QUOTA,
            f"non-preemptible jobs run only within the guarantee: project {job.project}"
            f" holds {held} of its {g:g} {job.accelerator}, this job needs {job.demand}",
        )
    return None


def interactive_limit(cycle: Cycle, job: Job) -> Reason | None:
    """[project_interactive_limits]: what the project's interactive jobs may hold together.
    Counted over the running jobs (interactive jobs are few; only they pay for the count)."""
    cap = cycle.snap.quota.interactive_limits.get(job.project, {}).get(job.accelerator)
    if cap is None:
        return None
    held = sum(
        run.job.demand
        for run in cycle.running_after()
        if run.job.interactive
        and run.job.project == job.project
        and run.job.accelerator == job.accelerator
    )
    if held + job.demand <= cap:
        return None
    return Reason(
        ReasonCode.LIMIT,
        f"project {job.project}'s interactive jobs hold {held} of their limit {cap}"
        f" {job.accelerator}; this job needs {job.demand} more",
    )


def releasing(cycle: Cycle) -> Reason:
    n = len(cycle.releasing)
    return Reason(
        ReasonCode.PREEMPTING,
        f"waiting for {_plural(n, 'stopping job')} to release their accelerators",
    )
