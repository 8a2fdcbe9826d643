"""Commands that talk to a live control plane: up, submit, ls, show, logs, cancel, queue,
quota, nodes, token, demo.

Everything but `up` and `demo` is a thin HTTP client of the API (CORRAL_URL, CORRAL_TOKEN or
CORRAL_TOKEN_FILE), so the CLI can do nothing a user could not do with curl. Heavy imports
(the server, uvicorn, FastAPI) happen inside the commands that need them.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

if TYPE_CHECKING:  # Rich is imported where a command prints with it: startup stays quick
    from rich.console import Console
    from rich.table import Table

import typer

from corral.cli import app, fail
from corral.cli.output import (
    EXIT_ERROR,
    EXIT_USAGE,
    Column,
    JsonOpt,
    NoHeadersOpt,
    OutputOpt,
    check_format,
    exit_code,
    print_json,
    print_rows,
)

DEFAULT_URL = "http://127.0.0.1:8642"
FOLLOW_INTERVAL = 0.5  # seconds between log polls with -f
WATCH_INTERVAL = 2.0  # seconds between frames of ls --watch
RESTART_PATIENCE = 300.0  # seconds `logs -f` waits for a restarting `corral up`


def _job_refs(refs: Any) -> Any:
    """An empty job id would ask for another URL (`/v1/jobs/` is the list): refuse it."""
    for ref in [refs] if isinstance(refs, str) else refs or ():
        if not ref.strip():
            fail("job: empty; give a job id or name (corral ls lists yours)")
    return refs


JobArg = Annotated[str, typer.Argument(help="Job id or name.", callback=_job_refs)]
UrlOpt = Annotated[
    str, typer.Option("--url", envvar="CORRAL_URL", help="API address (CORRAL_URL).")
]
TokenFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--token-file",
        envvar="CORRAL_TOKEN_FILE",
        help="File holding the bearer token (CORRAL_TOKEN_FILE); CORRAL_TOKEN wins if set.",
    ),
]

token_app = typer.Typer(help="Manage API tokens (admins).", no_args_is_help=True)
app.add_typer(token_app, name="token")


# -- the client ------------------------------------------------------------------------------------


class ApiError(Exception):
    """A request that failed: one line for the user, and the CLI's exit code for it."""

    def __init__(self, message: str, code: int, unreachable: bool = False):
        super().__init__(message)
        self.code, self.unreachable = code, unreachable


class Response:
    """What the CLI reads of an HTTP response."""

    __slots__ = ("status_code", "reason_phrase", "headers", "content")

    def __init__(self, status: int, reason: str, headers: Any, content: bytes):
        self.status_code, self.reason_phrase = status, reason
        self.headers, self.content = headers, content  # headers: case-insensitive

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


class Client:
    """The API over one keep-alive connection, with corral's error handling: every failure
    becomes one line and the exit code of docs/live.md (1 unreachable or failed, 2 bad input,
    3 refused, 4 not found). The standard library's http.client, not httpx: a read command
    is mostly start-up, and httpx alone cost it a fifth."""

    def __init__(self, url: str, token_file: Path | None, need_token: bool = True):
        from urllib.parse import urlsplit

        self.url = url.rstrip("/")
        token = os.environ.get("CORRAL_TOKEN") or _read_token(token_file)
        if need_token and not token:
            fail(
                "no token: set CORRAL_TOKEN, or CORRAL_TOKEN_FILE / --token-file"
                " (`corral up` writes an admin token to STATE/admin.token)",
                EXIT_USAGE,
            )
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            fail(f"--url: expected http://HOST:PORT or https://..., got {url!r}", EXIT_USAGE)
        self._parts, self._prefix = parts, parts.path
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._conn: Any = None

    def _connection(self) -> Any:
        import http.client

        if self._conn is None:
            p = self._parts
            https = p.scheme == "https"
            kind = http.client.HTTPSConnection if https else http.client.HTTPConnection
            self._conn = kind(p.hostname, p.port, timeout=30.0)
        return self._conn

    def request(
        self, method: str, path: str, params: dict[str, Any] | None = None, json: Any = None
    ) -> Response:
        """The response, or ApiError."""
        import http.client
        from json import dumps  # `json` is the body here, as in httpx
        from urllib.parse import urlencode

        target = self._prefix + path
        if params:
            query = {k: _query_value(v) for k, v in params.items() if v is not None}
            target += "?" + urlencode(query, doseq=True)
        headers = dict(self._headers)
        body = None
        if json is not None or method == "POST":
            body = dumps(json).encode()
            headers["Content-Type"] = "application/json"
        while True:
            reused = self._conn is not None
            conn = self._connection()
            try:
                conn.request(method, target, body=body, headers=headers)
                raw = conn.getresponse()
                resp = Response(raw.status, raw.reason, raw.headers, raw.read())
                break
            except ConnectionRefusedError:
                self._conn = None
                raise ApiError(
                    f"cannot reach corral at {self.url}: is `corral up` running?", EXIT_ERROR, True
                ) from None
            except (OSError, http.client.HTTPException) as err:
                conn.close()
                self._conn = None
                # A kept-alive connection the server had closed: once more on a new one.
                if reused and isinstance(err, http.client.RemoteDisconnected | BrokenPipeError):
                    continue
                raise ApiError(f"request to {self.url} failed: {err}", EXIT_ERROR, True) from None
        if resp.status_code >= 400:
            raise ApiError(_detail(resp), exit_code(resp.status_code))
        return resp

    def call(self, method: str, path: str, **kw: Any) -> Response:
        try:
            return self.request(method, path, **kw)
        except ApiError as err:
            fail(str(err), err.code)
            raise  # unreachable: fail() exits

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, params=params).json()

    def post(self, path: str, body: Any = None) -> Any:
        return self.call("POST", path, json=body).json()

    def delete(self, path: str) -> Any:
        return self.call("DELETE", path).json()


