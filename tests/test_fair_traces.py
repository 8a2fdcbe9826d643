"""Rules that real traces showed were missing (issue "Fair on real traces"), each as a scenario
whose event log shows it: preemption stability (a default minimum run time, per project, never
in the cycle that started the attempt, protection for a job preempted many times)."""

from __future__ import annotations

import pytest
from simkit import events, job, preempted, quota, run_checked, show, start_of, starts

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


# --- reclaim (DESIGN.md §3.7) -------------------------------------------------------------------


def test_fractional_guarantee_reclaim_takes_a_borrower_below_by_less_than_one_job():
    # The docs' quota: 8 GPUs, vision 4.8, nlp 3.2. nlp runs two 3-GPU jobs (6 of its 3.2);
    # alice (vision, holding 0) submits two 2-GPU jobs. Preempting n2 leaves nlp at 3 < 3.2,
    # but vision at 4 of 4.8 is further below its own (0.83 < 0.94): the reclaim happens, and
    # n2 (beyond nlp's guarantee once back in the queue) never takes it back.
    q = quota({"vision": {"gpu": 4.8}, "nlp": {"gpu": 3.2}})
    jobs = [
        job("n1", "nlp", 3, submit=0, duration=5000),
        job("n2", "nlp", 3, submit=1, duration=5000),
        job("v1", "vision", 2, submit=10, duration=1000, user="alice"),
        job("v2", "vision", 2, submit=10, duration=1000, user="alice"),
    ]
    r = run_checked({"cluster": "2x4:gpu", "quota": q, "jobs": jobs})
    assert preempted(r) == [(10, "n2")], show(r)
    assert start_of(r, "v1")[0] == 10 and start_of(r, "v2")[0] == 10, show(r)
    assert start_of(r, "n2", 1)[0] == 1010, show(r)  # when vision's jobs end, not before


def test_fractional_reclaim_not_when_the_victim_would_end_further_below_its_guarantee():
    # As above, but vision's guarantee is 1.6 and nlp's 6.4 (quota 8): vision's 2 GPUs would
    # put it at 1.25 of its guarantee, nlp at 3 of 6.4 (0.47): no reclaim (v1 is beyond its
    # guarantee anyway, so it may only wait).
    q = quota({"vision": {"gpu": 1.6}, "nlp": {"gpu": 6.4}})
    jobs = [
        job("n1", "nlp", 3, submit=0, duration=5000),
        job("n2", "nlp", 3, submit=1, duration=5000),
        job("v1", "vision", 1, workers=2, submit=10, duration=1000),
    ]
    r = run_checked({"cluster": "2x4:gpu", "quota": q, "jobs": jobs})
    assert preempted(r) == [], show(r)


def test_reclaim_tries_an_older_victim_that_frees_a_whole_node():
    # 3 nodes x 8; guarantees a 20, b 4. b holds 12: b-old (a whole node, gpu-0), then b1
    # and b2 (2 GPUs each, beside a's a1 and a2, 6 each, on gpu-1 and gpu-2). a's a3 (4 GPUs,
    # within its guarantee) arrives. b's two most recent jobs fill half its budget of 8, and
    # b-old no longer fits in the rest; they free no 4-GPU block. Taken in victim order until
    # a3 fits, then the ones not needed given back, b-old alone is chosen (b keeps its 4).
    q = quota({"a": {"gpu": 5}, "b": {"gpu": 1}})
    jobs = [
        job("b-old", "b", 8, submit=0, duration=LONG),
        job("a1", "a", 6, submit=1, duration=LONG),
        job("a2", "a", 6, submit=1, duration=LONG),
        job("b1", "b", 2, submit=2, duration=LONG),
        job("b2", "b", 2, submit=3, duration=LONG),
        job("a3", "a", 4, submit=10, duration=100),
    ]
    r = run_checked({"cluster": "3x8:gpu", "quota": q, "jobs": jobs})
    assert [n for _, _, n in starts(r)[:5]] == [
        ["gpu-0"],
        ["gpu-1"],
        ["gpu-2"],
        ["gpu-1"],
        ["gpu-2"],
    ]
    assert preempted(r) == [(10, "b-old")], show(r)
    assert start_of(r, "a3") == (10, ["gpu-0"]), show(r)


