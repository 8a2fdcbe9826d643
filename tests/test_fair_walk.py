"""The fair walk's shortcuts change no decision.

`Fair.order` memoises its answers between the jobs it yields, goes on with a project while it
stays first in the heap, and walks a one-user project's queue directly; `Fair.victims` skips
searches that could not make room beside a reservation. `Plain` below is the walk without any
of that (as it was before the shortcuts): both must give the same event log on busy
scenarios. The memo relies on `Cycle.changes` moving whenever decide changes capacity, usage
or the reservation; the last test checks that it does.
"""

from __future__ import annotations

import heapq
import random

import pytest
from simkit import job, load, quota, simulate

from corral.core.cycle import Cycle
from corral.core.model import Job
from corral.core.preempt import Preemption
from corral.policies.fair import Fair
from corral.policies.fair_memos import FairCycleMemo
from corral.policies.fair_walk import _Answers, _ProjectQueue


class Plain(Fair):
    """Fair as the rules state it: every answer asked afresh and in full, every project
    through the heap, every queue merged across users, every job it reaches yielded (in a
    project that may make progress), every search that could free room made."""

    def order(self, cycle: Cycle):
        seen: set[str] = set()
        cycle.policy_memo(FairCycleMemo).reclaim = True
        starved = self._starved_head(cycle)
        if starved is not None:
            seen.add(starved.id)
            yield starved
        yield from self._plain_pass(cycle, seen, within=True)
        cycle.policy_memo(FairCycleMemo).reclaim = False
        yield from self._plain_pass(cycle, seen, within=False)

    def _plain_pass(self, cycle: Cycle, seen: set[str], within: bool):
        queues = {}
        for project, users in cycle.snap.pending.by_user.items():
            if within and not self._plain_has_room(cycle, project):
                continue
            # (A project whose first pass its head ended: that head may take the reservation.)
            deferred = not within and project in cycle.policy_memo(FairCycleMemo).deferred
            waits = not within or cycle.reserver is not None
            if waits and not deferred and not self._progress(cycle, project):
                continue
            queues[project] = _ProjectQueue(users)
        heap = [self._key(cycle, p, q.peek()) for p, q in queues.items()]
        heapq.heapify(heap)
        while heap:
            project = heapq.heappop(heap)[-1]
            queue = queues[project]
            progress = self._progress(cycle, project)
            if not progress and cycle.reserver is not None:
                continue
            first = queue.pop()
            beyond = first.id not in seen and within and not cycle.within_guarantee(first)
            if beyond and self.may_reserve(cycle, first):
                # The project's first pass ends here (else it is passed over); the jobs
                # behind may reclaim in the second.
                if self._plain_has_room(cycle, project):
                    cycle.policy_memo(FairCycleMemo).deferred.add(project)
                continue
            acts = (progress and self._may_act(cycle, first)) or (
                cycle.reserver is None and self.may_reserve(cycle, first)
            )
            if first.id not in seen and not beyond and acts:
                seen.add(first.id)
                yield first
            head = queue.peek()
            if progress and head is not None:
                heapq.heappush(heap, self._key(cycle, project, head))

    def _may_act(self, cycle: Cycle, job: Job) -> bool:
        return True

    def _reclaim(self, cycle: Cycle, job: Job) -> Preemption | None:
        if self._reclaim_bound(cycle, job) >= job.demand and self._may_free(cycle, job):
            found = self._take_back(cycle, job)
            if found:
                return found
        return self._take_back(cycle, job, wide=True)

    def _progress(self, cycle: Cycle, project: str) -> bool:
        memo = cycle.policy_memo(FairCycleMemo)
        return (
            self._plain_fits(cycle, project)
            or (memo.reclaim and self._plain_has_room(cycle, project))
            or (project in memo.deferred and self._may_reclaim(cycle, project))
            or self._plain_outranks(cycle, project)
        )

    def _plain_fits(self, cycle: Cycle, project: str) -> bool:
        pending = cycle.snap.pending
        lent = pending.bounded.get(project) or cycle.lends_to(project)
        long = cycle.reservation is not None and not lent
        shapes = pending.demand.get(project, ())
        return any(cycle.blocks(a, p, long) >= w for a, p, w in shapes)

    def _plain_has_room(self, cycle: Cycle, project: str) -> bool:
        shapes = cycle.snap.pending.demand.get(project, ())
        return any(cycle.room_within(project, a, p * w) for a, p, w in shapes)

    def _plain_outranks(self, cycle: Cycle, project: str) -> bool:
        running = cycle.snap.running_priorities.get(project)
        heads = [next(iter(jobs)) for jobs in cycle.snap.pending.by_user[project].values()]
        return bool(running) and max(job.priority for job in heads) > min(running)

    def _key(self, cycle: Cycle, project: str, head: Job) -> tuple:
        guaranteed, ratio = self._key_head(cycle, project, head.accelerator, head.demand)
        return (guaranteed, ratio, head.submit_time, project)


