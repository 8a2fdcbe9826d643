"""The supervisor: one small detached process per attempt that owns the attempt's gang.

Run as `python -m corral.executors.supervisor RUN_DIR`. It lives in its own session, so it and
its workers keep running when the control plane dies; it writes the attempt's fate to
status.json, which any later control plane reads (see rundir.py for the files).

Each worker leads its own process group (a session, in fact), so one killpg reaches everything
the worker started that did not deliberately leave the group. The supervisor is also a child
subreaper, so orphaned grandchildren are reparented to it and reaped here, and anything that
escaped its group with setsid is still found among our descendants and killed at the end.
"""

from __future__ import annotations

import abc
import contextlib
import ctypes
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

import psutil

from corral.executors import cryptproxy
from corral.executors.base import FAILED, SUCCEEDED, TERMINATED, TIMEOUT, AttemptExit, Launch
from corral.executors.runas import WorkerSetupError, not_dumpable, worker_process
from corral.executors.rundir import (
    RUN_MARKER,
    ProcessRef,
    RunDir,
    kill_groups,
    read_json,
    write_json_atomic,
)

log = logging.getLogger("corral.supervisor")

STOPPING_TICK = 0.05  # how often to look whether killed groups have emptied
LOG_MAX_BYTES = 64 << 20  # per worker log; the previous 64 MiB are kept as worker-N.log.1
IDLE_TICK = 5.0  # safety wake-up while running; signals normally wake us first
KILL_WAIT = 5.0  # after SIGKILL, how long to wait for the kernel before recording anyway
SPAWN_FAILED = 127  # the shell's code for "command not found"
PR_SET_CHILD_SUBREAPER = 36


@dataclass(slots=True)
class Signals:
    """What the signal handlers tell the loop: a stop was asked for, and a fd to wake on."""

    wake_fd: int
    stop_requested: bool = False

    def handle(self, signum: int, _frame: object) -> None:
        # SIGCHLD only needs to wake the loop, which the wakeup fd already does.
        if signum != signal.SIGCHLD:
            self.stop_requested = True

    @classmethod
    def install(cls) -> Signals:
        """Installed before anything else, so an early terminate() is not lost."""
        read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        # The C-level handler writes every caught signal to write_fd, so a signal arriving
        # just before select() still makes it return at once.
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        signals = cls(read_fd)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signals.handle)
        return signals


class Gang(abc.ABC):
    """When a gang's attempt is over and with what outcome: what the local supervisor and the
    Ray one share. A subclass starts the workers, calls record_exit as each one ends, and says
    how to signal the workers that are left (signal_all) and whether any is (workers_gone)."""

    def __init__(self, run: RunDir, launch: Launch, signals: Signals) -> None:
        self.run = run
        self.launch = launch
        self.signals = signals
        self.codes: list[int | None] = [None] * len(launch.workers)
        self.first_failed: int | None = None
        self.outcome: str | None = None  # set when the gang starts stopping
        self.message = ""  # why, when the attempt ended for a reason of corral's
        self.kill_at = 0.0  # monotonic time to SIGKILL the workers, once stopping
        self.give_up_at: float | None = None  # set once SIGKILL was sent
        self.deadline: float | None = None  # monotonic end of max_runtime

    @abc.abstractmethod
    def signal_all(self, sig: int) -> None:
        """Send sig to every worker still there, and to what it started."""

    @abc.abstractmethod
    def workers_gone(self) -> bool:
        """No worker, nor anything it started, is left."""

    def record_exit(self, index: int, code: int) -> None:
        self.codes[index] = code
        log.info("worker %d exited with %d", index, code)
        # Exits after the gang started stopping are our own kills, not the cause.
        if code != 0 and self.outcome is None and self.first_failed is None:
            self.first_failed = index

    def advance(self) -> None:
        if self.outcome is None:
            outcome = self.natural_outcome()
            if outcome is not None:
                self.stop(outcome, self.launch.grace)
        if self.signals.stop_requested:
            # After the natural outcome: a gang that already ended on its own ended that way.
            self.signals.stop_requested = False
            self.stop(TERMINATED, self.requested_grace())
        if (
            self.outcome is not None
            and self.give_up_at is None
            and time.monotonic() >= self.kill_at
        ):
            log.info("grace over: SIGKILL to the gang")
            self.signal_all(signal.SIGKILL)
            self.give_up_at = time.monotonic() + KILL_WAIT

    def natural_outcome(self) -> str | None:
        if self.first_failed is not None:
            return FAILED
        if all(code == 0 for code in self.codes):
            # Every worker exited 0; whatever they left behind is still stopped.
            return SUCCEEDED
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return TIMEOUT
        return None

    def requested_grace(self) -> float:
        grace = (read_json(self.run.file("stop.json")) or {}).get("grace")
        return self.launch.grace if grace is None else float(grace)

    def stop(self, outcome: str, grace: float) -> None:
        now = time.monotonic()
        if self.outcome is not None and self.kill_at:
            # Already stopping; a repeated request may only make the wait shorter.
            self.kill_at = min(self.kill_at, now + grace)
            return
        self.outcome = self.outcome or outcome  # an outcome of corral's (lost) stands
        self.kill_at = now + grace
        self.signal_all(signal.SIGTERM)
        log.info("gang %s; SIGTERM to the workers, SIGKILL in %.1fs", self.outcome, grace)

    def settled(self) -> bool:
        if self.outcome is None:
            return False
        if self.give_up_at is not None and time.monotonic() >= self.give_up_at:
            log.warning("workers survive SIGKILL (uninterruptible?); recording anyway")
            return True
        return self.workers_gone()

    def record_result(self) -> AttemptExit:
        """Write the attempt's status.json, which tells the control plane it is over."""
        assert self.outcome is not None  # settled() holds
        exit_code = None
        if self.outcome == SUCCEEDED:
            exit_code = 0
        elif self.outcome == FAILED and self.first_failed is not None:
            exit_code = self.codes[self.first_failed]
        result = AttemptExit(
            job_id=self.launch.job_id,
            attempt=self.launch.attempt,
            outcome=self.outcome,
            exit_code=exit_code,
            worker_codes=list(self.codes),
            finished_at=time.time(),
            message=self.message,
        )
        write_json_atomic(self.run.file("status.json"), result.to_dict())
        log.info("attempt %s: exit code %s, workers %s", result.outcome, exit_code, self.codes)
        return result


