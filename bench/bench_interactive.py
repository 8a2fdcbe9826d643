"""Benchmark interactive jobs: template submit to a reachable Jupyter, and the proxy's cost.

    python bench/bench_interactive.py [--notebooks 5] [--requests 300] [--mib 32] [--json]

Starts a real `corral up` (4 fake GPUs, temporary state dir) and talks to it over loopback.

1. Start: `POST /v1/jobs {"template": "jupyter"}`, then `GET /j/JOB/http/api/status` through
   the proxy (its own port, `--proxy-port`) until it answers 200; the time from sending the
   submission to that answer, with Jupyter's own start included. p50 and max over --notebooks
   runs, one at a time.
2. Proxy against direct: on one running Jupyter, --requests sequential small requests
   (`GET api/status`, keep-alive) through the proxy and straight to Jupyter's port (with
   Jupyter's token); p50/p99 latency of each. Then a --mib MiB file downloaded through
   both (`GET files/...`): MiB/s.

Target (issue #21): p50 <= 5 s from submit to a reachable Jupyter.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from live_pool import free_port, one_project_quota

QUOTA = one_project_quota("bench")


def start_server(state: Path, workdir: Path) -> tuple[subprocess.Popen, str, str, str]:
    """The server, its API's URL, its proxy's URL (interactive jobs) and the admin token."""
    port, proxy_port = free_port(), free_port()
    quota = state.parent / "quota.toml"
    quota.write_text(QUOTA)
    low = random.randrange(20000, 29900, 100)
    cmd = [
        sys.executable,
        "-c",
        "from corral.cli import main; main()",
        "up",
        "--state",
        str(state),
        "--port",
        str(port),
        "--proxy-port",
        str(proxy_port),
        "--fake-gpus",
        "4",
        "--accelerator",
        "gpu",
        "--quota",
        str(quota),
        "--run-as",
        "corral",
        "--port-range",
        f"{low}-{low + 99}",
    ]
    log = open(state.parent / "server.log", "wb")  # noqa: SIM115 (lives as long as the server)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                token = (state / "admin.token").read_text().strip()
                return proc, url, f"http://127.0.0.1:{proxy_port}", token
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("corral up did not start; see " + str(state.parent / "server.log"))


def time_to_reachable(http: httpx.Client, proxy: str, workdir: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    job = http.post("/v1/jobs", json={"template": "jupyter", "workdir": str(workdir)})
    job.raise_for_status()
    job_id = job.json()["id"]
    while True:
        r = http.get(f"{proxy}/j/{job_id}/http/api/status")
        if r.status_code == 200:
            return time.perf_counter() - t0, job_id
        if time.perf_counter() - t0 > 60:
            raise SystemExit(f"job {job_id} not reachable in 60 s: {r.status_code} {r.text[:200]}")
        time.sleep(0.05)


def latencies(client: httpx.Client, url: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        client.get(url).raise_for_status()
        out.append(time.perf_counter() - t0)
    return out


def throughput(client: httpx.Client, url: str) -> float:
    t0 = time.perf_counter()
    size = 0
    with client.stream("GET", url) as r:
        r.raise_for_status()
        for chunk in r.iter_raw():
            size += len(chunk)
    return size / (1 << 20) / (time.perf_counter() - t0)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notebooks", type=int, default=5)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--mib", type=int, default=32)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as tmp:
        root = Path(tmp)
        workdir = root / "work"
        workdir.mkdir()
        (workdir / "blob.bin").write_bytes(os.urandom(args.mib << 20))
        proc, url, proxy, token = start_server(root / "state", workdir)
        auth = {"Authorization": f"Bearer {token}"}
        try:
            with httpx.Client(base_url=url, headers=auth, timeout=60) as http:
                starts, jobs = [], []
                for _ in range(args.notebooks):
                    took, job_id = time_to_reachable(http, proxy, workdir)
                    starts.append(took)
                    jobs.append(job_id)
                    if len(jobs) > 1:  # keep one running for the proxy figures
                        http.post(f"/v1/jobs/{jobs[-2]}/cancel")
                job_id = jobs[-1]
                ep = http.get(f"/v1/jobs/{job_id}").json()["endpoints"][0]
                direct_base = f"http://127.0.0.1:{ep['port']}/j/{job_id}/http/"
            job_token = _job_token(root / "state", job_id)
            with (
                httpx.Client(headers=auth, timeout=60) as via,
                httpx.Client(headers={"Authorization": f"token {job_token}"}, timeout=60) as raw,
            ):
                status = "api/status"
                proxied = latencies(via, ep["url"] + status, args.requests)
                direct = latencies(raw, direct_base + status, args.requests)
                blob = "files/blob.bin"
                mib_proxied = throughput(via, ep["url"] + blob)
                mib_direct = throughput(raw, direct_base + blob)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)
            _kill_jobs(root / "state")
    result = {
        "submit_to_reachable_p50_s": statistics.median(starts),
        "submit_to_reachable_max_s": max(starts),
        "proxy_latency_p50_ms": pct(proxied, 0.5) * 1e3,
        "proxy_latency_p99_ms": pct(proxied, 0.99) * 1e3,
        "direct_latency_p50_ms": pct(direct, 0.5) * 1e3,
        "direct_latency_p99_ms": pct(direct, 0.99) * 1e3,
        "proxy_mib_s": mib_proxied,
        "direct_mib_s": mib_direct,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"template submit -> reachable Jupyter ({args.notebooks} runs):"
        f" p50 {result['submit_to_reachable_p50_s']:.2f} s,"
        f" max {result['submit_to_reachable_max_s']:.2f} s (target p50 <= 5 s)"
    )
    print(
        f"GET api/status, {args.requests} sequential: proxy p50"
        f" {result['proxy_latency_p50_ms']:.2f} ms p99 {result['proxy_latency_p99_ms']:.2f} ms;"
        f" direct p50 {result['direct_latency_p50_ms']:.2f} ms"
        f" p99 {result['direct_latency_p99_ms']:.2f} ms"
    )
    print(f"{args.mib} MiB download: proxy {mib_proxied:.0f} MiB/s, direct {mib_direct:.0f} MiB/s")


def _job_token(state: Path, job_id: str) -> str:
    """Jupyter's own token, as corral derives it (for the direct, unproxied figures)."""
    import hashlib
    import hmac

    key = bytes.fromhex((state / "interactive.key").read_text().strip())
    return hmac.new(key, job_id.encode(), hashlib.sha256).hexdigest()


def _kill_jobs(state: Path) -> None:
    """Jobs outlive their control plane by design: stop what the benchmark started."""
    from corral.executors.rundir import ProcessRef

    for attempt in (state / "runs").glob("*/*"):
        for name in ("workers.json", "supervisor.pid"):
            try:
                data = json.loads((attempt / name).read_text())
            except (OSError, ValueError):
                continue
            for ref in data if isinstance(data, list) else [data]:
                with contextlib.suppress(OSError, KeyError, ValueError):
                    ProcessRef.from_dict(ref).signal_group(signal.SIGKILL)


if __name__ == "__main__":
    main()
