"""The process that holds one worker of a gang on a Ray node.

Its actor (ray_worker.py) runs `python -m corral.executors.ray_host DIR ACTOR_PID` ahead of the
attempt, with its stdin the actor's order pipe; it forks at once, writes DIR/host.json (the
host's ProcessRef) and the parent exits, so the host is nobody's child in Ray: Ray kills an
actor's own children when the actor dies, but would leave the worker (a session of its own)
running. The host waits for `go` on the order pipe (DIR/launch.json is written by then), then:

- starts the worker as the local supervisor does (start_worker_process: its account, workdir
  and env), output to DIR/worker.log;
- writes DIR/worker.json (the worker's ProcessRef; its pid is its process group) and, when the
  worker exits, DIR/exit.json ({"code"});
- is a child subreaper, so what the worker orphans is reparented to it and reaped here;
- watches its actor (a pidfd) and the order pipe: if the actor dies (ray.kill, the node's
  raylet gone) or closes the pipe (the attempt is released), it SIGKILLs the worker's group and
  every descendant, so no process of a dead attempt survives on the node;
- exits once the worker's group is empty, killing whatever escaped it (setsid) on the way out.
"""

from __future__ import annotations

import os
import select
import signal
import sys
from pathlib import Path

from corral.executors.base import Launch
from corral.executors.runas import WorkerSetupError
from corral.executors.rundir import ProcessRef, read_json, write_json_atomic
from corral.executors.supervisor import (
    SPAWN_FAILED,
    become_subreaper,
    kill_escaped_descendants,
    start_worker_process,
)

TICK = 0.1  # seconds between looks at the worker's group while it lives


def worker_base_env() -> dict[str, str]:
    """The node's environment as the raylet was started, without what Ray set for the actor
    (a job that calls ray.init() itself must not attach as this actor)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    # Ray must not overwrite corral's CUDA_VISIBLE_DEVICES in anything the job starts.
    env["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"] = "1"
    return env


def kill_everything(worker: ProcessRef | None) -> None:
    if worker is not None:
        worker.signal_group(signal.SIGKILL)
    kill_escaped_descendants()


def host(work: Path, actor: int, order: int) -> int:
    # Not SIG_IGN: an ignored signal stays ignored across exec, and the worker's shell could
    # then not even trap SIGTERM. A handler is reset to the default in the worker.
    signal.signal(signal.SIGTERM, lambda *_: None)
    become_subreaper()
    try:
        actor_fd = os.pidfd_open(actor)
    except ProcessLookupError:
        return 1  # the actor is already gone: start nothing
    ready, _, _ = select.select([actor_fd, order], [], [])
    if actor_fd in ready or os.read(order, 3) != b"go\n":
        return 0  # the actor died or let us go before the attempt: start nothing
    data = read_json(work / "launch.json")
    launch, index = Launch.from_dict(data["launch"]), data["index"]
    # The state dir is out of the job's sight where this node has it (one shared with the
    # control plane's host); elsewhere there is nothing to hide.
    hide = [path for path in data["hide"] if os.path.exists(path)]
    with open(work / "worker.log", "ab") as out:
        try:
            proc = start_worker_process(
                launch, index, out, data["run_marker"], hide, base_env=worker_base_env()
            )
        except WorkerSetupError as err:
            # The worker's log is where its user will look for why it did not run.
            out.write(f"corral: {err}\n".encode())
            write_json_atomic(work / "exit.json", {"code": SPAWN_FAILED})
            return SPAWN_FAILED
    worker = ProcessRef.of(proc.pid)
    write_json_atomic(work / "worker.json", worker.to_dict())
    code = None
    while code is None or worker.group_exists():
        ready, _, _ = select.select([actor_fd, order], [], [], TICK)
        if ready:  # the actor died or closed the pipe: the attempt is over on this node
            kill_everything(worker)
            return 1
        for pid, status in reap_children():
            if pid == proc.pid:
                code = os.waitstatus_to_exitcode(status)
                write_json_atomic(work / "exit.json", {"code": code})
    kill_escaped_descendants()
    return 0


def reap_children() -> list[tuple[int, int]]:
    """(pid, wait status) of every exited child: the worker, and orphans reparented to us."""
    reaped = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped.append((pid, status))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    work, actor = Path(args[0]), int(args[1])
    written, written_end = os.pipe()
    child = os.fork()
    if child:
        # The actor's child exits at once; the host lives on, out of Ray's reach.
        write_json_atomic(work / "host.json", ProcessRef.of(child).to_dict())
        return 0
    # The host acts only once host.json is there (EOF: its parent has exited): a worker it
    # started before would be polled as one whose host is gone.
    os.close(written_end)
    os.read(written, 1)
    os.close(written)
    os.setsid()
    order = os.dup(0)  # the actor's order pipe, kept off the worker's fds (dup is CLOEXEC)
    # Our stdout is the actor's; nothing more may go there, or the actor would block.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os._exit(host(work, actor, order))


if __name__ == "__main__":
    sys.exit(main())
