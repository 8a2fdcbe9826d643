"""Soak the live plane: sustained load from several clients while `corral up` and supervisors
are SIGKILLed at random, then check that nothing was lost, duplicated or double-booked.

    python bench/bench_soak.py [--seconds 180] [--clients 4] [--rate 25] [--kill-every 15]

Starts a real `corral up` (8 fake GPUs, temporary state dir) and --clients processes, each
sending up to --rate requests/s over HTTP: mostly submissions (short jobs, each with a name of
its own), and cancels of its own jobs, job lists and log reads. Every --kill-every seconds on
average, one of: SIGKILL `corral up` and start it again on the same state dir, or SIGKILL the
supervisor of a running attempt. Clients ride out the restarts (a submission whose answer was
lost is not retried: it may or may not be stored, and is not counted either way).

At the end it stops the server and reads the store directly:

- lost: answered 201, but not in the store;
- duplicated: one submission (one name) stored as two jobs;
- double-booked: two attempts that held the same GPU of the same node at the same time;

all three must be 0. It prints submissions/s, the server's peak RSS (over all its lives),
and the WAL, database and state dir sizes, against the live data (the database as
`VACUUM INTO` writes it, plus the run dirs and logs): the state dir should stay under 2x that.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import multiprocessing
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import httpx
import psutil
from live_pool import free_port, one_project_quota

QUOTA = one_project_quota("soak")
COMMANDS = ["true", "sleep 0.5", "sleep 2", "echo hello; sleep 1", "exit 1"]


class Server:
    def __init__(self, state: Path, port: int, quota: Path):
        self.state, self.port, self.quota = state, port, quota
        self.proc: subprocess.Popen[bytes] | None = None
        self.peak_rss = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        cmd = [sys.executable, "-c", "from corral.cli import main; main()", "up"]
        cmd += ["--state", str(self.state), "--port", str(self.port), "--quota", str(self.quota)]
        cmd += ["--fake-gpus", "8", "--accelerator", "gpu", "--run-as", "corral"]
        with open(self.state.parent / "server.log", "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("corral up did not start")

    def sample_rss(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(psutil.Error):
                self.peak_rss = max(self.peak_rss, psutil.Process(self.proc.pid).memory_info().rss)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)

    def admin_token(self) -> str:
        return (self.state / "admin.token").read_text().strip()


def client(index: int, url: str, token: str, seconds: float, rate: float, out: Path) -> None:
    """One user's load; writes the ids it was answered 201 for, with their names."""
    rng = random.Random(index)
    acked: list[tuple[str, str]] = []
    deadline = time.monotonic() + seconds
    http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    for n in itertools.count():
        if time.monotonic() >= deadline:
            break
        started = time.monotonic()
        try:
            roll = rng.random()
            if roll < 0.7 or not acked:
                name = f"c{index}-{n}"
                spec = {"name": name, "command": rng.choice(COMMANDS), "max_restarts": 1}
                resp = http.post("/v1/jobs", json=spec)
                if resp.status_code == 201:
                    acked.append((resp.json()["id"], name))
            elif roll < 0.8:
                http.post(f"/v1/jobs/{rng.choice(acked)[0]}/cancel")
            elif roll < 0.9:
                http.get("/v1/jobs", params={"limit": 50})
            else:
                http.get(f"/v1/jobs/{rng.choice(acked)[0]}/logs")
        except httpx.HTTPError:
            time.sleep(0.2)  # the server is being restarted
        time.sleep(max(0.0, 1 / rate - (time.monotonic() - started)))
    out.write_text("\n".join(f"{i} {name}" for i, name in acked))


