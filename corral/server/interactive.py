"""Interactive jobs: templates, ports per node, the launch command, endpoints, idle culling.

An interactive job is one worker that serves something a person uses (Jupyter, TensorBoard,
sshd). corral gives each named port of the job a port on its node from a configured range,
records it in the store (so ports stay unique per node across a control-plane restart), and
writes it into the job's command and environment. Nobody reaches the port directly: corral's
proxy serves `/j/JOB/PORT/` (proxy.py, on a port of its own: another origin than the web
page's) with the API's authentication, and adds the job's own secret (`{token}`: Jupyter's
token) on the way in, so the app is never open to others on the node.

Idleness: a job is active while any of its template's signals is recent: traffic through the
proxy, Jupyter's last_activity or a busy kernel, an open SSH tunnel, GPU utilisation (NVML).
At 80 % of the idle timeout an `idle_warning` event is recorded; at 100 % the job is cancelled
with reason `idle` (SIGTERM, grace, SIGKILL, like any cancel).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import re
import secrets
import socket
import sys
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral.executors.base import Launch
from corral.formats.types import FormatError, JobSpec, Quota

if TYPE_CHECKING:
    from corral.server.controlplane import ControlPlane
    from corral.server.store import JobRow, Store, Tx

log = logging.getLogger("corral.server")

DEFAULT_PORT_RANGE = (20000, 29999)
WARN_AT = 0.8  # fraction of the idle timeout after which an idle_warning event is recorded
GPU_BUSY = 10  # percent utilisation that counts as activity
CHECK_INTERVAL = 1.0  # seconds between looks at the interactive jobs

# {port.NAME}, {base_url.NAME} (path prefix with a trailing /), {prefix.NAME} (without),
# {token}, {job}, {python}. A bare {port}/{base_url}/{prefix} means the port named "http".
PLACEHOLDER = re.compile(
    r"\{(port|base_url|prefix)(?:\.([a-z][a-z0-9-]{0,30}))?\}|\{(token|job|python)\}"
)
PORT_NAME = re.compile(r"[a-z][a-z0-9-]{0,30}")
IDLE_SIGNALS = ("proxy", "jupyter", "ssh", "gpu")

# sshd as an ordinary user needs nothing of root's; as root (corral running as root without
# per-user accounts) it wants its privilege-separation directory.
_SSHD = (
    '{ [ "$(id -u)" != 0 ] || mkdir -p -m 755 /run/sshd; }'
    ' && d=$(mktemp -d) && printf "%s\\n" "$CORRAL_SSH_KEYS" > "$d/authorized_keys"'
    ' && chmod 700 "$d" && chmod 600 "$d/authorized_keys"'
    ' && ssh-keygen -q -t ed25519 -N "" -f "$d/host_key"'
    " && exec /usr/sbin/sshd -D -e -f /dev/null -p {port.ssh} -o ListenAddress=127.0.0.1"
    ' -h "$d/host_key" -o AuthorizedKeysFile="$d/authorized_keys" -o PidFile=none'
    " -o StrictModes=no -o PasswordAuthentication=no -o KbdInteractiveAuthentication=no"
    " -o UsePAM=no -o PermitRootLogin=prohibit-password -o AllowTcpForwarding=yes"
)


@dataclass(frozen=True, slots=True)
class Template:
    name: str
    command: str
    ports: dict[str, str]  # port name -> protocol: "http" (proxied HTTP+WebSocket) or "tcp"
    ready: str | None = None  # HTTP path under the first port's base URL; "tcp": it accepts
    idle: tuple[str, ...] = ("proxy", "gpu")  # the signals that count as activity
    description: str = ""


BUILTIN: dict[str, Template] = {
    t.name: t
    for t in (
        Template(
            "jupyter",
            "{python} -m jupyter_server --no-browser --ip=127.0.0.1 --port={port.http}"
            " --ServerApp.port_retries=0 --ServerApp.base_url={base_url.http}"
            " --IdentityProvider.token={token} --ServerApp.root_dir=. --allow-root",
            {"http": "http"},
            ready="api/status",
            idle=("proxy", "jupyter", "gpu"),
            description="Jupyter server (notebooks, kernels, terminals)",
        ),
        Template(
            "tensorboard",
            '{python} -m tensorboard.main --logdir "${TENSORBOARD_LOGDIR:-.}"'
            " --host 127.0.0.1 --port {port.http} --path_prefix {prefix.http}",
            {"http": "http"},
            ready="",
            idle=("proxy",),
            description="TensorBoard on $TENSORBOARD_LOGDIR (default: the job's directory)",
        ),
        Template(
            "ssh",
            _SSHD,
            {"ssh": "tcp"},
            ready="tcp",
            idle=("ssh", "gpu"),
            description="sshd with your keys (corral keys add); corral ssh JOB",
        ),
        Template(
            "shell",
            "sleep infinity",
            {},
            idle=("gpu",),
            description="holds a worker and its accelerators for the command you give",
        ),
    )
}


def load_templates(path: Path | None) -> dict[str, Template]:
    """The built-in templates plus those of the admin's YAML file (a list of mappings with
    name, command, ports, ready, idle, description); a file's template replaces a built-in one
    of the same name. FormatError (one line) if the file is bad."""
    templates = dict(BUILTIN)
    if path is None:
        return templates
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as err:
        raise FormatError(f"{path}: cannot read: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise FormatError(f"{path}: not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(data, list):
        raise FormatError(f"{path}: expected a list of templates (name, command, ports...)")
    for i, item in enumerate(data):
        t = _template(item, f"{path}: templates[{i}]")
        templates[t.name] = t
    return templates


def _template(item: Any, where: str) -> Template:
    if not isinstance(item, dict):
        raise FormatError(f"{where}: expected a mapping with name and command")
    unknown = set(item) - {"name", "command", "ports", "ready", "idle", "description"}
    if unknown:
        raise FormatError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    name, command = item.get("name"), item.get("command")
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][-a-z0-9_]{0,62}", name):
        raise FormatError(f"{where}.name: lowercase letters, digits, '-', '_'; got {name!r}")
    if not isinstance(command, str) or not command.strip():
        raise FormatError(f"{where}.command: a shell command string, got {command!r}")
    ports = item.get("ports", {n: "http" for n in port_names(command)})
    if not isinstance(ports, dict) or not all(
        isinstance(k, str) and PORT_NAME.fullmatch(k) and v in ("http", "tcp")
        for k, v in ports.items()
    ):
        raise FormatError(f"{where}.ports: a mapping of port names to http or tcp, got {ports!r}")
    idle = item.get("idle", ["proxy", "gpu"])
    if not isinstance(idle, list) or not set(idle) <= set(IDLE_SIGNALS):
        raise FormatError(f"{where}.idle: a list of {', '.join(IDLE_SIGNALS)}; got {idle!r}")
    ready = item.get("ready")
    if ready is not None and not isinstance(ready, str):
        raise FormatError(f"{where}.ready: a path under the base URL, or tcp; got {ready!r}")
    return Template(
        name, command, dict(ports), ready, tuple(idle), str(item.get("description", ""))
    )


def port_names(command: str | tuple[str, ...]) -> list[str]:
    """The port names a command's placeholders use, in order of first use."""
    text = command if isinstance(command, str) else " ".join(command)
    names: list[str] = []
    for m in PLACEHOLDER.finditer(text):
        if m[1] and (m[2] or "http") not in names:
            names.append(m[2] or "http")
    return names


