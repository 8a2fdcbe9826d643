"""SIGKILL the control plane with jobs running and pending, restart it on the same state dir:
every job reaches its true final state and exit code, and none is started twice."""

from __future__ import annotations

import random
import time

import pytest
from conftest import TEAM_QUOTA

pytestmark = pytest.mark.live

QUOTA = TEAM_QUOTA + '[scheduler]\npreempt_grace = "1s"\n'


def _script(marker, seconds: float, code: int, gate=None) -> str:
    # The start marker is the first thing the job does: two lines would mean two starts.
    wait = f"while [ ! -e {gate} ]; do sleep 0.05; done; " if gate else ""
    return f'echo "$CORRAL_ATTEMPT" >> {marker}; {wait}sleep {seconds}; exit {code}'


def _submit(server, name: str, gpus: int, script: str) -> str:
    with server.http(server.admin_token) as c:
        resp = c.post(
            "/v1/jobs",
            json={"name": name, "command": script, "resources": {"per_worker": gpus}},
        )
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


def _starts(server, job_id: str) -> int:
    with server.http(server.admin_token) as c:
        return [e["event"] for e in c.get(f"/v1/jobs/{job_id}/events").json()].count("start")


def test_crash_with_jobs_running_and_pending(live_servers, tmp_path):
    server = live_servers(QUOTA, fake_gpus=4)
    marks = {n: tmp_path / n for n in ("ok", "bad", "long", "wide", "after")}
    gate = tmp_path / "gate"  # ok and bad end once it exists: after the crash
    plan = {  # name -> (gpus, seconds, exit code, gate)
        "ok": (1, 0, 0, gate),
        "bad": (1, 0, 7, gate),
        "long": (1, 300, 0, None),
        "wide": (3, 0.5, 0, None),
        "after": (2, 0.5, 5, None),
    }
    ids = {n: _submit(server, n, g, _script(marks[n], s, c, w)) for n, (g, s, c, w) in plan.items()}
    for name in ("ok", "bad", "long"):
        server.wait(ids[name], "running")
    for name in ("wide", "after"):
        assert server.job(ids[name])["state"] == "pending"
    server.kill()
    gate.touch()
    time.sleep(1)  # ok and bad end while no control plane runs

    server.start()
    ok, bad = server.wait(ids["ok"], "succeeded"), server.wait(ids["bad"], "failed")
    assert ok["exit_code"] == 0 and bad["exit_code"] == 7
    assert server.job(ids["long"])["state"] == "running", "adopted, not restarted"
    wide = server.wait(ids["wide"], "succeeded", timeout=20)
    assert wide["exit_code"] == 0
    server.cli("cancel", ids["long"], admin=True)
    server.wait(ids["long"], "cancelled", timeout=15)
    after = server.wait(ids["after"], "failed", timeout=20)
    assert after["exit_code"] == 5

    for name, job_id in ids.items():
        assert marks[name].read_text() == "0\n", f"{name} started more than once"
        assert _starts(server, job_id) == 1


def test_repeated_kills_at_random_moments(live_servers, tmp_path):
    """Kills land wherever they land (mid-cycle, mid-launch, mid-exit): the outcome is the
    same as with no crash at all."""
    rng = random.Random(4)
    server = live_servers(QUOTA, fake_gpus=4)
    expected: dict[str, tuple[str, int]] = {}
    marks = {}
    for i in range(12):
        code = (0, 0, 3)[i % 3]
        marker = tmp_path / f"m{i}"
        script = _script(marker, round(rng.uniform(0.1, 0.8), 2), code)
        job_id = _submit(server, f"job-{i}", rng.choice((1, 1, 2)), script)
        expected[job_id] = ("succeeded" if code == 0 else "failed", code)
        marks[job_id] = marker
    for _ in range(3):
        time.sleep(rng.uniform(0.2, 1.2))
        server.kill()
        time.sleep(rng.uniform(0.0, 0.5))
        server.start()
    for job_id, (state, code) in expected.items():
        job = server.wait(job_id, state, timeout=30)
        assert job["exit_code"] == code
        assert marks[job_id].read_text() == "0\n", f"{job_id} started more than once"
        assert _starts(server, job_id) == 1
