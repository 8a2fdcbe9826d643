"""Live: a preemptor keeps what its victims free while they are in their grace period
(DESIGN.md §3.9). One victim stops at once, the other takes its whole grace period; another
project's job, ahead of the preemptor in the order, must not take what the first one freed."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.live

QUOTA = """
[toml-schema]
version = "1"
[project_membership]
vision = ["alice"]
ops = ["carol"]
nlp = ["bob"]
[project_resources.vision]
gpu = 2
[project_resources.ops]
gpu = 1
[project_resources.nlp]
gpu = 1
[scheduler]
preempt_grace = "4s"
preempt_min_runtime = "0s"
"""

IGNORES_TERM = "trap '' TERM; sleep 60"  # (the ignored signal is inherited by sleep)


@pytest.fixture(scope="module")
def server(module_servers):
    return module_servers(QUOTA, fake_gpus=8)


def _first(server, job: str, event: str) -> float:
    with server.http(server.admin_token) as c:
        events = c.get(f"/v1/jobs/{job}/events").json()
    return min(e["t"] for e in events if e["event"] == event)


def test_another_projects_job_does_not_take_what_a_victim_freed_for_the_preemptor(server):
    bob, alice, carol = server.token("bob"), server.token("alice"), server.token("carol")
    # nlp (guarantee 2 of 8) fills the pool with four 2-GPU jobs; the two most recent are
    # the victims: n3 ignores SIGTERM (killed after the 4 s grace), n4 stops at once.
    nlp = []
    for cmd in ("sleep 60", "sleep 60", IGNORES_TERM, "sleep 60"):
        job = server.cli("submit", "--per-worker", "2", "--", cmd, token=bob).stdout.strip()
        server.wait(job, "running")
        nlp.append(job)
    time.sleep(1.2)  # past their first second, when no attempt is preempted
    p = server.cli("submit", "--per-worker", "4", "--", "sleep 1", token=alice).stdout.strip()
    server.wait(nlp[3], lambda j: j["state"] != "running", what="preempted")
    # ops (0 of its 2: first in bastion order) asks for 1 GPU while n3 is still stopping.
    x = server.cli("submit", "--per-worker", "1", "--", "sleep 1", token=carol).stdout.strip()
    server.wait(p, ("running", "succeeded"), timeout=30)
    server.wait(x, ("running", "succeeded"), timeout=30)
    assert _first(server, x, "start") >= _first(server, p, "start")
    assert _first(server, nlp[2], "preempt") <= _first(server, p, "start")  # n3 was a victim
    for job in nlp:
        server.cli("cancel", job, token=bob, check=False)
