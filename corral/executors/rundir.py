"""The on-disk protocol between the control plane and a detached supervisor.

One directory per attempt, `STATE/runs/JOB/ATTEMPT/`:

- launch.json      the resolved Launch (ports picked); written once by launch()
- supervisor.pid   {"pid", "create_time"} of the supervisor (written by both sides)
- workers.json     [{"pid", "create_time"}] of each worker started so far; each worker is the
                   leader of its own process group, so pid == pgid
- stop.json        {"grace"}: a stop was requested (terminate())
- status.json      the AttemptExit, written once when the attempt is over
- acked            the control plane has recorded the exit; poll() no longer reports it
- supervisor.log   the supervisor's own stdout/stderr

Worker logs live apart, in `STATE/logs/JOB/ATTEMPT/worker-N.log`, so runs/ stays small.
Every JSON file is written atomically (tmp file, fsync, rename) because either side may be
killed at any instant and the other must never read half a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

# psutil derives create times from the boot time, which the kernel recomputes from the wall
# clock; it can drift by a second. A pid reused within a second of the original process's start
# would need the whole pid space to wrap in that second, so this tolerance keeps the check safe.
CREATE_TIME_TOLERANCE = 1.0
# Set in every worker's environment to its run directory, and inherited by whatever it starts:
# the way to find a gang whose supervisor died before it could record the workers' pids.
RUN_MARKER = "CORRAL_RUN_DIR"


@dataclass(frozen=True, slots=True)
class RunDir:
    state_dir: Path
    job_id: str
    attempt: int

    @classmethod
    def from_path(cls, path: Path) -> RunDir:
        path = path.resolve()
        return cls(path.parents[2], path.parent.name, int(path.name))

    @property
    def path(self) -> Path:
        return self.state_dir / "runs" / self.job_id / str(self.attempt)

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs" / self.job_id / str(self.attempt)

    def worker_log(self, index: int) -> Path:
        return self.log_dir / f"worker-{index}.log"

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def key(self) -> tuple[str, int]:
        return self.job_id, self.attempt


def write_json_atomic(path: Path, data: Any) -> None:
    """Replace `path` with `data` so a reader sees the old file or the whole new one, even
    across a power cut (fsync of the file before the rename, of the directory after)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_json(path: Path) -> Any | None:
    """The file's content, or None if it does not exist."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


@dataclass(frozen=True, slots=True)
class ProcessRef:
    """A process named by pid *and* start time, so a recycled pid is never mistaken for it."""

    pid: int
    create_time: float

    @classmethod
    def of(cls, pid: int) -> ProcessRef:
        return cls(pid, psutil.Process(pid).create_time())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProcessRef:
        return cls(int(data["pid"]), float(data["create_time"]))

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "create_time": self.create_time}

    def _same_pid_is_other(self) -> bool:
        """True if `pid` now belongs to a different process than the one recorded."""
        try:
            other = psutil.Process(self.pid).create_time()
        except psutil.NoSuchProcess:
            return False
        return abs(other - self.create_time) > CREATE_TIME_TOLERANCE

    def is_alive(self) -> bool:
        """Running and not a zombie (a dead child its parent has not reaped yet)."""
        try:
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.create_time) > CREATE_TIME_TOLERANCE:
                return False
            return proc.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def signal_group(self, sig: int) -> bool:
        """Send `sig` to the process group this process leads; False if the group is gone.

        The leader may have exited while members of its group live on. That is safe: Linux
        does not hand out a pid while a process group with that id exists, so if no other
        process holds the pid now, the group with that id is still ours.
        """
        if self._same_pid_is_other():
            return False
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def group_exists(self) -> bool:
        return self.signal_group(0)


def kill_groups(refs: list[ProcessRef], sig: int = signal.SIGKILL) -> None:
    for ref in refs:
        with contextlib.suppress(OSError):
            ref.signal_group(sig)


def marked_processes(run_path: Path) -> list[psutil.Process]:
    """Live processes whose environment marks them as part of this run. Reads every process's
    environment, so it is kept for the rare case of a gang that lost its supervisor."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):  # gone, a zombie, or another user's
            if proc.environ().get(RUN_MARKER) == str(run_path):
                found.append(proc)
    return found