def test_a_head_job_too_big_for_the_guarantee_does_not_hold_back_its_projects_reclaims():
    # 4 nodes x 8; guarantees p 14.7, q 17.3. q holds all 32 GPUs. p's head job (16 GPUs) can
    # never be within its guarantee; its two 2-GPU jobs behind it are, and reclaim one of q's
    # jobs (q stays at 24, above its 17.3). The head waits as a borrower.
    q = quota({"p": {"gpu": 14.7}, "q": {"gpu": 17.3}})
    jobs = [job(f"q{i}", "q", 8, submit=i, duration=LONG) for i in range(1, 5)]
    jobs.append(job("big", "p", 8, workers=2, submit=5, duration=100))
    jobs += [job(f"s{i}", "p", 2, submit=10, duration=100) for i in (1, 2)]
    r = run_checked({"cluster": "4x8:gpu", "quota": q, "jobs": jobs})
    assert preempted(r) == [(10, "q4")], show(r)
    assert start_of(r, "s1") == (10, ["gpu-3"]) and start_of(r, "s2") == (10, ["gpu-3"])


# --- capacity held while victims stop (DESIGN.md §3.9) ------------------------------------------


def test_the_simulator_gives_a_preemptor_first_pick_of_what_its_victims_freed():
    # 6 GPUs on one node; guarantees p, r, w 2 each. w holds 3 (w1, protected for 1 h), r 1,
    # p 2 (l1, l2, priority 0). r's rj (1 GPU, within r's guarantee, first in bastion
    # order) finds no room and nothing to reclaim; at t=10 p's pj (priority 5) preempts l1 or l2.
    # In the next cycle at that instant rj would come first and take the GPU freed, and pj
    # would preempt the other too: the preemptor has first pick, as live (DESIGN.md §3.9).
    q = quota({"p": {"gpu": 1}, "r": {"gpu": 1}, "w": {"gpu": 1}})
    q += '[project_preempt_min_runtime]\nw = "1h"\n'
    jobs = [job("w1", "w", 3, duration=LONG), job("r1", "r", 1, duration=LONG)]
    jobs += [job(f"l{i}", "p", 1, duration=LONG) for i in (1, 2)]
    jobs += [job("rj", "r", 1, submit=9), job("pj", "p", 1, submit=10, priority=5)]
    r = run_checked({"cluster": "1x6:gpu", "quota": q, "jobs": jobs})
    assert len(preempted(r)) == 1, show(r)
    assert start_of(r, "pj")[0] == 10 and start_of(r, "rj")[0] > 10, show(r)


def test_a_preemptor_keeps_what_its_first_victim_freed_while_the_other_stops():
    # One 8-GPU node; guarantees vision 4, ops 2, nlp 2. nlp holds it all (n1..n4, 2 GPUs
    # each). vision's P (4 GPUs) reclaims n4 and n3; live, n4 stops at once and n3 takes its
    # grace period. ops's X (1 GPU, within its guarantee, before P in bastion order: 0.5 < 1)
    # arrives: it must not take the 2 GPUs n4 freed, which P counts on.
    config = SchedulerConfig(preempt_min_runtime=0.0)
    q = parse_quota(quota({"vision": {"gpu": 2}, "ops": {"gpu": 1}, "nlp": {"gpu": 1}}))
    pol = load_policy(config)
    snap = pol.snapshot([Node("n0", "gpu", 8)], q)
    for i in range(1, 5):
        snap.submit(_job(f"n{i}", "nlp", 2, submit=i))
        snap.start(f"n{i}", ["n0"], i)
    snap.set_time(100)
    snap.submit(_job("P", "vision", 4, submit=100))
    d = decide(snap, pol)
    assert [(p.job_id, p.preemptor) for p in d.preemptions] == [("n4", "P"), ("n3", "P")]
    for p in d.preemptions:
        snap.mark_terminating(p.job_id, p.preemptor)
    snap.set_time(101)
    snap.stop("n4")  # gone at once; n3 is still stopping
    snap.submit(_job("X", "ops", 1, submit=101))
    d = decide(snap, pol)
    assert "X" not in [s.job_id for s in d.starts], d
    assert d.reason(snap.pending.jobs["P"]).code == "preempting"
    snap.stop("n3")
    snap.set_time(102)
    assert "P" in [s.job_id for s in decide(snap, pol).starts]


