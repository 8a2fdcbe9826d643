"""The other policies (fifo, las, srtf, a user's own), spread placement, and the simulator's
options (restart_penalty, fixed rounds). Each test runs a small scenario and asserts on the
event log; every log goes through check_invariants."""

from __future__ import annotations

import textwrap

import pytest
from simkit import (
    brief,
    ends,
    events,
    job,
    preempted,
    quota,
    run_checked,
    show,
    start_of,
    starts,
)

from corral.formats import FormatError, SchedulerConfig
from corral.policies import load_policy

LONG = 10_000


def las(thresholds=(100,), starve_factor=None) -> dict:
    options: dict = {"las_thresholds": list(thresholds)}
    if starve_factor is not None:
        options["starve_factor"] = starve_factor
    return {"policy": "las", "options": options}


# --- fifo -----------------------------------------------------------------------------------


def test_fifo_one_global_queue_without_fair_share_or_preemption():
    # The rule-3 scenario (p1 guaranteed 6 of 8, p2 2) under fifo: at t=100 the 8 slots go to
    # the 8 oldest jobs, all p1's; p2's jobs wait although p2 is below its guarantee, and
    # nothing is ever preempted.
    q = quota({"p1": {"gpu": 3}, "p2": {"gpu": 1}})
    jobs = [
        job("blk1", "p1", 1, workers=4, duration=100),
        job("blk2", "p2", 1, workers=4, duration=100),
    ]
    jobs += [job(f"a{i}", "p1", 1, submit=i, duration=1000) for i in range(1, 9)]
    jobs += [job(f"b{i}", "p2", 1, submit=10 + i, duration=1000) for i in range(1, 5)]
    sc = {"cluster": "8x1:gpu", "quota": q, "scheduler": {"policy": "fifo"}, "jobs": jobs}
    r = run_checked(sc)
    assert [j for t, j, _ in starts(r) if t == 100] == [f"a{i}" for i in range(1, 9)], show(r)
    assert [j for t, j, _ in starts(r) if t == 1100] == ["b1", "b2", "b3", "b4"], show(r)
    assert not preempted(r)


def _stream(bounded: bool) -> dict:
    # Two 4-GPU nodes full of 2-GPU jobs ending at 100, 150, 200, 250; a 2x4 gang at t=10;
    # then a 2-GPU job every 20 s.
    jobs = []
    for i, d in enumerate([100, 150, 200, 250]):
        extra = {"max_runtime": d} if bounded else {}
        jobs.append(job(f"s{i}", "p", 2, duration=d, **extra))
    jobs.append(job("big", "p", 4, workers=2, submit=10))
    for k in range(12):
        extra = {"max_runtime": 100} if bounded else {}
        jobs.append(job(f"t{k:02d}", "p", 2, submit=20 + 20 * k, duration=90, **extra))
    cluster = [{"name": "n{0..1}", "accelerator": "gpu", "count": 4}]
    return {"cluster": cluster, "scheduler": {"policy": "fifo"}, "jobs": jobs}


def test_fifo_easy_backfill_reserves_for_the_head_job():
    # The head job (the gang) holds the pool; small jobs without max_runtime cannot jump it.
    r = run_checked(_stream(bounded=False))
    assert start_of(r, "big") == (250, ["n0", "n1"]), show(r)
    assert all(t >= 250 for t, j, _ in starts(r) if j.startswith("t")), show(r)


def test_fifo_easy_backfill_lets_jobs_that_end_in_time_through():
    # Everything declares max_runtime: the reservation is due at 250. t00 (from 100, ends by
    # 200) and t01 (from 150, ends by 250) backfill; later ones would overrun and wait.
    r = run_checked(_stream(bounded=True))
    assert start_of(r, "big") == (250, ["n0", "n1"]), show(r)
    assert start_of(r, "t00")[0] == 100 and start_of(r, "t01")[0] == 150, show(r)
    assert all(t >= 250 for t, j, _ in starts(r) if j >= "t02" and j.startswith("t")), show(r)


