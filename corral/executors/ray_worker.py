"""The Ray actor that carries out one worker of a gang on the node corral chose.

It does no supervising of its own: the attempt's supervisor (ray_supervisor.py) drives it.
`start` hands the worker to a host process (ray_host.py) and waits until it runs; `poll`
returns the worker's exit code, whether anything of it still lives, and the log bytes after an
offset; `signal` signals the worker's process group.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from corral.executors.local import free_ports
from corral.executors.rundir import ProcessRef, read_json, write_json_atomic

START_TIMEOUT = 30.0  # seconds for the host to start the worker (a Python start, a fork)
LOG_CHUNK = 1 << 20  # at most this many log bytes per poll: the supervisor asks again


class WorkerActor:
    def __init__(self) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="corral-worker-"))
        self.host: ProcessRef | None = None
        self.worker: ProcessRef | None = None

    def free_ports(self, count: int) -> list[int]:
        return free_ports(count, host="")

    def start(self, launch: dict[str, Any], index: int, run_marker: str, hide: list[str]) -> None:
        data = {"launch": launch, "index": index, "run_marker": run_marker, "hide": hide}
        write_json_atomic(self.work / "launch.json", data)
        argv = [sys.executable, "-m", "corral.executors.ray_host", str(self.work), str(os.getpid())]
        # The first process forks the host and exits; the host runs out of Ray's reach.
        subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
        deadline = time.monotonic() + START_TIMEOUT
        while self.worker is None and not (self.work / "exit.json").exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the worker did not start in {START_TIMEOUT:g}s")
            time.sleep(0.005)
            self.worker = self._ref("worker.json")
        self.host = self._ref("host.json")

    def poll(self, offset: int) -> tuple[int | None, bool, bytes]:
        """(exit code or None, whether anything of the worker lives, log bytes from `offset`).
        The host lives until all of the worker is gone."""
        done = read_json(self.work / "exit.json")
        alive = self.host is not None and self.host.is_alive()
        try:
            with open(self.work / "worker.log", "rb") as f:
                f.seek(offset)
                chunk = f.read(LOG_CHUNK)
        except FileNotFoundError:
            chunk = b""
        return (None if done is None else done["code"]), alive, chunk

    def signal(self, sig: int) -> None:
        if self.worker is not None:
            self.worker.signal_group(sig)

    def cleanup(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)

    def _ref(self, name: str) -> ProcessRef | None:
        data = read_json(self.work / name)
        return None if data is None else ProcessRef.from_dict(data)
