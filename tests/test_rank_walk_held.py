"""The rank walk's count of non-preemptible pending jobs per shape."""

from __future__ import annotations

from simkit import load
from test_rank_speed_semantics import busy

from corral.core.model import Job
from corral.formats.types import Node, Resources
from corral.policies import load_policy


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