# --- las (Tiresias) -------------------------------------------------------------------------


def test_las_demotes_at_threshold_and_counts_accelerator_seconds():
    # long holds 2 GPUs from t=1: it passes the 100 GPU-second threshold at t=51 (not 101),
    # drops to queue 1, and s0 (queue 0, waiting since t=20) preempts it at that moment,
    # without any other event happening then.
    jobs = [
        job("long", "p", 1, workers=2, submit=1, duration=1000),
        job("s0", "p", 1, submit=20, duration=60),
    ]
    r = run_checked({"cluster": "2x1:gpu", "scheduler": las(), "jobs": jobs})
    assert brief(r, "start", "preempt", "finish") == [
        (1, "start", "long", ("gpu-0", "gpu-1")),
        (51, "preempt", "long"),
        (51, "start", "s0", ("gpu-0",)),
        (111, "finish", "s0"),
        (111, "start", "long", ("gpu-0", "gpu-1")),
        (1061, "finish", "long"),  # 50 s done before, 950 after: progress kept
    ], show(r)
    assert events(r, "preempt")[0]["reason"] == "preempted by job s0 (las: queue 0)"


def test_las_same_queue_is_first_come_first_served():
    # Both below the threshold: the newcomer does not preempt, it queues.
    jobs = [job("a", "p", 1, submit=1, duration=50), job("b", "p", 1, submit=2, duration=10)]
    r = run_checked({"cluster": "1x1:gpu", "scheduler": las(), "jobs": jobs})
    assert not preempted(r) and start_of(r, "b") == (51, ["gpu-0"]), show(r)


def _starving(starve_factor) -> dict:
    # long runs 100 s, is demoted at t=101 and preempted by s0; then a 60-s queue-0 job
    # arrives every 50 s, so queue 0 is never empty until t=761.
    jobs = [job("long", "p", 1, submit=1, duration=1000), job("s0", "p", 1, submit=50, duration=60)]
    jobs += [job(f"t{k}", "p", 1, submit=150 + 50 * k, duration=60) for k in range(10)]
    return {"cluster": "1x1:gpu", "scheduler": las(starve_factor=starve_factor), "jobs": jobs}


def test_las_starving_job_is_promoted_to_queue_0():
    # With starve_factor 1, long (run 100 s, waiting since 101) is promoted at t=201. In queue
    # 0 it is the oldest job, so it takes the GPU at the next opportunity, t=221, instead of
    # waiting for the stream to dry up (t=761).
    r = run_checked(_starving(starve_factor=1))
    assert preempted(r)[0] == (101, "long"), show(r)
    assert start_of(r, "long", attempt=1)[0] == 221, show(r)


def test_las_without_promotion_long_job_waits_for_queue_0():
    r = run_checked(_starving(starve_factor=0))
    assert start_of(r, "long", attempt=1)[0] == 761, show(r)


def test_las_attained_service_survives_a_start_at_time_zero():
    # As in the demotion test but long starts at t=0: it must still cross the threshold at 50
    # and, once preempted, rank in queue 1 behind s0 rather than restart in its place.
    jobs = [
        job("long", "p", 1, workers=2, submit=0, duration=1000),
        job("s0", "p", 1, submit=20, duration=60),
    ]
    r = run_checked({"cluster": "2x1:gpu", "scheduler": las(), "jobs": jobs})
    assert brief(r, "start", "preempt")[:3] == [
        (0, "start", "long", ("gpu-0", "gpu-1")),
        (50, "preempt", "long"),
        (50, "start", "s0", ("gpu-0",)),
    ], show(r)


# --- srtf -----------------------------------------------------------------------------------