def test_a_job_preempted_ten_times_is_not_preempted_again():
    config = SchedulerConfig(preempt_min_runtime=100.0)
    q = parse_quota(ONLY_C)
    pol = load_policy(config)
    snap = pol.snapshot([Node("n0", "gpu", 2)], q)
    snap.submit(_job("A", "a", 2, duration=LONG, preemptions=10))
    snap.start("A", ["n0"], 0)
    snap.set_time(10 * 86400)
    snap.submit(_job("C", "c", 1, submit=10))
    d = decide(snap, pol)
    assert d.preemptions == [] and d.wake_at is None, d


# --- fair share over time (DESIGN.md §3.3, §3.6) ---------------------------------------------


def _two_borrowers(**scheduler) -> dict:
    # 4 one-GPU nodes, guarantees p=2, s=2. p borrows the whole pool for 10 h (p1); then p2
    # and s2 (3 GPUs each, beyond either guarantee) wait for it, p2 submitted first.
    q = quota({"p": {"gpu": 1}, "s": {"gpu": 1}})
    jobs = [
        job("p1", "p", 1, workers=4, submit=0, duration=36_000),
        job("p2", "p", 1, workers=3, submit=100, duration=1000),
        job("s2", "s", 1, workers=3, submit=200, duration=1000),
    ]
    return {"cluster": "4x1:gpu", "quota": q, "scheduler": scheduler, "jobs": jobs}


def test_among_borrowers_the_team_with_least_recent_usage_goes_first():
    r = run_checked(_two_borrowers())  # the default half-life: s has used nothing, p 40 GPU-h
    assert start_of(r, "s2")[0] == 36_000 and start_of(r, "p2")[0] == 37_000, show(r)
    # With no decay (0s), borrowers go by what each holds now: a tie, the older job first.
    r = run_checked(_two_borrowers(usage_half_life="0s"))
    assert start_of(r, "p2")[0] == 36_000 and start_of(r, "s2")[0] == 37_000, show(r)


def _small_team_behind_a_stream(**scheduler) -> dict:
    # 2 two-GPU nodes, guarantees big=3, s=1. big keeps every GPU busy with one-GPU jobs that
    # end at different times; s's one job needs a whole node (2 GPUs, beyond its guarantee):
    # a free GPU is always taken by big's next job before a second one frees beside it.
    q = quota({"big": {"gpu": 3}, "s": {"gpu": 1}})
    jobs = [job(f"b{i:02d}", "big", 1, submit=0, duration=1000 + 250 * (i % 4)) for i in range(60)]
    jobs.append(job("s1", "s", 2, submit=10, duration=100))
    return {"cluster": "2x2:gpu", "quota": q, "scheduler": scheduler, "jobs": jobs}


def test_a_job_past_the_aging_limit_holds_the_reservation():
    r = run_checked(_small_team_behind_a_stream(aging_limit="1h"))
    t, _ = start_of(r, "s1")
    assert 3610 <= t <= 3610 + 1750, show(r)  # reserved at 1 h, started when a node drained
    last_big = max(u for u, name, _ in starts(r) if name.startswith("b"))
    assert t < last_big, show(r)
    r = run_checked(_small_team_behind_a_stream(aging_limit="0s"))  # never: it waits it out
    assert start_of(r, "s1")[0] > max(u for u, name, _ in starts(r) if name.startswith("b"))


