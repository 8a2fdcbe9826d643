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
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from corral.cli import app, fail

DEFAULT_URL = "http://127.0.0.1:8642"
FOLLOW_INTERVAL = 0.5  # seconds between log polls with -f

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
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]

token_app = typer.Typer(help="Manage API tokens (admins).", no_args_is_help=True)
app.add_typer(token_app, name="token")


# -- the client ------------------------------------------------------------------------------------


class Client:
    """httpx with corral's error handling: every failure becomes one line and exit 1."""

    def __init__(self, url: str, token_file: Path | None, need_token: bool = True):
        self.url = url.rstrip("/")
        token = os.environ.get("CORRAL_TOKEN") or _read_token(token_file)
        if need_token and not token:
            fail(
                "no token: set CORRAL_TOKEN, or CORRAL_TOKEN_FILE / --token-file"
                " (`corral up` writes an admin token to STATE/admin.token)",
                1,
            )
        import httpx  # here, not at the top: it costs ~0.3 s that `--help` should not pay

        self._httpx = httpx
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=30.0)

    def call(self, method: str, path: str, **kw: Any) -> Any:
        httpx = self._httpx
        try:
            resp = self.http.request(method, path, **kw)
        except httpx.ConnectError:
            fail(f"cannot reach corral at {self.url}: is `corral up` running?", 1)
        except httpx.HTTPError as err:
            fail(f"request to {self.url} failed: {err}", 1)
        if resp.status_code >= 400:
            fail(_detail(resp), 1)
        return resp

    def get(self, path: str, **params: Any) -> Any:
        clean = {k: v for k, v in params.items() if v is not None}
        return self.call("GET", path, params=clean).json()

    def post(self, path: str, body: Any = None) -> Any:
        return self.call("POST", path, json=body).json()

    def delete(self, path: str) -> Any:
        return self.call("DELETE", path).json()


def _read_token(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text().strip() or None
    except OSError as err:
        fail(f"cannot read token file {path}: {err.strerror}", 1)
    return None


def _detail(resp: Any) -> str:
    try:
        detail = resp.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if not isinstance(detail, str):
        detail = resp.text.strip()[:200] or resp.reason_phrase
    return f"{detail} (HTTP {resp.status_code})"


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _console() -> Console:
    return Console(highlight=False)


# -- formatting helpers ----------------------------------------------------------------------------


def _ago(t: float | None, now: float | None = None) -> str:
    if t is None:
        return "-"
    return _span((now or time.time()) - t)


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
) -> None:
    """Run the control plane: store, scheduler loop, local executor and HTTP API."""
    import logging

    from corral.formats.types import FormatError
    from corral.server.store import SchemaTooNew
    from corral.server.up import Server, Settings, StateDirBusy, check_port

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = Settings(
        state_dir=state.expanduser().resolve(),
        host=host,
        port=port,
        quota=quota.resolve() if quota else None,
        fake_gpus=fake_gpus,
        accelerator=accelerator,
        cluster=cluster,
        allow_hosts=tuple(allow_host or ()),
    )
    if cluster is not None and (fake_gpus is not None or accelerator is not None):
        fail("--cluster names the nodes and their accelerators: drop --fake-gpus/--accelerator")
    try:
        check_port(host, port)
        server = Server(settings)
    except (StateDirBusy, SchemaTooNew, FormatError, OSError) as err:
        fail(str(err), 1)
    _announce(server)
    server.run()


def _announce(server: Any) -> None:
    nodes = server.cp.inventory.nodes
    node = nodes[0]
    quota = str(server.settings.quota) if server.settings.quota else "everything to 'default'"
    out = Console(stderr=True, highlight=False, soft_wrap=True)
    out.print(
        f"[bold]corral[/] is up at [cyan]{server.url}[/]  (web page: {server.url}/,"
        f" API docs: {server.url}/docs)"
    )
    if len(nodes) > 1:
        domains = len({n.domain for n in nodes})
        total = sum(n.count for n in nodes)
        out.print(
            f"  pool: {len(nodes)} nodes in {domains} domains, {total} accelerators; quota: {quota}"
        )
    else:
        out.print(f"  node {node.name}: {node.count} x {node.accelerator}; quota: {quota}")
    if node.count == 0:
        out.print(
            "  [yellow]no GPUs found (NVML, nvidia-smi): every job will be refused;"
            " try corral without GPUs with --fake-gpus N[/]"
        )
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
    if not spec.get("command"):
        fail("no command: give one after `--`, or `command:` in the -f file")
    return spec


