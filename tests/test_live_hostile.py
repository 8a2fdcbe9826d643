"""The live plane under hostile input (issue 20): every input bounded, nothing leaks.

One `corral up` for the module, driven over real HTTP and through the CLI.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import resource
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import time

import httpx
import psutil
import pytest
from conftest import CLI, TEAM_QUOTA, LiveServer, free_port

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
restart_backoff = "1s"
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
        # Past the end: the log was truncated since (capped), read it from the start.
        assert resp.status_code == 200 and resp.content == b"hi\n", resp.text
        assert resp.headers["X-Corral-Offset"] == "3"
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
    assert done.returncode == 4 and "attempts 0..0" in done.stderr, done
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


# -- 3. the store stays bounded -------------------------------------------------------------------


def test_rejections_record_a_bounded_number_of_events(server, tokens):
    too_big = {"project": "vision", "command": "true", "resources": {"per_worker": 64}}
    with server.http(tokens["bob"]) as c:
        for _ in range(300):
            assert c.post("/v1/jobs", json=too_big | {"project": "nlp"}).status_code == 422
    with server.http(server.admin_token) as c:
        events = c.get("/v1/events", params={"limit": 10000}).json()
    rejects = [e for e in events if e["event"] == "reject" and e["user"] == "bob"]
    assert 1 <= len(rejects) <= 60


def test_the_wal_is_truncated_under_load(server, tokens):
    wal = server.state / "corral.db-wal"
    with server.http(tokens["alice"]) as c:
        ids = [c.post("/v1/jobs", json=SLEEP | {"priority": -1}).json()["id"] for _ in range(300)]
        grew = wal.stat().st_size  # about 10 MiB without truncation
        for job in ids:
            c.post(f"/v1/jobs/{job}/cancel")
    deadline = time.monotonic() + 5
    while wal.stat().st_size > 4 << 20 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert wal.stat().st_size <= 4 << 20, (grew, wal.stat().st_size)


# -- 4. the HTTP layer: sizes and times are capped before anything is read ------------------------


def raw(server, data: bytes, timeout: float = 5.0) -> bytes:
    """Send raw bytes, return what comes back until the server closes."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as s:
        with contextlib.suppress(OSError):
            s.sendall(data)
        out = b""
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                out += chunk
        return out


def test_a_huge_body_is_refused_before_it_is_read(server):
    head = b"POST /v1/tokens HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    answer = raw(server, head + b"Content-Length: 314572800\r\n\r\n{")
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    chunk = b"%x\r\n%s\r\n" % (1 << 16, b"x" * (1 << 16))
    answer = raw(server, head + b"Transfer-Encoding: chunked\r\n\r\n" + chunk * 20)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_huge_headers_are_refused(server):
    t0 = time.monotonic()
    answer = raw(server, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX: " + b"a" * (8 << 20))
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    assert time.monotonic() - t0 < 5
    with server.http() as c:
        assert c.get("/healthz").status_code == 200


def test_slow_clients_are_timed_out_and_cannot_starve_others(server):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    count = min(1500, hard - 300)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 300), hard))
    slow = []
    try:
        for _ in range(count):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            slow.append(s)
        deadline = time.monotonic() + 20
        while True:  # served at once where the fd limit allows, else once the slow time out
            with contextlib.suppress(httpx.HTTPError, AssertionError):
                with server.http() as c:
                    assert c.get("/healthz", timeout=2).status_code == 200
                break
            assert time.monotonic() < deadline, "a new client is never served"
            time.sleep(0.5)
        slow[0].settimeout(15)
        assert slow[0].recv(100).startswith(b"HTTP/1.1 408")
    finally:
        for s in slow:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# -- 12. browsers: security headers, and only our own Host names ---------------------------------