def _query_value(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _read_token(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text().strip() or None
    except OSError as err:
        fail(f"cannot read token file {path}: {err.strerror}", EXIT_USAGE)
    return None


def _detail(resp: Any) -> str:
    try:
        detail = resp.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if not isinstance(detail, str):
        detail = resp.text.strip()[:200] or resp.reason_phrase
    return f"{detail} (HTTP {resp.status_code})"


def _console(**kw: Any) -> Console:
    from rich.console import Console

    return Console(highlight=False, **kw)


# -- formatting helpers ----------------------------------------------------------------------------


def _ago(t: float | None, now: float | None = None) -> str:
    if t is None:
        return "-"
    return _span((now or time.time()) - t)


def _start_in(j: dict[str, Any], now: float) -> str:
    """A pending job's predicted start, relative ("in 2h05m", "now"); "-" where unknown."""
    t = j.get("predicted_start")
    if t is None:
        return "-"
    return "now" if t <= now else f"in {_span(t - now)}"


def _span(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 90:
        return f"{s}s"
    if s < 5400:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d"


_STATE_STYLE = {
    "pending": "yellow",
    "running": "cyan",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "magenta",
}


def _state(job: dict[str, Any]) -> str:
    style = _STATE_STYLE.get(job["state"], "")
    return f"[{style}]{job['state']}[/]" if style else job["state"]


def _why(job: dict[str, Any]) -> str:
    if job["state"] == "pending" or job.get("reason_code") in ("cancelling", "preempting"):
        code = job.get("reason_code") or ""
        return f"{code}: {job.get('reason', '')}" if code else job.get("reason", "")
    if job["state"] in ("failed", "cancelled") or job.get("exit_code") not in (None, 0):
        return job.get("reason") or ""
    return ""


# -- up --------------------------------------------------------------------------------------------


@app.command()
def up(
    state: Annotated[
        Path,
        typer.Option("--state", envvar="CORRAL_STATE", help="State directory (store, logs)."),
    ] = Path("~/.corral"),
    host: Annotated[str, typer.Option(help="Address to bind; keep loopback unless needed.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port for the API.")] = 8642,
    proxy_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            help="Port for interactive jobs (/j/JOB/PORT/), an origin apart from the web page's"
            " (default: --port + 1). docs/interactive.md",
        ),
    ] = None,
    quota: Annotated[
        Path | None, typer.Option(help="Quota TOML; reloaded when it changes.")
    ] = None,
    fake_gpus: Annotated[
        int | None, typer.Option("--fake-gpus", min=0, help="Pretend this machine has N GPUs.")
    ] = None,
    accelerator: Annotated[
        str | None, typer.Option(help="Accelerator type name (default: from the GPU model).")
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            help="Pretend this machine is a pool: a cluster file (node groups with domains) or"
            " shorthand like 6x4:v5e@2; every worker runs here. For trying out placement.",
        ),
    ] = None,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            help="A name clients may reach the API by (repeatable); IP addresses and localhost"
            " are always accepted, any other Host header is refused (DNS rebinding).",
        ),
    ] = None,
    run_as: Annotated[
        str | None,
        typer.Option(
            help="users: each job as its user's Unix account (needs root; the default as root);"
            " corral: every job as corral's own user (the default otherwise). docs/security.md",
        ),
    ] = None,
    templates: Annotated[
        Path | None, typer.Option(help="YAML file of templates for interactive jobs.")
    ] = None,
    port_range: Annotated[
        str, typer.Option(help="Ports for interactive jobs on each node, LOW-HIGH.")
    ] = "20000-29999",
    retention: Annotated[
        str,
        typer.Option(
            help="How long finished jobs, their events, run dirs and logs are kept (30d, 12h).",
        ),
    ] = "30d",
    max_finished_jobs: Annotated[
        int,
        typer.Option(min=1, help="Finished jobs kept at most; the oldest go first."),
    ] = 100_000,
    executor: Annotated[
        str,
        typer.Option(help="Where jobs run: local (this machine) or ray (a Ray pool, docs/ray.md)."),
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address", help="The Ray head's address (HOST:PORT), for --executor ray."
        ),
    ] = None,
) -> None:
    """Run the control plane: store, scheduler loop, local executor and HTTP API."""
    import logging

    from corral.server.store import SchemaTooNew
    from corral.server.up import ExecutorUnavailable, Server, Settings, StateDirBusy, check_port

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = Settings(
        state_dir=state.expanduser().resolve(),
        host=host,
        port=port,
        proxy_port=proxy_port,
        quota=quota.resolve() if quota else None,
        fake_gpus=fake_gpus,
        accelerator=accelerator,
        cluster=cluster,
        allow_hosts=tuple(allow_host or ()),
        run_as=run_as,
        templates=templates.resolve() if templates else None,
        port_range=_port_range(port_range),
        retention=_retention(retention, max_finished_jobs),
        executor=executor,
        ray_address=ray_address,
    )
    if cluster is not None and (fake_gpus is not None or accelerator is not None):
        fail("--cluster names the nodes and their accelerators: drop --fake-gpus/--accelerator")
    if executor == "ray" and (fake_gpus, accelerator, cluster) != (None, None, None):
        fail(
            "--executor ray: the Ray nodes say what they have; drop --fake-gpus, --accelerator"
            " and --cluster"
        )
    if settings.proxy in (port, 65536):
        fail("--proxy-port: give a port other than --port (1-65535)")
    try:
        check_port(host, port)
        check_port(host, settings.proxy)
        server = Server(settings)
    except (
        StateDirBusy,
        ExecutorUnavailable,
        SchemaTooNew,
        ValueError,
        OSError,
    ) as err:  # FormatError: a ValueError
        fail(str(err), 1)
    _announce(server)
    server.run()


