"""`corral up`: store, control loop, local executor and HTTP API in one process."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import resource
import signal
import socket
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from corral.executors.base import Executor
from corral.executors.local import LocalExecutor
from corral.executors.runas import not_dumpable
from corral.formats.types import Node
from corral.server.accounts import RunAs
from corral.server.api import create_asgi
from corral.server.auth import write_admin_token
from corral.server.controlplane import ControlPlane, NodeSource, Retention
from corral.server.httpguard import KEEP_ALIVE, MAX_CONNECTIONS, GuardedHttpTools
from corral.server.interactive import DEFAULT_PORT_RANGE, Interactive, load_templates
from corral.server.inventory import Inventory, RayNodeSource, local_inventory, pretend_inventory
from corral.server.proxy import JobProxy
from corral.server.quotafile import QuotaSource
from corral.server.store import Store

log = logging.getLogger("corral.server")

FD_RESERVE = 128  # descriptors kept for the store, log files and launching supervisors
RAY_CONNECT_TIMEOUT = 60.0  # seconds for the first list of nodes from the Ray pool


@dataclass(slots=True)
class Settings:
    state_dir: Path
    host: str = "127.0.0.1"
    port: int = 8642
    proxy_port: int | None = None  # interactive jobs' own origin; default: port + 1
    quota: Path | None = None
    fake_gpus: int | None = None
    accelerator: str | None = None
    node_name: str | None = None  # default: this machine's hostname
    cluster: str | None = None  # a cluster file or shorthand: pretend nodes, all run here
    allow_hosts: tuple[str, ...] = ()  # Host header names accepted besides IPs and localhost
    run_as: str | None = None  # accounts.USERS or CORRAL; None: USERS when root
    templates: Path | None = None  # the admin's templates for interactive jobs
    port_range: tuple[int, int] = DEFAULT_PORT_RANGE  # ports for interactive jobs, per node
    retention: Retention = Retention()  # how long finished jobs, events and logs are kept
    executor: str = "local"  # local | ray
    ray_address: str | None = None  # the Ray cluster (GCS) address, for executor "ray"

    @property
    def url(self) -> str:
        return _origin(self.host, self.port)

    @property
    def proxy(self) -> int:
        return self.proxy_port or self.port + 1

    @property
    def proxy_url(self) -> str:
        return _origin(self.host, self.proxy)


def _origin(host: str, port: int) -> str:
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}"


def _exit_quietly(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


class StateDirBusy(RuntimeError):
    pass


class ExecutorUnavailable(RuntimeError):
    """The executor asked for cannot run (a bad option, Ray missing or unreachable)."""


def secure_state_dir(state_dir: Path) -> None:
    """The state dir holds job specs (their env may carry secrets), logs and the admin token:
    only corral's user may enter it, even if it was made beforehand with a looser mode."""
    os.umask(0o077)  # what this process and its supervisors write from now on, too
    not_dumpable()  # a job running as corral's own user must not reach our files via /proc
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    mode = stat.S_IMODE(state_dir.stat().st_mode)
    if mode != 0o700:
        log.warning("state dir %s had mode %04o; set to 0700", state_dir, mode)
        state_dir.chmod(0o700)
    for root, dirs, files in os.walk(state_dir):  # and all in it, 0700 and 0600
        for names, want in ((dirs, 0o700), (files, 0o600)):
            for name in names:
                path = os.path.join(root, name)
                if not os.path.islink(path):
                    os.chmod(path, want)


