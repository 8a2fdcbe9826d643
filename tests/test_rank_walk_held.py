"""The shortcuts of the rank walk and of las victim searches give what the plain ones give:
shapes held out of the walk from the start, the count of non-preemptible pending jobs per
shape, and victims read queue by queue from the las indexes."""

from __future__ import annotations

from simkit import load
from test_rank_speed_semantics import busy, full_node_snapshot

from corral.core.cycle import Cycle
from corral.core.model import Job
from corral.formats.types import Node, Resources
from corral.policies import load_policy
from corral.policies.ranked import RankPolicy, _Walk
from corral.sim.engine import SimOptions, Simulator


def test_a_held_shape_joins_the_walk_if_a_job_before_its_first_preempts():
    # Shapes of 2 and 4 accelerators are held out from the start. Without a preemption the
    # walk never shows them; after a1 preempts, the shape whose first job comes later (b1)
    # is walked, the one whose first job came earlier (c1) stays dropped, as if reached.
    snap = full_node_snapshot("srtf")
    ranks = {"c1": 5, "a1": 10, "b1": 20, "a2": 30, "b2": 40}
    per = {"a": 1, "b": 2, "c": 4}
    for name, rank in ranks.items():
        resources = Resources("gpu", per[name[0]])
        snap.submit(Job(name, name, "a", "u", 0, resources, 0.0, duration=rank))

    def walked(preempt_after: str | None) -> list[str]:
        cycle = Cycle(snap)
        walk, seen = _Walk(cycle, {}, lambda shape, key: shape[1] > 1), []
        for _, job_ in walk:
            seen.append(job_.name)
            if job_.name == preempt_after:
                cycle.preempt([snap.running["r"]], (0,), job_, "test")
        return seen

    assert walked(None) == ["a1", "a2"]
    assert walked("a1") == ["a1", "b1", "a2", "b2"]


def test_pending_jobs_that_may_not_be_preempted_are_counted_per_shape():
    scenario = load(busy("las", 1, 0))
    snap = load_policy(scenario.quota.scheduler).snapshot([Node("n0", "gpu", 8)], scenario.quota)
    for name, preemptible in [("x", False), ("y", False), ("z", True)]:
        job_ = Job(name, name, "a", "u", 0, Resources("gpu", 2), 0.0, preemptible=preemptible)
        snap.submit(job_)
    assert snap.pending.fixed == {("gpu", 2, 1): 2}
    snap.withdraw("x")
    assert snap.pending.fixed == {("gpu", 2, 1): 1}
    snap.withdraw("y")
    assert not snap.pending.fixed


def test_las_victims_queue_by_queue_are_the_ranked_order():
    # Many jobs start together in the busy scenario: the ties by start must come by id.
    for seed, stop in [(1, 1500), (2, 2500), (3, 2000)]:
        scenario = load(busy("las", seed, 0))
        policy = load_policy(scenario.quota.scheduler)
        options = SimOptions(max_sim_time=stop)
        sim = Simulator(scenario.nodes, scenario.quota, scenario.jobs, policy, options)
        sim.run()
        cycle = Cycle(sim.snap)
        keep = policy._candidate(cycle, True)
        compared = 0
        for accelerator in sim.snap.cluster.by_type:
            for rank in range(len(policy.thresholds)):
                worse, worst_first = policy.candidates(cycle, accelerator, rank)
                plain = policy.indexed_worse(cycle, accelerator, rank, keep)
                assert sorted(r.job.id for r in worse) == sorted(r.job.id for r in plain)
                ranked = list(RankPolicy.worst_first(policy, cycle, plain))
                assert list(worst_first) == ranked
                compared += len(ranked)
        assert compared > 0