def _retention(age: str, finished_jobs: int) -> Any:
    from corral.formats.durations import positive_seconds
    from corral.server.controlplane import Retention

    try:
        return Retention(positive_seconds(age), finished_jobs)
    except ValueError as err:
        fail(f"--retention: {err}")


def _port_range(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition("-")
    if sep and lo.isdigit() and hi.isdigit() and 1024 <= int(lo) <= int(hi) <= 65535:
        return int(lo), int(hi)
    fail(f"--port-range: expected LOW-HIGH within 1024-65535, got {text!r}")
    raise AssertionError  # fail() exits


def _announce(server: Any) -> None:
    nodes = server.cp.inventory.nodes
    local = server.settings.executor == "local"  # a Ray pool may start with no node at all
    quota = str(server.settings.quota) if server.settings.quota else "everything to 'default'"
    out = _console(stderr=True, soft_wrap=True)
    out.print(
        f"[bold]corral[/] is up at [cyan]{server.url}[/]  (web page: {server.url}/,"
        f" API docs: {server.url}/docs; interactive jobs: {server.settings.proxy_url}/j/)"
    )
    if server.settings.executor == "ray":
        total = sum(n.count for n in nodes)
        out.print(
            f"  Ray pool at {server.settings.ray_address}: {len(nodes)} nodes, {total}"
            f" accelerators (nodes that join are used as they come); quota: {quota}"
        )
    elif len(nodes) > 1:
        domains = len({n.domain for n in nodes})
        total = sum(n.count for n in nodes)
        out.print(
            f"  pool: {len(nodes)} nodes in {domains} domains, {total} accelerators; quota: {quota}"
        )
    else:
        node = nodes[0]
        out.print(f"  node {node.name}: {node.count} x {node.accelerator}; quota: {quota}")
    if local and nodes[0].count == 0:
        out.print(
            "  [yellow]no GPUs found (NVML, nvidia-smi): every job will be refused;"
            " try corral without GPUs with --fake-gpus N[/]"
        )
    if server.cp.run_as.mode == "users":
        out.print(
            "  jobs run as their users' Unix accounts (\\[accounts] in the quota file; the admin"
            ' token\'s user, admin, needs one too, e.g. admin = "you"); see docs/security.md'
        )
    else:
        out.print("  jobs run as corral's own user, the state dir hidden from them")
    token = server.token_path
    if server.new_token:
        out.print(f"  admin token written to {token} (mode 0600)")
    out.print("  to use it:")
    out.print(f"    export CORRAL_URL={server.url} CORRAL_TOKEN_FILE={token}")
    out.print("    corral submit -- python -c 'print(\"hello\")'   # then: corral ls")
    out.print("  more users: corral token create NAME")


# -- submit ----------------------------------------------------------------------------------------


def _spec_from_flags(
    spec: dict[str, Any],
    command: list[str] | None,
    flags: dict[str, Any],
    resources: dict[str, Any],
    env: list[str],
) -> dict[str, Any]:
    for key, value in flags.items():
        if value is not None:
            spec[key] = value
    res = dict(spec.get("resources") or {})
    res.update({k: v for k, v in resources.items() if v is not None})
    if res:
        spec["resources"] = res
    if env:
        merged = dict(spec.get("env") or {})
        for item in env:
            key, sep, value = item.partition("=")
            if not sep or not key:
                fail(f"--env: expected KEY=VALUE, got {item!r}")
            merged[key] = value
        spec["env"] = merged
    if command:
        # One argument is a shell line (`-- "a && b"`); several are an argv, run as given.
        spec["command"] = command[0] if len(command) == 1 else list(command)
    if not spec.get("command") and not spec.get("template"):
        fail("no command: give one after `--`, or `command:` in the -f file, or --template")
    return spec


def _load_spec_file(file: Path, client: Client) -> tuple[dict[str, Any], Any]:
    """A job spec file as the mapping to send, and its key path -> line map (None for a
    JobSet manifest, translated here, where its lines are known, with one line on stderr for
    each field corral ignores)."""
    from corral.formats import FormatError, is_jobset, load_jobset
    from corral.formats._common import load_yaml, read_text

    try:
        data, lines = load_yaml(read_text(file), str(file))
    except FormatError as err:
        fail(str(err))
    if is_jobset(data):
        projects = client.get("/v1/whoami")["projects"]
        try:
            data, warnings = load_jobset(file, projects)
        except FormatError as err:
            fail(str(err))
        for warning in warnings:
            typer.echo(f"corral: {warning}", err=True)
        lines = None
    if not isinstance(data, dict):
        fail(f"{file}: expected a job spec mapping")
    return data, lines


def _at_line(message: str, file: Path | None, lines: Any, overridden: set[str]) -> str:
    """The server's `job spec: KEY.PATH: what` as `FILE:LINE: KEY.PATH: what` when the key
    came from the -f file (not from a flag that overrode it)."""
    import re

    found = re.match(r"job spec: ([\w.-]+): (.*)", message)
    if file is None or not lines or not found:
        return message
    path = found.group(1)
    loc = tuple(int(k) if k.isdigit() else k for k in path.split("."))
    if loc[0] in overridden or ".".join(map(str, loc[:2])) in overridden:
        return message
    for n in range(len(loc), 0, -1):
        if loc[:n] in lines:
            return f"{file}:{lines[loc[:n]]}: {path}: {found.group(2)}"
    return f"{file}: {path}: {found.group(2)}"


# Never sent by --export ALL: the submitter's credentials, and corral's own contract variables.
_NOT_EXPORTED = ("CORRAL_",)


def _exported(export: str | None) -> dict[str, str]:
    """The submitter's environment to send, in the manner of `sbatch --export`: ALL, NONE, or
    a comma-separated list of NAME (its current value) and NAME=value, after ALL or alone."""
    if export is None:
        return {}
    out: dict[str, str] = {}
    for item in export.split(","):
        name, sep, value = item.partition("=")
        if item in ("ALL", "NONE"):
            if item == "ALL":
                out |= {k: v for k, v in os.environ.items() if not k.startswith(_NOT_EXPORTED)}
        elif not name or "\0" in item:
            fail(f"--export: expected ALL, NONE or NAME[=value],... got {export!r}")
        elif sep:
            out[name] = value
        elif name in os.environ:
            out[name] = os.environ[name]
    return out


def _priority(value: str | None) -> int | str | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return value  # a priority class name


@app.command(context_settings={"allow_interspersed_args": False})
def submit(
    command: Annotated[list[str] | None, typer.Argument(help="Command, after `--`.")] = None,
    file: Annotated[Path | None, typer.Option("-f", "--file", help="Job spec YAML/JSON.")] = None,
    name: Annotated[str | None, typer.Option(help="Job name (default: the job id).")] = None,
    project: Annotated[str | None, typer.Option(help="Project (default: your only one).")] = None,
    priority: Annotated[str | None, typer.Option(help="Integer or priority class.")] = None,
    accelerator: Annotated[str | None, typer.Option(help="Accelerator type.")] = None,
    per_worker: Annotated[int | None, typer.Option(help="Accelerators per worker.")] = None,
    workers: Annotated[int | None, typer.Option(help="Workers per slice.")] = None,
    slices: Annotated[int | None, typer.Option(help="Slices.")] = None,
    exclusive: Annotated[bool | None, typer.Option("--exclusive", help="Own whole domains.")] = (
        None
    ),
    max_restarts: Annotated[int | None, typer.Option(help="Gang restarts on failure.")] = None,
    max_runtime: Annotated[str | None, typer.Option(help="e.g. 30m, 72h.")] = None,
    preemptible: Annotated[bool | None, typer.Option("--preemptible/--no-preemptible")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE, repeatable.")] = (
        None
    ),
    export: Annotated[
        str | None,
        typer.Option(
            help="Send your environment, as sbatch --export: ALL, or NAME,NAME=value,..."
            " (--env and the file's env win over it).",
        ),
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option(help="Where workers start (default: this directory); must exist on the node."),
    ] = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait", help="Wait for the job to end; exit with its exit code (docs/live.md)."
        ),
    ] = False,
    template: Annotated[
        str | None,
        typer.Option(help="Interactive job from a template: jupyter, tensorboard, ssh, shell."),
    ] = None,
    idle_timeout: Annotated[
        str | None, typer.Option(help="Interactive: cancel after this long idle, e.g. 1h.")
    ] = None,
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a job; prints its id. Flags override the -f file's keys."""
    flags = {
        "template": template,
        "idle_timeout": idle_timeout,
        "name": name,
        "project": project,
        "priority": _priority(priority),
        "max_restarts": max_restarts,
        "max_runtime": max_runtime,
        "preemptible": preemptible,
    }
    resources = {
        "accelerator": accelerator,
        "per_worker": per_worker,
        "workers": workers,
        "slices": slices,
        "exclusive": exclusive,
    }
    client = Client(url, token_file)
    spec, lines = _load_spec_file(file, client) if file is not None else ({}, None)
    if export is not None:
        file_env = spec.get("env")
        spec["env"] = {**_exported(export), **(file_env if isinstance(file_env, dict) else {})}
    if workdir is not None or not spec.get("workdir"):
        spec["workdir"] = str((workdir or Path.cwd()).absolute())
    spec = _spec_from_flags(spec, command, flags, resources, env or [])
    try:
        job = client.request("POST", "/v1/jobs", json=spec).json()
    except ApiError as err:
        overridden = {k for k, v in flags.items() if v is not None}
        overridden |= {f"resources.{k}" for k, v in resources.items() if v is not None}
        overridden |= {"command"} if command else set()
        overridden |= {"env"} if env or export else set()
        fail(_at_line(str(err), file, lines, overridden), err.code)
    if as_json and not wait:
        print_json(job)
        return
    if not as_json:
        typer.echo(job["id"])
    if not wait:
        return
    final = _wait_for(client, job["id"])
    if as_json:
        print_json(final)
    raise typer.Exit(_job_exit_code(final))


