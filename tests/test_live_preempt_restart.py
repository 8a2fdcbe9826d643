"""Live: what a preemptor waits for stays its own across a restart of `corral up` and a quota
reload (DESIGN.md §3.9; the store keeps the preemptor's first pick, docs/live.md).

base (guaranteed 1.1 GPUs of 8) and nlp (nothing) fill the pool with two 2-GPU jobs each,
base's protected by a long minimum runtime; vision's 4-GPU job (within its 4.6) preempts
nlp's: n4 stops at once, n3 ignores SIGTERM and is killed after the grace period. ops (0 of
its 2.3, so first in bastion order, but with nothing it may reclaim) then asks for 1 GPU.
Whatever happens to the control plane meanwhile, ops's job must not start before vision's.
"""

from __future__ import annotations

import sqlite3
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
base = ["dave"]
[project_resources.vision]
gpu = {vision}
[project_resources.ops]
gpu = 1
[project_resources.nlp]
gpu = 0
[project_resources.base]
gpu = 0.5
[project_preempt_min_runtime]
base = "10m"
[scheduler]
preempt_grace = "6s"
preempt_min_runtime = "0s"
restart_backoff = "{backoff}"
"""

# (The ignored signal is inherited by sleep.) Only the first attempt: teardown's cancel of the
# job requeued and restarted is then quick.
IGNORES_TERM = "[ $CORRAL_ATTEMPT = 0 ] && trap '' TERM; sleep 60"


def _quota(vision: float = 2, backoff: str = "10s") -> str:
    return QUOTA.format(vision=vision, backoff=backoff)


def _first(server, job: str, event: str) -> float | None:
    with server.http(server.admin_token) as c:
        events = c.get(f"/v1/jobs/{job}/events").json()
    return min((e["t"] for e in events if e["event"] == event), default=None)


def _preempt_then_queue(server) -> tuple[str, str]:
    """Vision's job p preempts n3 and n4; ops's job x is queued while n3 is still stopping.
    Returns (p, x)."""

    def submit(user: str, gpus: int, cmd: str) -> str:
        token = server.token(user)
        return server.cli(
            "submit", "--per-worker", str(gpus), "--", cmd, token=token
        ).stdout.strip()

    n1, n2, n3, n4 = (
        submit(user, 2, cmd)
        for user, cmd in (
            ("dave", "sleep 60"),
            ("dave", "sleep 60"),
            ("bob", IGNORES_TERM),
            ("bob", "sleep 60"),
        )
    )
    for job in (n1, n2, n3, n4):
        server.wait(job, "running")
    time.sleep(1.2)  # past their first second, when no attempt is preempted
    p = submit("alice", 4, "sleep 1")
    server.wait(n4, lambda j: j["state"] != "running", what="preempted")
    x = submit("carol", 1, "sleep 1")
    assert server.job(n3)["state"] == "running"  # in its grace period
    return p, x


def _reload(server, quota: str) -> None:
    path = server.state.parent / f"{server.state.name}-quota.toml"
    seen = server.log().count("reloaded")
    path.write_text(quota)
    deadline = time.monotonic() + 10
    while server.log().count("reloaded") == seen:
        assert time.monotonic() < deadline, "the quota file was not reloaded"
        time.sleep(0.1)


def _starts(server, p: str, x: str) -> tuple[float, float]:
    server.wait(x, ("running", "succeeded"), timeout=30)
    return _first(server, p, "start") or float("inf"), _first(server, x, "start")


def test_a_preemptor_keeps_its_pick_when_corral_up_is_killed_in_the_grace_period(live_servers):
    server = live_servers(_quota(), fake_gpus=8)
    p, x = _preempt_then_queue(server)
    server.kill()  # SIGKILL, while n3 is still stopping
    server.start()
    p_start, x_start = _starts(server, p, x)
    assert x_start >= p_start
    # The store named p as the victims' preemptor; its pick ended when it started.
    with sqlite3.connect(server.state / "corral.db") as db:
        named = db.execute("SELECT DISTINCT preemptor FROM attempts WHERE preemptor IS NOT NULL")
        assert [r[0] for r in named] == [p]
        assert db.execute("SELECT id FROM jobs WHERE first_pick").fetchall() == []


def test_a_preemptor_keeps_its_pick_across_a_quota_reload(live_servers):
    server = live_servers(_quota(), fake_gpus=8)
    p, x = _preempt_then_queue(server)
    _reload(server, _quota(backoff="5s"))  # new [scheduler] settings: the snapshot is rebuilt
    p_start, x_start = _starts(server, p, x)
    assert x_start >= p_start


def test_a_preemptor_whose_guarantee_a_reload_takes_away_loses_its_pick(live_servers):
    server = live_servers(_quota(), fake_gpus=8)
    p, x = _preempt_then_queue(server)
    _reload(server, _quota(vision=0.1))  # vision now guaranteed 0.5: the reclaim is not owed
    p_start, x_start = _starts(server, p, x)
    assert x_start < p_start
    with sqlite3.connect(server.state / "corral.db") as db:
        assert db.execute("SELECT first_pick FROM jobs WHERE id = ?", (p,)).fetchone() == (0,)
