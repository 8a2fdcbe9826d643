"""fair keeps, from cycle to cycle, what each project above its guarantee would give up to a
reclaim (`Fair._released`, on the snapshot), and which projects may give up any (`_givers`,
while the cycle has changed no usage). Every reclaim room check of busy random scenarios is
made twice, with the memos and afresh job by job, and the two must agree."""

from __future__ import annotations

import random

from simkit import job, load, preempted, quota, simulate, start_of

from corral.core.cycle import Cycle
from corral.core.model import Job
from corral.core.preempt import could_free_room
from corral.core.reserve import outlasts
from corral.formats.types import SchedulerConfig
from corral.policies.fair import Fair
from corral.policies.fair_memos import FairCycleMemo, _found_short, _fresh_givers, _givers, _kept


class Checking(Fair):
    def __init__(self) -> None:
        # With no minimum run time most checks may read the memo (else few jobs are all past
        # it at once); the 1 s first-cycle protection still applies.
        super().__init__(SchedulerConfig(preempt_min_runtime=0.0))
        self.checks = 0
        self.kept = 0  # checks that read a memo made in an earlier cycle
        self.giver_checks = 0  # of those, with the givers kept across cycles
        self.changed_checks = 0  # of those, after the cycle changed what some project holds
        self.skipped: list[str] = []  # jobs whose reclaim a smaller one's failure ruled out

    def _may_free(self, cycle: Cycle, job: Job, wide: bool = False) -> bool:
        if wide:
            return super()._may_free(cycle, job, wide)
        before = dict(_kept(cycle.snap).released)
        got = super()._may_free(cycle, job)
        every = _givers(cycle, job.accelerator)
        snap = cycle.snap
        fields = ("project", "held", "guarantee", "smallest", "runs")
        assert [[getattr(g, f) for f in fields] for g in every] == [
            [getattr(g, f) for f in fields] for g in _fresh_givers(cycle, job.accelerator)
        ]
        self.giver_checks += cycle.usage is snap.usage
        self.changed_checks += cycle.usage is not snap.usage  # (kept for the other projects)
        givers = [g for g in every if g.project != job.project]
        runs = [run for g in givers for run in self._given(cycle, g)]
        assert got == could_free_room(cycle, job, runs), f"{job.id} at {cycle.snap.now}"
        for giver in givers if self._all_eligible(cycle) else ():  # (memo read only then)
            fresh: dict[int, int] = {}
            for run in self._given(cycle, giver):
                for i in run.nodes:
                    fresh[i] = fresh.get(i, 0) + run.job.per_worker
            assert self._released(cycle, job.accelerator, giver) == fresh
        self.checks += 1
        self.kept += any(before.get((job.accelerator, g.project)) for g in givers)
        return got

    def _reclaim(self, cycle: Cycle, job: Job):
        self._check_unfreed(cycle, job, outlasts(cycle, job))
        return super()._reclaim(cycle, job)

    def _may_act(self, cycle: Cycle, job: Job) -> bool:
        got = super()._may_act(cycle, job)
        if not got and cycle.within_guarantee(job):
            self._check_unfreed(cycle, job, False)  # (for a job of any length)
        return got

    def _may_reclaim(self, cycle: Cycle, project: str) -> bool:
        got = super()._may_reclaim(cycle, project)
        if not got and cycle.policy_memo(FairCycleMemo).reclaim:
            for job in cycle.snap.pending.jobs.values():
                if job.project == project and cycle.within_guarantee(job):
                    self._check_unfreed(cycle, job, False)
        return got

    def _check_unfreed(self, cycle: Cycle, job: Job, long: bool) -> None:
        """Where fair's memo says a no bigger job of the size found no room, so must a fresh
        search (with every job the other projects would give up)."""
        if not _found_short(cycle, (job.accelerator, job.per_worker, long), job.gang):
            return
        givers = [g for g in _givers(cycle, job.accelerator) if g.project != job.project]
        runs = [run for g in givers for run in self._given(cycle, g)]
        assert not could_free_room(cycle, job, runs), f"{job.id} at {cycle.snap.now}"
        self.skipped.append(job.id)  # (it may be counted more than once)


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
    checks = kept = giver_checks = changed_checks = preempted = 0
    for seed in range(10):
        policy = Checking()
        result = simulate(load(borrowers_and_whole_nodes(seed)), policy)
        checks += policy.checks
        kept += policy.kept
        giver_checks += policy.giver_checks
        changed_checks += policy.changed_checks
        preempted += sum(e["event"] == "preempt" for e in result.events)
    assert checks > 50 and kept > 10 and preempted > 0  # the memo is read, reclaims happen
    assert giver_checks > 10 and changed_checks > 0


def test_a_size_no_reclaim_found_room_for_is_not_searched_again_in_the_cycle():
    """On each node a borrows 7 GPUs and b, within its guarantee, holds the 8th: no node can be
    freed whole. u, v and w, each within its guarantee, ask for a whole node in one cycle; once
    one of them finds no room, the others' searches are skipped (Checking makes each afresh).
    x asks for 2 GPUs, a size that does find room, and reclaims them."""
    jobs = [job(f"a{i}", "a", 7, duration=5000) for i in range(4)]
    jobs += [job(f"b{i}", "b", 1, submit=1, duration=5000, preemptible=False) for i in range(4)]
    jobs += [job(f"{p}-big", p, 8, submit=10, duration=100) for p in "uvw"]
    jobs.append(job("x-small", "x", 2, submit=10, duration=100))
    shares = {"a": 1, "b": 2, "u": 4, "v": 4, "w": 4, "x": 1}  # 2 GPUs a share
    scenario = {
        "cluster": [{"name": "n{0..3}", "accelerator": "gpu", "count": 8}],
        "quota": quota({p: {"gpu": n} for p, n in shares.items()}),
        "jobs": jobs,
    }
    policy = Checking()
    result = simulate(load(scenario), policy)
    assert policy.skipped  # (and never where room could be found: asserted in Checking)
    assert {job[0] for _, job in preempted(result)} == {"a"}
    assert start_of(result, "x-small")[0] == 10
    for p in "uvw":  # no whole node could be reclaimed: they wait for a's jobs to end
        assert start_of(result, f"{p}-big")[0] >= 5000
