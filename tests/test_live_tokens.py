"""Token revocation on a real `corral up`, through the CLI and HTTP: a revoked token is
refused at once (even on a connection kept alive), across a restart too; only admins revoke,
and the last admin token cannot be revoked."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.live

JOB = {"name": "t", "command": "true", "resources": {"per_worker": 1}}


@pytest.fixture
def server(live_servers):
    return live_servers(fake_gpus=2)


def _create(server, user: str, admin: bool = False) -> dict:
    args = ["token", "create", user, "--json", *(["--admin"] if admin else [])]
    return json.loads(server.cli(*args, admin=True).stdout)


def test_a_revoked_token_is_refused_at_once(server):
    erin = _create(server, "erin")
    assert erin["id"].startswith("tok-") and erin["token"].startswith("corral_")
    with server.http(erin["token"]) as c:  # one keep-alive connection throughout
        assert c.get("/v1/whoami").json()["user"] == "erin"
        assert c.post("/v1/jobs", json=JOB).status_code == 201

        done = server.cli("token", "revoke", erin["id"], admin=True)
        assert done.stdout.strip() == f"revoked {erin['id']} (erin)"

        for method, path in [("GET", "/v1/whoami"), ("POST", "/v1/jobs"), ("GET", "/v1/jobs")]:
            resp = c.request(method, path, json=JOB if method == "POST" else None)
            assert resp.status_code == 401, (method, path, resp.text)
            assert resp.json() == {"detail": "invalid token"}
    done = server.cli("ls", token=erin["token"], check=False)
    assert done.returncode == 3 and done.stderr.strip() == "corral: error: invalid token (HTTP 401)"
    listed = json.loads(server.cli("token", "list", "--json", admin=True).stdout)
    assert erin["id"] not in [t["id"] for t in listed]

    server.kill()  # the store is the truth: still revoked after a crash and restart
    server.start()
    with server.http(erin["token"]) as c:
        assert c.get("/v1/whoami").status_code == 401


def test_revoke_every_token_of_a_user(server):
    first, second = _create(server, "frank"), _create(server, "frank")
    other = _create(server, "gina")
    done = server.cli("token", "revoke", "frank", "--json", admin=True)
    revoked = json.loads(done.stdout)
    assert sorted(t["id"] for t in revoked) == sorted([first["id"], second["id"]])
    assert all(t["user"] == "frank" and "token" not in t for t in revoked)
    for tok in (first, second):
        with server.http(tok["token"]) as c:
            assert c.get("/v1/whoami").status_code == 401
    with server.http(other["token"]) as c:
        assert c.get("/v1/whoami").status_code == 200


def test_token_list_shows_ids_never_secrets(server):
    hal = _create(server, "hal")
    out = server.cli("token", "list", admin=True).stdout
    assert hal["id"] in out and "hal" in out and hal["token"] not in out
    listed = json.loads(server.cli("token", "list", "--json", admin=True).stdout)
    assert {"admin", "hal"} <= {t["user"] for t in listed}
    assert all(set(t) == {"id", "user", "admin", "created_at"} for t in listed)


def test_only_admins_revoke_and_bad_refs_are_one_line(server):
    ivy, jay = _create(server, "ivy"), _create(server, "jay")
    with server.http(ivy["token"]) as c:
        resp = c.delete(f"/v1/tokens/{jay['id']}")
        assert resp.status_code == 403 and "only admins" in resp.json()["detail"]
        assert c.get("/v1/tokens").status_code == 403
    done = server.cli("token", "revoke", jay["id"], token=ivy["token"], check=False)
    assert done.returncode == 3
    assert done.stderr.strip() == "corral: error: only admins may revoke tokens (HTTP 403)"
    with server.http(jay["token"]) as c:
        assert c.get("/v1/whoami").status_code == 200, "still valid"

    done = server.cli("token", "revoke", "tok-000000000000", admin=True, check=False)
    assert done.returncode == 4 and len(done.stderr.strip().splitlines()) == 1
    assert "no token with id 'tok-000000000000'" in done.stderr
    with server.http() as c:
        assert c.delete(f"/v1/tokens/{jay['id']}").status_code == 401


def test_the_last_admin_token_cannot_be_revoked(server):
    admin_id = json.loads(server.cli("token", "list", "--json", admin=True).stdout)[0]["id"]
    done = server.cli("token", "revoke", admin_id, admin=True, check=False)
    assert done.returncode == 3 and "would leave no admin token" in done.stderr
    assert "(HTTP 409)" in done.stderr
    with server.http(server.admin_token) as c:
        assert c.get("/v1/whoami").status_code == 200

    ops = _create(server, "ops", admin=True)
    server.cli("token", "revoke", "admin", admin=True)  # by user: admin.token's user
    with server.http(server.admin_token) as c:
        assert c.get("/v1/whoami").status_code == 401
    done = server.cli("token", "revoke", ops["id"], token=ops["token"], check=False)
    assert done.returncode == 3 and "would leave no admin token" in done.stderr
    with server.http(ops["token"]) as c:
        assert c.get("/v1/whoami").json() == {"user": "ops", "admin": True, "projects": ["default"]}
