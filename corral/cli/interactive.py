"""Commands for interactive jobs: keys, ssh, ssh-config, ssh-proxy.

`corral ssh JOB` runs the system's ssh with `corral ssh-proxy JOB` as its ProxyCommand: the
SSH stream goes through the API (a WebSocket to /j/JOB/ssh/, authenticated with your corral
token), never to an open port on the node.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

from corral.cli import app, fail
from corral.cli.live import DEFAULT_URL, Client, TokenFileOpt, UrlOpt, _read_token
from corral.cli.output import JsonOpt, print_json

keys_app = typer.Typer(help="Your SSH public keys, for jobs from the ssh template.")
app.add_typer(keys_app, name="keys")


@keys_app.command("add")
def keys_add(
    file: Annotated[Path, typer.Argument(help="Public key file, e.g. ~/.ssh/id_ed25519.pub.")],
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add a public key; ssh jobs started from now on accept it."""
    try:
        text = file.expanduser().read_text()
    except OSError as err:
        fail(f"cannot read {file}: {err.strerror}")
    if "PRIVATE KEY" in text:
        fail(f"{file} is a private key; give the .pub file")
    keys = Client(url, token_file).post("/v1/keys", {"key": text.strip()})
    if as_json:
        print_json(keys)
        return
    typer.echo(f"{len(keys)} key(s) on file")


@keys_app.command("ls")
def keys_ls(
    url: UrlOpt = DEFAULT_URL, token_file: TokenFileOpt = None, as_json: JsonOpt = False
) -> None:
    """List your public keys."""
    keys = Client(url, token_file).get("/v1/keys")
    if as_json:
        print_json(keys)
        return
    for key in keys:
        typer.echo(key)


def _ssh_endpoint(client: Client, job: str) -> tuple[str, dict]:
    data = client.get(f"/v1/jobs/{job}")
    for e in data.get("endpoints", []):
        if e["protocol"] == "tcp" and e["name"] == "ssh":
            return data["id"], e
    fail(f"job {job} has no ssh endpoint (state {data['state']}; start one with --template ssh)")
    raise AssertionError


def _proxy_command(job_id: str, endpoint: dict, portable: bool) -> str:
    """The ProxyCommand: `corral ssh-proxy` (portable, for ~/.ssh/config) or this very
    Python (so `corral ssh` works from a venv that is not on PATH). Its --url is the proxy's
    origin (`corral up --proxy-port`), taken from the endpoint's URL."""
    url = endpoint["url"].split("/j/")[0]
    if portable:
        return f"corral ssh-proxy {job_id} --url {url}"
    cli = [sys.executable, "-c", "from corral.cli import main; main()"]
    return shlex.join([*cli, "ssh-proxy", job_id, "--url", url])


@app.command("ssh", context_settings={"allow_interspersed_args": False})
def ssh(
    job: Annotated[str, typer.Argument(help="Job id or name (an ssh template job).")],
    command: Annotated[list[str] | None, typer.Argument(help="Remote command, after `--`.")] = None,
    identity: Annotated[Path | None, typer.Option("-i", help="Private key file for ssh.")] = None,
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
) -> None:
    """Open an SSH session to an ssh job, through the API."""
    client = Client(url, token_file)
    job_id, endpoint = _ssh_endpoint(client, job)
    binary = shutil.which("ssh")
    if binary is None:
        fail("ssh not found: install the OpenSSH client (Debian: openssh-client)", 1)
    argv = [
        binary,
        "-o",
        f"ProxyCommand={_proxy_command(job_id, endpoint, portable=False)}",
        # The host key is made fresh for each job; the tunnel is authenticated by corral.
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "LogLevel=ERROR",
    ]
    if identity is not None:
        argv += ["-i", str(identity), "-o", "IdentitiesOnly=yes"]
    argv += [f"{endpoint['user']}@corral-{job_id}", *(command or [])]
    sys.stdout.flush()
    os.execv(binary, argv)


@app.command("ssh-config")
def ssh_config(
    job: Annotated[str, typer.Argument(help="Job id or name (an ssh template job).")],
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
) -> None:
    """Print a Host block for ~/.ssh/config (VS Code Remote-SSH, scp, rsync)."""
    client = Client(url, token_file)
    job_id, endpoint = _ssh_endpoint(client, job)
    typer.echo(
        f"Host corral-{job_id}\n"
        f"    User {endpoint['user']}\n"
        f"    ProxyCommand {_proxy_command(job_id, endpoint, portable=True)}\n"
        "    StrictHostKeyChecking no\n"
        "    UserKnownHostsFile /dev/null\n"
    )


@app.command("ssh-proxy", hidden=True)
def ssh_proxy(
    job: Annotated[str, typer.Argument(help="Job id.")],
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
) -> None:
    """Carry stdin/stdout to the job's ssh port (ssh's ProxyCommand)."""
    from websockets.exceptions import WebSocketException
    from websockets.sync.client import connect

    token = os.environ.get("CORRAL_TOKEN") or _read_token(token_file)
    if not token:
        fail("no token: set CORRAL_TOKEN or CORRAL_TOKEN_FILE", 1)
    ws_url = url.rstrip("/").replace("http", "ws", 1) + f"/j/{job}/ssh/"
    try:
        ws = connect(
            ws_url,
            additional_headers={"Authorization": f"Bearer {token}"},
            max_size=None,
            compression=None,
        )
    except (OSError, WebSocketException) as err:
        fail(f"cannot open the tunnel to job {job}: {err}", 1)

    def upstream() -> None:
        try:
            while data := os.read(0, 65536):
                ws.send(data)
        except (OSError, WebSocketException):
            pass
        ws.close()

    threading.Thread(target=upstream, daemon=True).start()
    try:
        for message in ws:
            os.write(1, message if isinstance(message, bytes) else message.encode())
    except (OSError, WebSocketException):
        pass
