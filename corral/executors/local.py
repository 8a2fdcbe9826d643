"""The local executor: runs each attempt's gang as subprocesses on this machine.

The control plane never owns a worker. launch() starts a detached supervisor (supervisor.py)
per attempt and everything else goes through the attempt's run directory (rundir.py), so a
control plane that is killed and restarted picks up exactly where the old one left off: disk is
the truth, and the in-memory state here is only an index of it rebuilt by the constructor.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil

from corral.executors.base import LOST, TERMINATED, AttemptExit, Launch
from corral.executors.rundir import (
    ProcessRef,
    RunDir,
    kill_groups,
    marked_processes,
    read_json,
    write_json_atomic,
)

log = logging.getLogger(__name__)

# A run directory without supervisor.pid is a launch the previous control plane did not finish;
# the supervisor writes its own pid as it starts, so after this long it is never coming.
STARTUP_TIMEOUT = 30.0
# Job ids become directory names: nothing that could climb out of the state dir.
JOB_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


class LocalExecutor:
    """Executor (base.py) for this machine. Calls from several threads are safe in CPython:
    the shared set and dict are only touched by single, atomic operations."""

    def __init__(self, state_dir: Path) -> None:
        # Absolute, so the run paths match what the supervisor (and RUN_MARKER) sees.
        self.state_dir = Path(state_dir).resolve()
        (self.state_dir / "runs").mkdir(parents=True, exist_ok=True)
        # Supervisors started by this instance, kept so their exit is reaped (no zombies).
        self._children: dict[tuple[str, int], subprocess.Popen[bytes]] = {}
        # Attempts not yet acked: all poll() and active() look at, so a poll costs O(pending)
        # however many attempts the state dir has seen.
        self._pending: set[tuple[str, int]] = set(self._scan_unacked())

    # --- Executor interface -----------------------------------------------------------------

    def launch(self, launch: Launch) -> None:
        launch.validate()
        run = self._run(launch.job_id, launch.attempt)
        run.path.parent.mkdir(parents=True, exist_ok=True)
        launch = self._resolve(launch)
        relaunch = not self._create_run_dir(run, launch)
        if relaunch:
            if run.file("supervisor.pid").exists() or run.file("status.json").exists():
                log.info("attempt %s/%d already launched", launch.job_id, launch.attempt)
                return
            # An earlier launch was cut short before any supervisor recorded itself (the
            # control plane died in between): start one now. Should the first be starting
            # after all, the two race for the attempt's claim and the loser leaves.
            log.warning("attempt %s/%d: launch was cut short; launching", *run.key)
            if not run.file("launch.json").exists():  # left by a version without _create_run_dir
                write_json_atomic(run.file("launch.json"), launch.to_dict())
        run.log_dir.mkdir(parents=True, exist_ok=True)
        proc = self._start_supervisor(run)
        self._children[run.key] = proc
        self._pending.add(run.key)
        # The supervisor writes this too, but only once Python has started; writing it here
        # means poll() never sees a pid-less attempt launched by this instance. Not on a
        # relaunch: this one may lose the claim, and the winner writes its own (until then
        # the fresh launch.json gives it the startup grace).
        if not relaunch:
            write_json_atomic(run.file("supervisor.pid"), ProcessRef.of(proc.pid).to_dict())

    # --- what another executor on the same run directories changes --------------------------

    def _resolve(self, launch: Launch) -> Launch:
        """The launch as launch.json records it: ports picked here, on this machine."""
        return with_ports(launch)

    def _start_supervisor(self, run: RunDir) -> subprocess.Popen[bytes]:
        with open(run.file("supervisor.log"), "ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "corral.executors.supervisor", str(run.path)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # detached: survives a SIGKILL of the control plane
            )

    @staticmethod
    def _create_run_dir(run: RunDir, launch: Launch) -> bool:
        """Create the run dir with its launch.json in one step (a directory built aside, then
        renamed into place), so no run dir is ever seen without one. False if it already
        existed: the attempt is launched at most once."""
        tmp = run.path.with_name(f".{run.attempt}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)  # a leftover of an earlier crash of ours
        tmp.mkdir()
        write_json_atomic(tmp / "launch.json", launch.to_dict())
        try:
            os.rename(tmp, run.path)  # replaces only an empty directory: exclusive
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            return False
        return True

    def terminate(self, job_id: str, attempt: int, grace: float | None = None) -> None:
        run = self._run(job_id, attempt)
        if not run.path.is_dir() or run.file("status.json").exists():
            return
        # On disk first: a supervisor still starting up, or one that died, is judged by it.
        write_json_atomic(run.file("stop.json"), {"grace": grace, "requested_at": time.time()})
        if not self._signal_supervisor(run):
            # Supervisor gone: _exit_of kills its workers and records "terminated".
            self._exit_of(run)

    def kill(self, job_id: str, attempt: int) -> None:
        run = self._run(job_id, attempt)
        if not run.path.is_dir() or run.file("status.json").exists():
            return
        # The supervisor first (SIGKILL reaches a stopped process too), then its gang:
        # poll() then finds it gone and records the attempt (terminated, after stop.json).
        ref = self._supervisor_ref(run)
        if ref is not None and ref.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(ref.pid, signal.SIGKILL)
        kill_groups([ProcessRef.from_dict(w) for w in read_json(run.file("workers.json")) or []])

    def poll(self) -> list[AttemptExit]:
        self._reap_children()
        exits = (self._exit_of(self._run(*key)) for key in sorted(self._pending))
        return [exit_ for exit_ in exits if exit_ is not None]

    def ack(self, job_id: str, attempt: int) -> None:
        run = self._run(job_id, attempt)
        if not run.file("status.json").exists():
            raise ValueError(f"attempt {job_id}/{attempt} has not ended; nothing to ack")
        write_json_atomic(run.file("acked"), {"acked_at": time.time()})
        self._pending.discard(run.key)

    def active(self) -> list[tuple[str, int]]:
        self._reap_children()
        runs = [self._run(*key) for key in sorted(self._pending)]
        return [
            run.key
            for run in runs
            if not run.file("status.json").exists() and self._supervisor_alive(run)
        ]

    def log_path(self, job_id: str, attempt: int, worker: int) -> Path:
        return self._run(job_id, attempt).worker_log(worker)

    def remove(self, job_id: str) -> None:
        run = self._run(job_id, 0)
        for path in (run.path.parent, run.log_dir.parent):
            shutil.rmtree(path, ignore_errors=True)

    # --- internals --------------------------------------------------------------------------

    def _run(self, job_id: str, attempt: int) -> RunDir:
        if not JOB_ID.fullmatch(job_id):
            raise ValueError(f"job id {job_id!r} is not usable as a directory name")
        return RunDir(self.state_dir, job_id, int(attempt))

    def _scan_unacked(self) -> list[tuple[str, int]]:
        keys = []
        for job_dir in (self.state_dir / "runs").iterdir():
            if not job_dir.is_dir():
                continue
            for attempt_dir in job_dir.iterdir():
                if attempt_dir.name.isdigit() and not (attempt_dir / "acked").exists():
                    keys.append((job_dir.name, int(attempt_dir.name)))
        return keys

    def _reap_children(self) -> None:
        for key, proc in list(self._children.items()):
            if proc.poll() is not None:
                self._children.pop(key, None)

    def _supervisor_ref(self, run: RunDir) -> ProcessRef | None:
        data = read_json(run.file("supervisor.pid"))
        return None if data is None else ProcessRef.from_dict(data)

    def _supervisor_alive(self, run: RunDir) -> bool:
        ref = self._supervisor_ref(run)
        if ref is None:
            started = run.file("launch.json") if run.file("launch.json").exists() else run.path
            return time.time() - started.stat().st_mtime < STARTUP_TIMEOUT
        return ref.is_alive()

    def _signal_supervisor(self, run: RunDir) -> bool:
        ref = self._supervisor_ref(run)
        if ref is None:
            # Still starting (it will find stop.json), or never coming (poll() handles it).
            return self._supervisor_alive(run)
        if not ref.is_alive():
            return False
        try:
            os.kill(ref.pid, signal.SIGTERM)
        except ProcessLookupError:
            return False
        return True

    def _exit_of(self, run: RunDir) -> AttemptExit | None:
        """The attempt's exit if it has ended, recording one if its supervisor died."""
        status = read_json(run.file("status.json"))
        if status is None and not self._supervisor_alive(run):
            # It may have written its status just before it died.
            status = read_json(run.file("status.json")) or self._record_orphan(run)
        return None if status is None else AttemptExit.from_dict(status)

    def _record_orphan(self, run: RunDir) -> dict:
        """The supervisor died without a status: stop its workers ourselves, since nobody else
        will and the server is about to give their devices to another job."""
        refs = [ProcessRef.from_dict(w) for w in read_json(run.file("workers.json")) or []]
        kill_groups(refs, signal.SIGKILL)
        # It may have died between starting a worker and recording it, and a worker may have
        # left its group: the environment marker finds those.
        for proc in marked_processes(run.path):
            with contextlib.suppress(psutil.Error):
                proc.kill()
        launch = read_json(run.file("launch.json"))
        outcome = TERMINATED if run.file("stop.json").exists() else LOST
        result = AttemptExit(
            job_id=run.job_id,
            attempt=run.attempt,
            outcome=outcome,
            exit_code=None,
            worker_codes=[None] * (len(launch["workers"]) if launch else 0),
            finished_at=time.time(),
        )
        log.warning("attempt %s/%d: supervisor gone, recorded %s", *run.key, outcome)
        write_json_atomic(run.file("status.json"), result.to_dict())
        return result.to_dict()


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports free right now. Another process may still take one before the
    job binds it; nothing short of the job binding it itself can prevent that."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:  # all held open at once, so the ports differ
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in socks]


def with_ports(launch: Launch) -> Launch:
    """A copy of `launch` with every port left at 0 resolved, so launch.json records it."""
    need_master = launch.master_port == 0
    need_megascale = launch.num_slices > 1 and launch.megascale_port == 0
    ports = iter(free_ports(need_master + need_megascale))
    return replace(
        launch,
        master_port=next(ports) if need_master else launch.master_port,
        megascale_port=next(ports) if need_megascale else launch.megascale_port,
    )