def _load_spec_file(file: Path, client: Client) -> dict[str, Any]:
    """A job spec file as the mapping to send; a JobSet manifest is translated here, where its
    lines are known, with one line on stderr for each field corral ignores."""
    import yaml

    from corral.formats import FormatError, is_jobset, load_jobset

    try:
        data = yaml.safe_load(file.read_text())
    except OSError as err:
        fail(f"cannot read {file}: {err.strerror}")
    except yaml.YAMLError as err:
        fail(f"{file}: not valid YAML/JSON: {str(err).splitlines()[0]}")
    if is_jobset(data):
        projects = client.get("/v1/whoami")["projects"]
        try:
            data, warnings = load_jobset(file, projects)
        except FormatError as err:
            fail(str(err))
        for warning in warnings:
            typer.echo(f"corral: {warning}", err=True)
    if not isinstance(data, dict):
        fail(f"{file}: expected a job spec mapping")
    return data


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
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a job; prints its id. Flags override the -f file's keys."""
    flags = {
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
    spec = _load_spec_file(file, client) if file is not None else {}
    if export is not None:
        file_env = spec.get("env")
        spec["env"] = {**_exported(export), **(file_env if isinstance(file_env, dict) else {})}
    if workdir is not None or not spec.get("workdir"):
        spec["workdir"] = str((workdir or Path.cwd()).absolute())
    spec = _spec_from_flags(spec, command, flags, resources, env or [])
    job = client.post("/v1/jobs", spec)
    if as_json:
        _print_json(job)
    else:
        typer.echo(job["id"])


# -- reads -----------------------------------------------------------------------------------------


@app.command("ls")
def ls(
    state: Annotated[list[str] | None, typer.Option("--state", help="Filter, repeatable.")] = None,
    everyone: Annotated[bool, typer.Option("--all", "-a", help="Every user's jobs (admins).")] = (
        False
    ),
    limit: Annotated[int, typer.Option(help="At most this many, the most recent.")] = 100,
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List your jobs (oldest first)."""
    jobs = Client(url, token_file).get("/v1/jobs", state=state, all=everyone, limit=limit)
    if as_json:
        _print_json(jobs)
        return
    table = Table(box=None, header_style="bold")
    for col in ("ID", "NAME", "PROJECT", "USER", "STATE", "ATT", "GPUS", "AGE", "EXIT", "WHY"):
        table.add_column(col, overflow="fold" if col == "WHY" else "ellipsis")
    now = time.time()
    for j in jobs:
        exit_code = "" if j["exit_code"] is None else str(j["exit_code"])
        table.add_row(
            j["id"],
            j["name"],
            j["project"],
            j["user"],
            _state(j),
            str(j["attempt"]),
            f"{j['accelerators']}x{j['accelerator']}",
            _ago(j["submitted_at"], now),
            exit_code,
            _why(j),
        )
    _console().print(table if jobs else "no jobs")


@app.command()
def show(
    job: Annotated[str, typer.Argument(help="Job id or name.")],
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one job: state, reason, placement, attempts."""
    data = Client(url, token_file).get(f"/v1/jobs/{job}")
    if as_json:
        _print_json(data)
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
        ("priority", str(data["priority"])),
        (
            "attempt",
            f"{data['attempt']} (restarts {data['restarts']}/{data['max_restarts']},"
            f" preemptions {data['preemptions']})",
        ),
        ("exit code", "-" if data["exit_code"] is None else str(data["exit_code"])),
        ("submitted", _when(data["submitted_at"])),
        ("started", _when(data["started_at"])),
        ("finished", _when(data["finished_at"])),
    ]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for key, value in fields:
        grid.add_row(key, value)
    out.print(grid)
    if data["attempts"]:
        out.print(_attempts_table(data["attempts"]))


def _resources(r: dict[str, Any]) -> str:
    text = f"{r['workers']} worker(s) x {r['per_worker']} {r['accelerator']}"
    if r["slices"] > 1:
        text += f" x {r['slices']} slices"
    return text + (" exclusive" if r["exclusive"] else "")


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f" ({_ago(t)} ago)"


def _attempts_table(attempts: list[dict[str, Any]]) -> Table:
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
    job: Annotated[str, typer.Argument(help="Job id or name.")],
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Keep printing new output.")] = (
        False
    ),
    worker: Annotated[int, typer.Option(help="Worker index.")] = 0,
    attempt: Annotated[int | None, typer.Option(help="Attempt (default: the latest).")] = None,
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
) -> None:
    """Print a worker's log; -f follows it, across restarts, until the job ends."""
    client = Client(url, token_file)
    current, offset = attempt, 0
    out = sys.stdout.buffer
    try:
        while True:
            params = {"worker": worker, "offset": offset}
            if current is not None:
                params["attempt"] = current
            resp = client.call("GET", f"/v1/jobs/{job}/logs", params=params)
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


