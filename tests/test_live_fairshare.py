"""Live fair share over time (DESIGN.md §3.3): the [scheduler] keys are read, and a project's
decayed usage survives a restart and a change of scheduler settings (both rebuild it from
the attempts in the store)."""

from __future__ import annotations

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
usage_half_life = "1h"
aging_limit = "2h"
"""


def _quota(server) -> dict:
    with server.http(server.admin_token) as c:
        return c.get("/v1/quota").json()


def _recent(server) -> dict[str, float]:
    return {p["project"]: p["recent_usage"] for p in _quota(server)["projects"]}


def test_decayed_usage_is_kept_across_a_restart_and_a_new_setting(live_servers):
    server = live_servers(QUOTA, fake_gpus=4)
    assert (_quota(server)["usage_half_life"], _quota(server)["aging_limit"]) == (3600, 7200)
    bob = server.token("bob")
    ran = server.cli("submit", "--workers", "2", "--", "sleep 1", token=bob).stdout.strip()
    server.wait(ran, "succeeded")
    att = server.job(ran)["attempts"][0]
    expected = 2 * (att["finished_at"] - att["started_at"]) / 3600  # GPU-hours, barely decayed
    before = _recent(server)
    assert before["vision"] == 0 and before["nlp"] == pytest.approx(expected, rel=0.5)

    server.stop()
    server.start()  # rebuilt from the store: the attempt's own start and end
    after = _recent(server)
    assert after["vision"] == 0 and after["nlp"] == pytest.approx(expected, rel=0.01)

    path = server.state.parent / "state-quota.toml"
    path.write_text(QUOTA.replace('aging_limit = "2h"', 'aging_limit = "3h"'))
    deadline = time.monotonic() + 10
    while _quota(server)["aging_limit"] != 10800 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _quota(server)["aging_limit"] == 10800  # a new policy, a new snapshot: still there
    assert _recent(server)["nlp"] == pytest.approx(expected, rel=0.01)