def test_srtf_preempts_only_jobs_with_more_time_left():
    # short (100 s) preempts long (990 s left at t=11). mid (985 s) arrives while short runs:
    # it does not preempt short, and at t=111 it beats long (985 < 990).
    jobs = [
        job("long", "p", 1, submit=1, duration=1000),
        job("short", "p", 1, submit=11, duration=100),
        job("mid", "p", 1, submit=21, duration=985),
    ]
    r = run_checked({"cluster": "1x1:gpu", "scheduler": {"policy": "srtf"}, "jobs": jobs})
    assert brief(r, "start", "preempt", "finish") == [
        (1, "start", "long", ("gpu-0",)),
        (11, "preempt", "long"),
        (11, "start", "short", ("gpu-0",)),
        (111, "finish", "short"),
        (111, "start", "mid", ("gpu-0",)),
        (1096, "finish", "mid"),
        (1096, "start", "long", ("gpu-0",)),
        (2086, "finish", "long"),
    ], show(r)
    assert events(r, "preempt")[0]["reason"] == "preempted by job short (srtf: 100 s left)"


def test_srtf_uses_max_runtime_when_duration_unknown():
    # The core ranks by max_runtime when it has no duration; in the simulator the duration is
    # known, and it is what counts: the shorter job by duration runs first.
    jobs = [
        job("blk", "p", 1, duration=10),
        job("a", "p", 1, submit=1, duration=500, max_runtime=600),
        job("b", "p", 1, submit=2, duration=50, max_runtime=900),
    ]
    r = run_checked({"cluster": "1x1:gpu", "scheduler": {"policy": "srtf"}, "jobs": jobs})
    assert [j for _, j, _ in starts(r)] == ["blk", "b", "a"], show(r)


def test_srtf_exclusive_preemptor_gets_the_domain_it_cleared():
    # One 4-GPU node in one domain. excl (exclusive, 100 s) preempts long to empty the domain;
    # other (300 s, same instant) must not slip into the domain meanwhile, or excl preempts it
    # in turn, long comes back, and so on forever at t=10.
    cluster = [{"name": "n0", "accelerator": "gpu", "count": 4, "domain": "d0"}]
    jobs = [
        job("long", "p", 1, submit=1, duration=1000),
        job("excl", "p", 1, exclusive=True, submit=10, duration=100),
        job("other", "p", 1, submit=10, duration=300),
    ]
    r = run_checked({"cluster": cluster, "scheduler": {"policy": "srtf"}, "jobs": jobs})
    assert brief(r, "start", "preempt")[:3] == [
        (1, "start", "long", ("n0",)),
        (10, "preempt", "long"),
        (10, "start", "excl", ("n0",)),
    ], show(r)
    assert start_of(r, "other")[0] == 110, show(r)


# --- placement: spread ----------------------------------------------------------------------


def test_spread_placement_takes_the_emptiest_nodes():
    # The same jobs as with pack: spread puts each on the emptiest node and a gang's workers
    # one per node, emptiest first, round after round; pack stacks them.
    cluster = [{"name": "n{0..2}", "accelerator": "gpu", "count": 8}]
    jobs = [
        job("a", "p", 2, duration=LONG),
        job("b", "p", 2, submit=1, duration=LONG),
        job("c", "p", 4, submit=2, duration=LONG),
        job("g", "p", 2, workers=4, submit=3, duration=LONG),
    ]
    spread = run_checked({"cluster": cluster, "scheduler": {"placement": "spread"}, "jobs": jobs})
    assert [(j, n) for _, j, n in starts(spread)] == [
        ("a", ["n0"]),
        ("b", ["n1"]),
        ("c", ["n2"]),
        ("g", ["n0", "n1", "n2", "n0"]),
    ], show(spread)
    pack = run_checked({"cluster": cluster, "jobs": jobs})
    assert [(j, n) for _, j, n in starts(pack)] == [
        ("a", ["n0"]),
        ("b", ["n0"]),
        ("c", ["n0"]),
        ("g", ["n1", "n1", "n1", "n1"]),
    ], show(pack)