def test_security_headers_and_host_check(server, tokens):
    with server.http(tokens["alice"]) as c:
        for path in ("/", "/v1/jobs", "/docs", "/nope"):
            resp = c.get(path)
            assert resp.headers["x-content-type-options"] == "nosniff", path
            assert resp.headers["x-frame-options"] == "DENY", path
            assert "frame-ancestors 'none'" in resp.headers["content-security-policy"], path
        assert "'unsafe-inline'" not in c.get("/").headers["content-security-policy"]
        for host in ("localhost", f"localhost:{server.port}", "127.0.0.1", "[::1]:8642"):
            assert c.get("/v1/jobs", headers={"Host": host}).status_code == 200, host
        resp = c.get("/metrics", headers={"Host": f"rebind.example:{server.port}"})
        assert resp.status_code == 400 and "--allow-host" in resp.json()["detail"]
        assert "corral_jobs" not in resp.text


# -- 7. the state dir is private even if it was made with a looser mode --------------------------


def started(live_servers, name: str, *args: str) -> LiveServer:
    """A server of its own with extra `corral up` flags, torn down by the fixture."""
    state = live_servers.root / name
    server = LiveServer(state, free_port(), ["--fake-gpus", "1", "--run-as", "corral", *args])
    live_servers.servers.append(server)
    return server.start()


def test_a_loose_state_dir_is_made_private_and_extra_hosts_allowed(live_servers):
    state = live_servers.root / "loose"
    state.mkdir(mode=0o755)
    state.chmod(0o755)
    (state / "corral.db").touch(mode=0o644)
    (state / "corral.db").chmod(0o644)
    server = started(live_servers, "loose", "--allow-host", "gpu.example")
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for name in ("corral.db", "corral.db-wal", "admin.token"):
        assert stat.S_IMODE((state / name).stat().st_mode) == 0o600, name
    with server.http() as c:
        assert c.get("/healthz", headers={"Host": "gpu.example"}).status_code == 200
        assert c.get("/healthz", headers={"Host": "other.example"}).status_code == 400


# -- 6. an attempt cut short between its run dir and its launch runs as the same attempt ----------


def test_a_launch_cut_short_is_finished_as_the_same_attempt(live_servers):
    server = live_servers(TEAM_QUOTA, fake_gpus=1, name="cut")
    with server.http(server.admin_token) as c:
        spec = {"command": "echo attempt=$CORRAL_ATTEMPT; sleep 60"}
        job = c.post("/v1/jobs", json=spec).json()["id"]
    server.wait(job, "running")
    server.kill()
    server.kill_leftovers()
    # What a crash right after creating the run dir leaves: the store says "launching",
    # the run dir is empty, no supervisor ever started.
    run = server.state / "runs" / job / "0"
    shutil.rmtree(run)
    shutil.rmtree(server.state / "logs" / job)
    run.mkdir()
    with sqlite3.connect(server.state / "corral.db") as db:
        db.execute("UPDATE attempts SET state = 'launching' WHERE job_id = ?", (job,))
    server.start()
    deadline = time.monotonic() + 20  # a loaded machine starts Python slowly
    with server.http(server.admin_token) as c:
        while (log := c.get(f"/v1/jobs/{job}/logs").content) != b"attempt=0\n":
            assert time.monotonic() < deadline, (log, sorted(os.listdir(run)), server.log()[-3000:])
            time.sleep(0.2)
    assert server.job(job)["attempt"] == 0


# -- 10. a cancel completes even if the supervisor is stopped -------------------------------------


def test_cancel_kills_a_gang_whose_supervisor_is_stopped(server, tokens):
    job = submit(server, tokens["alice"], SLEEP).json()["id"]
    server.wait(job, "running")
    run = server.state / "runs" / job / "0"
    deadline = time.monotonic() + 10
    while not (run / "workers.json").exists():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    supervisor = json.loads((run / "supervisor.pid").read_text())["pid"]
    worker = json.loads((run / "workers.json").read_text())[0]["pid"]
    os.kill(supervisor, signal.SIGSTOP)
    try:
        with server.http(tokens["alice"]) as c:
            c.post(f"/v1/jobs/{job}/cancel")
        server.wait(job, "cancelled", timeout=20)
        assert not psutil.pid_exists(worker) or psutil.Process(worker).status() == "zombie"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(supervisor, signal.SIGCONT)