def contended(seed: int) -> dict:
    """Four projects (one with no guarantee, two with two users), priorities, gangs of
    several sizes, bounded jobs that may backfill around reservations, two domains."""
    rng = random.Random(seed)
    jobs = []
    for i in range(80):
        project = rng.choice(["p0", "p0", "p1", "p2", "p3"])
        extra = {}
        if rng.random() < 0.15:
            extra["priority"] = rng.choice([3, 5])
        if rng.random() < 0.3:
            extra["max_runtime"] = rng.choice([300, 4000])
        jobs.append(
            job(
                f"j{i:02d}",
                project,
                rng.choice([1, 1, 2, 4]),
                workers=rng.choice([1, 1, 1, 2, 4]),
                submit=rng.choice([0, 0, 30, 60, 300, 600]) + 20 * (i // 20),
                duration=rng.choice([100, 250, 900, 2000]),
                user=f"u{i % 2}" if project in ("p0", "p1") else "solo",
                **extra,
            )
        )
    q = quota({"p0": {"gpu": 2}, "p1": {"gpu": 1}, "p2": {"gpu": 1}}, {"p3": [".*"]})
    cluster = [
        {"name": "a{0..3}", "accelerator": "gpu", "count": 4, "domain": "d0"},
        {"name": "b{0..3}", "accelerator": "gpu", "count": 4, "domain": "d1"},
    ]
    return {"cluster": cluster, "quota": q, "scheduler": {"policy": "fair"}, "jobs": jobs}


@pytest.mark.parametrize("seed", range(8))
def test_the_shortcuts_give_the_plain_walks_log(seed):
    scenario = load(contended(seed))
    config = scenario.quota.scheduler
    fast = simulate(scenario, Fair(config)).events
    plain = simulate(scenario, Plain(config)).events
    assert fast == plain


def test_the_scenarios_preempt_and_reserve():
    # The comparison above means something only if reclaim, priority preemption and
    # reservations (jobs waiting with a 'reserved' reason) all happen in it.
    kinds = set()
    for seed in range(8):
        for e in simulate(load(contended(seed))).events:
            kinds.add(e["event"])
            if e["event"] == "preempt":
                kinds.add("reclaim" if "reclaimed" in e.get("reason", "") else "outrank")
    assert {"preempt", "reclaim", "outrank"} <= kinds


def _state(cycle: Cycle) -> tuple:
    usage = {p: {a: n for a, n in held.items() if n} for p, held in cycle.usage.items()}
    return (list(cycle.free), list(cycle.node_jobs), usage, cycle.reservation)


class Watching(Fair):
    """Fair that checks, around each job it yields, that `Cycle.changes` moves whenever decide
    changes the free map, usage or reservation."""

    changes = 0
    quiet = 0
    reserved = 0

    def order(self, cycle: Cycle):
        for pending in super().order(cycle):
            before, mark = _state(cycle), _Answers(self, cycle).mark
            yield pending
            if _state(cycle) != before:
                assert _Answers(self, cycle).mark != mark, pending.name
                Watching.changes += 1
            else:
                Watching.quiet += 1
            Watching.reserved += cycle.reservation is not None


def test_decide_marks_every_change_the_memo_depends_on():
    for seed in range(4):
        scenario = load(contended(seed))
        simulate(scenario, Watching(scenario.quota.scheduler))
    assert Watching.changes > 50 and Watching.quiet > 50 and Watching.reserved > 50