def base_path(job_id: str, port: str) -> str:
    return f"/j/{job_id}/{port}/"


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Interactive:
    """State and rules for interactive jobs. Ports are chosen and recorded only under the
    control plane's lock (from its `_start`); activity marks come from any thread (the proxy,
    the culler)."""

    def __init__(
        self,
        store: Store,
        state_dir: Path,
        templates: dict[str, Template] | None = None,
        port_range: tuple[int, int] = DEFAULT_PORT_RANGE,
        proxy_url: str = "",
    ):
        self.store = store
        self.templates = templates or dict(BUILTIN)
        self.port_range = port_range
        self.proxy_url = proxy_url.rstrip("/")
        self._secret = _secret(state_dir / "interactive.key")
        self.ports = store.ports()  # job id -> (node, name -> port)
        # Activity seen before this process began (a restart of corral up) is not known: a job
        # started before then has its idle clock start here, so one in use is not culled for
        # the restart (at worst one idle all along gets a timeout more).
        self.began = time.time()
        self._stored = set(self.ports)  # jobs with rows in the ports table
        self._active: dict[str, float] = {}  # job id -> last activity seen (wall clock)
        self._streams: dict[str, int] = {}  # job id -> open tunnels (ssh) through the proxy
        self._warned: set[str] = set()
        self._ready: set[str] = set()
        self._marks = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- submission ------------------------------------------------------------------------

    def template_of(self, spec: JobSpec) -> Template | None:
        return self.templates.get(spec.template) if spec.template else None

    def expand(self, spec: JobSpec, quota: Quota) -> JobSpec:
        """The spec as it will be stored: the template's command when the user gave none,
        and the quota's [interactive] defaults and caps. ValueError says what is wrong."""
        if spec.kind != "interactive":
            return spec
        changes: dict[str, Any] = {}
        if spec.template is not None:
            template = self.templates.get(spec.template)
            if template is None:
                known = ", ".join(sorted(self.templates))
                raise ValueError(f"template: no template {spec.template!r} (templates: {known})")
            if not spec.command:
                changes["command"] = template.command
        command = changes.get("command", spec.command)
        if not command:
            raise ValueError("command: required for an interactive job without a template")
        conf = quota.interactive
        runtime = spec.max_runtime if spec.max_runtime is not None else conf.max_runtime
        if conf.max_runtime_limit is not None and runtime is not None:
            if runtime > conf.max_runtime_limit:
                raise ValueError(
                    f"max_runtime: {runtime:g}s is more than interactive jobs may ask for"
                    f" ({conf.max_runtime_limit:g}s, [interactive] max_runtime_limit)"
                )
        elif conf.max_runtime_limit is not None:
            runtime = conf.max_runtime_limit
        changes["max_runtime"] = runtime
        if spec.idle_timeout is None:
            changes["idle_timeout"] = conf.idle_timeout
        return replace(spec, **changes)

    # -- ports -----------------------------------------------------------------------------

    def choose_ports(self, row: JobRow, node: str, running: Collection[str]) -> dict[str, int]:
        """Ports on `node` for the job's port names: the lowest in the range that no running
        job holds there and nothing else has bound. Ports of jobs no longer running are
        forgotten first (jobs end in many ways; this is the one place that counts)."""
        for j in [j for j in self.ports if j not in running or j == row.id]:
            self.ports.pop(j, None)
            self._forget(j)
        names = port_names(row.spec.command)
        template = self.template_of(row.spec)
        if template is not None:
            names += [n for n in template.ports if n not in names]
        used = {p for n, held in self.ports.values() if n == node for p in held.values()}
        lo, hi = self.port_range
        chosen: dict[str, int] = {}
        for port in range(lo, hi + 1):
            if len(chosen) == len(names):
                break
            if port not in used and _port_is_free(port):
                chosen[names[len(chosen)]] = port
        if len(chosen) < len(names):
            log.error("job %s: no free port left on %s in %d-%d", row.id, node, lo, hi)
        return chosen

    def record_ports(self, tx: Tx, row: JobRow, node: str, chosen: dict[str, int]) -> None:
        """In the start's transaction: the job's ports, replacing any a stale row held."""
        tx.delete_ports([row.id, *(j for j in self._stored if j not in self.ports)])
        self._stored = {row.id, *self.ports}
        tx.insert_ports(row.id, node, chosen)
        self.ports[row.id] = (node, chosen)
        self.mark(row.id)

    def job_token(self, job_id: str) -> str:
        """The job's own secret (Jupyter's token): derived, so nothing more is stored."""
        return hmac.new(self._secret, job_id.encode(), hashlib.sha256).hexdigest()

    def prepare(self, launch: Launch, ssh_keys: list[str]) -> Launch:
        """The launch with the placeholders filled in and the ports in the environment."""
        _, ports = self.ports.get(launch.job_id, ("", {}))
        values = {
            "token": self.job_token(launch.job_id),
            "job": launch.job_id,
            "python": sys.executable,
        }

        def fill(m: re.Match[str]) -> str:
            if m[3]:
                return values[m[3]]
            name = m[2] or "http"
            if name not in ports:
                return m[0]
            if m[1] == "port":
                return str(ports[name])
            path = base_path(launch.job_id, name)
            return path if m[1] == "base_url" else path.rstrip("/")

        command: str | tuple[str, ...]
        if isinstance(launch.command, str):
            command = PLACEHOLDER.sub(fill, launch.command)
        else:
            command = tuple(PLACEHOLDER.sub(fill, part) for part in launch.command)
        env = dict(launch.env)
        env["CORRAL_JOB_TOKEN"] = values["token"]
        for name, port in ports.items():
            key = name.upper().replace("-", "_")
            env[f"CORRAL_PORT_{key}"] = str(port)
            env[f"CORRAL_BASE_URL_{key}"] = base_path(launch.job_id, name)
        if ssh_keys:
            env["CORRAL_SSH_KEYS"] = "\n".join(ssh_keys)
        return replace(launch, command=command, env=env)

    def target(self, job_id: str, name: str) -> tuple[str, int, str] | None:
        """(host, port, protocol) of the job's port `name`, if it holds one."""
        node, ports = self.ports.get(job_id, ("", {}))
        if name not in ports:
            return None
        return "127.0.0.1", ports[name], self.protocol(job_id, name)

    def protocol(self, job_id: str, name: str) -> str:
        row = self._cp.live.get(job_id) if self._cp else None
        template = self.template_of(row.spec) if row is not None else None
        if template is not None and name in template.ports:
            return template.ports[name]
        return "tcp" if name == "ssh" else "http"

    def endpoints(self, row: JobRow) -> list[dict[str, Any]]:
        node, ports = self.ports.get(row.id, ("", {}))
        if row.state != "running":
            return []
        return [
            {
                "name": name,
                "url": f"{self.proxy_url}{base_path(row.id, name)}",
                "protocol": self.protocol(row.id, name),
                "node": node,
                "port": port,
                "ready": row.id in self._ready,
                **({"user": self._account(row)} if name == "ssh" else {}),
            }
            for name, port in ports.items()
        ]

    def _account(self, row: JobRow) -> str:
        """The Unix account the job runs as (its sshd's login): the user's, or corral's own."""
        import pwd

        cp = self._cp
        account = cp.run_as.account(row.user, cp.quota) if cp is not None else None
        return account or pwd.getpwuid(os.getuid()).pw_name

    # -- activity --------------------------------------------------------------------------

    def mark(self, job_id: str, at: float | None = None) -> None:
        at = time.time() if at is None else at
        with self._marks:
            if at > self._active.get(job_id, 0.0):
                self._active[job_id] = at

    def stream(self, job_id: str, delta: int) -> None:
        """A tunnel through the proxy opened (+1) or closed (-1): open ones count as activity."""
        with self._marks:
            self._streams[job_id] = self._streams.get(job_id, 0) + delta
        self.mark(job_id)

    def _forget(self, job_id: str) -> None:
        with self._marks:
            self._active.pop(job_id, None)
            self._streams.pop(job_id, None)
        self._warned.discard(job_id)
        self._ready.discard(job_id)

    # -- the culler ------------------------------------------------------------------------

    _cp: ControlPlane | None = None

    def start(self, cp: ControlPlane, interval: float = CHECK_INTERVAL) -> None:
        self._cp = cp
        self._thread = threading.Thread(
            target=self._run, args=(interval,), name="corral-interactive", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.check()
            except Exception:  # one bad look must not stop culling; it is retried
                log.exception("interactive check failed")

    def check(self) -> None:
        cp = self._cp
        assert cp is not None
        with cp.locked():
            rows = [
                (r, cp.attempts.get(r.id), list(cp.placed.get(r.id, ())))
                for r in cp.live.values()
                if r.spec.kind == "interactive" and r.state == "running"
            ]
        now = time.time()
        running = {row.id for row, _, _ in rows}
        for gone in (self._ready | self._warned) - running:
            self._forget(gone)
        for row, att, placed in rows:
            if att is None or att.state == "terminating":
                continue
            self.mark(row.id, max(att.started_at, self.began))
            template = self.template_of(row.spec)
            self._probe_ready(row, template)
            if template is not None and template.ready is not None and row.id not in self._ready:
                self.mark(row.id, now)  # the idle clock starts once the app answers
                continue
            signals = template.idle if template is not None else ("proxy", "gpu")
            self._observe(row, signals, [g for p in placed for g in p.gpus], now)
            timeout = row.spec.idle_timeout
            if timeout is None:
                continue
            with self._marks:
                idle_for = now - self._active.get(row.id, now)
            if idle_for < WARN_AT * timeout:
                self._warned.discard(row.id)
            elif row.id not in self._warned:  # always warned first, if only one look before
                self._warned.add(row.id)
                self._event(cp, row, "idle_warning", idle_for=round(idle_for, 1), timeout=timeout)
            elif idle_for >= timeout:
                self._cull(cp, row, idle_for)

    def _observe(self, row: JobRow, signals: tuple[str, ...], gpus: list[int], now: float) -> None:
        if "ssh" in signals:
            with self._marks:
                if self._streams.get(row.id, 0) > 0:
                    self._active[row.id] = now
        if "jupyter" in signals:
            seen = self._jupyter_activity(row, now)
            if seen is not None:
                self.mark(row.id, seen)
        if "gpu" in signals and gpus and _gpus_busy(gpus):
            self.mark(row.id, now)

    def _jupyter_activity(self, row: JobRow, now: float) -> float | None:
        """Jupyter's last_activity, or now if a kernel is busy; None if it cannot be asked.
        `no_track_activity` keeps our own look from counting as activity."""
        target = self.target(row.id, "http")
        if target is None:
            return None
        import httpx

        host, port, _ = target
        base = f"http://{host}:{port}{base_path(row.id, 'http')}api/"
        headers = {"Authorization": f"token {self.job_token(row.id)}"}
        try:
            with httpx.Client(timeout=2.0, headers=headers) as http:
                status = http.get(base + "status").json()
                kernels = http.get(base + "kernels", params={"no_track_activity": 1}).json()
        except (httpx.HTTPError, ValueError):
            return None
        if any(k.get("execution_state") == "busy" for k in kernels):
            return now
        try:
            return datetime.fromisoformat(status["last_activity"]).timestamp()
        except (KeyError, TypeError, ValueError):
            return None

    def _probe_ready(self, row: JobRow, template: Template | None) -> None:
        if row.id in self._ready or template is None or template.ready is None:
            return
        first = next(iter(template.ports), None)
        target = self.target(row.id, first) if first else None
        if target is None:
            return
        host, port, _ = target
        if template.ready == "tcp":
            with contextlib.suppress(OSError), socket.create_connection((host, port), 1.0):
                self._ready.add(row.id)
        else:
            import httpx

            url = f"http://{host}:{port}{base_path(row.id, first)}{template.ready}"
            headers = {"Authorization": f"token {self.job_token(row.id)}"}
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, headers=headers, timeout=2.0).status_code < 400:
                    self._ready.add(row.id)
        if row.id in self._ready and self._cp is not None:
            self._event(self._cp, row, "ready", port=first)

    def _cull(self, cp: ControlPlane, row: JobRow, idle_for: float) -> None:
        from corral.server.auth import Principal
        from corral.server.controlplane import Refused

        why = f"idle: no activity for {idle_for:.0f}s (idle_timeout {row.spec.idle_timeout:g}s)"
        log.info("job %s: %s; cancelling", row.id, why)
        with contextlib.suppress(Refused):  # it ended meanwhile
            cp.cancel(Principal("corral", admin=True), row.id, reason="idle", message=why)

    def _event(self, cp: ControlPlane, row: JobRow, event: str, **data: Any) -> None:
        with cp.locked(), cp.store.tx() as tx:
            tx.event(time.time(), event, row.id, row.project, **data)


def _gpus_busy(gpus: list[int]) -> bool:
    """Is any of these GPUs above GPU_BUSY % utilisation? False without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no NVML (fake GPUs, no driver): this signal is simply absent
        return False
    try:
        for index in gpus:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            if pynvml.nvmlDeviceGetUtilizationRates(handle).gpu >= GPU_BUSY:
                return True
    except pynvml.NVMLError:
        return False
    return False


def _secret(path: Path) -> bytes:
    """The key job tokens are derived from, made once per state dir (mode 0600)."""
    try:
        return bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        pass
    key = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key.hex() + "\n")
    return key