# -- 11. a failing job backs off before each restart ----------------------------------------------


def test_restarts_back_off_exponentially(server, tokens):
    spec = {"project": "vision", "command": "exit 3", "max_restarts": 2}
    job = submit(server, tokens["alice"], spec).json()["id"]
    seen = server.wait(job, lambda j: j["reason_code"] == "backoff" or j["state"] == "failed")
    assert seen["reason_code"] == "backoff", seen
    done = server.wait(job, "failed", timeout=20)
    attempts = done["attempts"]
    assert [a["exit_code"] for a in attempts] == [3, 3, 3]
    gaps = [b["started_at"] - a["finished_at"] for a, b in itertools.pairwise(attempts)]
    assert gaps[0] >= 1.0 and gaps[1] >= 2.0, gaps


# -- 11. nothing grows forever: logs are capped, finished jobs and their files go ----------------


def test_a_worker_log_is_capped(server, tokens):
    spec = {"project": "vision", "command": "head -c 70000000 /dev/zero; echo end; sleep 60"}
    job = submit(server, tokens["alice"], spec).json()["id"]
    log = server.state / "logs" / job / "0" / "worker-0.log"
    try:
        deadline = time.monotonic() + 20
        while not (log.with_name("worker-0.log.1").exists() and log.stat().st_size < 1 << 20):
            assert time.monotonic() < deadline, log.stat().st_size
            time.sleep(0.2)
        assert log.with_name("worker-0.log.1").stat().st_size >= 64 << 20
    finally:
        with server.http(tokens["alice"]) as c:
            c.post(f"/v1/jobs/{job}/cancel")


def test_finished_jobs_their_events_and_files_are_forgotten_after_retention(live_servers):
    server = started(live_servers, "kept", "--retention", "3s")
    with server.http(server.admin_token) as c:
        first = c.post("/v1/jobs", json={"command": "echo one"}).json()["id"]
        server.wait(first, "succeeded")
        assert (server.state / "logs" / first).is_dir()
        time.sleep(3)
        resp = c.post("/v1/jobs", json={"command": "echo two"})
        assert resp.status_code == 201, resp.text
        last = resp.json()["id"]
        server.wait(last, "succeeded")
        deadline = time.monotonic() + 10
        while c.get(f"/v1/jobs/{first}").status_code != 404:
            assert time.monotonic() < deadline, "never forgotten"
            time.sleep(0.3)
        assert not (server.state / "logs" / first).exists()
        assert not (server.state / "runs" / first).exists()
        assert all(e["job"] != first for e in c.get("/v1/events").json())
        time.sleep(4)  # the newest job stays, so ids are never given twice
        assert c.get(f"/v1/jobs/{last}").status_code == 200
        nxt = c.post("/v1/jobs", json={"command": "true"}).json()["id"]
        assert int(nxt[1:]) == int(last[1:]) + 1


# -- 12. the CLI says what is wrong in one line -------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["show", ""],
        ["cancel", ""],
        ["logs", ""],
        ["up", "--port", "99999"],
        ["demo", "--gpus", "2"],
    ],
)
def test_bad_arguments_are_one_clear_error(server, args):
    done = server.cli(*args, token="x", check=False)
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr and done.stderr.strip(), done.stderr


def test_a_quota_naming_no_accelerator_of_the_pool_is_refused_at_start(tmp_path):
    quota = tmp_path / "quota.toml"
    quota.write_text(QUOTA.replace("gpu = 0.5", "h100 = 0.5"))
    done = subprocess.run(
        [*CLI, "up", "--state", str(tmp_path / "s"), "--port", str(free_port())]
        + ["--proxy-port", str(free_port())]
        + ["--fake-gpus", "2", "--accelerator", "gpu", "--quota", str(quota)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done
    assert "names h100, but this pool has gpu" in done.stderr and "Traceback" not in done.stderr
