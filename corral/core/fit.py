"""Placement: where a gang's workers go, or None when it does not fit.

A worker needs `per_worker` free accelerators of its type on one node; each slice's workers lie
in one domain; an exclusive slice owns its domain alone. `pack` (best fit) takes the fullest
domain and nodes that fit, keeping large blocks free for big gangs; `spread`, the emptiest.
Domains are visited in order of free capacity: a fit usually looks at one domain's nodes.
"""

from __future__ import annotations

from corral.core import memos
from corral.core.cycle import Cycle
from corral.core.model import Job


def from_histogram(cycle: Cycle, job: Job) -> bool:
    """Is the job placed from its one-domain pool's free histogram (`_one_domain`)? Then only
    nodes with room for a worker, and whether that domain is taken exclusively, matter."""
    r = job.resources
    if r.slices == 1 and not r.exclusive and (r.workers == 1 or not cycle.spread):
        return len(cycle.snap.cluster.typed_domains.get(r.accelerator, {})) == 1
    return False


def place(cycle: Cycle, job: Job, long: bool = True) -> tuple[int, ...] | None:
    """Node of each worker (slice-major), honouring the cycle's free map, or None."""
    if from_histogram(cycle, job):  # the common case: one slice in a one-domain pool
        ((domain, nodes),) = cycle.snap.cluster.typed_domains[job.accelerator].items()
        if domain in cycle.exclusive:
            return None
        return _one_domain(cycle, job, long, nodes)
    r = job.resources
    taken: dict[int, int] = {}  # node -> accelerators this job claims already (earlier slices)
    used_domains: set[str] = set()
    placement: list[int] = []
    for _ in range(r.slices):
        workers = _place_slice(cycle, job, long, taken, used_domains)
        if workers is None:
            return None
        placement.extend(workers)
    return tuple(placement)


def place_unless_failed(
    cycle: Cycle, job: Job, long: bool, on: Cycle | None = None
) -> tuple[int, ...] | None:
    """`place` on `on` (by default the cycle itself, else its `after_release` map), unless a
    job of the same resources failed to place there since the cycle last changed: where slots
    are enough but placement fails (domains), the jobs of that kind behind it fail again."""
    r = job.resources  # what placement reads of the job (a tuple: hashed in C), and where
    key = (job.shape, r.workers, r.exclusive, long, on is not None)
    failed = cycle.unplaced if cycle.unplaced_at == cycle.changes else None
    if failed is not None and key in failed:
        if memos.CHECKING:
            memos.same("failed placement", None, place(cycle if on is None else on, job, long))
        return None
    nodes = place(cycle if on is None else on, job, long)
    if nodes is None:
        if failed is None:
            failed = cycle.unplaced = set()
            cycle.unplaced_at = cycle.changes
        failed.add(key)
    return nodes


def _one_domain(
    cycle: Cycle, job: Job, long: bool, nodes: tuple[int, ...]
) -> tuple[int, ...] | None:
    """The workers' nodes as `_assign` picks them (packing: fullest first; a lone worker when
    spreading: emptiest), found from the free histogram instead of a walk over the nodes."""
    per, workers = job.per_worker, job.gang
    hist = cycle.histogram(job.accelerator, long)
    sizes = range(len(hist) - 1, per - 1, -1) if cycle.spread else range(per, len(hist))
    free = cycle.free
    held = cycle.reservation.held if long and cycle.reservation is not None else None
    out: list[int] = []
    for k in sizes:
        if not hist[k]:
            continue
        for i in nodes:  # those with exactly k available, by position
            if free[i] - (held.get(i, 0) if held else 0) == k:
                out.extend([i] * min(k // per, workers - len(out)))
                if len(out) == workers:
                    return tuple(out)
    return None


def _place_slice(
    cycle: Cycle, job: Job, long: bool, taken: dict[int, int], used_domains: set[str]
) -> list[int] | None:
    r = job.resources
    per = r.per_worker
    typed = cycle.snap.cluster.typed_domains.get(r.accelerator, {})
    for domain in _candidate_domains(cycle, job, typed):
        if not _domain_open(cycle, job, domain, used_domains):
            continue
        room = _room(cycle, typed[domain], per, long, taken)
        if sum(a // per for a in room.values()) < r.workers:
            continue
        workers = _assign(room, per, r.workers, cycle.spread)
        for i in workers:
            taken[i] = taken.get(i, 0) + r.per_worker
        used_domains.add(domain)
        return workers
    return None


def _room(cycle: Cycle, nodes, per: int, long: bool, taken: dict[int, int]) -> dict[int, int]:
    """Free accelerators of each node that can take at least one worker."""
    free = cycle.free
    held = cycle.reservation.held if long and cycle.reservation is not None else None
    if held is None and not taken:
        return {i: free[i] for i in nodes if free[i] >= per}
    room = {}
    for i in nodes:
        a = free[i] - taken.get(i, 0) - (held.get(i, 0) if held else 0)
        if a >= per:
            room[i] = a
    return room


def _candidate_domains(cycle: Cycle, job: Job, typed: dict):
    """Domains that have at least the slice's size free, best first for the strategy."""
    r = job.resources
    if len(typed) == 1:
        yield from typed
        return
    roomy = cycle.map.domains_by_free(r.accelerator, r.per_worker * r.workers)
    if cycle.spread:
        roomy.reverse()
    for _, domain in roomy:
        yield domain


def _domain_open(cycle: Cycle, job: Job, domain: str, used_domains: set[str]) -> bool:
    if domain in cycle.exclusive:
        return False
    if not job.resources.exclusive:
        return True
    if domain in used_domains:
        return False
    # An exclusive slice needs the whole domain empty, whatever the type of its other nodes.
    return all(cycle.node_jobs[i] == 0 for i in cycle.snap.cluster.domains[domain])


def _assign(room: dict[int, int], per: int, workers: int, spread: bool) -> list[int]:
    out: list[int] = []
    if workers == 1:  # the common case: one best (or, spreading, emptiest) node
        pick = max if spread else min
        return [pick(room, key=lambda i: (room[i], -i if spread else i))]
    if spread:  # one worker per node, emptiest first, round after round
        order = sorted(room, key=lambda i: (-room[i], i))
        while len(out) < workers:
            for i in order:
                if room[i] >= per and len(out) < workers:
                    out.append(i)
                    room[i] -= per
        return out
    for i in sorted(room, key=lambda i: (room[i], i)):  # fullest node that fits first
        while room[i] >= per and len(out) < workers:
            out.append(i)
            room[i] -= per
    return out
