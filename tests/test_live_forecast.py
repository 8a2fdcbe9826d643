"""Predicted starts through a live `corral up`: the API's predicted_start, `corral queue`'s
START column, `corral show`'s line (docs/live.md)."""

from __future__ import annotations

import json
import sys
import time

import pytest

pytestmark = pytest.mark.live

QUOTA = """
[toml-schema]
version = "1"
[project_membership]
vision = ["alice"]
[project_resources.vision]
gpu = 1.0
"""
SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]


def test_a_pending_job_is_predicted_to_start_when_the_running_one_is_due(live_servers):
    server = live_servers(QUOTA, fake_gpus=1)
    alice = server.token("alice")

    def submit(name: str, max_runtime: str | None = None) -> dict:
        spec = {"name": name, "command": SLEEP, "max_runtime": max_runtime}
        with server.http(alice) as c:
            resp = c.post("/v1/jobs", json={k: v for k, v in spec.items() if v is not None})
        assert resp.status_code == 201, resp.text
        return resp.json()

    running = submit("running", "60s")["id"]
    started = server.wait(running, "running")["started_at"]
    nxt = submit("next", "10s")["id"]  # after running's 60 s
    unbounded = submit("unbounded")["id"]  # after next's 10 s, with no end of its own
    last = submit("after", "10s")  # waits for an end nobody knows
    after = last["id"]
    # A forecast made since the last submission has them all.
    server.wait(after, lambda j: (j["predicted_at"] or 0) >= last["submitted_at"], timeout=10)
    assert server.job(nxt)["predicted_start"] == pytest.approx(started + 60, abs=0.5)
    assert server.job(unbounded)["predicted_start"] == pytest.approx(started + 70, abs=0.5)
    assert server.job(after)["predicted_start"] is None

    out = server.cli("queue", token=alice).stdout.splitlines()
    header, rows = out[0].split(), {line.split()[2]: line.split() for line in out[1:]}
    column = header.index("START")
    word, left = rows[nxt][column : column + 2]  # "in 57s"
    assert word == "in" and abs(int(left.rstrip("s")) - (started + 60 - time.time())) < 3, out
    assert rows[after][column] == "-", out
    listed = json.loads(server.cli("queue", "-o", "json", token=alice).stdout)
    assert {j["id"]: j["predicted_start"] for j in listed}[after] is None
    shown = server.cli("show", nxt, token=alice).stdout
    assert "predicted start" in shown and "in " in shown, shown