def test_the_fair_share_keys_are_durations_with_defaults():
    assert (SchedulerConfig().usage_half_life, SchedulerConfig().aging_limit) == (86400, 43200)
    text = quota(
        {"a": {"gpu": 1}}, extra='[scheduler]\nusage_half_life = "2d"\naging_limit = "0s"\n'
    )
    scheduler = parse_quota(text).scheduler
    assert (scheduler.usage_half_life, scheduler.aging_limit) == (172800, 0)
    bad = quota({"a": {"gpu": 1}}, extra='[scheduler]\naging_limit = "later"\n')
    with pytest.raises(Exception, match=r"aging_limit: must be a duration"):
        parse_quota(bad)


def test_jobs_behind_a_head_that_may_reserve_reclaim_beside_its_reservation():
    # 2 nodes x 8; guarantees p 8, q 8. q borrows 12 (q1 a whole node, q2 4 GPUs beside p's
    # p0). p's head job big (8 GPUs: p would hold 12 of its 8) may hold the reservation (it
    # alone fits in the guarantee), so it ends p's first pass; small behind it (2 GPUs, within
    # p's guarantee) reclaims in the second, beside big's reservation: not q1, the job big
    # waits for, but q2 (q keeps its 8). big keeps the reservation and starts when q1 ends.
    q = quota({"p": {"gpu": 1}, "q": {"gpu": 1}})
    jobs = [
        job("q1", "q", 8, submit=0, duration=2000),
        job("p0", "p", 4, submit=1, duration=LONG),
        job("q2", "q", 4, submit=2, duration=LONG),
        job("big", "p", 8, submit=400, duration=100),
        job("small", "p", 2, submit=400, duration=100),
    ]
    r = run_checked({"cluster": "2x8:gpu", "quota": q, "jobs": jobs})
    assert preempted(r) == [(400, "q2")], show(r)
    assert start_of(r, "small") == (400, ["gpu-1"]), show(r)
    assert start_of(r, "big") == (2000, ["gpu-0"]), show(r)


def test_a_reclaim_does_not_take_the_place_of_a_job_a_reservation_waits_for():
    # 2 nodes x 8; guarantees p, q, r, a 4 each. q borrows: q3 (4 GPUs on gpu-0, beside r's r1)
    # and q1 (a whole node, gpu-1, started last, ends by its max_runtime). a's a1 (8 GPUs)
    # passes the aging limit (10 min) and holds the reservation: gpu-1, when q1 ends. p's
    # small (within p's guarantee, no max_runtime) reclaims: q1 comes first in victim order
    # (most recently started), but it is the job a1 waits for, and small would sit in its
    # place: q3 instead.
    q = quota({"p": {"gpu": 1}, "q": {"gpu": 1}, "r": {"gpu": 1}, "a": {"gpu": 1}})
    jobs = [
        job("q3", "q", 4, submit=0, duration=LONG),
        job("r1", "r", 4, submit=0, duration=LONG),
        job("q1", "q", 8, submit=1, duration=2000, max_runtime=2000),
        job("a1", "a", 8, submit=2, duration=100),
        job("small", "p", 2, submit=700, duration=100),
    ]
    scenario = {"cluster": "2x8:gpu", "quota": q, "scheduler": {"aging_limit": "10m"}}
    r = run_checked({**scenario, "jobs": jobs})
    assert preempted(r) == [(700, "q3")], show(r)
    assert start_of(r, "small") == (700, ["gpu-0"]), show(r)
    assert start_of(r, "a1") == (2001, ["gpu-1"]), show(r)


