"""Live reclaim: a borrower is preempted when the owner submits, then resumes as attempt 1.
And the quota file is reloaded when it changes, a bad edit keeping the last good quota."""

from __future__ import annotations

import json
import time

import pytest

pytestmark = pytest.mark.live

QUOTA = """
[toml-schema]
version = "1"
[project_membership]
vision = ["alice"]
nlp = ["bob"]
[project_resources.vision]
gpu = 0.5
[project_resources.nlp]
gpu = 0.5
[scheduler]
preempt_grace = "1s"
preempt_min_runtime = "0s"
"""


@pytest.fixture(scope="module")
def server(module_servers):
    return module_servers(QUOTA, fake_gpus=4)


def test_borrower_is_preempted_by_the_owner_and_resumes(server, tmp_path):
    bob, alice = server.token("bob"), server.token("alice")
    marker = tmp_path / "attempts"
    # Long on its first attempt, short once resumed: the test ends as soon as it has resumed.
    borrower_cmd = (
        f'echo "$CORRAL_ATTEMPT $RANK" >> {marker}; '
        'if [ "$CORRAL_ATTEMPT" = 0 ]; then sleep 60; else sleep 0.5; fi'
    )
    within = server.cli("submit", "--per-worker", "2", "--", "sleep 60", token=bob).stdout.strip()
    server.wait(within, "running")
    borrower = server.cli(
        "submit", "--name", "borrower", "--workers", "2", "--", borrower_cmd, token=bob
    ).stdout.strip()
    server.wait(borrower, "running")  # nlp now holds 4 gpu, 2 beyond its guarantee
    time.sleep(1.2)  # past its first second, when no attempt is preempted

    owner = server.cli("submit", "--per-worker", "2", "--", "sleep 1", token=alice).stdout
    owner = owner.strip()
    server.wait(owner, "running", timeout=15)
    job = server.job(borrower)
    assert job["state"] == "pending" and job["preemptions"] == 1 and job["attempt"] == 1
    assert server.job(within)["state"] == "running", "the victim is the borrowed job only"

    done = server.wait(borrower, "succeeded", timeout=30)
    assert done["restarts"] == 0 and done["attempt"] == 1
    assert sorted(marker.read_text().split("\n")[:-1]) == ["0 0", "0 1", "1 0", "1 1"]
    assert server.job(owner)["state"] == "succeeded"
    with server.http(bob) as c:
        events = [e["event"] for e in c.get(f"/v1/jobs/{borrower}/events").json()]
    assert events == ["submit", "start", "preempt", "start", "finish"]
    logs = server.cli("show", borrower, "--json", token=bob).stdout
    assert [a["state"] for a in json.loads(logs)["attempts"]] == ["terminated", "succeeded"]
    server.cli("cancel", within, token=bob)
    server.wait(within, "cancelled", timeout=15)


def _guarantees(server) -> dict[str, float]:
    with server.http(server.admin_token) as c:
        quota = c.get("/v1/quota").json()
    return {p["project"]: p["guarantee"].get("gpu", 0) for p in quota["projects"]}


def test_quota_file_is_reloaded_and_a_bad_edit_is_refused(server):
    path = server.state.parent / "state-quota.toml"
    assert _guarantees(server) == {"nlp": 2, "vision": 2}

    shares = "[project_resources.vision]\ngpu = 0.75\n[project_resources.nlp]\ngpu = 0.25\n"
    path.write_text(
        QUOTA.replace("[project_resources.vision]\ngpu = 0.5\n", "").replace(
            "[project_resources.nlp]\ngpu = 0.5\n", shares
        )
    )
    deadline = time.monotonic() + 10
    while _guarantees(server) != {"nlp": 1, "vision": 3} and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _guarantees(server) == {"nlp": 1, "vision": 3}
    assert "reloaded: projects nlp, vision, policy fair" in server.log()  # one line per reload

    path.write_text(QUOTA.replace('version = "1"', 'version = "7"'))
    deadline = time.monotonic() + 10
    while "refused" not in server.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "refused" in server.log() and "version" in server.log()
    assert _guarantees(server) == {"nlp": 1, "vision": 3}, "the last good quota stays"
    path.write_text(QUOTA)
