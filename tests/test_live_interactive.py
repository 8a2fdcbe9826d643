"""Interactive jobs on a real `corral up` (fake GPUs): a real Jupyter server, TensorBoard and
sshd started from the built-in templates, reached only through the API's proxy.

One server for the module; the idle-culling jobs run side by side to keep the module short.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid

import httpx
import pytest
from conftest import CLI, TEAM_QUOTA, free_port, port_block
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

pytestmark = pytest.mark.live

IDLE = 6.0  # seconds: short, so culling is seen within the test


TEMPLATES = """
- name: sleeper
  description: holds a TCP port and does nothing
  command: "sleep 300 # {port.api}"
  ports: {api: tcp}
  idle: [gpu]
"""
LIMITS = '[interactive]\nmax_runtime_limit = "12h"\n'


@pytest.fixture(scope="module")
def server(module_servers):
    s = module_servers(TEAM_QUOTA + LIMITS, fake_gpus=8, start=False)
    templates = module_servers.root / "templates.yaml"
    templates.write_text(TEMPLATES)
    s.args += ["--port-range", port_block(), "--templates", str(templates)]
    return s.start()


@pytest.fixture(scope="module")
def alice(server):
    return server.token("alice")


def submit(server, token: str, **spec) -> str:
    with server.http(token) as c:
        resp = c.post("/v1/jobs", json=spec)
        assert resp.status_code == 201, resp.text
        return resp.json()["id"]


def endpoint(server, job_id: str, name: str = "http", timeout: float = 30.0) -> dict:
    """The job's endpoint once the template's readiness check has passed."""
    job = server.wait(
        job_id,
        lambda j: (
            any(e["name"] == name and e["ready"] for e in j.get("endpoints", []))
            or j["state"] not in ("pending", "running")
        ),
        timeout=timeout,
        what="ready",
    )
    found = [e for e in job["endpoints"] if e["name"] == name]
    assert found, f"job {job_id} ended before it was ready: {job}"
    return found[0]


@pytest.fixture(scope="module")
def notebook(server, alice):
    job_id = submit(server, alice, template="jupyter", name="nb", idle_timeout="1h")
    return job_id, endpoint(server, job_id)


def test_jupyter_through_the_proxy_owner_only(server, alice, notebook):
    job_id, ep = notebook
    assert ep["url"] == f"{server.proxy_url}/j/{job_id}/http/"
    status = ep["url"] + "api/status"
    assert httpx.get(status, headers={"Authorization": f"Bearer {alice}"}).status_code == 200
    none = httpx.get(status)
    assert none.status_code == 401 and "token" in none.json()["detail"]
    bob = server.token("bob")
    other = httpx.get(status, headers={"Authorization": f"Bearer {bob}"})
    assert other.status_code == 403, other.text
    assert httpx.get(status, headers={"Authorization": f"Bearer {server.admin_token}"}).is_success
    # Jupyter keeps its own token: its port, reached directly, refuses a request without it.
    direct = f"http://127.0.0.1:{ep['port']}/j/{job_id}/http/api/status"
    assert httpx.get(direct).status_code == 403
    # `corral show --json` lists the endpoint too.
    shown = json.loads(server.cli("show", job_id, "--json", token=alice).stdout)
    assert [e["url"] for e in shown["endpoints"]] == [ep["url"]]


def test_browser_sign_in_sets_a_path_cookie_and_refuses_cross_site_writes(server, alice, notebook):
    job_id, ep = notebook
    page = httpx.get(ep["url"] + "api/status", headers={"Accept": "text/html"})
    assert page.status_code == 401 and "location.hash" in page.text  # the sign-in page
    with httpx.Client() as browser:
        assert browser.post(f"{server.proxy_url}/j/{job_id}/_login").status_code == 401
        login = browser.post(
            f"{server.proxy_url}/j/{job_id}/_login", headers={"Authorization": f"Bearer {alice}"}
        )
        assert login.status_code == 204
        cookie = login.headers["set-cookie"]
        for part in (f"Path=/j/{job_id}/", "HttpOnly", "SameSite=Strict"):
            assert part in cookie
        assert alice not in cookie
        assert browser.get(ep["url"] + "api/status").status_code == 200
        # A write riding on the cookie from another site (or with no Origin) is refused.
        contents = ep["url"] + "api/contents"
        forged = browser.post(
            contents, json={"type": "notebook"}, headers={"Origin": "http://evil"}
        )
        assert forged.status_code == 403
        assert browser.post(contents, json={"type": "notebook"}).status_code == 403
        # The web page's origin is another origin than the proxy's: refused too.
        page = browser.post(contents, json={"type": "notebook"}, headers={"Origin": server.url})
        assert page.status_code == 403
        same = browser.post(
            contents, json={"type": "notebook"}, headers={"Origin": server.proxy_url}
        )
        assert same.status_code == 201, same.text


def test_the_api_port_serves_no_job_and_the_proxy_port_nothing_else(server, alice, notebook):
    job_id, ep = notebook
    auth = {"Authorization": f"Bearer {alice}"}
    moved = httpx.get(f"{server.url}/j/{job_id}/http/api/status?x=1", headers=auth)
    assert moved.status_code == 307 and moved.headers["location"] == ep["url"] + "api/status?x=1"
    assert "version" not in moved.text  # no Jupyter content on the API's origin
    with pytest.raises(InvalidStatus):  # no WebSocket to a job on the API's port either
        connect(f"ws://127.0.0.1:{server.port}/j/{job_id}/http/api/events", additional_headers=auth)
    for path in ("/", "/v1/jobs", "/healthz", "/docs"):
        other = httpx.get(server.proxy_url + path, headers=auth)
        assert other.status_code == 404 and "/j/JOB/PORT/" in other.json()["detail"]
        assert "default-src 'none'" in other.headers["content-security-policy"]
    # The Host check (DNS rebinding) holds on the proxy's listener too.
    rebound = httpx.get(ep["url"] + "api/status", headers={**auth, "Host": "evil.example"})
    assert rebound.status_code == 400


def run_in_kernel(server, token: str, job_id: str, code: str, wait: bool = True) -> str:
    """Start a kernel through the proxy and run `code` over its WebSocket; its stdout."""
    base = f"{server.proxy_url}/j/{job_id}/http/api/kernels"
    auth = {"Authorization": f"Bearer {token}"}
    made = httpx.post(base, headers=auth, json={})
    assert made.status_code == 201, made.text
    kernel = made.json()["id"]
    ws_url = base.replace("http://", "ws://") + f"/{kernel}/channels"
    ws = connect(ws_url, additional_headers=auth).__enter__()
    msg_id = uuid.uuid4().hex
    header = {"msg_id": msg_id, "msg_type": "execute_request", "username": "t", "session": "s"}
    header["version"] = "5.3"
    ws.send(
        json.dumps(
            {
                "header": header,
                "parent_header": {},
                "metadata": {},
                "channel": "shell",
                "content": {"code": code, "silent": False},
            }
        )
    )
    if not wait:
        return ""  # left running, the socket open
    out = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        msg = json.loads(ws.recv(timeout=30))
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    ws.close()
    return "".join(out)


def test_a_kernel_opened_over_the_websocket_runs_code(server, alice, notebook):
    job_id, _ = notebook
    assert run_in_kernel(server, alice, job_id, "print(6 * 7)").strip() == "42"


def test_idle_notebook_is_cancelled_busy_and_used_ones_are_not(server, alice):
    idle = submit(server, alice, template="jupyter", name="idle", idle_timeout=IDLE)
    busy = submit(server, alice, template="jupyter", name="busy", idle_timeout=IDLE)
    used = submit(server, alice, template="jupyter", name="used", idle_timeout=IDLE)
    for job_id in (idle, busy, used):
        endpoint(server, job_id)
    run_in_kernel(server, alice, busy, "import time; time.sleep(120)", wait=False)
    deadline = time.monotonic() + IDLE + 6
    while time.monotonic() < deadline and server.job(idle)["state"] == "running":
        r = httpx.get(
            f"{server.proxy_url}/j/{used}/http/", headers={"Authorization": f"Bearer {alice}"}
        )
        assert r.status_code in (200, 302), r.status_code
        time.sleep(1)
    done = server.wait(idle, "cancelled", timeout=15)
    assert done["reason"].startswith("idle"), done
    with server.http(alice) as c:
        events = c.get(f"/v1/jobs/{idle}/events").json()
    kinds = [e["event"] for e in events]
    assert "idle_warning" in kinds and kinds.index("idle_warning") < kinds.index("cancel")
    assert [e.get("reason") for e in events if e["event"] == "cancel"] == ["idle"]
    assert server.job(busy)["state"] == "running"
    assert server.job(used)["state"] == "running"
    for job_id in (busy, used):
        server.cli("cancel", job_id, token=alice)


def test_tensorboard_serves_its_page_through_the_proxy(server, alice):
    job_id = submit(server, alice, template="tensorboard", name="tb")
    ep = endpoint(server, job_id, timeout=60)
    page = httpx.get(ep["url"], headers={"Authorization": f"Bearer {alice}"}, follow_redirects=True)
    assert page.status_code == 200 and "tensorboard" in page.text.lower()
    server.cli("cancel", job_id, token=alice)


def test_ports_are_unique_per_node_and_kept_across_a_restart(server, alice):
    spec = {"kind": "interactive", "command": "sleep 300 # {port.web} {port.api}"}
    jobs = [submit(server, alice, **spec) for _ in range(3)]
    before = {j: server.wait(j, "running")["endpoints"] for j in jobs}
    ports = [e["port"] for eps in before.values() for e in eps]
    assert len(ports) == 6 and len(set(ports)) == 6, before
    lo, hi = map(int, server.args[server.args.index("--port-range") + 1].split("-"))
    assert all(lo <= p <= hi for p in ports)
    server.stop()
    server.start()
    after = {j: server.wait(j, "running")["endpoints"] for j in jobs}
    assert {j: [e["port"] for e in eps] for j, eps in after.items()} == {
        j: [e["port"] for e in eps] for j, eps in before.items()
    }
    newer = submit(server, alice, **spec)
    fresh = [e["port"] for e in server.wait(newer, "running")["endpoints"]]
    assert not set(fresh) & set(ports), (fresh, ports)
    for j in [*jobs, newer]:
        server.cli("cancel", j, token=alice)


def test_a_job_in_use_is_not_culled_for_a_restart_of_corral_up(server, alice):
    # Used through the proxy for longer than its idle timeout, then corral up is killed: the
    # activity it saw is gone with it, and the job must not be taken for idle since its start.
    job_id = submit(
        server, alice, kind="interactive", command="sleep 300 # {port.web}", idle_timeout=IDLE
    )
    server.wait(job_id, "running")
    auth = {"Authorization": f"Bearer {alice}"}
    until = time.monotonic() + IDLE + 1
    while time.monotonic() < until:
        httpx.get(f"{server.proxy_url}/j/{job_id}/web/", headers=auth)  # (nothing answers)
        time.sleep(0.5)
    assert server.job(job_id)["state"] == "running"
    server.kill()
    server.start()
    # The culler looks every second: counting from the start, it warns, then cancels.
    time.sleep(3)
    job = server.job(job_id)
    with server.http(alice) as c:
        kinds = [e["event"] for e in c.get(f"/v1/jobs/{job_id}/events").json()]
    assert job["state"] == "running" and "idle_warning" not in kinds, (job, kinds)
    server.cli("cancel", job_id, token=alice)


@pytest.mark.skipif(
    shutil.which("sshd") is None and not shutil.os.path.exists("/usr/sbin/sshd"),
    reason="needs sshd: Debian openssh-server",
)
def test_corral_ssh_runs_a_command_through_the_api(server, alice, tmp_path):
    key = tmp_path / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    server.cli("keys", "add", str(key) + ".pub", token=alice)
    job_id = submit(server, alice, template="ssh", name="box")
    endpoint(server, job_id, name="ssh")
    done = subprocess.run(
        [*CLI, "ssh", job_id, "-i", str(key), "--", "echo", "ok"],
        env=server.env(alice),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    config = server.cli("ssh-config", job_id, token=alice).stdout
    assert f"Host corral-{job_id}" in config and "ProxyCommand corral ssh-proxy" in config
    server.cli("cancel", job_id, token=alice)


def test_admin_templates_limits_and_bad_input(server, alice, tmp_path):
    with server.http(alice) as c:
        names = [t["name"] for t in c.get("/v1/templates").json()]
        assert names == ["jupyter", "shell", "sleeper", "ssh", "tensorboard"]
        too_long = c.post("/v1/jobs", json={"template": "shell", "max_runtime": "24h"})
        assert too_long.status_code == 422 and "max_runtime_limit" in too_long.json()["detail"]
        unknown = c.post("/v1/jobs", json={"template": "vscode"})
        assert unknown.status_code == 422 and "sleeper" in unknown.json()["detail"]
        batch = c.post("/v1/jobs", json={"command": "true", "idle_timeout": "1h"})
        assert batch.status_code == 422 and "only for interactive" in batch.json()["detail"]
        assert c.post("/v1/keys", json={"key": "not a key"}).status_code == 422
    job_id = server.cli("submit", "--template", "sleeper", token=alice).stdout.strip()
    job = server.wait(job_id, lambda j: j["endpoints"], what="given its port")
    assert job["max_runtime"] == 8 * 3600 and not job["preemptible"]  # the defaults
    assert [(e["name"], e["protocol"]) for e in job["endpoints"]] == [("api", "tcp")]
    server.cli("cancel", job_id, token=alice)
    bad = tmp_path / "bad.yaml"
    bad.write_text("- name: x\n  command: run {port.web}\n  idle: [sometimes]\n")
    done = subprocess.run(
        [*CLI, "up", "--state", str(tmp_path / "s"), "--port", str(free_port())]
        + ["--proxy-port", str(free_port())]
        + ["--templates", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "idle" in done.stderr and "Traceback" not in done.stderr
