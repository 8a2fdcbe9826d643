"""The live plane under hostile input (issue 20): every input bounded, nothing leaks.

One `corral up` for the module, driven over real HTTP and through the CLI.
"""

from __future__ import annotations

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
"""

SLEEP = {"project": "vision", "command": "sleep 60"}


@pytest.fixture(scope="module")
def server(module_servers):
    return module_servers(QUOTA, fake_gpus=4)


@pytest.fixture(scope="module")
def tokens(server):
    return {u: server.token(u) for u in ("alice", "bob", "carol")}


def submit(server, token, spec):
    with server.http(token) as c:
        return c.post("/v1/jobs", json=spec)


# -- 1. what no process can be given is refused at the edge ------------------------------------


@pytest.mark.parametrize(
    "spec, key",
    [
        ({"command": "echo a\0b"}, "command"),
        ({"command": ["echo", "a\0b"]}, "command"),
        ({"command": "true", "env": {"X": "a\0b"}}, "env"),
        ({"command": "true", "max_restarts": 10**16}, "max_restarts"),
        ({"command": "true", "max_restarts": 101}, "max_restarts"),
    ],
)
def test_what_cannot_run_is_refused(server, tokens, spec, key):
    resp = submit(server, tokens["alice"], {"project": "vision"} | spec)
    assert resp.status_code == 422, resp.text
    assert resp.json()["detail"].startswith(f"job spec: {key}"), resp.text


def test_an_integer_env_value_is_stored_exactly(server, tokens):
    resp = submit(
        server, tokens["alice"], {"project": "vision", "command": "true", "env": {"BIG": 10**40}}
    )
    assert resp.status_code == 201, resp.text
    with server.http(tokens["alice"]) as c:
        assert c.get(f"/v1/jobs/{resp.json()['id']}").json()["env"] == {"BIG": str(10**40)}


# -- 2. automatic ids cannot be taken by names --------------------------------------------------


def test_a_name_cannot_take_the_next_automatic_id(server, tokens):
    first = submit(server, tokens["alice"], SLEEP).json()["id"]
    nxt = f"j{int(first[1:]) + 1}"
    resp = submit(server, tokens["bob"], {"project": "nlp", "command": "sleep 60", "name": nxt})
    assert resp.status_code == 422 and "automatic ids" in resp.json()["detail"], resp.text
    resp = submit(server, tokens["alice"], SLEEP)
    assert resp.status_code == 201 and resp.json()["id"] == nxt, resp.text
    with server.http(tokens["alice"]) as c:
        for job in (first, nxt):
            c.post(f"/v1/jobs/{job}/cancel")


# -- 5. out-of-range numbers are a 4xx, not a 500 -----------------------------------------------


def test_huge_offsets_are_refused_or_empty(server, tokens):
    job = submit(server, tokens["alice"], {"project": "vision", "command": "echo hi"}).json()["id"]
    server.wait(job, "succeeded")
    with server.http(tokens["alice"]) as c:
        resp = c.get(f"/v1/jobs/{job}/logs", params={"offset": 2**63 - 1})
        assert resp.status_code == 200 and resp.content == b"", resp.text
        assert resp.headers["X-Corral-Offset"] == str(2**63 - 1)
        for params in ({"offset": 2**63}, {"attempt": 2**64}, {"worker": 2**63}):
            resp = c.get(f"/v1/jobs/{job}/logs", params=params)
            assert resp.status_code == 422, (params, resp.text)
    with server.http(server.admin_token) as c:
        assert c.get("/v1/events", params={"after": 2**63 - 1}).json() == []
        assert c.get("/v1/events", params={"after": 2**63}).status_code == 422
    assert "Traceback" not in server.log()


def test_logs_of_an_attempt_that_never_was_is_an_error(server, tokens):
    job = submit(server, tokens["alice"], {"project": "vision", "command": "echo hi"}).json()["id"]
    server.wait(job, "succeeded")
    done = server.cli("logs", job, "--attempt", "9", token=tokens["alice"], check=False)
    assert done.returncode == 1 and "attempts 0..0" in done.stderr, done
    done = server.cli("logs", job, "--attempt", "0", token=tokens["alice"])
    assert done.stdout == "hi\n"


# -- 8. nothing about other users' jobs leaks ----------------------------------------------------


def test_nodes_and_name_clashes_show_only_what_the_caller_may_see(server, tokens):
    spec = SLEEP | {"name": "private-run"}
    job = submit(server, tokens["alice"], spec).json()["id"]
    server.wait(job, "running")
    try:
        for user, sees in (("alice", True), ("bob", False), ("carol", False)):
            with server.http(tokens[user]) as c:
                shown = {j for n in c.get("/v1/nodes").json() for j in n["jobs"]}
            assert (job in shown) is sees, (user, shown)
        with server.http(server.admin_token) as c:
            assert job in {j for n in c.get("/v1/nodes").json() for j in n["jobs"]}
        resp = submit(
            server, tokens["bob"], {"project": "nlp", "command": "true", "name": "private-run"}
        )
        assert resp.status_code == 409, resp.text
        assert job not in resp.text and "running" not in resp.text, resp.text
        resp = submit(server, tokens["alice"], spec)
        assert resp.status_code == 409 and job in resp.text, resp.text  # her own job: named
    finally:
        with server.http(tokens["alice"]) as c:
            c.post(f"/v1/jobs/{job}/cancel")


# -- 9. the token request is as strict as the job spec ------------------------------------------


@pytest.mark.parametrize(
    "body",
    [{"user": "x", "admin": "yes"}, {"user": "x", "admin": 1}, {"user": "x", "role": "admin"}],
)
def test_token_requests_are_strict(server, body):
    with server.http(server.admin_token) as c:
        resp = c.post("/v1/tokens", json=body)
        assert resp.status_code == 422, resp.text
        assert all(t["user"] != "x" for t in c.get("/v1/tokens").json())
