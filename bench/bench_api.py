"""Benchmark the live API: submit throughput, and submit-to-running latency on an idle pool.

    python bench/bench_api.py [--submissions 2000] [--clients 4] [--latency-jobs 50]

Starts a real `corral up` (8 fake GPUs, temporary state dir) as a subprocess and talks to it
over loopback HTTP with keep-alive clients, as a user's scripts would.

1. Latency: on the idle pool, submit one small job at a time and poll until it is running;
   p50 and p99 of the time from sending the submission to seeing it running.
2. Throughput: a job holding every GPU is started first, so the N submissions that follow all
   stay pending (each is still validated, admission-checked, committed and queued, and wakes a
   scheduling cycle); submissions/s over the whole run, split across --clients threads.

Targets (issue #4): >= 500 submissions/s, p50 <= 100 ms to running.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

QUOTA = """
[toml-schema]
version = "1"
[project_membership]
bench = [".*"]
[project_resources.bench]
gpu = 1.0
[scheduler]
preempt_grace = "1s"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, state: Path, gpus: int):
        self.state = state
        self.port = free_port()
        quota = state.parent / "quota.toml"
        quota.write_text(QUOTA)
        cmd = [sys.executable, "-c", "from corral.cli import main; main()", "up"]
        cmd += ["--state", str(state), "--port", str(self.port), "--quota", str(quota)]
        cmd += ["--fake-gpus", str(gpus), "--accelerator", "gpu"]
        self.log = open(state.parent / "server.log", "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"corral up exited {self.proc.returncode}; see {self.log.name}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        self.token = (state / "admin.token").read_text().strip()

    def log_tail(self, lines: int = 20) -> str:
        text = Path(self.log.name).read_text(errors="replace")
        return "--- corral up log (tail) ---\n" + "\n".join(text.splitlines()[-lines:]) + "\n"

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def stop(self) -> None:
        with self.client() as c:  # the hog and anything running: don't leak processes
            live = ok(c.get("/v1/jobs", params={"state": "running", "limit": 100000}))
            for job in live:
                c.post(f"/v1/jobs/{job['id']}/cancel")
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and ok(
                c.get("/v1/jobs", params={"state": "running"})
            ):
                time.sleep(0.1)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # the store survives SIGKILL; this is only the benchmark's copy
            self.proc.wait()
        self.log.close()


def ok(resp: httpx.Response) -> dict:
    """The JSON of a successful answer; anything else ends the run with what went wrong."""
    if resp.status_code >= 400:
        req = resp.request
        raise SystemExit(f"{req.method} {req.url}: {resp.status_code} {resp.text}")
    return resp.json()


def spec(i: int, per_worker: int = 1, command: str = "true") -> dict:
    return {"name": f"b{i}", "command": command, "resources": {"per_worker": per_worker}}


def measure_latency(server: Server, n: int) -> list[float]:
    out = []
    with server.client() as c:
        for i in range(n):
            t0 = time.perf_counter()
            job = ok(c.post("/v1/jobs", json=spec(100_000 + i, command="sleep 0.05")))
            while job["state"] == "pending":
                time.sleep(0.001)
                job = ok(c.get(f"/v1/jobs/{job['id']}"))
            out.append(time.perf_counter() - t0)
            while ok(c.get(f"/v1/jobs/{job['id']}"))["state"] == "running":
                time.sleep(0.01)  # idle pool again before the next one
    return out


def _submit_range(url: str, token: str, start: int, n: int, step: int, client: str) -> list[str]:
    """One client process: its share of the submissions over one keep-alive connection."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    bodies = [json.dumps(spec(i + 1)) for i in range(start, n, step)]
    if client == "httpx":
        with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
            answers = [c.post("/v1/jobs", content=b) for b in bodies]
            return [r.text for r in answers if r.status_code != 201]
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    errors = []
    for body in bodies:
        try:
            status, text = _post(conn, body, headers)
        except (http.client.RemoteDisconnected, ConnectionError):
            # The server closed an idle keep-alive connection before reading the request:
            # nothing was submitted, so send it again on a new connection (as httpx does).
            conn.close()
            status, text = _post(conn, body, headers)
        if status != 201:
            errors.append(text)
    conn.close()
    return errors


def _post(conn: http.client.HTTPConnection, body: str, headers: dict) -> tuple[int, str]:
    conn.request("POST", "/v1/jobs", body=body, headers=headers)
    resp = conn.getresponse()
    return resp.status, resp.read().decode()


def measure_throughput(server: Server, n: int, clients: int, gpus: int, client: str) -> float:
    with server.client() as c:
        hog = ok(c.post("/v1/jobs", json=spec(0, per_worker=gpus, command="sleep 600")))
        while ok(c.get(f"/v1/jobs/{hog['id']}"))["state"] != "running":
            time.sleep(0.01)
    # Client processes, not threads, and by default the stdlib's http.client rather than
    # httpx: httpx spends ~2 ms of CPU per request, more than the server, and on a 2-core
    # machine the clients' CPU is taken from the server being measured.
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(clients) as pool:
        pool.apply(time.sleep, (0,))  # workers are up before the clock starts
        t0 = time.perf_counter()
        jobs = [
            pool.apply_async(_submit_range, (server.url, server.token, k, n, clients, client))
            for k in range(clients)
        ]
        errors = [e for j in jobs for e in j.get()]
        elapsed = time.perf_counter() - t0
    if errors:
        raise SystemExit(f"{len(errors)} submissions failed, first: {errors[0]}")
    return n / elapsed


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--submissions", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--latency-jobs", type=int, default=50)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument(
        "--client",
        choices=("http.client", "httpx"),
        default="http.client",
        help="HTTP client of the throughput phase (both keep connections alive)",
    )
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()

    # ignore_cleanup_errors: a cancelled job's supervisor may still be writing its last
    # files into the state dir as it is removed.
    with tempfile.TemporaryDirectory(prefix="corral-bench-", ignore_cleanup_errors=True) as tmp:
        server = Server(Path(tmp) / "state", args.gpus)
        try:
            lat = measure_latency(server, args.latency_jobs)
            rate = measure_throughput(
                server, args.submissions, args.clients, args.gpus, args.client
            )
        except BaseException:
            sys.stderr.write(server.log_tail())
            raise
        finally:
            server.stop()
    figures = {
        "submissions": args.submissions,
        "clients": args.clients,
        "client": args.client,
        "submissions_per_s": round(rate, 1),
        "latency_jobs": args.latency_jobs,
        "submit_to_running_p50_ms": round(statistics.median(lat) * 1000, 1),
        "submit_to_running_p99_ms": round(pct(lat, 0.99) * 1000, 1),
        "cpus": os.cpu_count(),
    }
    if args.json:
        print(json.dumps(figures))
        return
    ok_rate = "ok" if rate >= 500 else "BELOW TARGET 500/s"
    ok_lat = "ok" if figures["submit_to_running_p50_ms"] <= 100 else "ABOVE TARGET 100 ms"
    print(
        f"submit throughput: {rate:.0f} submissions/s "
        f"({args.submissions} from {args.clients} keep-alive {args.client} client processes)"
        f" [{ok_rate}]"
    )
    print(
        f"submit-to-running on an idle pool ({args.latency_jobs} jobs): "
        f"p50 {figures['submit_to_running_p50_ms']} ms, "
        f"p99 {figures['submit_to_running_p99_ms']} ms [{ok_lat}]"
    )


if __name__ == "__main__":
    main()