@app.command()
def cancel(
    job: Annotated[str, typer.Argument(help="Job id or name.")],
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
) -> None:
    """Cancel a job: dequeue it, or stop all its workers (SIGTERM, grace, SIGKILL)."""
    data = Client(url, token_file).post(f"/v1/jobs/{job}/cancel")
    if data["state"] == "cancelled":
        typer.echo(f"cancelled {data['id']}")
    else:
        typer.echo(f"cancelling {data['id']}: its workers are being stopped")


@app.command()
def queue(
    project: Annotated[str | None, typer.Option(help="Only this project.")] = None,
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Pending jobs of your projects: position in the project's queue, and why they wait."""
    jobs = Client(url, token_file).get("/v1/queue", project=project)
    if as_json:
        _print_json(jobs)
        return
    table = Table(box=None, header_style="bold")
    for col in ("POS", "PROJECT", "ID", "NAME", "USER", "PRIO", "GPUS", "WAIT", "REASON"):
        table.add_column(col, overflow="fold" if col == "REASON" else "ellipsis")
    now = time.time()
    for j in jobs:
        table.add_row(
            str(j["position"]),
            j["project"],
            j["id"],
            j["name"],
            j["user"],
            str(j["priority"]),
            f"{j['accelerators']}x{j['accelerator']}",
            _ago(j["submitted_at"], now),
            f"{j['reason_code']}: {j['reason']}",
        )
    _console().print(table if jobs else "the queue is empty")


@app.command()
def quota(
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Per project: guarantee, in use, borrowed, pending."""
    data = Client(url, token_file).get("/v1/quota")
    if as_json:
        _print_json(data)
        return
    table = Table(box=None, header_style="bold")
    for col in ("PROJECT", "TYPE", "GUARANTEE", "IN USE", "BORROWED", "LIMIT", "PENDING"):
        table.add_column(col, justify="left" if col in ("PROJECT", "TYPE") else "right")
    for p in data["projects"]:
        for t in sorted(p["guarantee"]):
            table.add_row(
                p["project"],
                t,
                f"{p['guarantee'][t]:g}",
                str(p["in_use"][t]),
                f"{p['borrowed'][t]:g}",
                str(p["limit"].get(t, "-")),
                f"{p['pending'][t]} ({p['pending_jobs']} jobs)",
            )
    cap = ", ".join(f"{n} {t}" for t, n in data["capacity"].items()) or "none"
    out = _console()
    out.print(f"capacity: {cap}; policy {data['policy']}, preempt grace {data['preempt_grace']:g}s")
    out.print(table)


@app.command()
def nodes(
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Nodes: accelerators, free, and the jobs on each."""
    data = Client(url, token_file).get("/v1/nodes")
    if as_json:
        _print_json(data)
        return
    table = Table(box=None, header_style="bold")
    for col in ("NODE", "TYPE", "TOTAL", "FREE", "FREE DEVICES", "DOMAIN", "JOBS"):
        table.add_column(col)
    for n in data:
        table.add_row(
            n["name"],
            n["accelerator"],
            str(n["count"]),
            str(n["free"]),
            ",".join(map(str, n["free_devices"])) or "-",
            n["domain"] or "-",
            ", ".join(n["jobs"]) or "-",
        )
    _console().print(table)


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
        _print_json(data)
    else:
        typer.echo(data["token"])
        # stderr: stdout stays the token alone, for `TOKEN=$(corral token create bob)`.
        typer.echo(f"token id {data['id']} (corral token revoke {data['id']})", err=True)


def _token_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(box=None, header_style="bold")
    for col in ("ID", "USER", "ADMIN", "CREATED"):
        table.add_column(col)
    for t in rows:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(t["created_at"]))
        table.add_row(t["id"], t["user"], "yes" if t["admin"] else "-", created)
    return table


@token_app.command("list")
def token_list(
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List tokens: id, user, admin, created (never the secrets: corral keeps only digests)."""
    data = Client(url, token_file).get("/v1/tokens")
    if as_json:
        _print_json(data)
    else:
        _console().print(_token_table(data))


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
    from urllib.parse import quote

    data = Client(url, token_file).delete(f"/v1/tokens/{quote(ref, safe='')}")
    if as_json:
        _print_json(data)
        return
    for t in data:
        typer.echo(f"revoked {t['id']} ({t['user']}{', admin' if t['admin'] else ''})")


# -- demo ------------------------------------------------------------------------------------------


@app.command()
def demo(
    fast: Annotated[bool, typer.Option("--fast", help="A ~10 s run (for CI).")] = False,
    gpus: Annotated[int, typer.Option(help="Fake GPUs in the pool.")] = 8,
    keep: Annotated[bool, typer.Option(help="Keep the state dir and print its path.")] = False,
) -> None:
    """Watch corral share a pretend 8-GPU box between two teams, with a preemption."""
    from corral.server.demo import run_demo

    run_demo(fast=fast, gpus=gpus, keep=keep, console=_console())