class Supervisor(Gang):
    def __init__(self, run: RunDir, launch: Launch, signals: Signals) -> None:
        super().__init__(run, launch, signals)
        n = len(launch.workers)
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * n
        self.refs: list[ProcessRef] = []  # started workers = their process groups
        self.running: dict[int, int] = {}  # pid -> worker index, until reaped
        self.crypt_proxy: subprocess.Popen[bytes] | None = None

    # --- starting ---------------------------------------------------------------------------

    def start_workers(self) -> None:
        if self.launch.max_runtime is not None:
            self.deadline = time.monotonic() + self.launch.max_runtime
        if self.launch.crypt_proxy and not self.start_crypt_proxy():
            return
        for index in range(len(self.launch.workers)):
            # A stop requested while starting must not start the rest of the gang.
            if self.signals.stop_requested or self.first_failed is not None:
                return
            self.start_worker(index)

    def start_worker(self, index: int) -> None:
        with open(self.run.worker_log(index), "ab") as out:
            try:
                proc = start_worker_process(
                    self.launch, index, out, str(self.run.path), hide=[str(self.run.state_dir)]
                )
            except WorkerSetupError as err:
                self.not_started(index, out, str(err))
                return
        self.procs[index] = proc
        self.running[proc.pid] = index
        self.refs.append(ProcessRef.of(proc.pid))
        # Recorded after every start: if we die mid-gang, terminate() can still find them all.
        write_json_atomic(self.run.file("workers.json"), [r.to_dict() for r in self.refs])
        log.info("worker %d started, pid %d", index, proc.pid)

    def start_crypt_proxy(self) -> bool:
        """The job's encrypting storage gateway, up before any worker needs it."""
        try:
            log_path = self.run.file("crypt-proxy.log")
            self.crypt_proxy, env = cryptproxy.start(
                self.launch, log_path, [str(self.run.state_dir)]
            )
        except (WorkerSetupError, OSError) as err:
            with open(self.run.worker_log(0), "ab") as out:
                self.not_started(0, out, str(err))
            return False
        self.launch = replace(self.launch, env={**self.launch.env, **env})
        log.info("crypt proxy started, pid %d: %s", self.crypt_proxy.pid, env["CORRAL_CRYPT_PROXY"])
        return True

    def not_started(self, index: int, out: BinaryIO, why: str) -> None:
        # The worker's log is where its user will look for why it did not run.
        out.write(f"corral: {why}\n".encode())
        self.codes[index] = SPAWN_FAILED
        self.first_failed = index
        log.error("worker %d did not start: %s", index, why)

    # --- the loop ---------------------------------------------------------------------------

    def supervise(self) -> AttemptExit:
        self.start_workers()
        logs_checked = time.monotonic()
        while True:
            self.reap()
            self.advance()
            if self.settled():
                return self.finish()
            if time.monotonic() - logs_checked >= IDLE_TICK:
                logs_checked = time.monotonic()
                self.cap_logs()
            self.sleep()

    def cap_logs(self) -> None:
        """Keep each worker log under LOG_MAX_BYTES: copy it to worker-N.log.1 (replacing the
        previous one) and truncate it, as logrotate's copytruncate does (the worker keeps
        its file open in append mode, so it goes on writing at the new end). What a worker
        writes between the copy and the truncation is lost; at most 2 x LOG_MAX_BYTES stay."""
        for index in range(len(self.launch.workers)):
            path = self.run.worker_log(index)
            try:
                if path.stat().st_size <= LOG_MAX_BYTES:
                    continue
                shutil.copyfile(path, path.with_name(path.name + ".1"))
                os.truncate(path, 0)
            except OSError as err:
                log.warning("worker %d log not capped: %s", index, err)

    def reap(self) -> None:
        """Collect every exited child: workers, and orphans reparented to us."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            index = self.running.pop(pid, None)
            if index is not None:
                self.record_exit(index, os.waitstatus_to_exitcode(status))

    def record_exit(self, index: int, code: int) -> None:
        proc = self.procs[index]
        if proc is not None:
            proc.returncode = code  # we reaped it; Popen must not wait for it again
        super().record_exit(index, code)

    def signal_all(self, sig: int) -> None:
        kill_groups(self.refs, sig)

    def workers_gone(self) -> bool:
        return not self.running and not any(ref.group_exists() for ref in self.refs)

    def sleep(self) -> None:
        timeout = IDLE_TICK
        if self.outcome is not None:
            timeout = STOPPING_TICK
        elif self.deadline is not None:
            timeout = max(0.0, min(timeout, self.deadline - time.monotonic()))
        ready, _, _ = select.select([self.signals.wake_fd], [], [], timeout)
        if ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(self.signals.wake_fd, 512):
                    pass

    def finish(self) -> AttemptExit:
        if self.crypt_proxy is not None:
            cryptproxy.stop(self.crypt_proxy)
        kill_escaped_descendants()
        self.reap()
        return self.record_result()


def start_worker_process(
    launch: Launch,
    index: int,
    out: BinaryIO,
    run_marker: str,
    hide: list[str],
    base_env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start worker `index` of `launch` in a session of its own, as its user, in its workdir
    (runas.py), output to `out`: how every executor starts a worker (the local supervisor
    here, the Ray executor's host on a node). Raises WorkerSetupError, one line for the
    worker's log, when it cannot start."""
    # As its user, in its workdir, with the state dir out of its sight (runas.py).
    worker = worker_process(launch, index, hide=hide, base_env=base_env)
    worker.env[RUN_MARKER] = run_marker
    try:
        return subprocess.Popen(
            worker.args,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **worker.popen_kwargs(),
        )
    except (OSError, ValueError, subprocess.SubprocessError) as err:
        raise WorkerSetupError(f"cannot start {worker.args[0]!r}: {err}") from None


