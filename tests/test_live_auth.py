"""Who may do what on a live server, and how bad requests are refused."""

from __future__ import annotations

import json

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
[priority_classes]
high = 100
[admins]
users = ["ops"]
[scheduler]
preempt_grace = "1s"
"""

GOOD = {
    "project": "vision",
    "command": "sleep 30",
    "resources": {"accelerator": "gpu", "per_worker": 1},
}


@pytest.fixture(scope="module")
def server(module_servers):
    return module_servers(QUOTA, fake_gpus=4)


@pytest.fixture(scope="module")
def tokens(server):
    return {u: server.token(u) for u in ("alice", "bob", "ops")}


@pytest.fixture(scope="module")
def alice_job(server, tokens):
    with server.http(tokens["alice"]) as c:
        resp = c.post("/v1/jobs", json=GOOD | {"name": "secret"})
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


def test_no_token_or_a_bad_one_is_401(server, alice_job):
    with server.http() as c:
        for method, path in [
            ("GET", "/v1/jobs"),
            ("POST", "/v1/jobs"),
            ("GET", "/v1/quota"),
            ("POST", f"/v1/jobs/{alice_job}/cancel"),
        ]:
            resp = c.request(method, path)
            assert resp.status_code == 401, (method, path, resp.text)
            assert "token" in resp.json()["detail"]
    with server.http("corral_not-a-real-token") as c:
        assert c.get("/v1/jobs").status_code == 401
    done = server.cli("ls", check=False)
    assert done.returncode == 2 and "no token" in done.stderr  # usage
    assert server.cli("ls", token="nope", check=False).returncode == 3  # refused
    with server.http() as c:  # health and metrics stay open for probes and Prometheus
        assert c.get("/healthz").status_code == 200
        metrics = c.get("/metrics").text
    for name in ("corral_jobs", "corral_cycle_seconds", "corral_submit_to_running_seconds"):
        assert name in metrics
    with server.http() as c:
        spec = c.get("/openapi.json").json()
        assert c.get("/docs").status_code == 200
    assert {"/v1/jobs", "/v1/jobs/{job}/cancel", "/v1/queue", "/v1/tokens"} <= set(spec["paths"])
    assert "requestBody" in spec["paths"]["/v1/jobs"]["post"]


def test_users_see_and_cancel_only_their_own_jobs(server, tokens, alice_job):
    with server.http(tokens["bob"]) as c:
        assert c.get(f"/v1/jobs/{alice_job}").status_code == 403
        assert c.get(f"/v1/jobs/{alice_job}/logs").status_code == 403
        resp = c.post(f"/v1/jobs/{alice_job}/cancel")
        assert resp.status_code == 403 and "another user" in resp.json()["detail"]
        assert c.get("/v1/jobs").json() == []
        assert c.get("/v1/jobs", params={"all": True}).status_code == 403
        assert c.get("/v1/queue", params={"project": "vision"}).status_code == 403
        assert {p["project"] for p in c.get("/v1/quota").json()["projects"]} == {"nlp"}
    done = server.cli("cancel", alice_job, token=tokens["bob"], check=False)
    assert done.returncode == 3 and "another user" in done.stderr
    # By name, bob finds no job of his called "secret".
    assert server.cli("show", "secret", token=tokens["bob"], check=False).returncode == 4
    assert server.job(alice_job)["state"] in ("pending", "running")

    # Admins: by token (--admin) or by the quota's [admins].
    for token in (server.admin_token, tokens["ops"]):
        everyone = server.cli("ls", "--all", "--json", token=token).stdout
        assert alice_job in [j["id"] for j in json.loads(everyone)]
    alice_sees = json.loads(server.cli("show", "secret", "--json", token=tokens["alice"]).stdout)
    assert alice_sees["id"] == alice_job


def test_submit_only_to_member_projects(server, tokens):
    done = server.cli(
        "submit", "--project", "nlp", "--", "true", token=tokens["alice"], check=False
    )
    assert done.returncode == 3
    assert "not a member of project 'nlp'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    with server.http(tokens["bob"]) as c:
        assert c.post("/v1/jobs", json=GOOD).status_code == 403


def test_only_admins_create_tokens(server, tokens):
    with server.http(tokens["alice"]) as c:
        assert c.post("/v1/tokens", json={"user": "mallory", "admin": True}).status_code == 403
    new = server.cli("token", "create", "dave", admin=True).stdout.strip()
    with server.http(new) as c:
        assert c.get("/v1/whoami").json() == {"user": "dave", "admin": False, "projects": []}


BAD_SPECS = [
    ({"project": "vision", "resources": {"per_worker": 1}}, "command"),
    (GOOD | {"name": "Bad_Name"}, "name"),
    (GOOD | {"resources": {"accelerator": "gpu", "per_worker": 0}}, "per_worker"),
    (GOOD | {"resources": {"accelerator": "gpu", "per_worker": 9}}, "largest node has 4"),
    (GOOD | {"resources": {"accelerator": "tpu", "per_worker": 1}}, "unknown accelerator"),
    (GOOD | {"resources": {"accelerator": "gpu", "per_worker": 2, "workers": 3}}, "pool has 4"),
    (GOOD | {"colour": "blue"}, "colour"),
    (GOOD | {"priority": "urgent"}, "urgent"),
    (GOOD | {"priority": 2**63}, "out of range"),
    (GOOD | {"priority": 10**30}, "priority"),
    (GOOD | {"max_runtime": "soon"}, "max_runtime"),
    (GOOD | {"env": {"A": ["x"]}}, "env"),
    (GOOD | {"max_restarts": -1}, "max_restarts"),
    (GOOD | {"resources": "big"}, "resources"),
]


@pytest.mark.parametrize(("spec", "says"), BAD_SPECS)
def test_malformed_specs_are_422_with_a_one_line_message(server, tokens, spec, says):
    with server.http(tokens["alice"]) as c:
        before = len(c.get("/v1/jobs").json())
        resp = c.post("/v1/jobs", json=spec)
        assert resp.status_code == 422, resp.text
        detail = resp.json()["detail"]
        assert isinstance(detail, str) and "\n" not in detail and says in detail, detail
        assert len(c.get("/v1/jobs").json()) == before, "nothing half-written"


def test_non_object_bodies_and_bad_params_are_422(server, tokens):
    with server.http(tokens["alice"]) as c:
        for body in (b"[1, 2]", b"{not json", b""):
            resp = c.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
            assert resp.status_code == 422, body
            assert isinstance(resp.json()["detail"], str)
        resp = c.get("/v1/jobs", params={"state": "sleeping"})
        assert resp.status_code == 422 and "sleeping" in resp.json()["detail"]
        assert c.get("/v1/jobs/j99999").status_code == 404


def test_live_names_are_unique(server, tokens, alice_job):
    with server.http(tokens["alice"]) as c:
        resp = c.post("/v1/jobs", json=GOOD | {"name": "secret"})
        assert resp.status_code == 409 and alice_job in resp.json()["detail"]
        high = c.post("/v1/jobs", json=GOOD | {"name": "urgent", "priority": "high"})
        assert high.status_code == 201 and high.json()["priority"] == 100
        c.post(f"/v1/jobs/{high.json()['id']}/cancel")
