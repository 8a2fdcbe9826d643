"""Benchmark the live API: submit throughput, and submit-to-running latency on an idle pool.

    python bench/bench_api.py [--submissions 2000] [--clients 4] [--latency-jobs 50]
                              [--client raw|http.client|httpx] [--json]

Starts a real `corral up` (8 fake GPUs, temporary state dir) as a subprocess and talks to it
over loopback HTTP with keep-alive connections, as a user's scripts would.

1. Latency: on the idle pool, submit one small job at a time (httpx) and poll until it is
   running; p50 and p99 of the time from sending the submission to seeing it running.
2. Throughput: a job holding every GPU is started first, so the N submissions that follow all
   stay pending (each is still authenticated, validated, admission-checked, committed to
   SQLite before its 201, queued, and wakes a scheduling cycle); submissions/s over the whole
   run, from --clients client processes with one keep-alive connection and one request in
   flight each. The default client is a minimal HTTP/1.1 client on a socket (as wrk and other
   load generators are): the clients share the machine's 2 cores with the server, so what
   they spend is taken from it. It also prints the CPU the server and the clients spent per
   submission, which, unlike the rate, does not depend on what else the machine is running.

Targets (issue #4): >= 500 submissions/s, p50 <= 100 ms to running.
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
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
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
from live_pool import free_port, one_project_quota

QUOTA = one_project_quota("bench")


class Server:
    def __init__(self, state: Path, gpus: int):
        self.state = state
        self.port = free_port()
        quota = state.parent / "quota.toml"
        quota.write_text(QUOTA)
        cmd = [sys.executable, "-c", "from corral.cli import main; main()", "up"]
        cmd += ["--state", str(state), "--port", str(self.port), "--quota", str(quota)]
        cmd += ["--fake-gpus", str(gpus), "--accelerator", "gpu", "--run-as", "corral"]
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


def _submit_range(
    url: str, token: str, start: int, n: int, step: int, client: str
) -> tuple[list[str], float]:
    """One client process: its share of the submissions over one keep-alive connection.
    Returns the error answers and the CPU seconds this client spent sending them."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    bodies = [json.dumps(spec(i + 1)) for i in range(start, n, step)]
    cpu0 = time.process_time()
    errors = _send_all(url, headers, bodies, client)
    return errors, time.process_time() - cpu0


def _send_all(url: str, headers: dict, bodies: list[str], client: str) -> list[str]:
    if client == "raw":
        return _send_raw(url, headers, bodies)
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


