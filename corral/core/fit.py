"""Placement: where a gang's workers go, or None when it does not fit.

A worker needs `per_worker` free accelerators of its type on one node; each slice's workers lie
in one domain; an exclusive slice owns its domain alone. `pack` (best fit) takes the fullest
domain and the fullest nodes that fit, keeping large blocks free for big gangs; `spread` takes
the emptiest. Domains are visited in order of free capacity from an index, so a fit usually
looks at one domain, not all of them.
"""

from __future__ import annotations

from corral.core.cycle import Cycle
from corral.core.model import Job


def place(cycle: Cycle, job: Job, long: bool = True) -> tuple[int, ...] | None:
    """Node of each worker (slice-major), honouring the cycle's free map, or None."""
    r = job.resources
    if r.workers == 1 and r.slices == 1 and not r.exclusive:
        typed = cycle.snap.cluster.typed_domains.get(r.accelerator, {})
        if len(typed) == 1:  # the common case: one worker, one domain
            ((domain, nodes),) = typed.items()
            if domain in cycle.exclusive:
                return None
            node = _one_node(cycle, job, long, nodes)
            return None if node is None else (node,)
    taken: dict[int, int] = {}  # node -> accelerators this job claims already (earlier slices)
    used_domains: set[str] = set()
    placement: list[int] = []
    for _ in range(r.slices):
        nodes = _place_slice(cycle, job, long, taken, used_domains)
        if nodes is None:
            return None
        placement.extend(nodes)
    return tuple(placement)


def _one_node(cycle: Cycle, job: Job, long: bool, nodes: tuple[int, ...]) -> int | None:
    """The node a lone worker goes to (as `_assign` would pick it), found from the free
    histogram and a scan in C instead of a walk over the nodes."""
    per = job.per_worker
    hist = cycle.histogram(job.accelerator, long)
    sizes = range(len(hist) - 1, per - 1, -1) if cycle.spread else range(per, len(hist))
    k = next((k for k in sizes if hist[k]), None)  # best fit, or emptiest when spreading
    if k is None:
        return None
    free = cycle.free
    held = cycle.reservation.held if long and cycle.reservation is not None else None
    if nodes[-1] - nodes[0] + 1 != len(nodes):  # not a run of positions: walk them
        held = held or {}
        return next(i for i in nodes if free[i] - held.get(i, 0) == k)
    # The lowest-numbered node with exactly k available: a held node, or one found by
    # list.index among the others (held nodes are few).
    lo, hi = nodes[0], nodes[-1] + 1
    best = hi
    if held:
        best = min((i for i, h in held.items() if lo <= i < best and free[i] - h == k), default=hi)
    i = lo - 1
    while True:
        try:
            i = free.index(k, i + 1, best)
        except ValueError:
            return best
        if not held or i not in held:
            return i


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
    index = cycle.domains_by_free(r.accelerator)
    size = r.per_worker * r.workers
    if cycle.spread:
        for free, domain in index.irange(reverse=True):
            if free < size:
                return
            yield domain
        return
    for _, domain in index.irange((size, "")):
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