def _wait_for(client: Client, job_id: str) -> dict[str, Any]:
    """The job once it has ended, polled through restarts of the control plane."""
    path = f"/v1/jobs/{quote(job_id, safe='')}"
    while True:
        job = _request_riding_restarts(client, path, {}).json()
        if job["state"] not in ("pending", "running"):
            return job
        time.sleep(FOLLOW_INTERVAL)


def _job_exit_code(job: dict[str, Any]) -> int:
    """0 if it succeeded; else the job's own exit code (128+N for signal N, as shells do),
    or 1 when it has none (cancelled, lost, never launched). One line on stderr says which."""
    if job["state"] == "succeeded":
        return 0
    code = job["exit_code"]
    typer.echo(f"corral: job {job['id']} {job['state']}: {job.get('reason') or ''}", err=True)
    if code is None or code == 0:
        return 1
    return 128 - code if code < 0 else min(code, 255)


# -- reads -----------------------------------------------------------------------------------------


def _gpus(j: dict[str, Any]) -> str:
    return f"{j['accelerators']}x{j['accelerator']}"


def _job_columns(now: float) -> list[Column]:
    return [
        Column("ID", lambda j: j["id"]),
        Column("NAME", lambda j: j["name"]),
        Column("PROJECT", lambda j: j["project"]),
        Column("USER", lambda j: j["user"]),
        Column("STATE", lambda j: j["state"], style=lambda j: _STATE_STYLE.get(j["state"], "")),
        Column("ATT", lambda j: str(j["attempt"])),
        Column("GPUS", _gpus),
        Column("AGE", lambda j: _ago(j["submitted_at"], now)),
        Column("EXIT", lambda j: "" if j["exit_code"] is None else str(j["exit_code"])),
        Column("PRIO", lambda j: str(j["priority"]), wide=True),
        Column("RESTARTS", lambda j: str(j["restarts"]), wide=True),
        Column("PREEMPTED", lambda j: str(j["preemptions"]), wide=True),
        Column("RAN", lambda j: _span(j["run_time"]), wide=True),
        Column("WORKERS", lambda j: str(j["workers"]), wide=True),
        Column("WHY", _why),
    ]


