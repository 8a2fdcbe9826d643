"""The shortcuts of the rank walk and of las victim searches give what the plain ones give:
the count of non-preemptible pending jobs per shape, and victims read queue by queue from the
las indexes."""

from __future__ import annotations

from simkit import load
from test_rank_speed_semantics import busy

from corral.core.cycle import Cycle
from corral.core.model import Job
from corral.formats.types import Node, Resources
from corral.policies import load_policy
from corral.policies.ranked import RankPolicy
from corral.sim.engine import SimOptions, Simulator


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
