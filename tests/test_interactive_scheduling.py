"""Interactive jobs in the scheduler (DESIGN.md §2, §5): not preemptible by default, so admitted
only within the project's guarantee, and capped by [project_interactive_limits]. Scenarios run
through the simulator, which drives the same core as `corral up`."""

from __future__ import annotations

from simkit import ends, events, job, quota, run_checked, show, starts

LONG = 10_000


def cluster(count: int = 8):
    return [{"name": "n0", "accelerator": "gpu", "count": count}]


def test_interactive_jobs_are_not_preemptible_and_stay_within_the_guarantee():
    # p is guaranteed 4 of 8; its batch jobs may borrow, its interactive ones may not.
    sc = {
        "cluster": cluster(),
        "quota": quota({"p": {"gpu": 1}, "q": {"gpu": 1}}),
        "jobs": [
            job("nb1", "p", 4, kind="interactive", duration=LONG),
            job("nb2", "p", 2, kind="interactive", duration=100, submit=1),
            job("batch", "p", 2, submit=2, duration=100),
            job("reclaim", "q", 4, submit=3, duration=100),
        ],
    }
    r = run_checked(sc)
    # nb2 would take p beyond its guarantee: it waits; the batch job borrows instead and is
    # the one q reclaims; nb1 is never a victim.
    assert starts(r, "nb1")[0][0] == 0, show(r)
    assert starts(r, "batch")[0][0] == 2, show(r)
    assert [e["job"] for e in events(r, "preempt")] == ["batch"], show(r)
    assert starts(r, "nb2")[0][0] == LONG, show(r)  # only once nb1 has left room


def test_interactive_limit_caps_what_a_projects_interactive_jobs_hold():
    extra = "[project_interactive_limits.p]\ngpu = 2\n"
    sc = {
        "cluster": cluster(),
        "quota": quota({"p": {"gpu": 1}}, extra=extra),
        "jobs": [
            job("nb1", "p", 2, kind="interactive", duration=100),
            job("nb2", "p", 1, kind="interactive", submit=1, duration=100),
            job("batch", "p", 4, submit=2, duration=100),
            job("huge", "p", 3, kind="interactive", submit=3),
        ],
    }
    r = run_checked(sc)
    assert starts(r, "batch")[0][0] == 2, show(r)  # the cap is on interactive jobs only
    assert starts(r, "nb2")[0][0] == 100, show(r)  # waits for nb1 to leave room under the cap
    rejected = {e["job"]: e["reason"] for e in events(r, "reject")}
    assert "interactive jobs are limited to 2" in rejected["huge"], show(r)
    assert ends(r)["nb2"][1] == "finish"


def test_an_interactive_job_that_asks_to_be_preemptible_may_borrow():
    sc = {
        "cluster": cluster(),
        "quota": quota({"p": {"gpu": 1}, "q": {"gpu": 1}}),
        "jobs": [job("nb", "p", 6, kind="interactive", preemptible=True, duration=100)],
    }
    r = run_checked(sc)
    assert starts(r, "nb")[0][0] == 0, show(r)


def test_quota_file_interactive_keys_parse_and_bad_ones_name_the_key():
    import pytest

    from corral.formats import FormatError, parse_quota

    text = quota(
        {"p": {"gpu": 1}},
        extra='[interactive]\nmax_runtime = "2h"\nmax_runtime_limit = "8h"\nidle_timeout = "30m"\n'
        "[project_interactive_limits.p]\ngpu = 2\n",
    )
    q = parse_quota(text)
    assert (q.interactive.max_runtime, q.interactive.max_runtime_limit) == (7200, 28800)
    assert q.interactive.idle_timeout == 1800 and q.interactive_limits == {"p": {"gpu": 2}}
    with pytest.raises(FormatError, match=r"quota:\d+: interactive.idle_timeout: must be"):
        parse_quota(quota({"p": {"gpu": 1}}, extra='[interactive]\nidle_timeout = "soon"\n'))