class RawHTTP:
    """A minimal HTTP/1.1 keep-alive client on a plain socket, the way load generators such
    as wrk are written: the request is built as bytes, the answer's status line and
    Content-Length are read and its whole body is received. The standard library's
    http.client parses headers with the email package and costs ~0.1 ms of CPU per request,
    which on 2 cores is taken from the server being measured."""

    def __init__(self, host: str, port: int, headers: dict):
        self.sock = socket.create_connection((host, port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        fixed = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.head = f"Host: {host}:{port}\r\n{fixed}"
        self.buf = b""

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        request = f"POST {path} HTTP/1.1\r\n{self.head}Content-Length: {len(body)}\r\n\r\n"
        self.sock.sendall(request.encode() + body)
        while (end := self.buf.find(b"\r\n\r\n")) < 0:
            self._recv()
        status_line, *lines = self.buf[:end].split(b"\r\n")
        status = int(status_line.split(b" ", 2)[1])
        length = None
        for line in lines:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if length is None:
            raise SystemExit(f"answer without Content-Length: {self.buf[:end]!r}")
        start = end + 4
        while len(self.buf) < start + length:
            self._recv()
        answer, self.buf = self.buf[start : start + length], self.buf[start + length :]
        return status, answer

    def _recv(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buf += chunk

    def close(self) -> None:
        self.sock.close()


def _send_raw(url: str, headers: dict, bodies: list[str]) -> list[str]:
    host, port = url.removeprefix("http://").split(":")
    conn = RawHTTP(host, int(port), headers)
    errors = []
    for body in bodies:
        status, answer = conn.post("/v1/jobs", body.encode())
        if status != 201 or not json.loads(answer)["id"].startswith("j"):
            errors.append(f"{status} {answer.decode(errors='replace')}")
    conn.close()
    return errors


def _post(conn: http.client.HTTPConnection, body: str, headers: dict) -> tuple[int, str]:
    conn.request("POST", "/v1/jobs", body=body, headers=headers)
    resp = conn.getresponse()
    return resp.status, resp.read().decode()


@dataclass
class Throughput:
    rate: float  # submissions per second, wall clock
    server_cpu_ms: float  # CPU of the corral up process per submission
    client_cpu_ms: float  # CPU of all client processes per submission


def measure_throughput(server: Server, n: int, clients: int, gpus: int, client: str) -> Throughput:
    with server.client() as c:
        hog = ok(c.post("/v1/jobs", json=spec(0, per_worker=gpus, command="sleep 600")))
        while ok(c.get(f"/v1/jobs/{hog['id']}"))["state"] != "running":
            time.sleep(0.01)
    # Client processes, not threads, and by default the stdlib's http.client rather than
    # httpx: httpx spends ~2 ms of CPU per request, more than the server, and on a 2-core
    # machine the clients' CPU is taken from the server being measured.
    ctx = multiprocessing.get_context("spawn")
    proc = psutil.Process(server.proc.pid)
    with ctx.Pool(clients) as pool:
        pool.apply(time.sleep, (0,))  # workers are up before the clock starts
        cpu0 = proc.cpu_times()
        t0 = time.perf_counter()
        jobs = [
            pool.apply_async(_submit_range, (server.url, server.token, k, n, clients, client))
            for k in range(clients)
        ]
        results = [j.get() for j in jobs]
        elapsed = time.perf_counter() - t0
        cpu1 = proc.cpu_times()
    errors = [e for errs, _ in results for e in errs]
    if errors:
        raise SystemExit(f"{len(errors)} submissions failed, first: {errors[0]}")
    server_cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    client_cpu = sum(cpu for _, cpu in results)
    return Throughput(n / elapsed, server_cpu / n * 1000, client_cpu / n * 1000)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


CLIENTS = {
    "raw": "raw-socket HTTP/1.1",
    "http.client": "http.client",
    "httpx": "httpx",
}


def http_stack() -> str:
    """What uvicorn in `corral up` will run on (it picks uvloop and httptools when present)."""
    have = [m for m in ("uvloop", "httptools") if importlib.util.find_spec(m) is not None]
    return "uvicorn + " + (" + ".join(have) if have else "asyncio + h11")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--submissions", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--latency-jobs", type=int, default=50)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument(
        "--client",
        choices=tuple(CLIENTS),
        default="raw",
        help="HTTP client of the throughput phase (all keep connections alive): raw, a"
        " minimal HTTP/1.1 client on a socket, as load generators are; or the standard"
        " library's http.client; or httpx",
    )
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()

    load_before = os.getloadavg()[0]
    # ignore_cleanup_errors: a cancelled job's supervisor may still be writing its last
    # files into the state dir as it is removed.
    with tempfile.TemporaryDirectory(prefix="corral-bench-", ignore_cleanup_errors=True) as tmp:
        server = Server(Path(tmp) / "state", args.gpus)
        try:
            lat = measure_latency(server, args.latency_jobs)
            tp = measure_throughput(server, args.submissions, args.clients, args.gpus, args.client)
        except BaseException:
            sys.stderr.write(server.log_tail())
            raise
        finally:
            server.stop()
    figures = {
        "submissions": args.submissions,
        "clients": args.clients,
        "client": args.client,
        "submissions_per_s": round(tp.rate, 1),
        "server_cpu_ms_per_submission": round(tp.server_cpu_ms, 3),
        "client_cpu_ms_per_submission": round(tp.client_cpu_ms, 3),
        "latency_jobs": args.latency_jobs,
        "submit_to_running_p50_ms": round(statistics.median(lat) * 1000, 1),
        "submit_to_running_p99_ms": round(pct(lat, 0.99) * 1000, 1),
        "cpus": os.cpu_count(),
        "load_average_before": round(load_before, 2),
        "http_stack": http_stack(),
    }
    if args.json:
        print(json.dumps(figures))
        return
    ok_rate = "ok" if tp.rate >= 500 else "BELOW TARGET 500/s"
    ok_lat = "ok" if figures["submit_to_running_p50_ms"] <= 100 else "ABOVE TARGET 100 ms"
    print(
        f"load: {args.submissions} POST /v1/jobs over 127.0.0.1 from {args.clients} client"
        f" processes, one keep-alive {CLIENTS[args.client]} connection each, one request in flight"
        f" per connection; server: corral up ({http_stack()}), {os.cpu_count()} CPUs,"
        f" load average {load_before:.1f} before the run"
    )
    print(f"submit throughput: {tp.rate:.0f} submissions/s [{ok_rate}]")
    print(
        f"  CPU per submission: server {tp.server_cpu_ms:.2f} ms,"
        f" clients {tp.client_cpu_ms:.2f} ms (all {args.clients} together)"
    )
    print(
        f"submit-to-running on an idle pool ({args.latency_jobs} jobs, one at a time): "
        f"p50 {figures['submit_to_running_p50_ms']} ms, "
        f"p99 {figures['submit_to_running_p99_ms']} ms [{ok_lat}]"
    )


if __name__ == "__main__":
    main()