def kill_escaped_descendants() -> None:
    """SIGKILL what a worker moved out of its process group (setsid); as subreaper we
    inherited it, so it is still among our descendants. Waited for, so no zombie is left."""
    escaped = psutil.Process().children(recursive=True)
    for proc in escaped:
        with contextlib.suppress(psutil.Error):
            log.info("killing escaped process %d (%s)", proc.pid, proc.name())
            proc.kill()
    psutil.wait_procs(escaped, timeout=1.0)


def become_subreaper() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_CHILD_SUBREAPER): errno %d", ctypes.get_errno())
    except (OSError, AttributeError) as err:  # not Linux
        log.warning("cannot become a subreaper: %s", err)


def claim(run: RunDir) -> bool:
    """Take the attempt for this supervisor alone: a launch cut short by a crash is launched
    again, and if its first supervisor was starting after all, only one of the two may run."""
    try:
        os.close(os.open(run.file("supervisor.claim"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m corral.executors.supervisor RUN_DIR", file=sys.stderr)
        return 2
    signals = Signals.install()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s supervisor[%(process)d] %(levelname)s %(message)s"
    )
    run = RunDir.from_path(Path(args[0]))
    if not claim(run):
        log.info("another supervisor has this attempt; nothing to do")
        return 0
    become_subreaper()
    not_dumpable()
    write_json_atomic(run.file("supervisor.pid"), ProcessRef.of(os.getpid()).to_dict())
    if run.file("status.json").exists():
        log.info("attempt already has a status; nothing to do")
        return 0
    refs: list[ProcessRef] = []
    try:
        launch = Launch.from_dict(read_json(run.file("launch.json")))
        # terminate() may have run before our handler existed; its request is on disk.
        signals.stop_requested |= run.file("stop.json").exists()
        supervisor = Supervisor(run, launch, signals)
        refs = supervisor.refs
        supervisor.supervise()
    except Exception as err:
        # Without us nobody would ever reap or stop them. Recorded as a failure with the
        # reason (it counts against max_restarts), not left to be found "lost" and requeued
        # forever.
        log.exception("supervisor failed; killing the gang")
        kill_groups(refs, signal.SIGKILL)
        record_failure(run, f"the supervisor failed: {type(err).__name__}: {err}")
        return 1
    return 0


def record_failure(run: RunDir, message: str) -> None:
    launch = read_json(run.file("launch.json")) or {}
    workers = len(launch.get("workers", []))
    result = AttemptExit(
        run.job_id, run.attempt, FAILED, None, [None] * workers, time.time(), message
    )
    write_json_atomic(run.file("status.json"), result.to_dict())


if __name__ == "__main__":
    sys.exit(main())