StateFilter = Annotated[
    list[str] | None,
    typer.Option("--state", help="pending, running, succeeded, failed, cancelled; repeatable."),
]
ProjectFilter = Annotated[list[str] | None, typer.Option("--project", help="Repeatable.")]
UserFilter = Annotated[str | None, typer.Option("--user", help="This user's jobs (admins).")]
EveryoneOpt = Annotated[bool, typer.Option("--all", "-a", help="Every user's jobs (admins).")]


@app.command("ls")
def ls(
    state: StateFilter = None,
    project: ProjectFilter = None,
    user: UserFilter = None,
    since: Annotated[
        str | None, typer.Option(help="Submitted since: 2h, 7d, or a date (2026-11-24).")
    ] = None,
    everyone: EveryoneOpt = False,
    limit: Annotated[int, typer.Option(help="At most this many, the most recent.")] = 100,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Print again every 2 s, until Ctrl-C.")
    ] = False,
    output: OutputOpt = None,
    no_headers: NoHeadersOpt = False,
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List your jobs (oldest first); -a for everyone's."""
    from corral.cli.timeargs import parse_time

    fmt = check_format(output, as_json)
    client = Client(url, token_file)
    query = {
        "state": state,
        "project": project,
        "user": user,
        "since": parse_time(since, "--since"),
        "all": everyone,
        "limit": limit,
    }
    tty = sys.stdout.isatty()
    try:
        while True:
            jobs = client.get("/v1/jobs", **query)
            if watch and tty:
                sys.stdout.write("\x1b[H\x1b[2J")  # clear the screen: one frame at a time
            print_rows(jobs, _job_columns(time.time()), fmt, no_headers, empty="no jobs")
            if not watch:
                return
            sys.stdout.write("" if tty else "\n")  # piped: frames apart by an empty line
            sys.stdout.flush()
            time.sleep(WATCH_INTERVAL)
    except KeyboardInterrupt:
        return


