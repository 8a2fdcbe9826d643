"""DESIGN.md §3, rule by rule: each test builds a small scenario, runs the simulator and asserts
on the event log (who starts when and where, who is preempted and why). Every log also goes
through `check_invariants` (no over-commit, whole gangs, domains, exclusivity, every job ends).

Node names are single digits per group so that name order is also numeric order.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from simkit import (
    brief,
    ends,
    events,
    job,
    load,
    preempted,
    quota,
    run_checked,
    show,
    start_of,
    starts,
)

from corral.core.admission import check_admissible
from corral.core.decide import decide
from corral.core.model import Job, Start
from corral.core.snapshot import Snapshot
from corral.formats import FormatError, Node, Resources, parse_quota
from corral.policies import load_policy

LONG = 10_000  # a duration that outlasts every scenario


def nodes(prefix: str, n: int, count: int, domain: str | None = None, accel: str = "gpu"):
    group = {"name": f"{prefix}{{0..{n - 1}}}", "accelerator": accel, "count": count}
    if domain is not None:
        group["domain"] = domain
    return group


# --- rule 1: gang ---------------------------------------------------------------------------


def test_rule1_gang_starts_whole_or_not_at_all():
    # n1 is empty the whole time, so one worker of `gang` could start at once; the gang needs
    # 4 free on two nodes and must wait for `r` to leave n0, then start both workers together.
    sc = {
        "cluster": [nodes("n", 2, 4)],
        "jobs": [job("r", "p", 3, duration=100), job("gang", "p", 4, workers=2, submit=1)],
    }
    r = run_checked(sc)
    assert starts(r, "gang") == [(100, "gang", ["n0", "n1"])], show(r)
    assert ends(r)["gang"] == (200, "finish")


# --- rule 2: placement ----------------------------------------------------------------------


def test_rule2_best_fit_packs_the_fullest_node():
    # Three empty 8-GPU nodes. Best fit puts each job on the fullest node that still fits and
    # packs a gang's workers onto one node, keeping n2 whole for as long as possible.
    sc = {
        "cluster": [nodes("n", 3, 8)],
        "jobs": [
            job("a", "p", 6, duration=LONG),  # n0 (all equal: first by name)
            job("b", "p", 4, submit=1, duration=LONG),  # n1: n0 has only 2 left
            job("c", "p", 2, submit=2, duration=LONG),  # n0: 2 free is the tightest fit
            job("d", "p", 4, submit=3, duration=LONG),  # n1 (4 free) rather than empty n2
            job("e", "p", 4, workers=2, submit=4, duration=LONG),  # both workers on n2
        ],
    }
    r = run_checked(sc)
    assert [(j, n) for _, j, n in starts(r)] == [
        ("a", ["n0"]),
        ("b", ["n1"]),
        ("c", ["n0"]),
        ("d", ["n1"]),
        ("e", ["n2", "n2"]),
    ], show(r)


def test_rule2_slice_stays_in_one_domain_and_fullest_domain_first():
    # Domains d0 = {a0, a1}, d1 = {b0, b1}, 4 GPUs per node. After `x` takes 2 GPUs on a0,
    # the 2x4 gang cannot use a1 + b0 (two domains): it takes b0 + b1. The 2-GPU jobs then go
    # to the fullest domain that fits (d0), a0 first (tightest node).
    sc = {
        "cluster": [nodes("a", 2, 4, "d0"), nodes("b", 2, 4, "d1")],
        "jobs": [
            job("x", "p", 2, duration=LONG),
            job("gang", "p", 4, workers=2, submit=1, duration=LONG),
            job("h", "p", 2, submit=2, duration=LONG),
            job("i", "p", 2, submit=3, duration=LONG),
        ],
    }
    r = run_checked(sc)
    assert [(j, n) for _, j, n in starts(r)] == [
        ("x", ["a0"]),
        ("gang", ["b0", "b1"]),
        ("h", ["a0"]),
        ("i", ["a1"]),
    ], show(r)


def test_rule2_exclusive_slice_owns_its_domain():
    # `x` asks for 1 GPU but exclusively: it owns domain d0 (8 GPUs) alone. `z` (1 GPU,
    # not exclusive) cannot use d0's 7 idle GPUs nor d1 (full), so it waits for x; the second
    # exclusive job `w` needs an empty domain and waits until y leaves d1.
    sc = {
        "cluster": [nodes("a", 2, 4, "d0"), nodes("b", 2, 4, "d1")],
        "jobs": [
            job("x", "p", 1, exclusive=True, duration=1000),
            job("y", "p", 4, workers=2, submit=1, duration=1000),
            job("z", "p", 1, submit=2, duration=10),
            job("w", "p", 1, exclusive=True, submit=3, duration=10),
        ],
    }
    r = run_checked(sc)
    assert brief(r, "start") == [
        (0, "start", "x", ("a0",)),
        (1, "start", "y", ("b0", "b1")),
        (1000, "start", "z", ("a0",)),  # d0 free again; d0 is now shared, so not for w
        (1001, "start", "w", ("b0",)),
    ], show(r)


def test_rule2_exclusive_domain_counts_nodes_of_every_type():
    # Domain d0 holds a gpu node and a cpu node. A cpu job on c0 makes d0 non-empty, so an
    # exclusive gpu slice may not take d0 even though its gpu node is idle.
    sc = {
        "cluster": [
            {"name": "g0", "accelerator": "gpu", "count": 4, "domain": "d0"},
            {"name": "c0", "accelerator": "cpu", "count": 4, "domain": "d0"},
        ],
        "jobs": [
            job("cpu-job", "p", 1, accelerator="cpu", duration=50),
            job("excl", "p", 1, exclusive=True, submit=1, duration=10),
        ],
    }
    r = run_checked(sc)
    assert start_of(r, "excl") == (50, ["g0"]), show(r)


# --- rule 3: order across projects ----------------------------------------------------------


def test_rule3_projects_served_by_lowest_usage_over_guarantee():
    # 8 one-GPU nodes; p1 is guaranteed 6 and p2 2. Both queues fill up behind blockers that
    # finish at t=100; then the 8 slots go out by the ratio after admission (ties: older head):
    # a1 1/6, a2 2/6, a3 3/6 (older than b1 1/2), b1, a4 4/6, a5 5/6, a6 1.0 (older than b2),
    # b2 1.0. FIFO would give a1..a8.
    q = quota({"p1": {"gpu": 3}, "p2": {"gpu": 1}})
    jobs = [
        job("blk1", "p1", 1, workers=4, duration=100),
        job("blk2", "p2", 1, workers=4, duration=100),
    ]
    jobs += [job(f"a{i}", "p1", 1, submit=i, duration=1000) for i in range(1, 9)]
    jobs += [job(f"b{i}", "p2", 1, submit=10 + i, duration=1000) for i in range(1, 5)]
    r = run_checked({"cluster": "8x1:gpu", "quota": q, "jobs": jobs})
    at_100 = [j for t, j, _ in starts(r) if t == 100]
    assert at_100 == ["a1", "a2", "a3", "b1", "a4", "a5", "a6", "b2"], show(r)


def test_rule3_ratio_is_the_maximum_over_types():
    # p1 borrows the whole tpu pool (ratio 2 on tpu). For the next gpu slot p1's head `a`
    # (older) would give gpu ratio 1.5, p2's `b` 1.5 too; but p1's ratio is max(1.5, 2) = 2,
    # so p2 goes first. (Both borrow: with usage decayed, recent usage would order them.)
    q = quota({"p1": {"gpu": 1, "tpu": 1}, "p2": {"gpu": 1, "tpu": 1}})
    jobs = [
        job("t1", "p1", 4, accelerator="tpu", duration=LONG),
        job("blk", "p2", 4, duration=100),
        job("a", "p1", 3, submit=1),
        job("b", "p2", 3, submit=2),
    ]
    scheduler = {"usage_half_life": "0s"}
    r = run_checked(
        {"cluster": "1x4:gpu,1x4:tpu", "quota": q, "jobs": jobs, "scheduler": scheduler}
    )
    assert start_of(r, "b") == (100, ["gpu-0"]), show(r)
    assert start_of(r, "a") == (200, ["gpu-0"]), show(r)


def test_rule3_tie_broken_by_project_name():
    # Equal shares, equal usage, equal submit times: alpha before beta.
    q = quota({"alpha": {"gpu": 1}, "beta": {"gpu": 1}})
    jobs = [
        job("blk-a", "alpha", 1, duration=100),
        job("blk-b", "beta", 1, duration=100),
        job("b", "beta", 1, workers=2, submit=1),
        job("a", "alpha", 1, workers=2, submit=1),
    ]
    r = run_checked({"cluster": "2x1:gpu", "quota": q, "jobs": jobs})
    assert start_of(r, "a")[0] == 100 and start_of(r, "b")[0] == 200, show(r)


def test_rule3_project_without_guarantee_comes_last_and_is_reclaimed():
    # `guest` has no share: its older job waits until every guaranteed job has a place; it
    # runs on leftovers and is the first to go when a guaranteed project needs the room.
    q = quota({"p1": {"gpu": 1}}, members={"guest": [".*"]})
    jobs = [
        job("blk", "p1", 1, workers=2, duration=100),
        job("g", "guest", 1, submit=1, duration=LONG),
        job("a", "p1", 1, submit=2, duration=200),
        job("a2", "p1", 1, submit=3, duration=50),
        job("a3", "p1", 1, submit=200, duration=50),
    ]
    r = run_checked({"cluster": "2x1:gpu", "quota": q, "jobs": jobs})
    assert brief(r, "start", "preempt")[:6] == [
        (0, "start", "blk", ("gpu-0", "gpu-1")),
        (100, "start", "a", ("gpu-0",)),
        (100, "start", "a2", ("gpu-1",)),
        (150, "start", "g", ("gpu-1",)),  # leftovers only
        (200, "preempt", "g"),  # a3 is within p1's guarantee: reclaim from guest
        (200, "start", "a3", ("gpu-1",)),
    ], show(r)


# --- rule 4: order within a project ---------------------------------------------------------


def test_rule4_priority_then_weighted_user_round_robin_then_submit_time():
    # One project, 5 one-GPU nodes behind a blocker. When it ends: carol's high-priority job
    # first; then users take turns weighted by what each already has ahead: alice a1 (2 GPUs),
    # bob b1 (bob 0 < alice 2), bob b2 (1 < 2). Next alice and bob tie at 2 ahead, and a2 is
    # older than b3: a2 comes before b3 (both start at t=200, a2 first).
    q = quota({"p": {"gpu": 1}})
    jobs = [
        job("blk", "p", 1, workers=5, duration=100, priority=100),
        job("a1", "p", 1, workers=2, submit=1, user="alice"),
        job("a2", "p", 1, workers=2, submit=2, user="alice"),
        job("b1", "p", 1, submit=3, user="bob"),
        job("b2", "p", 1, submit=4, user="bob"),
        job("b3", "p", 1, submit=5, user="bob"),
        job("hi", "p", 1, submit=6, user="carol", priority=5),
    ]
    r = run_checked({"cluster": "5x1:gpu", "quota": q, "jobs": jobs})
    assert [(t, j) for t, j, _ in starts(r)] == [
        (0, "blk"),
        (100, "hi"),
        (100, "a1"),
        (100, "b1"),
        (100, "b2"),
        (200, "a2"),
        (200, "b3"),
    ], show(r)


def test_rule4_name_breaks_the_last_tie():
    # Same user, same priority, same submit time: by name.
    jobs = [
        job("blk", "p", 1, duration=100),
        job("job-b", "p", 1, submit=1),
        job("job-a", "p", 1, submit=1),
    ]
    r = run_checked({"cluster": "1x1:gpu", "jobs": jobs})
    assert [j for _, j, _ in starts(r)] == ["blk", "job-a", "job-b"], show(r)


# --- rule 5: backfill -----------------------------------------------------------------------


def test_rule5_blocked_job_does_not_block_the_jobs_behind_it():
    # `big` needs a whole 8-GPU node; both nodes have 2 free. The later `small` fits and
    # starts at once instead of queueing behind big; big starts when r1 leaves n0.
    sc = {
        "cluster": [nodes("n", 2, 8)],
        "jobs": [
            job("r1", "p", 6, duration=100),
            job("r2", "p", 6, duration=200),
            job("big", "p", 8, submit=1),
            job("small", "p", 2, submit=2, duration=50),
        ],
    }
    r = run_checked(sc)
    assert start_of(r, "small")[0] == 2, show(r)
    assert start_of(r, "big") == (100, ["n0"]), show(r)


# --- rule 6: no starvation (reservations) ---------------------------------------------------


def _stream(project: str, bounded: bool, stream_project: str | None = None) -> dict:
    """Two 4-GPU nodes full of 2-GPU jobs ending at 100, 150, 200, 250; `big` (a 2x4 gang,
    the whole pool) arrives at t=10, then a stream of 2-GPU jobs every 20 s."""
    jobs = []
    for i, d in enumerate([100, 150, 200, 250]):
        extra = {"max_runtime": d} if bounded else {}
        jobs.append(job(f"s{i}", project, 2, duration=d, **extra))
    jobs.append(job("big", project, 4, workers=2, submit=10))
    for k in range(12):
        extra = {"max_runtime": 100} if bounded else {}
        jobs.append(
            job(f"t{k:02d}", stream_project or project, 2, submit=20 + 20 * k, duration=90, **extra)
        )
    return {"cluster": [nodes("n", 2, 4)], "jobs": jobs}


def test_rule6_big_gang_not_starved_by_stream_of_small_jobs():
    # One project owns the pool. Without a reservation, every 2 GPUs that free up go to the
    # next small job and the 8-GPU gang waits until the stream dries up (t=470). With one, it
    # starts when the four jobs it waits for have finished: t=250, on both nodes.
    r = run_checked(_stream("p", bounded=False))
    assert start_of(r, "big") == (250, ["n0", "n1"]), show(r)
    # no small job of the stream started in the meantime
    assert all(t >= 250 for t, j, _ in starts(r) if j.startswith("t")), show(r)


def test_rule6_short_jobs_backfill_before_reservation_is_due():
    # Same, but every job declares max_runtime: the reservation is due at t=250, so a stream
    # job that surely ends by then may use the held GPUs (t00 at 100 ends by 200; t01 at 150
    # by 250); t02 (could run to 300) may not. big still starts at 250.
    r = run_checked(_stream("p", bounded=True))
    assert start_of(r, "big") == (250, ["n0", "n1"]), show(r)
    assert start_of(r, "t00")[0] == 100 and start_of(r, "t01")[0] == 150, show(r)
    assert all(t >= 250 for t, j, _ in starts(r) if j.startswith("t") and j >= "t02"), show(r)


def _two_projects(bounded_stream: bool) -> dict:
    # p2 fills both nodes with 2-GPU jobs ending at 100, 150, 200, 250 and keeps submitting;
    # p1's `big` (one 4-GPU worker, within p1's guarantee of 4) arrives at t=10. Reclaim is
    # off (preempt_min_runtime 1h), so big can only wait: it reserves n0, which is whole once
    # s0 and s1 end (t=150).
    q = quota({"p1": {"gpu": 1}, "p2": {"gpu": 1}})
    jobs = [job(f"s{i}", "p2", 2, duration=d) for i, d in enumerate([100, 150, 200, 250])]
    jobs.append(job("big", "p1", 4, submit=10))
    for k in range(8):
        short = bounded_stream and k % 2 == 0
        extra = {"max_runtime": 40, "duration": 40} if short else {"duration": 100}
        jobs.append(job(f"t{k}", "p2", 2, submit=20 + 20 * k, **extra))
    return {
        "cluster": [nodes("n", 2, 4)],
        "quota": q,
        "scheduler": {"preempt_min_runtime": "1h"},
        "jobs": jobs,
    }


def test_rule6_reservation_holds_nodes_against_later_jobs():
    r = run_checked(_two_projects(bounded_stream=False))
    assert start_of(r, "big") == (150, ["n0"]), show(r)
    # At t=100 n0 has 2 free GPUs and t0 is waiting, but they are held for big.
    assert start_of(r, "t0") == (200, ["n1"]), show(r)
    assert not [s for s in starts(r) if 100 <= s[0] < 150], show(r)


def test_rule6_no_backfill_on_held_capacity_when_due_time_is_unknown():
    # p2's running jobs declare no max_runtime, so nobody knows when the reservation will be
    # due: even t0, which declares 40 s, may not use n0's held GPUs.
    r = run_checked(_two_projects(bounded_stream=True))
    assert start_of(r, "big") == (150, ["n0"]), show(r)
    assert start_of(r, "t0")[0] >= 150, show(r)


def test_rule6_short_job_backfills_on_held_capacity_when_due_time_is_known():
    # As above, but p2's running jobs declare max_runtime, so the reservation is due at 150
    # (when s1 must end). t0 (max_runtime 40, arriving before s0 ends) fits in n0's 2 held
    # GPUs between 100 and 140 and starts at once; t1 (no max_runtime) may not.
    sc = _two_projects(bounded_stream=True)
    for spec in sc["jobs"][:4]:
        spec["max_runtime"] = spec["duration"]
    r = run_checked(sc)
    assert start_of(r, "t0") == (100, ["n0"]), show(r)
    assert start_of(r, "big") == (150, ["n0"]), show(r)
    assert start_of(r, "t1")[0] >= 200, show(r)


def test_rule6_reservation_kept_while_other_projects_are_within_their_guarantee():
    # Spread placement leaves p2's four 2-GPU jobs on four different 4-GPU nodes: p2 holds
    # exactly its guarantee (8 of 16), so p1's big (2 x 4, within p1's guarantee) can neither
    # fit nor reclaim. It must still hold a reservation: p3's stream of borrowed 2-GPU jobs may
    # not take the nodes it waits for. n0 and n1 are whole again at t=150 (s0, s1 end).
    # (Were they p2's, p2 would be above its guarantee and big would reclaim s0 and s1.)
    q = quota({"p1": {"gpu": 1}, "p2": {"gpu": 1}}, {"p3": [".*"]})
    jobs = [job(f"s{i}", "p2", 2, duration=d) for i, d in enumerate([100, 150, 200, 250])]
    jobs.append(job("big", "p1", 4, workers=2, submit=10))
    jobs += [job(f"t{k:02d}", "p3", 2, submit=20 + 20 * k, duration=90) for k in range(15)]
    sc = {
        "cluster": [nodes("n", 4, 4)],
        "quota": q,
        "scheduler": {"placement": "spread"},
        "jobs": jobs,
    }
    r = run_checked(sc)
    assert start_of(r, "big") == (150, ["n0", "n1"]), show(r)


def test_rule6_max_runtime_ends_a_job():
    # max_runtime is enforced: x would need 500 s but is stopped (fail) after 100.
    jobs = [job("x", "p", 1, duration=500, max_runtime=100), job("y", "p", 8, submit=1)]
    r = run_checked({"cluster": "1x8:gpu", "jobs": jobs})
    assert ends(r)["x"] == (100, "fail") and start_of(r, "y")[0] == 100, show(r)
    assert events(r, "fail")[0]["reason"] == "max_runtime exceeded"


# --- rule 7: reclaim ------------------------------------------------------------------------


def test_rule7_reclaim_victim_order():
    # 10 one-GPU nodes; guarantees a=2, b=3, c=5. a holds 5 (ratio 2.5), b holds 4 (1.33),
    # one node is free. c1 (5 workers, within c's guarantee) needs 4 victims:
    #   from a (most over-served): a-low (lowest priority), then a4, a3 (most recent first);
    #   a is then at its guarantee (2) and may not lose more, so the 4th comes from b:
    #   b3 (lowest priority in b).
    q = quota({"a": {"gpu": 2}, "b": {"gpu": 3}, "c": {"gpu": 5}})
    jobs = [job("a-low", "a", 1, priority=-5, duration=LONG)]
    jobs += [job(f"a{i}", "a", 1, submit=i, duration=LONG) for i in range(1, 5)]
    jobs += [
        job(f"b{i}", "b", 1, submit=4 + i, duration=LONG, priority=-1 if i == 3 else 0)
        for i in range(1, 5)
    ]
    jobs.append(job("c1", "c", 1, workers=5, submit=20))
    r = run_checked({"cluster": "10x1:gpu", "quota": q, "jobs": jobs})
    victims = events(r, "preempt")
    assert [(e["t"], e["job"]) for e in victims] == [
        (20, "a-low"),
        (20, "a4"),
        (20, "a3"),
        (20, "b3"),
    ], show(r)
    assert all("reclaimed by project c" in e["reason"] for e in victims)
    assert start_of(r, "c1") == (20, ["gpu-0", "gpu-3", "gpu-4", "gpu-7", "gpu-9"])


def test_rule7_reclaim_skips_non_preemptible_jobs():
    # a's lowest-priority job is non-preemptible (admitted within a's guarantee): it is never
    # a victim; c1 takes the two most recently started preemptible jobs instead.
    q = quota({"a": {"gpu": 1}, "c": {"gpu": 1}})
    jobs = [
        job("a-np", "a", 1, priority=-10, preemptible=False, duration=LONG),
        *[job(f"a{i}", "a", 1, submit=i, duration=LONG) for i in range(1, 4)],
        job("c1", "c", 1, workers=2, submit=10),
        job("c2", "c", 1, submit=11),  # c would then exceed its guarantee: no more reclaim
    ]
    r = run_checked({"cluster": "4x1:gpu", "quota": q, "jobs": jobs})
    assert preempted(r) == [(10, "a3"), (10, "a2")], show(r)
    assert start_of(r, "c1") == (10, ["gpu-2", "gpu-3"]), show(r)
    assert start_of(r, "c2")[0] == 110, show(r)


def test_rule7_reclaim_exclusive_slices():
    # Three 2-host v5e pools. p2 (guarantee 8 chips) borrows all three with one exclusive
    # slice each; p1 (guarantee 16) wants two exclusive slices: it reclaims the two most
    # recently started (js-c, js-b), which leaves p2 at its guarantee, and takes their pools.
    cluster = [nodes(f"pool{i}-", 2, 4, f"pool{i}", accel="v5e") for i in (1, 2, 3)]
    q = quota({"p1": {"v5e": 2}, "p2": {"v5e": 1}})
    jobs = [
        job(f"js-{c}", "p2", 4, accelerator="v5e", workers=2, exclusive=True, submit=i)
        for i, c in enumerate("abc")
    ]
    for spec in jobs:
        spec["duration"] = LONG
    jobs.append(
        job("two", "p1", 4, accelerator="v5e", workers=2, slices=2, exclusive=True, submit=10)
    )
    r = run_checked({"cluster": cluster, "quota": q, "jobs": jobs})
    assert preempted(r) == [(10, "js-c"), (10, "js-b")], show(r)
    assert start_of(r, "two") == (10, ["pool2-0", "pool2-1", "pool3-0", "pool3-1"]), show(r)


def test_rule7_domain_cleared_for_an_exclusive_preemptor_stays_clear():
    # Two domains of two 4-GPU nodes. p2 (guarantee 8) holds d0 whole with p2-a and borrows
    # 1 GPU in d1 with p2-b. p1's excl (exclusive, within p1's guarantee) needs an empty
    # domain: it reclaims p2-b. p2-c, arriving at the same time, must not be placed in d1
    # while excl is taking it over; otherwise excl preempts p2-c next, p2-b comes back into
    # d1, and the two trade places forever (a preemption loop at t=10).
    q = quota({"p1": {"gpu": 1}, "p2": {"gpu": 1}})
    jobs = [
        job("p2-a", "p2", 4, workers=2, submit=1, duration=1000),
        job("p2-b", "p2", 1, submit=2, duration=1000),
        job("excl", "p1", 1, exclusive=True, submit=10),
        job("p2-c", "p2", 1, submit=10, duration=300),
    ]
    sc = {"cluster": [nodes("a", 2, 4, "d0"), nodes("b", 2, 4, "d1")], "quota": q, "jobs": jobs}
    r = run_checked(sc)
    assert preempted(r)[:3] == [(10, "p2-b")], show(r)
    assert start_of(r, "excl") == (10, ["b0"]), show(r)
    assert start_of(r, "p2-c")[0] >= 110, show(r)


def _min_runtime_scenario() -> dict:
    # 4 one-GPU nodes, guarantees a=2, c=2; preempt_min_runtime 100 s. a holds all 4 GPUs
    # (started at 1, 50, 60, 70). c1 (2 GPUs, within c's guarantee) arrives at 120, when only
    # a1 is old enough to be a victim: freeing it alone would not make room.
    q = quota({"a": {"gpu": 1}, "c": {"gpu": 1}})
    jobs = [
        job("a1", "a", 1, submit=1, duration=LONG),
        job("a2", "a", 1, submit=50, duration=LONG),
        job("a3", "a", 1, submit=60, duration=LONG),
        job("a4", "a", 1, submit=70, duration=LONG),
        job("c1", "c", 1, workers=2, submit=120),
    ]
    return {
        "cluster": "4x1:gpu",
        "quota": q,
        "scheduler": {"preempt_min_runtime": 100},
        "jobs": jobs,
    }


def test_rule7_no_useless_preemption_and_no_young_victims():
    r = run_checked(_min_runtime_scenario())
    started: dict[str, float] = {}
    for e in events(r, "start", "preempt"):
        if e["event"] == "start":
            started[e["job"]] = e["t"]
        else:
            age = e["t"] - started[e["job"]]
            assert age >= 100, f"{e['job']} preempted {age} s after its start\n{show(r)}"
    # at 120 a1 alone is eligible and is not enough: nobody may be preempted before a2 is
    # old enough (t=150)
    assert all(t >= 150 for t, _ in preempted(r)), show(r)


def test_rule7_reclaim_when_victims_come_of_age():
    # At t=150 a2 reaches the minimum runtime: a1 and a2 together make room, so c1 reclaims
    # them then (most recently started first), without waiting for an unrelated event.
    r = run_checked(_min_runtime_scenario())
    assert preempted(r) == [(150, "a2"), (150, "a1")], show(r)
    assert start_of(r, "c1") == (150, ["gpu-0", "gpu-1"]), show(r)


def test_rule7_one_victim_serves_two_preemptors():
    # 4 nodes x 8 GPUs; a (guarantee 8) holds three whole nodes, b (guarantee 24) fills the
    # fourth with b0, b1 and still wants b2, b3 (4 GPUs each). Preempting one of a's jobs (a3,
    # the most recent) frees 8 GPUs: room for both. A second victim would be useless.
    q = quota({"a": {"gpu": 1}, "b": {"gpu": 3}})
    jobs = [job(f"a{i}", "a", 8, submit=i, duration=LONG) for i in range(1, 4)]
    jobs += [job(f"b{i}", "b", 4, submit=10, duration=1000) for i in range(4)]
    r = run_checked({"cluster": "4x8:gpu", "quota": q, "jobs": jobs})
    assert preempted(r) == [(10, "a3")], show(r)
    assert start_of(r, "b2") == (10, ["gpu-2"]) and start_of(r, "b3") == (10, ["gpu-2"])
    assert len(starts(r, "a2")) == 1, show(r)


def test_rule7_room_being_freed_is_not_taken_by_later_jobs():
    # Live, a victim takes a grace period to stop. n0, n1 x 4; p2 holds s1 (n0) and s2, s3
    # (n1), 6 GPUs, above its guarantee of 4; n0 has 2 free. p1's big (4 GPUs, within its
    # guarantee) reclaims s1. While s1 is stopping, p2's small t0 must not take n0's 2 free
    # GPUs: big counts on them, and s1 would then have been preempted for nothing.
    gpus = [Node(f"n{i}", "gpu", 4) for i in range(2)]
    snap, policy = _snap({"p1": {"gpu": 1}, "p2": {"gpu": 1}}, gpus)
    _run(snap, _job("s1", "p2", 2, accel="gpu"), ["n0"])
    _run(snap, _job("s2", "p2", 2, accel="gpu"), ["n1"])
    _run(snap, _job("s3", "p2", 2, accel="gpu"), ["n1"])
    snap.set_time(100)
    snap.submit(_job("big", "p1", 4, submit=10, accel="gpu"))
    d = decide(snap, policy)
    assert [p.job_id for p in d.preemptions] == ["s1"], d
    snap.mark_terminating("s1")
    snap.set_time(101)
    snap.submit(_job("t0", "p2", 2, submit=101, accel="gpu"))
    d = decide(snap, policy)
    assert d.starts == [] and d.preemptions == [], d
    assert d.reason(snap.pending.jobs["big"]).code == "preempting"


# --- rule 8: priority within a project ------------------------------------------------------


def test_rule8_high_priority_preempts_lowest_priority_most_recent():
    # One project on 4 one-GPU nodes. `high` (2 GPUs) preempts l2 (lowest priority), then l4
    # (most recently started among the priority-0 ones); l1 and l3 keep running.
    jobs = [
        job("l1", "p", 1, submit=1, duration=LONG),
        job("l2", "p", 1, submit=2, duration=LONG, priority=-1),
        job("l3", "p", 1, submit=3, duration=LONG),
        job("l4", "p", 1, submit=4, duration=LONG),
        job("high", "p", 1, workers=2, submit=10, priority=5),
    ]
    r = run_checked({"cluster": "4x1:gpu", "jobs": jobs})
    pre = events(r, "preempt")
    assert [(e["t"], e["job"]) for e in pre] == [(10, "l2"), (10, "l4")], show(r)
    assert all(e["reason"] == "preempted by higher-priority job high of project p" for e in pre)
    assert start_of(r, "high") == (10, ["gpu-1", "gpu-3"]), show(r)


def _swap(p1_share: int) -> dict:
    # n0, n1 with 4 GPUs. p1 runs low (3 GPUs, n0, priority -1) and mid (3 GPUs, n1); p2 runs
    # x (1 GPU, n0). high (p1, priority 10) needs a whole node: only mid's node can be made
    # whole (freeing low too would be useless). With mid gone p1 holds 3 - 3 + 4 = 7.
    q = quota({"p1": {"gpu": p1_share}, "p2": {"gpu": 1}})
    jobs = [
        job("low", "p1", 3, submit=1, priority=-1, duration=1000),
        job("mid", "p1", 3, submit=2, duration=1000),
        job("x", "p2", 1, submit=3, duration=1000),
        job("high", "p1", 4, submit=10, priority=10),
    ]
    return {"cluster": [nodes("n", 2, 4)], "quota": q, "jobs": jobs}


def test_rule8_swap_refused_when_it_grows_the_project_beyond_its_guarantee():
    # p1's guarantee is 6: 7 > 6, and 7 > 6 held before the swap: no preemption; high waits
    # for low to finish (n0 has 3 free then, so it preempts mid at t=1001: 4 <= 6).
    r = run_checked(_swap(p1_share=3))
    assert not [p for p in preempted(r) if p[0] < 1001], show(r)
    assert start_of(r, "high") == (1001, ["n1"]), show(r)


def test_rule8_swap_allowed_within_guarantee_and_cascades():
    # p1's guarantee is 7: high preempts mid (7 <= 7); mid, back in the queue, outranks low
    # and takes its place the same way.
    r = run_checked(_swap(p1_share=7))
    assert brief(r, "preempt", "start")[3:7] == [
        (10, "preempt", "mid"),
        (10, "start", "high", ("n1",)),
        (10, "preempt", "low"),
        (10, "start", "mid", ("n0",)),
    ], show(r)


def test_rule8_equal_swap_allowed_above_guarantee():
    # p1 (guarantee 2) borrows n0 with `low` (4 GPUs). Swapping it for `high` (4 GPUs) leaves
    # p1 holding no more than before, so it is allowed although p1 is above its guarantee.
    q = quota({"p1": {"gpu": 1}, "p2": {"gpu": 3}})
    jobs = [
        job("low", "p1", 4, submit=1, priority=-1, duration=1000),
        job("y", "p2", 4, submit=2, duration=1000),
        job("high", "p1", 4, submit=10, priority=10),
    ]
    r = run_checked({"cluster": [nodes("n", 2, 4)], "quota": q, "jobs": jobs})
    assert preempted(r) == [(10, "low")], show(r)
    assert start_of(r, "high") == (10, ["n0"]), show(r)


def test_rule8_equal_priority_never_preempts():
    jobs = [job("a", "p", 1, submit=1, duration=100), job("b", "p", 1, submit=2, priority=0)]
    r = run_checked({"cluster": "1x1:gpu", "jobs": jobs})
    assert not preempted(r) and start_of(r, "b")[0] == 101, show(r)


def test_rule8_priority_never_crosses_projects():
    # p1's high-priority job does not preempt p2's low-priority one: priority orders a
    # project's own jobs; across projects only the guarantee counts (p1 would be above its
    # 0.5 GPU), so high waits for low to finish.
    q = quota({"p1": {"gpu": 1}, "p2": {"gpu": 1}})
    jobs = [
        job("low", "p2", 1, submit=1, priority=-100, duration=100),
        job("high", "p1", 1, submit=2, priority=100),
    ]
    r = run_checked({"cluster": "1x1:gpu", "quota": q, "jobs": jobs})
    assert not preempted(r) and start_of(r, "high")[0] == 101, show(r)


# --- rule 9: preempted jobs keep their place ------------------------------------------------


def test_rule9_preempted_job_keeps_submit_time_progress_and_restarts():
    # v (submitted 1, 100 s of work, max_restarts 0) is preempted at 31 by high; w (submitted
    # 5) has been waiting since before that. When high ends at 51, v comes back first (it
    # keeps its submit time), resumes its remaining 70 s and finishes at 121: the preemption
    # did not count as a restart (finish, not fail).
    jobs = [
        job("v", "p", 1, submit=1, duration=100, max_restarts=0),
        job("w", "p", 1, submit=5, duration=50),
        job("high", "p", 1, submit=31, duration=20, priority=10),
    ]
    r = run_checked({"cluster": "1x1:gpu", "jobs": jobs})
    assert brief(r, "start", "preempt", "finish") == [
        (1, "start", "v", ("gpu-0",)),
        (31, "preempt", "v"),
        (31, "start", "high", ("gpu-0",)),
        (51, "finish", "high"),
        (51, "start", "v", ("gpu-0",)),
        (121, "finish", "v"),
        (121, "start", "w", ("gpu-0",)),
        (171, "finish", "w"),
    ], show(r)


def test_rule9_progress_kept_for_a_job_started_at_time_zero():
    # Same as above with v starting at t=0: it ran 30 s before the preemption, so it needs 70
    # more and finishes at 50 + 70 = 120.
    jobs = [
        job("v", "p", 1, submit=0, duration=100),
        job("high", "p", 1, submit=30, duration=20, priority=10),
    ]
    r = run_checked({"cluster": "1x1:gpu", "jobs": jobs})
    assert start_of(r, "v", attempt=1)[0] == 50, show(r)
    assert ends(r)["v"] == (120, "finish"), show(r)


# --- rule 10: rejection ---------------------------------------------------------------------


def test_rule10_impossible_jobs_are_rejected_at_submission_with_the_limit():
    # Two domains of two 8-GPU nodes (32 GPUs). Each job below breaks one limit; `ok` (which
    # needs both domains exclusively) proves the pool itself is usable.
    q = quota({"p": {"gpu": 1}, "small": {"gpu": 1}}, extra="[project_limits.small]\ngpu = 8")
    jobs = [
        job("unknown", "p", 1, accelerator="h100"),
        job("too-wide", "p", 16),
        job("too-big", "p", 8, workers=5),
        job("excl", "p", 1, slices=3, exclusive=True),
        job("wide-slice", "p", 8, workers=3),
        job("slices", "p", 5, workers=2, slices=3),
        job("over-limit", "small", 8, workers=2),
        job("np-over", "p", 8, workers=2, slices=2, preemptible=False, submit=1),
        job("ok", "p", 8, workers=2, slices=2, exclusive=True, submit=2),
    ]
    sc = {"cluster": [nodes("a", 2, 8, "d0"), nodes("b", 2, 8, "d1")], "quota": q, "jobs": jobs}
    r = run_checked(sc)
    rejected = {e["job"]: (e["t"], e["reason"]) for e in events(r, "reject")}
    submitted = {e["job"]: e["t"] for e in events(r, "submit")}
    assert set(rejected) == {j["name"] for j in jobs} - {"ok"}, show(r)
    assert all(rejected[j][0] == submitted[j] for j in rejected), "rejected at submission"
    expect = {
        "unknown": ["unknown accelerator", "h100"],
        "too-wide": ["16 gpu per worker", "largest node has 8"],
        "too-big": ["40 gpu", "32"],
        "excl": ["3 exclusive domains", "2"],
        "wide-slice": ["3 workers", "one domain"],
        "slices": ["3 slices"],
        "over-limit": ["limited to 8"],
        "np-over": ["non-preemptible", "guaranteed 16"],
    }
    for name, words in expect.items():
        for word in words:
            assert word in rejected[name][1], f"{name}: {rejected[name][1]!r} lacks {word!r}"
    assert start_of(r, "ok") == (2, ["a0", "a1", "b0", "b1"])


def test_rule10_project_limit_caps_borrowing():
    # `small` may hold at most 8 GPUs, even on an idle 32-GPU pool: two 4-GPU jobs at a time.
    q = quota({"small": {"gpu": 1}, "big": {"gpu": 1}}, extra="[project_limits.small]\ngpu = 8")
    jobs = [job(f"s{i}", "small", 4, submit=i, duration=100) for i in range(4)]
    r = run_checked({"cluster": "4x8:gpu", "quota": q, "jobs": jobs})
    assert [t for t, _, _ in starts(r)] == [0, 1, 100, 101], show(r)


def test_rule10_non_member_is_refused():
    # The scenario loader refuses a job whose user is not a member (naming the job and the
    # project); the core's admission check gives the same answer for a live submission.
    q = quota({"vision": {"gpu": 1}}, members={"vision": ["alice"]})
    with pytest.raises(FormatError, match="bob is not a member of project vision"):
        load({"cluster": "1x8:gpu", "quota": q, "jobs": [job("j", "vision", 1, user="bob")]})
    snap = Snapshot([Node("n0", "gpu", 8)], parse_quota(q))
    j = Job("j", "j", "vision", "bob", 0, Resources("gpu", 1), 0.0)
    assert check_admissible(snap, j) == "user bob is not a member of project vision"


def test_rule10_capacity_is_capped_by_total_resources():
    # total_resources caps what corral hands out: 8 of the 16 GPUs. A 12-GPU job is refused
    # and two 8-GPU jobs run one after the other, never together.
    q = quota({"p": {"gpu": 1}}, extra="[total_resources]\ngpu = 8")
    jobs = [job("a", "p", 8), job("b", "p", 8), job("c", "p", 4, workers=3)]
    sc = {"cluster": "2x8:gpu", "quota": q, "jobs": jobs}
    r = run_checked(sc)
    assert "needs 12 gpu in all; the pool has 8" in events(r, "reject", job="c")[0]["reason"]
    assert start_of(r, "a")[0] == 0 and start_of(r, "b")[0] == 100, show(r)


# --- rule 11: reasons -----------------------------------------------------------------------


def _snap(shares: dict, node_list: list[Node], extra: str = "", **sched) -> tuple:
    q = parse_quota(quota(shares, extra=extra))
    q = replace(q, scheduler=replace(q.scheduler, preempt_min_runtime=0.0))  # as simkit's
    policy = load_policy(q.scheduler)
    return policy.snapshot(node_list, q), policy


def _job(name, project, per, workers=1, submit=0.0, accel="h100", **kw) -> Job:
    return Job(
        name, name, project, "u", kw.pop("priority", 0), Resources(accel, per, workers),
        submit, **kw,
    )  # fmt: skip


def _run(snap: Snapshot, j: Job, where: list[str], at: float = 0.0) -> None:
    snap.submit(j)
    snap.start(j.id, where, at)


def test_rule11_quota_reason():
    # The DESIGN example: vision holds 48 of its 40 h100 and the pool is full.
    h100 = [Node(f"h{i}", "h100", 8) for i in range(10)]
    snap, policy = _snap({"vision": {"h100": 1}, "nlp": {"h100": 1}}, h100)
    for i in range(6):
        _run(snap, _job(f"v{i}", "vision", 8), [f"h{i}"])
    for i in range(4):
        _run(snap, _job(f"n{i}", "nlp", 8), [f"h{6 + i}"])
    snap.set_time(10)
    snap.submit(_job("more", "vision", 8, submit=5))
    why = decide(snap, policy).reason(snap.pending.jobs["more"])
    assert (why.code, why.message) == (
        "quota",
        "project vision holds 48 of its 40 h100 and the pool is full",
    )


def test_rule11_capacity_reason_when_free_capacity_is_fragmented():
    # 4 nodes x 8 h100; nlp and vision each hold 2 x 4 (one per node): 16 free, 4 per node.
    # vision (8 of its 16) asks for 2 workers x 8. The pool is not full and vision is not
    # over its guarantee: the reason is capacity, naming the need and the largest free block.
    h100 = [Node(f"h{i}", "h100", 8) for i in range(4)]
    snap, policy = _snap({"vision": {"h100": 1}, "nlp": {"h100": 1}}, h100)
    for i in range(2):
        _run(snap, _job(f"n{i}", "nlp", 4), [f"h{i}"])
        _run(snap, _job(f"v{i}", "vision", 4), [f"h{i + 2}"])
    snap.set_time(10)
    snap.submit(_job("big", "vision", 8, workers=2, submit=5))
    why = decide(snap, policy).reason(snap.pending.jobs["big"])
    assert why.code == "capacity", why
    assert "8 free h100" in why.message and "largest free block is 4" in why.message, why


def test_rule11_reserved_and_preempting_reasons():
    # n0, n1 x 4. p2 fills both nodes with 2-GPU jobs; s0 has finished, leaving 2 free on n0.
    # p1's big (4 GPUs, reclaim off by min runtime) holds n0; p2's small t0 would fit there:
    # its reason is `reserved`, naming big.
    gpus = [Node(f"n{i}", "gpu", 4) for i in range(2)]
    q = parse_quota(quota({"p1": {"gpu": 1}, "p2": {"gpu": 1}}))

    q = replace(q, scheduler=replace(q.scheduler, preempt_min_runtime=3600.0))
    policy = load_policy(q.scheduler)
    snap = policy.snapshot(gpus, q)
    _run(snap, _job("s1", "p2", 2, accel="gpu"), ["n0"])
    _run(snap, _job("s2", "p2", 2, accel="gpu"), ["n1"])
    _run(snap, _job("s3", "p2", 2, accel="gpu"), ["n1"])
    snap.set_time(100)
    snap.submit(_job("big", "p1", 4, submit=10, accel="gpu"))
    snap.submit(_job("t0", "p2", 2, submit=20, accel="gpu"))
    d = decide(snap, policy)
    assert d.starts == [] and d.preemptions == []
    big, t0 = snap.pending.jobs["big"], snap.pending.jobs["t0"]
    assert d.reason(t0).code == "reserved" and "big" in d.reason(t0).message, d.reason(t0)
    assert d.reason(big).code == "capacity", d.reason(big)

    # Without the minimum runtime big reclaims one of p2's jobs (p2 is over its guarantee):
    # big's reason says it is preempting; once the victim is told to stop (live: grace
    # period), the next cycle says big waits for it to release its GPUs.
    snap.withdraw("t0")
    policy = load_policy(replace(q.scheduler, preempt_min_runtime=0.0))
    d = decide(snap, policy)
    assert [p.job_id for p in d.preemptions] == ["s1"], d
    assert d.reason(big).code == "preempting" and "preempting 1 job" in d.reason(big).message
    snap.mark_terminating("s1")
    d = decide(snap, policy)
    assert d.preemptions == [] and d.starts == []
    assert d.reason(big).code == "preempting" and "1 stopping job" in d.reason(big).message


def test_rule11_limit_reason_and_every_pending_job_has_one():
    h100 = [Node(f"h{i}", "h100", 8) for i in range(4)]
    snap, policy = _snap(
        {"a": {"h100": 1}, "b": {"h100": 1}}, h100, extra="[project_limits.b]\nh100 = 16"
    )
    _run(snap, _job("b0", "b", 8, workers=2), ["h0", "h1"])
    _run(snap, _job("a0", "a", 8), ["h2"])
    snap.set_time(10)
    snap.submit(_job("b1", "b", 8, submit=1))  # would exceed b's limit of 16
    for i in range(20):  # a queue of all shapes
        snap.submit(_job(f"q{i:02d}", "a", 1 + i % 8, workers=1 + i % 3, submit=2 + i))
    d = decide(snap, policy)
    why = d.reason(snap.pending.jobs["b1"])
    assert why.code == "limit" and "limit 16" in why.message, why
    started = {s.job_id for s in d.starts}
    codes = {"capacity", "quota", "limit", "reserved", "preempting", "order", "policy"}
    for j in snap.pending.jobs.values():
        if j.id in started:
            continue
        reason = d.reason(j)
        assert reason.code in codes and len(reason.message) > 10, (j.id, reason)
    # The decision is a plain value: every pending job's reason is in it, and stays what the
    # cycle decided once the snapshot moves on (here: every running job ends).
    assert set(d.reasons) | started == set(snap.pending.jobs)
    kept = dict(d.reasons)
    for job_id in list(snap.running):
        snap.stop(job_id)
    assert d.reasons == kept and d.reason(snap.pending.jobs["b1"]).code == "limit"


# --- rule 12: determinism -------------------------------------------------------------------


def test_rule12_decide_is_pure_and_repeatable():
    # decide() twice on one snapshot: the same decision, and the snapshot is untouched. Six
    # identical jobs (same user, priority and submit time) are told apart by name only.
    h100 = [Node(f"h{i}", "h100", 8) for i in range(4)]
    snap, policy = _snap({"a": {"h100": 1}, "b": {"h100": 3}}, h100)
    _run(snap, _job("a0", "a", 8, workers=3), ["h0", "h1", "h2"])
    snap.set_time(5)
    for i in (3, 5, 0, 4, 1, 2):
        snap.submit(_job(f"b{i}", "b", 4, submit=1))
    free, usage = list(snap.free), {p: dict(c) for p, c in snap.usage.items()}
    first, second = decide(snap, policy), decide(snap, policy)
    assert first.starts == second.starts and first.preemptions == second.preemptions
    assert first.reasons == second.reasons
    assert snap.free == free and {p: dict(c) for p, c in snap.usage.items()} == usage
    assert len(snap.pending) == 6 and set(snap.running) == {"a0"}
    assert first.starts == [Start("b0", ("h3",)), Start("b1", ("h3",))]
    # a0 is a's only job: taking it would push a below its guarantee, so no reclaim
    assert first.preemptions == []
