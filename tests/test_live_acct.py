"""`corral acct` against a real `corral up`: its figures equal a recount from the event log and
the jobs' attempts, with a job preempted and restarted (its wait counts both pending spells)."""

from __future__ import annotations

import csv
import io
import json
import time
from collections import defaultdict

import pytest

pytestmark = pytest.mark.live

QUOTA = """
[toml-schema]
version = "1"
[project_membership]
vision = ["alice"]
nlp = ["bob", "carol"]
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
    server = module_servers(QUOTA, fake_gpus=2)
    tok = {u: server.token(u) for u in ("alice", "bob", "carol")}

    def submit(user: str, gpus: int, command: str) -> str:
        with server.http(tok[user]) as c:
            spec = {"command": command, "resources": {"per_worker": gpus}}
            resp = c.post("/v1/jobs", json=spec)
            assert resp.status_code == 201, resp.text
            return resp.json()["id"]

    # 1 GPU for 1 s and a failure after 1 s fill the pool; the 2-GPU job waits for both.
    short, failing = submit("alice", 1, "sleep 1"), submit("bob", 1, "sleep 1; exit 3")
    wide = submit("alice", 2, "sleep 2")
    server.wait(wide, "running")
    never = submit("carol", 2, "true")  # waits behind the wide job, and is cancelled
    with server.http(tok["carol"]) as c:
        assert c.post(f"/v1/jobs/{never}/cancel").json()["state"] == "cancelled"  # never ran
    for job in (short, failing, wide):
        server.wait(job, ("succeeded", "failed"))
    # nlp holds one GPU of its own and borrows the other; alice takes hers back, and the
    # borrower waits again until alice's job is done (short on its second attempt).
    hold = submit("bob", 1, "sleep 60")
    borrower = submit("bob", 1, 'if [ "$CORRAL_ATTEMPT" = 0 ]; then sleep 60; else sleep 0.2; fi')
    server.wait(borrower, "running")
    time.sleep(1.2)  # past its first second, when no attempt is preempted
    server.wait(submit("alice", 1, "sleep 1"), "succeeded")
    assert server.wait(borrower, "succeeded")["preemptions"] == 1
    with server.http(tok["bob"]) as c:
        assert c.post(f"/v1/jobs/{hold}/cancel").status_code == 200
    server.wait(hold, "cancelled")
    server.tokens, server.borrower = tok, borrower
    return server


def _recount(server) -> dict[tuple[str, str], dict[str, float]]:
    """The same figures, from the event log and each job's attempts: the wait is every spell
    the job spent pending, submission to the first start and each attempt's end to the next
    start (or to the job's end, had it ended pending)."""
    with server.http(server.admin_token) as c:
        events = c.get("/v1/events").json()
        jobs = {j["id"]: j for j in c.get("/v1/jobs", params={"all": True}).json()}
        runs = {i: c.get(f"/v1/jobs/{i}").json()["attempts"] for i in jobs}
    out: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for e in events:
        figures = out[jobs[e["job"]]["project"], jobs[e["job"]]["user"]]
        kind = e["event"]
        if kind in ("submit", "preempt"):
            figures["jobs" if kind == "submit" else "preemptions"] += 1
        elif kind in ("finish", "fail", "cancel"):
            figures[{"finish": "succeeded", "fail": "failed", "cancel": "cancelled"}[kind]] += 1
    for i, job in jobs.items():
        figures = out[job["project"], job["user"]]
        pending_since = job["submitted_at"]
        for run in runs[i]:
            figures["wait_seconds"] += run["started_at"] - pending_since
            ran = run["finished_at"] - run["started_at"]
            figures["accelerator_hours"] += ran * job["accelerators"] / 3600
            pending_since = run["finished_at"]
        figures["started"] += bool(runs[i])
    return out


def test_acct_equals_a_recount_from_the_event_log(server):
    rows = json.loads(server.cli("acct", "--json", admin=True).stdout)
    got = {(r["project"], r["user"]): r for r in rows}
    expected = _recount(server)
    assert set(got) == set(expected) == {("vision", "alice"), ("nlp", "bob"), ("nlp", "carol")}
    for key, figures in expected.items():
        for name in ("jobs", "started", "succeeded", "failed", "cancelled", "preemptions"):
            assert got[key][name] == figures.get(name, 0), (key, name)
        for name in ("accelerator_hours", "wait_seconds"):  # to the millisecond
            assert got[key][name] == pytest.approx(figures.get(name, 0), abs=1e-3), (key, name)
    # At least the run times we asked for (alice 2 x 1 GPU x 1 s + 2 GPUs x 2 s; bob 1 GPU x
    # 1 s, the borrower 1 GPU x 1.2 s, and the held GPU until then), plus each process's start
    # and exit, which a loaded machine stretches.
    assert 6.0 <= got["vision", "alice"]["accelerator_hours"] * 3600 < 15.0
    assert 4.0 <= got["nlp", "bob"]["accelerator_hours"] * 3600 < 20.0
    assert got["vision", "alice"]["wait_seconds"] > 0.1  # the wide job waited for the pool
    # The borrower waited twice; its second spell (alice's job ran in it) is in bob's wait.
    assert got["nlp", "bob"]["preemptions"] == 1
    with server.http(server.admin_token) as c:
        runs = c.get(f"/v1/jobs/{server.borrower}").json()["attempts"]
    assert len(runs) == 2 and runs[1]["started_at"] - runs[0]["finished_at"] > 1.0


def test_acct_by_day_csv_and_filters(server):
    total = json.loads(server.cli("acct", "--json", admin=True).stdout)
    daily = server.cli("acct", "--by", "day", "-o", "csv", admin=True).stdout
    parsed = list(csv.DictReader(io.StringIO(daily)))
    assert {r["period"] for r in parsed} and all(r["period"] for r in parsed)
    hours = sum(float(r["accelerator_hours"]) for r in parsed)
    assert hours == pytest.approx(sum(r["accelerator_hours"] for r in total), abs=1e-5)
    table = server.cli("acct", "--project", "nlp", token=server.tokens["bob"]).stdout
    assert [line.split()[:2] for line in table.splitlines()[1:]] == [
        ["nlp", "bob"],
        ["nlp", "carol"],
    ]
    refused = server.cli("acct", "--project", "vision", token=server.tokens["bob"], check=False)
    assert refused.returncode == 3 and "not a member of project 'vision'" in refused.stderr
    assert server.cli("acct", "--since", "2999-01-01", admin=True).stdout == ""
    assert server.cli("acct", "--by", "month", admin=True, check=False).returncode == 2