def test_unknown_placement_is_refused():
    with pytest.raises(FormatError, match="placement"):
        load_policy(SchedulerConfig(placement="random"))


# --- a user's own policy --------------------------------------------------------------------

USER_POLICY = '''
"""Largest job first: a researcher's one-file policy."""
from corral.core.policy import Policy


class LargestFirst(Policy):
    name = "largest-first"

    def queue_key(self, job):
        return (-job.demand, job.submit_time, job.name, job.id)


class NotAPolicy:
    pass
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    name = f"corral_user_policy_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(USER_POLICY))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_user_policy_from_module_and_class(user_module):
    # Loaded by "module:Class" from the scenario's scheduler section. After the blocker, the
    # 3-GPU job goes first although it was submitted last; then the 2-GPU, then the 1-GPU.
    jobs = [
        job("blk", "p", 4, duration=100),
        job("one", "p", 1, submit=1),
        job("two", "p", 2, submit=2),
        job("three", "p", 3, submit=3),
    ]
    sc = {
        "cluster": "1x4:gpu",
        "scheduler": {"policy": f"{user_module}:LargestFirst"},
        "jobs": jobs,
    }
    r = run_checked(sc)
    assert [(t, j) for t, j, _ in starts(r)] == [
        (0, "blk"),
        (100, "three"),
        (100, "one"),  # backfill: 1 GPU left beside three
        (200, "two"),
    ], show(r)
    policy = load_policy(SchedulerConfig(policy=f"{user_module}:LargestFirst"))
    assert policy.name == "largest-first"


def test_user_policy_errors_name_the_problem(user_module):
    with pytest.raises(FormatError, match="not a subclass"):
        load_policy(SchedulerConfig(policy=f"{user_module}:NotAPolicy"))
    with pytest.raises(FormatError, match="cannot load"):
        load_policy(SchedulerConfig(policy=f"{user_module}:Missing"))
    with pytest.raises(FormatError, match="unknown policy"):
        load_policy(SchedulerConfig(policy="no-such-policy"))


# --- simulator options ----------------------------------------------------------------------


def _srtf_preemption() -> dict:
    jobs = [
        job("long", "p", 1, submit=1, duration=1000),
        job("short", "p", 1, submit=11, duration=100),
    ]
    return {"cluster": "1x1:gpu", "scheduler": {"policy": "srtf"}, "jobs": jobs}


def test_restart_penalty_is_added_on_each_resume():
    # long ran 10 s, was preempted, resumes at 111 with 990 s left plus 30 s of penalty.
    plain = run_checked(_srtf_preemption())
    assert ends(plain)["long"] == (1101, "finish"), show(plain)
    slow = run_checked(_srtf_preemption(), restart_penalty=30)
    assert ends(slow)["long"] == (1131, "finish"), show(slow)
    assert ends(slow)["short"] == (111, "finish"), "the penalty is only for resumed jobs"


def test_round_mode_starts_only_on_round_boundaries():
    # With 300-s rounds nothing starts between rounds: short at 300 (srtf), long at 600 after
    # short finished at 400; event-driven, they start at 11 and 111.
    r = run_checked(_srtf_preemption(), round_s=300)
    assert brief(r, "start", "preempt", "finish") == [
        (300, "start", "short", ("gpu-0",)),
        (400, "finish", "short"),
        (600, "start", "long", ("gpu-0",)),
        (1600, "finish", "long"),
    ], show(r)


def test_round_mode_aligns_every_start_and_preemption():
    jobs = [
        job(f"j{i}", f"p{i % 3}", 1 + i % 4, submit=37 * i, duration=100 + 53 * i)
        for i in range(20)
    ]
    r = run_checked({"cluster": "3x4:gpu", "jobs": jobs}, round_s=300)
    moves = events(r, "start", "preempt")
    assert moves and all(e["t"] % 300 == 0 for e in moves), show(r)
