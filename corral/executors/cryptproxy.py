"""A job spec's `crypt_proxy`: `corral crypt-proxy` started beside an attempt's workers.

The supervisor starts it before the first worker, as the job's own account (it reads the
user's keyring), on a free loopback port, and stops it once the gang has ended. The workers
get the variables their storage clients read, so boto3, s3fs, gcsfs and google-cloud-storage
go through it without a code change (docs/crypt.md).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from corral.executors.base import Launch
from corral.executors.runas import WorkerSetupError, worker_process

STARTUP_TIMEOUT = 30.0
STOP_GRACE = 3.0


def client_env(url: str) -> dict[str, str]:
    """What points the usual storage clients at the gateway."""
    return {
        "CORRAL_CRYPT_PROXY": url,
        "AWS_ENDPOINT_URL": url,  # boto3 >= 1.28, s3fs, the AWS CLI
        "AWS_ENDPOINT_URL_S3": url,
        "STORAGE_EMULATOR_HOST": url,  # gcsfs, google-cloud-storage
        # gcsfs's experimental client first asks a gRPC API that no gateway serves.
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(launch: Launch, log: Path, hide: Sequence[str]) -> tuple[subprocess.Popen, dict]:
    """Start the attempt's gateway and wait until it answers; (process, the workers' env).
    WorkerSetupError, saying why, if it does not come up."""
    spec = launch.crypt_proxy or {}
    port = _free_port()
    argv = [sys.executable, "-c", "from corral.cli import main; main()", "crypt-proxy"]
    argv += ["--listen", f"127.0.0.1:{port}", "--backend", spec["backend"]]
    if spec.get("keyring"):
        argv += ["--keyring", spec["keyring"]]
    process = worker_process(replace(launch, command=tuple(argv)), 0, hide=hide)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            process.args,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **process.popen_kwargs(),
        )
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return proc, client_env(f"http://127.0.0.1:{port}")
        time.sleep(0.1)
    stop(proc)
    lines = log.read_text(errors="replace").strip().splitlines()
    why = lines[-1] if lines else f"not answering after {STARTUP_TIMEOUT:g}s"
    raise WorkerSetupError(f"crypt_proxy did not start: {why}")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, a short grace for uploads in flight, then SIGKILL. The supervisor reaps
    every child itself, so the exit is awaited by polling, not by wait()."""
    with contextlib.suppress(ProcessLookupError, ChildProcessError):
        proc.terminate()
        deadline = time.monotonic() + STOP_GRACE
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
