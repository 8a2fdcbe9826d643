"""Submissions in bursts from many clients at once (stored with group commit): each answer is
right for its own request, and every 201 is in the store, even across a SIGKILL mid-burst."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from conftest import TEAM_QUOTA

pytestmark = pytest.mark.live

HOG = {"name": "hog", "command": "sleep 300", "resources": {"per_worker": 4}}


def _spec(name: str, per_worker: int = 1) -> dict:
    return {"name": name, "command": "true", "resources": {"per_worker": per_worker}}


def _all_jobs(server) -> list[dict]:
    with server.http(server.admin_token) as c:
        resp = c.get("/v1/jobs", params={"all": True, "limit": 100000})
        resp.raise_for_status()
        return resp.json()


def test_concurrent_bursts_get_their_own_answers(live_servers):
    server = live_servers(TEAM_QUOTA, fake_gpus=4)
    with server.http(server.admin_token) as c:
        hog = c.post("/v1/jobs", json=HOG).json()["id"]
    server.wait(hog, "running")  # everything below stays pending
    barrier = threading.Barrier(8)

    def client(k: int) -> list[tuple[str, int, dict]]:
        out = []
        with server.http(server.admin_token) as c:
            barrier.wait()
            for i in range(30):
                if i == 10:
                    spec = _spec("same")  # all 8 clients at once: exactly one may have it
                elif i % 7 == 3:
                    spec = _spec(f"big-{k}-{i}", per_worker=5)  # larger than any node
                else:
                    spec = _spec(f"c{k}-{i}")
                resp = c.post("/v1/jobs", json=spec)
                out.append((spec["name"], resp.status_code, resp.json()))
        return out

    with ThreadPoolExecutor(8) as pool:
        answers = [a for part in pool.map(client, range(8)) for a in part]

    created = {body["id"]: name for name, status, body in answers if status == 201}
    for name, status, body in answers:
        if name == "same":
            assert status in (201, 409), body
        elif name.startswith("big-"):
            assert status == 422 and "largest node has 4" in body["detail"], body
        else:
            assert status == 201 and body["name"] == name and body["state"] == "pending", body
    assert [s for n, s, _ in answers if n == "same"].count(201) == 1
    stored = {j["id"]: j["name"] for j in _all_jobs(server) if j["id"] != hog}
    assert stored == created, "every 201 is stored, under the id it was answered with"
    seqs = sorted(int(i[1:]) for i in [hog, *stored])
    assert seqs == list(range(1, len(seqs) + 1)), "ids are dense and unique"
    with server.http(server.admin_token) as c:
        events = c.get("/v1/events", params={"limit": 10000}).json()
    rejects = [e for e in events if e["event"] == "reject"]
    assert len(rejects) == sum(1 for n, _, _ in answers if n.startswith("big-"))
    assert sum(1 for e in events if e["event"] == "submit") == len(seqs)


def test_every_201_survives_a_kill_mid_burst(live_servers):
    server = live_servers(TEAM_QUOTA, fake_gpus=4)
    with server.http(server.admin_token) as c:
        hog = c.post("/v1/jobs", json=HOG).json()["id"]
    server.wait(hog, "running")
    acked: list[tuple[str, str]] = []  # (id, name) answered 201
    lock = threading.Lock()
    stop = threading.Event()

    def client(k: int) -> None:
        i = 0
        with server.http(server.admin_token) as c:
            while not stop.is_set():
                name = f"k{k}-{i}"
                i += 1
                try:
                    resp = c.post("/v1/jobs", json=_spec(name))
                except httpx.HTTPError:
                    return  # the server died under this request: its fate is unknown
                if resp.status_code == 201:
                    with lock:
                        acked.append((resp.json()["id"], name))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(acked) < 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(acked) >= 200, f"only {len(acked)} submissions answered in 30 s"
    server.kill()
    stop.set()
    for t in threads:
        t.join()
    server.start()
    stored = {j["id"]: j["name"] for j in _all_jobs(server)}
    missing = [(i, n) for i, n in acked if stored.get(i) != n]
    assert not missing, f"answered 201 but not stored after the crash: {missing[:5]}"
    assert len(set(stored.values())) == len(stored), "no job stored twice"
    with server.http(server.admin_token) as c:  # and the restarted server takes new ones
        resp = c.post("/v1/jobs", json=_spec("after-crash"))
    assert resp.status_code == 201
    assert int(resp.json()["id"][1:]) == max(int(i[1:]) for i in stored) + 1
