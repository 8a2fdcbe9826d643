"""Rules that real traces showed were missing (issue "Fair on real traces"), each as a scenario
whose event log shows it: preemption stability (a default minimum run time, per project, never
in the cycle that started the attempt, protection for a job preempted many times)."""

from __future__ import annotations

import pytest
from simkit import job, preempted, quota, run_checked, show, start_of

from corral.core.decide import decide
from corral.core.model import Job
from corral.formats import Node, Resources, parse_quota
from corral.formats.types import SchedulerConfig
from corral.policies import load_policy

LONG = 100_000
DEFAULT = None  # in a scenario's scheduler: keep corral's default (see simkit.without_protection)


# --- stability (DESIGN.md §3.9) ---------------------------------------------------------------


def _borrowed_pool(extra: str = "", **scheduler) -> dict:
    # 4 one-GPU nodes, guarantees a=2, c=2. a borrows all 4 GPUs from t=0; c asks for 2
    # (within its guarantee) at t=10.
    q = quota({"a": {"gpu": 1}, "c": {"gpu": 1}}, extra=extra)
    jobs = [job(f"a{i}", "a", 1, submit=0, duration=LONG) for i in range(4)]
    jobs.append(job("c1", "c", 1, workers=2, submit=10, duration=100))
    return {"cluster": "4x1:gpu", "quota": q, "scheduler": scheduler, "jobs": jobs}


def test_default_min_runtime_delays_the_reclaim_to_when_victims_are_five_minutes_old():
    r = run_checked(_borrowed_pool(preempt_min_runtime=DEFAULT))
    assert [t for t, _ in preempted(r)] == [300, 300], show(r)
    assert start_of(r, "c1")[0] == 300, show(r)


def test_min_runtime_per_project_from_the_quota_file():
    # a's own minimum (1 h) wins over [scheduler]'s default.
    r = run_checked(_borrowed_pool('[project_preempt_min_runtime]\na = "1h"\n', **{}))
    assert [t for t, _ in preempted(r)] == [3600, 3600], show(r)
    r = run_checked(_borrowed_pool('[project_preempt_min_runtime]\na = "0s"\n', **{}))
    assert [t for t, _ in preempted(r)] == [10, 10], show(r)


def test_a_bad_per_project_min_runtime_is_refused_in_one_line():
    text = quota({"a": {"gpu": 1}}, extra='[project_preempt_min_runtime]\na = "soon"\n')
    with pytest.raises(Exception, match=r"project_preempt_min_runtime\.a: must be a duration"):
        parse_quota(text)
    text = quota({"a": {"gpu": 1}}, extra='[project_preempt_min_runtime]\nzz = "5m"\n')
    with pytest.raises(Exception, match=r"project zz has no entry in \[project_membership\]"):
        parse_quota(text)


ONLY_C = quota({"c": {"gpu": 1}}, {"a": [".*"]})  # a has no guarantee: all it holds is lent


def _job(name: str, project: str, per: int, submit: float = 0.0, **kw) -> Job:
    return Job(name, name, project, "u", 0, Resources("gpu", per, 1), submit, **kw)


@pytest.mark.parametrize("policy", ["fair", "las", "srtf"])
def test_no_attempt_is_preempted_in_the_cycle_that_started_it(policy):
    # preempt_min_runtime 0: L started at t=100 on the only node; S, which would preempt it
    # (within c's guarantee; less service; less time left), arrives at that instant. Not in
    # this cycle: the decision asks to be woken one second later, and preempts then.
    config = SchedulerConfig(policy=policy, preempt_min_runtime=0.0)
    q = parse_quota(ONLY_C)
    pol = load_policy(config)
    snap = pol.snapshot([Node("n0", "gpu", 2)], q)
    long = _job("L", "a", 2, duration=LONG, attained=LONG * 2.0)
    snap.submit(long)
    snap.set_time(100)
    snap.start("L", ["n0"], 100)
    snap.submit(_job("S", "c", 1, submit=100, duration=10))
    d = decide(snap, pol)
    assert d.preemptions == [] and d.wake_at == 101, d
    snap.set_time(101)
    assert [p.job_id for p in decide(snap, pol).preemptions] == ["L"]


def test_a_job_preempted_many_times_is_protected_longer():
    # a's job was preempted 5 times already: beyond the first 2, each doubles its minimum run
    # time (100 s here, so 800 s). c's reclaim waits until then.
    config = SchedulerConfig(preempt_min_runtime=100.0)
    q = parse_quota(ONLY_C)
    pol = load_policy(config)
    snap = pol.snapshot([Node("n0", "gpu", 2)], q)
    snap.submit(_job("A", "a", 2, duration=LONG, preemptions=5))
    snap.start("A", ["n0"], 0)
    snap.set_time(10)
    snap.submit(_job("C", "c", 1, submit=10))
    d = decide(snap, pol)
    assert d.preemptions == [] and d.wake_at == 800, d
    snap.set_time(800)
    assert [p.job_id for p in decide(snap, pol).preemptions] == ["A"]