def lock_state_dir(state_dir: Path) -> int:
    """Hold an exclusive lock on the state dir for the life of the process: two control planes
    on one store would each start the other's jobs. The kernel drops it on any exit, SIGKILL
    included, so a crash never leaves a stale lock behind."""
    fd = os.open(state_dir / "corral.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise StateDirBusy(f"another corral up (pid {holder}) is using {state_dir}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def check_port(host: str, port: int) -> None:
    """Fail early, with one clear line, if the API could not listen (before any output)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind((host, port))
        except OSError as err:
            raise OSError(f"cannot listen on {host}:{port}: {err.strerror}") from None


def load_pool(cluster: str) -> tuple[Node, ...]:
    """`--cluster`: a cluster file (node groups), or the simulator's shorthand."""
    from corral.formats import load_cluster, parse_cluster_shorthand

    if Path(cluster).exists():
        return load_cluster(cluster)
    return parse_cluster_shorthand(cluster, "--cluster")


def guarded_protocol() -> type[GuardedHttpTools]:
    """The HTTP protocol with a connection cap this process's file descriptors can hold:
    the soft limit raised to the hard one, less room for the store, logs and supervisors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    cap = max(16, min(MAX_CONNECTIONS, soft - FD_RESERVE))
    return type("CorralHttp", (GuardedHttpTools,), {"max_connections": cap})


def build(settings: Settings) -> ControlPlane:
    # The core is imported here, not at module level, so `corral --help` stays fast.
    from corral.core.admission import check_admissible
    from corral.core.decide import decide
    from corral.policies import load_policy

    executor, inventory, nodes = build_executor(settings)
    quota = QuotaSource(settings.quota, inventory.types)
    store = Store(settings.state_dir / "corral.db")
    interactive = Interactive(
        store,
        settings.state_dir,
        load_templates(settings.templates),
        settings.port_range,
        proxy_url=settings.proxy_url,
    )
    cp = ControlPlane(
        store,
        executor,
        inventory,
        quota,
        load_policy,
        decide,
        check_admissible,
        RunAs(settings.run_as),
        interactive,
        nodes,
    )
    cp.retention = settings.retention
    return cp


def build_executor(settings: Settings) -> tuple[Executor, Inventory, NodeSource | None]:
    """The executor asked for, the pool it runs on, and where changes to that pool come from."""
    if settings.executor == "local":
        if settings.cluster is not None:
            inventory = pretend_inventory(load_pool(settings.cluster))
        else:
            inventory = local_inventory(
                settings.fake_gpus, settings.accelerator, settings.node_name
            )
        return LocalExecutor(settings.state_dir), inventory, None
    if settings.executor != "ray":
        raise ExecutorUnavailable(f"executor: {settings.executor!r} is not one of: local, ray")
    if not settings.ray_address:
        raise ExecutorUnavailable("--executor ray needs --ray-address HOST:PORT (the Ray head)")
    try:
        from corral.executors.ray_executor import RayExecutor
    except ImportError as err:
        raise ExecutorUnavailable(
            f"the Ray executor needs Ray: pip install 'corral[ray]' ({err})"
        ) from None
    executor = RayExecutor(settings.state_dir, settings.ray_address)
    nodes = RayNodeSource(executor.nodes)
    try:
        inventory = nodes.first(timeout=RAY_CONNECT_TIMEOUT)
    except TimeoutError as err:
        executor.close()
        raise ExecutorUnavailable(str(err)) from None
    return executor, inventory, nodes


class Server:
    """One control plane and its API. `run()` serves in this thread until SIGINT/SIGTERM;
    `start()`/`shutdown()` serve from a background thread (the demo, tests)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        secure_state_dir(settings.state_dir)
        self._lock_fd = lock_state_dir(settings.state_dir)
        self.cp = build(settings)
        self.token_path = settings.state_dir / "admin.token"
        self.new_token = write_admin_token(self.cp.tokens, self.token_path)
        protocol = guarded_protocol()
        assert self.cp.interactive is not None
        hosts = (settings.host, *settings.allow_hosts)
        common = dict(
            host=settings.host,
            log_level="warning",
            access_log=False,
            http=protocol,
            limit_concurrency=protocol.max_connections,
            timeout_keep_alive=KEEP_ALIVE,
            # The API binds to loopback, or sits behind a TLS proxy whose X-Forwarded-* it
            # has no use for: skip the per-request header rewriting.
            proxy_headers=False,
            server_header=False,
            timeout_graceful_shutdown=5,
        )
        self.http = uvicorn.Server(
            uvicorn.Config(create_asgi(self.cp, hosts), port=settings.port, **common)
        )
        # Interactive jobs on a listener of their own: another origin than the web page's.
        proxy = JobProxy(self.cp, self.cp.interactive, hosts)
        self.proxy_http = uvicorn.Server(
            uvicorn.Config(proxy, port=settings.proxy, lifespan="off", **common)
        )
        self._proxy_thread: threading.Thread | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return self.settings.url

    def run(self) -> None:
        # uvicorn raises SIGTERM again once it has stopped serving; with the default handler
        # the process would die there, before `close()` folds the WAL into the database.
        signal.signal(signal.SIGTERM, _exit_quietly)
        try:
            self._start_loops()
            self.http.run()
        finally:
            self.close()

    def _start_loops(self) -> None:
        self.cp.start()
        assert self.cp.interactive is not None
        self.cp.interactive.start(self.cp)
        self._proxy_thread = _serve(self.proxy_http, "corral-proxy", self.settings.proxy_url)

    def start(self, timeout: float = 30.0) -> None:
        self._start_loops()
        self._thread = _serve(self.http, "corral-http", self.url, timeout)

    def shutdown(self) -> None:
        self.http.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.close()

    def close(self) -> None:
        self.proxy_http.should_exit = True
        if self._proxy_thread is not None:
            self._proxy_thread.join(timeout=10)
        if self.cp.interactive is not None:
            self.cp.interactive.stop()
        self.cp.stop()
        close = getattr(self.cp.executor, "close", None)
        if close is not None:
            close()  # the Ray executor's helpers; running gangs keep running
        self.cp.store.close()
        os.close(self._lock_fd)


def _serve(server: uvicorn.Server, name: str, url: str, timeout: float = 30.0) -> threading.Thread:
    """Serve from a background thread; back once it listens."""
    thread = threading.Thread(target=server.run, name=name, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"corral did not start listening on {url}")
        time.sleep(0.02)
    return thread
