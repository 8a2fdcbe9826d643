"""A real Ray cluster for tests: nodes started with `ray start --block` inside a network
namespace of loopback addresses only (Ray picks the machine's outside address otherwise), each
node on its own 127.0.0.x with its own corral labels, torn down by PID.

The test process itself enters the namespace (setns on its main thread) so that corral, its
CLI and httpx all run there unchanged; `leave()` puts it back.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

CLONE_NEWNET = 0x40000000
RAY = str(Path(sys.executable).with_name("ray"))
# Ray marks a node dead after health_check_failure_threshold missed checks: with these, about
# 1.5 s after its raylet dies (the defaults take tens of seconds).
HEAD_CONFIG = (
    '{"health_check_period_ms": 500, "health_check_failure_threshold": 3,'
    ' "health_check_initial_delay_ms": 0, "health_check_timeout_ms": 500}'
)
NODE_ARGS = [
    "--num-cpus",
    "1",
    "--include-log-monitor=false",
    "--object-store-memory",
    str(80 * 2**20),
    "--disable-usage-stats",
]


def skip_unless_ray_and_netns() -> None:
    """Skip, saying why, where Ray or network namespaces are genuinely unavailable."""
    try:
        import ray  # noqa: F401
    except ImportError:
        pytest.skip("needs Ray: pip install -e '.[test]' (corral[ray])")
    if not Path(RAY).exists():
        pytest.skip(f"needs the ray command next to {sys.executable}")
    if shutil.which("ip") is None:
        pytest.skip("needs iproute2's ip (apt-get install iproute2) for a network namespace")
    if os.geteuid() != 0:
        pytest.skip("needs root for `ip netns add` (a loopback-only network namespace)")


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns")


class Netns:
    """A loopback-only network namespace the test process (main thread) is inside of."""

    def __init__(self) -> None:
        self.name = f"corral-ray-{os.getpid()}"
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        subprocess.run(
            ["ip", "netns", "exec", self.name, "ip", "link", "set", "lo", "up"], check=True
        )
        self._home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        fd = os.open(f"/run/netns/{self.name}", os.O_RDONLY)
        try:
            _setns(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            _setns(self._home)
        os.close(self._home)
        subprocess.run(["ip", "netns", "delete", self.name], check=False)


@dataclass
class RayNode:
    name: str
    ip: str
    proc: subprocess.Popen
    log: Path
    procs: list[psutil.Process] = field(default_factory=list)  # what it started, for teardown

    def started(self) -> bool:
        return "Ray runtime started" in self.log.read_text(errors="replace")

    def remember_children(self) -> None:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                if child not in self.procs:
                    self.procs.append(child)

    def raylet(self) -> psutil.Process:
        self.remember_children()
        return next(p for p in self.procs if p.name() == "raylet")

    def kill(self) -> None:
        self.remember_children()
        self.proc.kill()
        for proc in self.procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        psutil.wait_procs(self.procs, timeout=5)


class RayCluster:
    """Nodes of one Ray cluster; node i listens on 127.0.0.(i+1)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        # Ray's socket paths must stay under 107 bytes: a short temp dir, not pytest's.
        self.temp = Path(tempfile.mkdtemp(prefix="cr", dir="/tmp"))
        self.port = 6380
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: dict[str, RayNode] = {}
        self.node_env: dict[str, str] = {}  # every node's environment, over ours
        # A token in ~/.ray (left by some other local Ray) would switch the head to token
        # auth; everything here (nodes, corral, its drivers) runs without, by the environment.
        self._auth = os.environ.get("RAY_AUTH_MODE")
        os.environ["RAY_AUTH_MODE"] = "disabled"

    def start(
        self,
        name: str,
        domain: str,
        gpus: int = 4,
        accelerator: str = "gpu",
    ) -> RayNode:
        """Start a node; the first is the head. Returns at once: see wait()."""
        head = not self.nodes
        ip = f"127.0.0.{len(self.nodes) + 1}"
        labels = (
            f"corral.io/node={name},corral.io/domain={domain},corral.io/accelerator={accelerator}"
        )
        args = [RAY, "start", "--block", "--node-ip-address", ip, "--num-gpus", str(gpus)]
        args += [*NODE_ARGS, "--labels", labels]
        if head:
            args += ["--head", "--port", str(self.port), "--include-dashboard=false"]
            args += ["--temp-dir", str(self.temp), "--system-config", HEAD_CONFIG]
        else:
            args += ["--address", self.address]
        log = self.root / f"ray-{name}.log"
        env = {
            **os.environ,
            **self.node_env,
            "RAY_USAGE_STATS_ENABLED": "0",
            "CORRAL_TEST_NODE": name,
        }
        env["RAY_raylet_start_wait_time_s"] = "120"  # a loaded CI machine registers slowly
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        node = RayNode(name, ip, proc, log)
        self.nodes[name] = node
        return node

    def wait(self, *names: str, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        for name in names:
            node = self.nodes[name]
            while not node.started():
                if node.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"ray node {name} did not start (exit {node.proc.returncode}):\n"
                        + node.log.read_text(errors="replace")[-3000:]
                    )
                time.sleep(0.1)
            node.remember_children()

    def close(self) -> None:
        for node in reversed(list(self.nodes.values())):
            node.kill()
        shutil.rmtree(self.temp, ignore_errors=True)
        if self._auth is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = self._auth


def run_processes(run_dir: Path) -> list[psutil.Process]:
    """Live processes of one attempt, on any node (all nodes are this machine here)."""
    from corral.executors.rundir import marked_processes

    return marked_processes(run_dir)
