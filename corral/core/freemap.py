"""What is free where: the one capacity model. `FreeMap` owns the free accelerators of each
node and every index derived from them, kept exact by `take`; the snapshot keeps one, and a
cycle, its what-if probes and its view after the stopping jobs are gone work on copies."""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.core.queues import inner

if TYPE_CHECKING:
    from corral.core.snapshot import Cluster


class FreeMap:
    def __init__(
        self,
        cluster: Cluster,
        free: list[int],
        hist: dict[str, list[int]],
        slots: dict[str, dict[int, int]],
        held: dict[int, int] | None = None,
    ) -> None:
        self.cluster = cluster
        self.free = free  # node -> free accelerators
        self.held = held  # node -> accelerators held, which the indexes leave out (or None)
        self.hist = hist  # accelerator -> [nodes with k free for k in 0..largest node]
        # accelerator -> per_worker -> free worker slots of that size, for the sizes asked
        # (`slots_of`). (Nested, not keyed by tuples: a string's hash is kept, a tuple's is
        # computed on every lookup.)
        self.slots = slots

    @classmethod
    def empty(cls, cluster: Cluster) -> FreeMap:
        """Every node's accelerators free."""
        hist = {accel: [0] * (size + 1) for accel, size in cluster.largest_node.items()}
        for node in cluster.nodes:
            hist[node.accelerator][node.count] += 1
        return cls(cluster, [node.count for node in cluster.nodes], hist, {})

    def copy(self) -> FreeMap:
        hist = {accel: list(hist) for accel, hist in self.hist.items()}
        slots = {accel: dict(counts) for accel, counts in self.slots.items()}
        return FreeMap(self.cluster, self.free.copy(), hist, slots, self.held)

    def beside(self, held: dict[int, int]) -> FreeMap:
        """A copy whose indexes count only what is beside `held` (node -> accelerators): what
        a job outlasting a reservation may take (`Cycle.long_map`)."""
        hist = {accel: list(hist) for accel, hist in self.hist.items()}
        accelerator_of, free = self.cluster.accelerator_of, self.free
        for i, amount in held.items():
            counts = hist[accelerator_of[i]]
            counts[free[i]] -= 1
            counts[max(0, free[i] - amount)] += 1
        return FreeMap(self.cluster, free.copy(), hist, {}, held)

    def counter(self, accelerator: str, per_worker: int) -> FreeMap:
        """A copy that keeps one worker-slot count: what a what-if search counts its releases
        on before it changes a probe (core/slots.py)."""
        slots = {accelerator: {per_worker: self.slots_of(accelerator, per_worker)}}
        hist = {accel: list(hist) for accel, hist in self.hist.items()}
        return FreeMap(self.cluster, self.free.copy(), hist, slots, self.held)

    def avail(self, node: int) -> int:
        """Free accelerators of a node that the indexes count."""
        free, held = self.free[node], self.held
        return free if held is None else max(0, free - held.get(node, 0))

    def take(self, node: int, amount: int) -> None:
        """Move `amount` accelerators of a node from free to used (negative: back)."""
        accel = self.cluster.accelerator_of[node]
        before = self.free[node]
        after = self.free[node] = before - amount
        held = self.held
        if held is not None:  # only what is beside held capacity counts
            beside = held.get(node, 0)
            before, after = max(0, before - beside), max(0, after - beside)
        hist = self.hist[accel]
        hist[before] -= 1
        hist[after] += 1
        counts = self.slots.get(accel)
        if counts is not None:
            for per, count in counts.items():
                counts[per] = count + after // per - before // per

    def slots_of(self, accelerator: str, per_worker: int) -> int:
        """Free worker slots of a size, counted the first time, then kept by `take`."""
        counts = inner(self.slots, accelerator)
        found = counts.get(per_worker)
        if found is None:
            found = 0
            for k, nodes in enumerate(self.hist.get(accelerator, [0])):
                found += nodes * (k // per_worker)
            counts[per_worker] = found
        return found

    def domains_by_free(self, accelerator: str, size: int) -> list[tuple[int, str]]:
        """(free, domain) of the type's domains with at least `size` of it free, fewest
        free first: placement visits first the domains a slice fits in, best first."""
        free, found = self.free, []
        for domain, nodes in self.cluster.typed_domains.get(accelerator, {}).items():
            total = sum([free[i] for i in nodes])
            if total >= size:
                found.append((total, domain))
        found.sort()
        return found