def kill_a_supervisor(state: Path, rng: random.Random) -> bool:
    pids = []
    for run in (state / "runs").glob("*/*"):
        if (run / "status.json").exists():
            continue
        try:
            pids.append(json.loads((run / "supervisor.pid").read_text())["pid"])
        except (OSError, ValueError, KeyError):
            continue
    if not pids:
        return False
    try:
        os.kill(rng.choice(pids), signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def check_store(db: Path, acked: list[tuple[str, str]]) -> dict[str, int]:
    conn = sqlite3.connect(db)
    stored = {job_id: name for job_id, name in conn.execute("SELECT id, name FROM jobs")}
    lost = sum(1 for job_id, _ in acked if job_id not in stored)
    per_name: dict[str, int] = defaultdict(int)
    for name in stored.values():
        per_name[name] += 1
    duplicated = sum(n - 1 for n in per_name.values() if n > 1)
    rows = conn.execute(
        "SELECT p.node, p.gpus, a.started_at, COALESCE(a.finished_at, 1e18)"
        " FROM placements p JOIN attempts a USING (job_id, attempt)"
    ).fetchall()
    held: dict[tuple[str, int], list[tuple[float, float]]] = defaultdict(list)
    for node, gpus, start, end in rows:
        for gpu in json.loads(gpus):
            held[node, gpu].append((start, end))
    double = 0
    for spans in held.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            double += start < end
    return {"jobs": len(stored), "lost": lost, "duplicated": duplicated, "double_booked": double}


def kill_leftovers(state: Path) -> None:
    """Every supervisor and worker group the state dir started (by pid and start time)."""
    from corral.executors.rundir import ProcessRef

    for run in (state / "runs").glob("*/*"):
        refs = []
        for name in ("workers.json", "supervisor.pid"):
            with contextlib.suppress(OSError, ValueError):
                data = json.loads((run / name).read_text())
                refs += data if isinstance(data, list) else [data]
        for ref in refs:
            with contextlib.suppress(OSError, KeyError, ValueError):
                ProcessRef.from_dict(ref).signal_group(signal.SIGKILL)


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rate", type=float, default=25, help="requests/s per client")
    parser.add_argument("--kill-every", type=float, default=15, help="mean seconds between kills")
    args = parser.parse_args()
    rng = random.Random(1)
    with tempfile.TemporaryDirectory(prefix="corral-soak-") as tmp:
        root = Path(tmp)
        (root / "quota.toml").write_text(QUOTA)
        server = Server(root / "state", free_port(), root / "quota.toml")
        server.start()
        token = server.admin_token()
        procs = [
            multiprocessing.Process(
                target=client,
                args=(i, server.url, token, args.seconds, args.rate, root / f"acked-{i}"),
            )
            for i in range(args.clients)
        ]
        for p in procs:
            p.start()
        t0 = time.monotonic()
        restarts = supervisor_kills = 0
        next_kill = t0 + rng.expovariate(1 / args.kill_every)
        while any(p.is_alive() for p in procs):
            server.sample_rss()
            if time.monotonic() >= next_kill and time.monotonic() - t0 < args.seconds - 5:
                next_kill = time.monotonic() + rng.expovariate(1 / args.kill_every)
                if (restarts + supervisor_kills) % 2 == 0:
                    server.kill()
                    server.start()
                    restarts += 1
                else:
                    supervisor_kills += kill_a_supervisor(server.state, rng)
            time.sleep(0.5)
        elapsed = time.monotonic() - t0
        acked = []
        for i in range(args.clients):
            text = (root / f"acked-{i}").read_text()
            acked += [tuple(line.split()) for line in text.splitlines() if line]
        time.sleep(3)  # let the last exits be recorded
        server.stop()
        db = server.state / "corral.db"
        wal = Path(f"{db}-wal")
        wal_bytes = wal.stat().st_size if wal.exists() else 0
        db_bytes, state_bytes = db.stat().st_size, du(server.state)
        result = check_store(db, acked)
        with sqlite3.connect(db) as conn:
            conn.execute(f"VACUUM INTO '{root / 'vacuumed.db'}'")
        live = (root / "vacuumed.db").stat().st_size + du(server.state / "runs")
        live += du(server.state / "logs")
        kill_leftovers(server.state)
    mib = 1 << 20
    print(f"soak: {elapsed:.0f} s, {args.clients} clients, {restarts} SIGKILLs of corral up,")
    print(f"      {supervisor_kills} SIGKILLs of supervisors")
    print(f"submissions/s: {len(acked) / elapsed:.1f} ({len(acked)} answered 201)")
    print(
        f"lost: {result['lost']}  duplicated: {result['duplicated']}"
        f"  double-booked: {result['double_booked']}  (jobs stored: {result['jobs']})"
    )
    print(f"peak RSS of corral up: {server.peak_rss / mib:.0f} MiB")
    print(
        f"WAL {wal_bytes / mib:.1f} MiB, database {db_bytes / mib:.1f} MiB, state dir"
        f" {state_bytes / mib:.1f} MiB; live data {live / mib:.1f} MiB"
        f" (state dir {state_bytes / live:.2f}x)"
    )
    bad = result["lost"] or result["duplicated"] or result["double_booked"]
    sys.exit(1 if bad or state_bytes > 2 * live else 0)


if __name__ == "__main__":
    main()