def test_a_refused_reclaim_is_tried_again_with_the_jobs_each_project_could_give_alone():
    # 3 nodes x 8; guarantees p 8, q 4, r 2, s 10. r holds r1 (a whole node; 4x its
    # guarantee), q holds qbig (a whole node) and q2 (4 GPUs beside s's s1). p's pj (8 GPUs,
    # within p's guarantee) finds no room in each project's budget (r1 is beyond r's 6,
    # qbig beyond what q has left once q2, more recent, is taken). Taken in victim order, r1
    # (the most over-served project's) makes room, but leaves r with nothing, below p's share:
    # refused. Tried again with the jobs each project could give up alone, qbig is taken
    # (q keeps its 4).
    q = quota({"p": {"gpu": 8}, "q": {"gpu": 4}, "r": {"gpu": 2}, "s": {"gpu": 10}})
    jobs = [
        job("qbig", "q", 8, submit=0, duration=LONG),
        job("r1", "r", 8, submit=0, duration=LONG),
        job("s1", "s", 4, submit=0, duration=LONG),
        job("q2", "q", 4, submit=1, duration=LONG),
        job("pj", "p", 8, submit=400, duration=100),
    ]
    r = run_checked({"cluster": "3x8:gpu", "quota": q, "jobs": jobs})
    assert start_of(r, "q2") == (1, ["gpu-0"]), show(r)  # beside s1
    assert preempted(r) == [(400, "qbig")], show(r)
    assert start_of(r, "pj") == (400, ["gpu-1"]), show(r)


# --- reservations that do not idle the pool (docs/scheduling.md) -------------------------------


def _reservation_with_unknown_due(*late: dict) -> dict:
    # 3 nodes x 4; guarantees p 4, q 6, r 2; b none. No job can be reclaimed: q holds its
    # guarantee, r1 (3 GPUs) is more than r has above its own. None has a max_runtime.
    # p's p1 (4 GPUs, within p's guarantee) reserves gpu-0, due when q1 ends (at 1000): not
    # known. `late` come after it.
    q = quota({"p": {"gpu": 4}, "q": {"gpu": 6}, "r": {"gpu": 2}}, {"b": [".*"]})
    jobs = [
        job("q1", "q", 2, submit=0, duration=1000),  # gpu-0, 2 free beside it
        job("q2", "q", 4, submit=0, duration=LONG),  # gpu-1
        job("r1", "r", 3, submit=0, duration=LONG),  # gpu-2, 1 free beside it
        job("p1", "p", 4, submit=10, duration=100),
        *late,
    ]
    return {"cluster": "3x4:gpu", "quota": q, "jobs": jobs}


def test_a_borrower_runs_in_a_reservation_not_known_to_be_due_and_is_reclaimed_when_it_is():
    r = run_checked(_reservation_with_unknown_due(job("b1", "b", 2, submit=20, duration=LONG)))
    assert start_of(r, "b1") == (20, ["gpu-0"]), show(r)  # beside q1, in what p1 holds
    assert preempted(r) == [(1000, "b1")], show(r)
    assert "reclaimed by project p" in events(r, "preempt")[0]["reason"], show(r)
    assert start_of(r, "p1") == (1000, ["gpu-0"]), show(r)


def test_what_a_reservation_holds_is_not_lent_to_jobs_it_could_not_take_back():
    # r2 cannot be preempted (r is borrowing); p2 can, but p holds less than its guarantee.
    # Neither uses gpu-0 beside q1 while p1 waits.
    late = [
        job("r2", "r", 2, submit=20, duration=100, preemptible=False),
        job("p2", "p", 2, submit=20, duration=100),
    ]
    r = run_checked(_reservation_with_unknown_due(*late))
    assert not preempted(r) and start_of(r, "p1") == (1000, ["gpu-0"]), show(r)
    assert all(t >= 1000 for t, name, _ in starts(r) if name in ("r2", "p2")), show(r)
