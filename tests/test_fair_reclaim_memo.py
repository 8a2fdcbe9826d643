"""fair keeps, from cycle to cycle, what each project above its guarantee would give up to a
reclaim (`Fair._released`, on the snapshot), and which projects may give up any (`_givers`,
while the cycle has changed no usage). Every reclaim room check of busy random scenarios is
made twice, with the memos and afresh job by job, and the two must agree."""

from __future__ import annotations

import random

from simkit import job, load, quota, simulate

from corral.core.cycle import Cycle
from corral.core.model import Job
from corral.core.preempt import could_free_room
from corral.policies.fair import Fair, _giver, _givers


class Checking(Fair):
    def __init__(self) -> None:
        super().__init__()
        self.checks = 0
        self.kept = 0  # checks that read a memo made in an earlier cycle
        self.giver_checks = 0  # of those, with the givers kept across cycles

    def _may_free(self, cycle: Cycle, job: Job) -> bool:
        before = dict(cycle.snap.policy_memo)
        got = super()._may_free(cycle, job)
        every = _givers(cycle, job.accelerator)
        snap = cycle.snap
        fresh_givers = [
            _giver(snap, job.accelerator, project, cycle.held(project, job.accelerator), runs)
            for project, runs in snap.preemptible.get(job.accelerator, {}).items()
        ]
        fields = ("project", "held", "guarantee", "smallest", "runs")
        assert [[getattr(g, f) for f in fields] for g in every] == [
            [getattr(g, f) for f in fields] for g in fresh_givers if g is not None
        ]
        self.giver_checks += cycle.usage is snap.usage
        givers = [g for g in every if g.project != job.project]
        runs = [run for g in givers for run in self._given(cycle, g)]
        assert got == could_free_room(cycle, job, runs), f"{job.id} at {cycle.snap.now}"
        for giver in givers:  # and what each project gives up, node by node
            fresh: dict[int, int] = {}
            for run in self._given(cycle, giver):
                for i in run.nodes:
                    fresh[i] = fresh.get(i, 0) + run.job.per_worker
            assert self._released(cycle, job.accelerator, giver) == fresh
        self.checks += 1
        self.kept += any(before.get(("fair.released", job.accelerator, g.project)) for g in givers)
        return got


def borrowers_and_whole_nodes(seed: int) -> dict:
    """Small jobs of three borrowing projects fill the pool; a fourth project within its
    guarantee asks for whole nodes and reclaims, cycle after cycle."""
    rng = random.Random(seed)
    jobs = []
    for i in range(150):
        whole = rng.random() < 0.25
        jobs.append(
            job(
                f"j{i:03d}",
                "w" if whole else rng.choice(["a", "b", "c"]),
                8 if whole else rng.choice([1, 1, 2]),
                submit=rng.choice([0, 10, 40]) + 25 * (i // 6),
                duration=rng.choice([60, 300, 1200]),
            )
        )
    cluster = [{"name": "n{0..3}", "accelerator": "gpu", "count": 8}]
    q = quota({"a": {"gpu": 1}, "b": {"gpu": 1}, "c": {"gpu": 1}, "w": {"gpu": 3}})
    return {"cluster": cluster, "quota": q, "jobs": jobs}


def test_reclaim_room_checks_with_the_memo_agree_with_checks_made_afresh():
    checks = kept = giver_checks = preempted = 0
    for seed in range(10):
        policy = Checking()
        result = simulate(load(borrowers_and_whole_nodes(seed)), policy)
        checks += policy.checks
        kept += policy.kept
        giver_checks += policy.giver_checks
        preempted += sum(e["event"] == "preempt" for e in result.events)
    assert checks > 50 and kept > 10 and preempted > 0  # the memo is read, reclaims happen
    assert giver_checks > 10
