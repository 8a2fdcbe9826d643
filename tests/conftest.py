"""Shared fixtures. `live_servers` starts real `corral up` processes on free loopback ports.

Tests drive a live server only as a user would: the `corral` CLI as a subprocess and HTTP.
Teardown cancels what is still running and kills any worker left behind, so no test leaks
processes into the next (jobs outlive their control plane by design).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

CLI = [sys.executable, "-c", "from corral.cli import main; main()"]
LIVE = ("pending", "running")
# One project every user belongs to, with the whole pool: for tests that need no sharing.
TEAM_QUOTA = """
[toml-schema]
version = "1"
[project_membership]
team = [".*"]
[project_resources.team]
gpu = 1.0
"""
FINAL = ("succeeded", "failed", "cancelled")


def port_block(size: int = 100) -> str:
    """A --port-range for interactive jobs, drawn at random below the ephemeral ports so that
    test runs side by side on one machine do not hand out the same ports."""
    import random

    low = random.randrange(20000, 30000 - size, size)
    return f"{low}-{low + size - 1}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LiveServer:
    state: Path
    port: int
    args: list[str]
    user: str | None = None  # run `corral up` as this Unix account (the test runs as root)
    python: list[str] = field(default_factory=lambda: CLI[:1])  # the interpreter to run it
    proc: subprocess.Popen | None = None
    proxy_port: int = field(default_factory=free_port)  # interactive jobs' origin
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.state.parent / f"{self.state.name}-server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def proxy_url(self) -> str:
        return f"http://127.0.0.1:{self.proxy_port}"

    @property
    def admin_token(self) -> str:
        return (self.state / "admin.token").read_text().strip()

    # -- process -----------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> LiveServer:
        cmd = [
            *self.python,
            *CLI[1:],
            "up",
            "--state",
            str(self.state),
            "--port",
            str(self.port),
            "--proxy-port",
            str(self.proxy_port),
            *self.args,
        ]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, user=self.user, cwd=self.user and "/"
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"corral up exited {self.proc.returncode}:\n{self.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            time.sleep(0.1)
        raise RuntimeError(f"corral up did not answer in {timeout}s:\n{self.log()}")

    def kill(self) -> None:
        """SIGKILL: the crash the store must survive."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # -- clients -----------------------------------------------------------------------------

    def env(self, token: str | None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        env["CORRAL_URL"] = self.url
        if token is not None:
            env["CORRAL_TOKEN"] = token
        return env

    def cli(
        self, *args: str, token: str | None = None, check: bool = True, admin: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """Run `corral ARGS` as a user would (token None and admin False: no token at all)."""
        token = self.admin_token if admin else token
        done = subprocess.run(
            [*CLI, *args], env=self.env(token), capture_output=True, text=True, timeout=60
        )
        if check and done.returncode != 0:
            raise AssertionError(f"corral {' '.join(args)} exited {done.returncode}: {done.stderr}")
        return done

    def http(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def token(self, user: str, admin: bool = False) -> str:
        with self.http(self.admin_token) as c:
            resp = c.post("/v1/tokens", json={"user": user, "admin": admin})
            resp.raise_for_status()
            return resp.json()["token"]

    def job(self, job_id: str) -> dict:
        with self.http(self.admin_token) as c:
            resp = c.get(f"/v1/jobs/{job_id}")
            resp.raise_for_status()
            return resp.json()

    def wait(self, job_id: str, until, timeout: float = 30.0, what: str = "") -> dict:
        """Poll the job until `until(job)` (a predicate, or a state / tuple of states)."""
        if isinstance(until, str):
            until = (until,)
        check = until if callable(until) else (lambda j: j["state"] in until)
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if check(job):
                return job
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"job {job_id} not {what or until} in {timeout}s: {job}"
                    + self.supervisor_log(job_id, job["attempt"])
                )
            time.sleep(0.1)

    def supervisor_log(self, job_id: str, attempt: int, lines: int = 40) -> str:
        """The end of the attempt's supervisor log, to say where a job that is late got to."""
        path = self.state / "runs" / job_id / str(attempt) / "supervisor.log"
        if not path.exists():
            return f"\n(no {path})"
        tail = path.read_text(errors="replace").splitlines()[-lines:]
        return f"\n{path}:\n" + "\n".join(tail)

    def live_jobs(self) -> list[dict]:
        with self.http(self.admin_token) as c:
            resp = c.get("/v1/jobs", params={"all": True, "state": list(LIVE), "limit": 100000})
            resp.raise_for_status()
            return resp.json()

    # -- cleanup -----------------------------------------------------------------------------

    def cancel_all(self, timeout: float = 20.0) -> None:
        if not self.alive:
            return
        with self.http(self.admin_token) as c:
            for job in self.live_jobs():
                c.post(f"/v1/jobs/{job['id']}/cancel")
        deadline = time.monotonic() + timeout
        while self.live_jobs() and time.monotonic() < deadline:
            time.sleep(0.2)

    def kill_leftovers(self) -> None:
        """Kill every supervisor and worker group this state dir ever started."""
        runs = self.state / "runs"
        if not runs.is_dir():
            return
        from corral.executors.rundir import ProcessRef

        for attempt in runs.glob("*/*"):
            refs = _json(attempt / "workers.json") or []
            sup = _json(attempt / "supervisor.pid")
            for ref in [*refs, *([sup] if sup else [])]:
                # By pid *and* start time: a pid recycled since is someone else's process.
                with contextlib.suppress(OSError, KeyError, ValueError):
                    ProcessRef.from_dict(ref).signal_group(signal.SIGKILL)


def _json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class ServerFactory:
    def __init__(self, root: Path):
        self.root = root
        self.servers: list[LiveServer] = []

    def __call__(
        self,
        quota: str | None = None,
        fake_gpus: int = 4,
        accelerator: str = "gpu",
        name: str = "state",
        start: bool = True,
        run_as: str | None = "corral",
    ) -> LiveServer:
        # Jobs as corral's own user unless a test asks for more: the users these tests make
        # up have no Unix accounts (tests/test_live_accounts.py has real ones).
        args = ["--fake-gpus", str(fake_gpus), "--accelerator", accelerator]
        if run_as is not None:
            args += ["--run-as", run_as]
        if quota is not None:
            path = self.root / f"{name}-quota.toml"
            path.write_text(quota)
            args += ["--quota", str(path)]
        server = LiveServer(self.root / name, free_port(), args)
        self.servers.append(server)
        return server.start() if start else server

    def close(self) -> None:
        for server in self.servers:
            with contextlib.suppress(Exception):
                server.cancel_all()
            server.stop()
            server.kill_leftovers()


@pytest.fixture
def live_servers(tmp_path: Path) -> Iterator[ServerFactory]:
    factory = ServerFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="module")
def module_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerFactory]:
    """Like live_servers, shared by a module's tests (a server start costs a second or two)."""
    factory = ServerFactory(tmp_path_factory.mktemp("live"))
    try:
        yield factory
    finally:
        factory.close()