@app.command()
def show(
    job: JobArg,
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one job: state, reason, placement, attempts."""
    data = Client(url, token_file).get(f"/v1/jobs/{job}")
    if as_json:
        print_json(data)
        return
    out = _console()
    fields = [
        ("job", f"{data['id']} ({data['name']})"),
        ("project / user", f"{data['project']} / {data['user']}"),
        ("state", _state(data)),
        ("reason", _why(data) or "-"),
        (
            "command",
            data["command"] if isinstance(data["command"], str) else shlex.join(data["command"]),
        ),
        ("resources", _resources(data["resources"])),
        ("workdir", data.get("workdir") or "(the account's home)"),
        ("priority", str(data["priority"])),
        (
            "attempt",
            f"{data['attempt']} (restarts {data['restarts']}/{data['max_restarts']},"
            f" preemptions {data['preemptions']})",
        ),
        ("exit code", "-" if data["exit_code"] is None else str(data["exit_code"])),
        ("submitted", _when(data["submitted_at"])),
        *_predicted(data),
        ("started", _when(data["started_at"])),
        ("finished", _when(data["finished_at"])),
    ]
    from rich.table import Table

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for key, value in fields:
        grid.add_row(key, value)
    out.print(grid)
    if data["attempts"]:
        out.print(_attempts_table(data["attempts"]))
    for e in data.get("endpoints", []):
        ready = "" if e["ready"] else " (starting)"
        out.print(f"[bold]endpoint[/] {e['name']}: {e['url']}{ready}")


def _resources(r: dict[str, Any]) -> str:
    text = f"{r['workers']} worker(s) x {r['per_worker']} {r['accelerator']}"
    if r["slices"] > 1:
        text += f" x {r['slices']} slices"
    return text + (" exclusive" if r["exclusive"] else "")


def _predicted(data: dict[str, Any]) -> list[tuple[str, str]]:
    """A pending job's "predicted start" line (none for other jobs)."""
    if data["state"] != "pending":
        return []
    t = data.get("predicted_start")
    if t is None:
        why = "it waits for a job with no max_runtime, or is too far off"
        return [("predicted start", f"- (not known: {why})")]
    at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    return [("predicted start", f"{at} ({_start_in(data, time.time())})")]


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f" ({_ago(t)} ago)"


def _attempts_table(attempts: list[dict[str, Any]]) -> Table:
    from rich.table import Table

    table = Table(title="attempts", box=None, header_style="bold", title_justify="left")
    for col in ("#", "STATE", "STARTED", "RAN", "EXIT", "WORKERS (node:gpus)", "NOTE"):
        table.add_column(col)
    for a in attempts:
        ran = (a["finished_at"] or time.time()) - a["started_at"]
        where = ", ".join(
            f"{p['worker']}@{p['node']}:{','.join(map(str, p['gpus'])) or '-'}"
            for p in a["placement"]
        )
        table.add_row(
            str(a["attempt"]),
            a["state"],
            _ago(a["started_at"]) + " ago",
            _span(ran),
            "-" if a["exit_code"] is None else str(a["exit_code"]),
            where,
            a["message"],
        )
    return table


@app.command()
def logs(
    job: JobArg,
    follow: Annotated[
        bool,
        typer.Option(
            "-f",
            "--follow",
            help="Keep printing new output, across restarts of the job and of"
            " corral up, until the job ends.",
        ),
    ] = False,
    tail: Annotated[
        int | None, typer.Option("--tail", min=0, max=100_000, help="Start at the last N lines.")
    ] = None,
    worker: Annotated[int, typer.Option(help="Worker index.")] = 0,
    attempt: Annotated[int | None, typer.Option(help="Attempt (default: the latest).")] = None,
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
) -> None:
    """Print a worker's log; -f follows it until the job ends."""
    client = Client(url, token_file)
    current, offset = attempt, 0
    out = sys.stdout.buffer
    path = f"/v1/jobs/{quote(job, safe='')}/logs"
    try:
        while True:
            params = {"worker": worker, "offset": offset}
            if tail is not None:
                params["tail"], tail = tail, None  # only the first read; then from the offset
            if current is not None:
                params["attempt"] = current
            resp = (
                _request_riding_restarts(client, path, params)
                if follow
                else client.call("GET", path, params=params)
            )
            out.write(resp.content)
            out.flush()
            offset = int(resp.headers["X-Corral-Offset"])
            shown = int(resp.headers["X-Corral-Attempt"])
            if current is None and resp.headers["X-Corral-Done"] == "0":
                current = shown  # the offset belongs to this attempt's log: stay on it
            done = resp.headers["X-Corral-Done"] == "1"
            live = resp.headers["X-Corral-State"] in ("pending", "running")
            # A later attempt may have run (even to the job's end) between two polls.
            later = int(resp.headers.get("X-Corral-Latest", shown)) > shown
            if resp.content and not done:
                continue  # more may be there already: read on without waiting
            if not follow or (done and (attempt is not None or not (live or later))):
                return
            if done:
                # This attempt ended; the job ran or will run again as the next one. Follow it.
                current, offset = shown + 1, 0
                sys.stderr.write(f"--- attempt {current} ---\n")
                if later:
                    continue
            time.sleep(FOLLOW_INTERVAL)
    except KeyboardInterrupt:
        return


def _request_riding_restarts(client: Client, path: str, params: dict[str, Any]) -> Any:
    """One GET for `logs -f` or `submit --wait`, waiting out a control plane that is
    restarting (jobs run on meanwhile) for up to RESTART_PATIENCE seconds."""
    deadline, said = time.monotonic() + RESTART_PATIENCE, False
    while True:
        try:
            return client.request("GET", path, params=params)
        except ApiError as err:
            if not err.unreachable or time.monotonic() > deadline:
                fail(str(err), err.code)
            if not said:
                sys.stderr.write(f"--- {err}; retrying ---\n")
                said = True
        time.sleep(FOLLOW_INTERVAL)


@app.command()
def cancel(
    jobs: Annotated[
        list[str] | None, typer.Argument(help="Job ids or names.", callback=_job_refs)
    ] = None,
    state: StateFilter = None,
    project: ProjectFilter = None,
    user: UserFilter = None,
    everyone: EveryoneOpt = False,
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancel jobs: dequeue them, or stop all their workers (SIGTERM, grace, SIGKILL).

    Name the jobs, or pick them as `ls` would: `cancel --project vision --state pending`
    cancels your pending jobs in vision (-a: everyone's, for admins)."""
    picked = bool(state or project or user or everyone)
    if bool(jobs) == picked:
        fail("cancel what? name jobs (JOB...) or pick them with --state/--project/--user/--all")
    live = ("pending", "running")
    for s in state or ():
        if s not in live:
            fail(f"--state: only live jobs can be cancelled ({', '.join(live)}), not {s!r}")
    client = Client(url, token_file)
    if picked:
        found = client.get(
            "/v1/jobs",
            state=state or list(live),
            project=project,
            user=user,
            all=everyone,
            limit=100_000,
        )
        jobs = [j["id"] for j in found]
    done, worst = [], 0
    for ref in jobs or ():
        try:
            data = client.request("POST", f"/v1/jobs/{quote(ref, safe='')}/cancel").json()
        except ApiError as err:
            typer.echo(f"corral: error: {ref}: {err}", err=True)
            worst = worst or err.code  # the first failure's code; the rest still go ahead
            continue
        done.append(data)
        if not as_json:
            if data["state"] == "cancelled":
                typer.echo(f"cancelled {data['id']}")
            else:
                typer.echo(f"cancelling {data['id']} (stopping its workers)")
    if as_json:
        print_json(done)
    elif picked and not jobs:
        typer.echo("no live job matches", err=True)
    if worst:
        raise typer.Exit(worst)


@app.command()
def queue(
    project: Annotated[str | None, typer.Option(help="Only this project.")] = None,
    output: OutputOpt = None,
    no_headers: NoHeadersOpt = False,
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Pending jobs of your projects: position in the project's queue, and why they wait."""
    fmt = check_format(output, as_json)
    jobs = Client(url, token_file).get("/v1/queue", project=project)
    now = time.time()
    columns = [
        Column("POS", lambda j: str(j["position"])),
        Column("PROJECT", lambda j: j["project"]),
        Column("ID", lambda j: j["id"]),
        Column("NAME", lambda j: j["name"]),
        Column("USER", lambda j: j["user"]),
        Column("PRIO", lambda j: str(j["priority"])),
        Column("GPUS", _gpus),
        Column("WAIT", lambda j: _ago(j["submitted_at"], now)),
        Column("START", lambda j: _start_in(j, now)),
        Column("WORKERS", lambda j: str(j["workers"]), wide=True),
        Column("REASON", lambda j: f"{j['reason_code']}: {j['reason']}"),
    ]
    print_rows(jobs, columns, fmt, no_headers, empty="the queue is empty")


@app.command()
def quota(
    output: OutputOpt = None,
    no_headers: NoHeadersOpt = False,
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Per project and accelerator: guarantee, in use, borrowed, limit, pending."""
    fmt = check_format(output, as_json)
    data = Client(url, token_file).get("/v1/quota")
    if fmt == "json":
        print_json(data)
        return
    rows = [
        {
            "project": p["project"],
            "type": t,
            "guarantee": f"{p['guarantee'][t]:g}",
            "in_use": str(p["in_use"][t]),
            "borrowed": f"{p['borrowed'][t]:g}",
            "limit": str(p["limit"].get(t, "-")),
            "pending": f"{p['pending'][t]} ({p['pending_jobs']} jobs)",
        }
        for p in data["projects"]
        for t in sorted(p["guarantee"])
    ]
    heads = ("PROJECT", "TYPE", "GUARANTEE", "IN USE", "BORROWED", "LIMIT", "PENDING")
    keys = ("project", "type", "guarantee", "in_use", "borrowed", "limit", "pending")
    columns = [Column(h, lambda r, k=k: r[k]) for h, k in zip(heads, keys, strict=True)]
    if fmt != "name":
        cap = ", ".join(f"{n} {t}" for t, n in data["capacity"].items()) or "none"
        grace = data["preempt_grace"]
        typer.echo(f"capacity: {cap}; policy {data['policy']}, preempt grace {grace:g}s", err=True)
    print_rows(rows, columns, fmt, no_headers, empty="no projects", name=lambda r: r["project"])


@app.command()
def nodes(
    output: OutputOpt = None,
    no_headers: NoHeadersOpt = False,
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Nodes: accelerators, free, and the jobs on each."""
    fmt = check_format(output, as_json)
    data = Client(url, token_file).get("/v1/nodes")
    columns = [
        Column("NODE", lambda n: n["name"]),
        Column("TYPE", lambda n: n["accelerator"]),
        Column("TOTAL", lambda n: str(n["count"])),
        Column("FREE", lambda n: str(n["free"])),
        Column("FREE DEVICES", lambda n: ",".join(map(str, n["free_devices"])) or "-"),
        Column("DOMAIN", lambda n: n["domain"] or "-"),
        Column("JOBS", lambda n: ",".join(n["jobs"]) or "-"),
    ]
    print_rows(data, columns, fmt, no_headers, empty="no nodes", name=lambda n: n["name"])


@token_app.command("create")
def token_create(
    user: Annotated[str, typer.Argument(help="User id the token acts as.")],
    admin: Annotated[bool, typer.Option("--admin", help="May see and manage all jobs.")] = False,
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a token for USER and print it (it is shown only this once)."""
    data = Client(url, token_file).post("/v1/tokens", {"user": user, "admin": admin})
    if as_json:
        print_json(data)
    else:
        typer.echo(data["token"])
        # stderr: stdout stays the token alone, for `TOKEN=$(corral token create bob)`.
        typer.echo(f"token id {data['id']} (corral token revoke {data['id']})", err=True)


@token_app.command("list")
def token_list(
    output: OutputOpt = None,
    no_headers: NoHeadersOpt = False,
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List tokens: id, user, admin, created (never the secrets: corral keeps only digests)."""
    fmt = check_format(output, as_json)
    data = Client(url, token_file).get("/v1/tokens")
    columns = [
        Column("ID", lambda t: t["id"]),
        Column("USER", lambda t: t["user"]),
        Column("ADMIN", lambda t: "yes" if t["admin"] else "-"),
        Column(
            "CREATED", lambda t: time.strftime("%Y-%m-%d %H:%M", time.localtime(t["created_at"]))
        ),
    ]
    print_rows(data, columns, fmt, no_headers, empty="no tokens")


@token_app.command("revoke")
def token_revoke(
    ref: Annotated[
        str, typer.Argument(metavar="USER|TOKEN-ID", help="A token id (tok-...) or a user.")
    ],
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Revoke one token by its id, or every token of USER. Refused from the next request on."""

    data = Client(url, token_file).delete(f"/v1/tokens/{quote(ref, safe='')}")
    if as_json:
        print_json(data)
        return
    for t in data:
        typer.echo(f"revoked {t['id']} ({t['user']}{', admin' if t['admin'] else ''})")


# -- demo ------------------------------------------------------------------------------------------


@app.command()
def demo(
    fast: Annotated[bool, typer.Option("--fast", help="A ~10 s run (for CI).")] = False,
    gpus: Annotated[
        int, typer.Option(min=8, max=1024, help="Fake GPUs in the pool (its jobs need 8).")
    ] = 8,
    keep: Annotated[bool, typer.Option(help="Keep the state dir and print its path.")] = False,
) -> None:
    """Watch corral share a pretend 8-GPU box between two teams, with a preemption."""
    from corral.server.demo import run_demo

    run_demo(fast=fast, gpus=gpus, keep=keep, console=_console())
