"""The Ray actor that carries out one worker of a gang on the node corral chose.

It does no supervising of its own: the attempt's supervisor (ray_supervisor.py) drives it.
Most actors are pooled (ray_pool.py): detached, started ahead of time on every node and reused
from one attempt to the next, so a launch does not wait for a Ray worker process to start.
The actor never runs a job's code itself, so nothing of a job can stay in it: each attempt's
worker is started by a host process (ray_host.py), itself started ahead of time, one per
attempt, and gone with everything the worker started when the attempt is released.

- `claim(owner, until)` takes the actor for one attempt (None if another has it, or if the
  claim comes after `until`, the wall time its caller stops waiting for the answer); every
  later call names its owner, and a call from another is refused (LeaseLost);
- `start` hands the worker to the host and waits until its process exists; `poll` returns the
  worker's exit code, whether anything of it still lives, and the log bytes after an offset;
  `signal` signals the worker's process group;
- `release(owner)` ends the attempt: the host kills whatever is left of it and exits, the
  work directory goes, and a fresh host and directory wait for the next attempt;
- the owner's calls are its lease: a supervisor polls a started worker several times a
  second, so one that goes LEASE seconds without a call is gone (killed), and the actor
  releases itself. Before the start, while the supervisor places the rest of its gang (Ray
  may take its PLACE_TIMEOUT and CALL_TIMEOUT), the lease is CLAIM_LEASE.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from corral.executors.local import free_ports
from corral.executors.rundir import ProcessRef, read_json, write_json_atomic

START_TIMEOUT = 30.0  # seconds for the host to start the worker (it may still be starting)
LOG_CHUNK = 1 << 20  # at most this many log bytes per poll: the supervisor asks again
LEASE = 10.0  # seconds without a call from its owner before an actor releases itself
CLAIM_LEASE = 120.0  # the same, for an actor claimed but not started yet
HOST_EXIT_WAIT = 10.0  # seconds for a released host to kill its worker and exit


class LeaseLost(Exception):
    """The caller does not own this actor (any more): its attempt is over here."""


class WorkerActor:
    def __init__(self) -> None:
        self.lock = threading.Lock()  # calls run on several threads (max_concurrency)
        self.owner: str | None = None
        self.seen = 0.0  # monotonic time of the owner's last call
        self.calls = 0  # the owner's calls in progress
        self.retired = False
        self.started_for: str | None = None  # the owner of the last worker started
        self._prepare()
        threading.Thread(target=self._watch_lease, daemon=True).start()

    # --- the attempt's calls ----------------------------------------------------------------

    def claim(self, owner: str, until: float) -> int | None:
        """Take the actor for `owner`'s attempt: its pid, or None if it is taken (or the
        claim comes too late: its caller has moved on)."""
        with self.lock:
            if self.owner is not None or self.retired or time.time() > until:
                return None
            self.owner, self.seen = owner, time.monotonic()
            return os.getpid()

    def free_ports(self, owner: str, count: int) -> list[int]:
        with self._owned(owner):
            return free_ports(count, host="")

    def start(
        self, owner: str, launch: dict[str, Any], index: int, run_marker: str, hide: list[str]
    ) -> None:
        with self._owned(owner):
            data = {"launch": launch, "index": index, "run_marker": run_marker, "hide": hide}
            write_json_atomic(self.work / "launch.json", data)
            os.write(self.order, b"go\n")  # the host is waiting for it
            self.started_for = owner
            deadline = time.monotonic() + START_TIMEOUT
            while self.worker is None and not (self.work / "exit.json").exists():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the worker did not start in {START_TIMEOUT:g}s")
                time.sleep(0.002)
                self.worker = self._ref("worker.json")

    def poll(self, owner: str, offset: int) -> tuple[int | None, bool, bytes]:
        """(exit code or None, whether anything of the worker lives, log bytes from `offset`).
        The host lives until all of the worker is gone."""
        with self._owned(owner):
            # The host before its exit: a host seen gone wrote exit.json before it went.
            host = self._ref("host.json")
            alive = host is not None and host.is_alive()
            done = read_json(self.work / "exit.json")
            try:
                with open(self.work / "worker.log", "rb") as f:
                    f.seek(offset)
                    chunk = f.read(LOG_CHUNK)
            except FileNotFoundError:
                chunk = b""
            return (None if done is None else done["code"]), alive, chunk

    def signal(self, owner: str, sig: int) -> None:
        with self._owned(owner):
            if self.worker is not None:
                self.worker.signal_group(sig)

    def release(self, owner: str, reuse: bool = True) -> None:
        """The attempt is over here: nothing of it is left, and (reuse) the actor is ready
        for the next one."""
        with self.lock:
            if self.owner != owner:
                return
            self._end_attempt(reuse)

    # --- the pool's calls -------------------------------------------------------------------

    def ping(self) -> None:
        """Nothing: a driver's first call, made ahead (ray_pool.prefetch)."""

    def retire(self) -> bool:
        """Refuse every later claim if no attempt has the actor: True if it may be killed."""
        with self.lock:
            self.retired = self.retired or self.owner is None
            return self.retired

    # --- internals --------------------------------------------------------------------------

    def _prepare(self) -> None:
        """A fresh work directory and a host waiting in it for its `go` (ray_host.py)."""
        self.work = Path(tempfile.mkdtemp(prefix="corral-worker-"))
        self.worker: ProcessRef | None = None
        read, self.order = os.pipe()
        argv = [sys.executable, "-m", "corral.executors.ray_host", str(self.work), str(os.getpid())]
        # It forks the host and exits; the host runs out of Ray's reach. Reaped at release.
        self.launcher = subprocess.Popen(argv, stdin=read, stdout=subprocess.DEVNULL)
        os.close(read)

    def _end_attempt(self, reuse: bool) -> None:
        """The host sees its order pipe close, kills the worker's group and all it started,
        and exits; then the work directory goes. Called with the lock held."""
        os.close(self.order)
        self.launcher.wait()  # it wrote host.json before it exited
        host = self._ref("host.json")
        deadline = time.monotonic() + HOST_EXIT_WAIT
        while host is not None and host.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.worker is not None:  # the host is gone: a worker it could not kill is not left
            self.worker.signal_group(signal.SIGKILL)
        shutil.rmtree(self.work, ignore_errors=True)
        self.owner = None
        if reuse and not self.retired:
            self._prepare()

    def _watch_lease(self) -> None:
        while True:
            time.sleep(1.0)
            with self.lock:
                lease = LEASE if self.started_for == self.owner else CLAIM_LEASE
                late = time.monotonic() - self.seen > lease
                if self.owner is not None and self.calls == 0 and late:
                    print(f"lease of {self.owner} ran out: releasing", flush=True)
                    self._end_attempt(reuse=True)

    def _owned(self, owner: str) -> _OwnerCall:
        return _OwnerCall(self, owner)

    def _ref(self, name: str) -> ProcessRef | None:
        data = read_json(self.work / name)
        return None if data is None else ProcessRef.from_dict(data)


class _OwnerCall:
    """A call from the actor's owner: refused from anyone else, and it renews the lease."""

    def __init__(self, actor: WorkerActor, owner: str) -> None:
        self.actor, self.owner = actor, owner

    def __enter__(self) -> None:
        with self.actor.lock:
            if self.actor.owner != self.owner:
                raise LeaseLost(f"this worker's actor is not {self.owner}'s (any more)")
            self.actor.calls += 1
            self.actor.seen = time.monotonic()

    def __exit__(self, *_: object) -> None:
        with self.actor.lock:
            self.actor.calls -= 1
            self.actor.seen = time.monotonic()
