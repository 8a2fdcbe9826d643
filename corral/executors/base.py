"""What the control plane hands an executor, what it gets back, and the interface between them.

An executor runs one *attempt* of a job (a job restarted or preempted runs again as the next
attempt) as a gang of worker processes. Everything here is plain data so it can be written to
disk and read back by a process that outlives the control plane.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

SUCCEEDED = "succeeded"
FAILED = "failed"
TERMINATED = "terminated"  # stopped on request (cancel, preemption)
TIMEOUT = "timeout"  # ran past max_runtime
LOST = "lost"  # the supervisor vanished without recording a status
OUTCOMES = frozenset({SUCCEEDED, FAILED, TERMINATED, TIMEOUT, LOST})


@dataclass(slots=True)
class WorkerLaunch:
    index: int
    slice_id: int
    node: str
    gpus: tuple[int, ...]


@dataclass(slots=True)
class Launch:
    job_id: str
    name: str
    project: str
    user: str
    attempt: int
    command: str | tuple[str, ...]  # str runs under /bin/sh -c; a tuple is argv
    env: dict[str, str]  # the user's env, added on top of the server's environment
    workers: list[WorkerLaunch]  # worker order: slice-major
    workers_per_slice: int
    num_slices: int
    master_addr: str = "127.0.0.1"
    master_port: int = 0  # 0: the executor picks a free port
    max_runtime: float | None = None  # seconds; the supervisor kills the gang after it
    grace: float = 30.0  # SIGTERM -> SIGKILL delay, for cancel/preempt/timeout
    # Port for MEGASCALE_PORT when num_slices > 1; 0: the executor picks a free port.
    megascale_port: int = 0
    # The Unix account the workers run as (runas.py); None: the executor's own user.
    account: str | None = None
    # Where the workers start; None: the account's home directory.
    workdir: str | None = None
    # `corral crypt-proxy` to start beside the workers: {"backend": URL, "keyring": path}.
    crypt_proxy: dict[str, str] | None = None

    def validate(self) -> None:
        """Raise ValueError if the gang's shape is inconsistent (a bug in the caller)."""
        expected = self.workers_per_slice * self.num_slices
        if not self.workers or len(self.workers) != expected:
            raise ValueError(
                f"job {self.job_id}: {len(self.workers)} workers given, "
                f"{self.num_slices} slices x {self.workers_per_slice} workers expected"
            )
        for position, worker in enumerate(self.workers):
            if worker.index != position:
                raise ValueError(f"job {self.job_id}: worker {position} has index {worker.index}")
            if worker.slice_id != position // self.workers_per_slice:
                raise ValueError(
                    f"job {self.job_id}: worker {position} is in slice {worker.slice_id}, "
                    "workers must be listed slice-major"
                )
        if isinstance(self.command, tuple) and not self.command:
            raise ValueError(f"job {self.job_id}: empty command")

    def contract_env(self, index: int) -> dict[str, str]:
        """The environment contract (DESIGN §4) of worker `index`; only corral's variables."""
        worker = self.workers[index]
        on_node = [w.index for w in self.workers if w.node == worker.node]
        env = {
            "CORRAL_JOB_ID": self.job_id,
            "CORRAL_JOB_NAME": self.name,
            "CORRAL_PROJECT": self.project,
            "CORRAL_USER": self.user,
            "CORRAL_ATTEMPT": str(self.attempt),
            "CORRAL_WORKER_INDEX": str(index),
            "CORRAL_NUM_WORKERS": str(len(self.workers)),
            "CORRAL_SLICE_ID": str(worker.slice_id),
            "CORRAL_NUM_SLICES": str(self.num_slices),
            "CUDA_VISIBLE_DEVICES": ",".join(str(gpu) for gpu in worker.gpus),
            "RANK": str(index),
            "WORLD_SIZE": str(len(self.workers)),
            "LOCAL_RANK": str(on_node.index(index)),
            "LOCAL_WORLD_SIZE": str(len(on_node)),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "JAX_COORDINATOR_ADDRESS": f"{self.master_addr}:{self.master_port}",
            "JAX_NUM_PROCESSES": str(len(self.workers)),
            "JAX_PROCESS_ID": str(index),
        }
        if self.num_slices > 1:
            env |= {
                "MEGASCALE_COORDINATOR_ADDRESS": self.master_addr,
                "MEGASCALE_NUM_SLICES": str(self.num_slices),
                "MEGASCALE_SLICE_ID": str(worker.slice_id),
                "MEGASCALE_PORT": str(self.megascale_port),
            }
        return env

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Launch:
        command = data["command"]
        workers = [
            WorkerLaunch(w["index"], w["slice_id"], w["node"], tuple(w["gpus"]))
            for w in data["workers"]
        ]
        # JSON turns the argv tuple into a list; a list must come back as argv, not as a string.
        return cls(
            **{
                **data,
                "command": command if isinstance(command, str) else tuple(command),
                "workers": workers,
            }
        )


@dataclass(slots=True)
class AttemptExit:
    job_id: str
    attempt: int
    outcome: str  # one of OUTCOMES
    # 0 on success; on failure the code of the first worker that failed (negative signal
    # number if a signal killed it); None when the gang was stopped or lost.
    exit_code: int | None
    worker_codes: list[int | None]  # None: the worker never started or was never reaped
    finished_at: float  # wall clock
    message: str = ""  # why, when the supervisor itself could not run the gang

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttemptExit:
        return cls(
            job_id=data["job_id"],
            attempt=data["attempt"],
            outcome=data["outcome"],
            exit_code=data["exit_code"],
            worker_codes=list(data["worker_codes"]),
            finished_at=data["finished_at"],
            message=data.get("message", ""),
        )


class Executor(Protocol):
    def launch(self, launch: Launch) -> None:
        """Start the attempt's gang and return at once. Launching the same attempt twice is a
        no-op, so a control plane that crashed mid-launch can simply launch again."""
        ...

    def terminate(self, job_id: str, attempt: int, grace: float | None = None) -> None:
        """Ask the attempt to stop (SIGTERM, `grace` seconds, SIGKILL). Idempotent; a second
        call with a shorter grace shortens the wait."""
        ...

    def kill(self, job_id: str, attempt: int) -> None:
        """SIGKILL the attempt's workers and whatever runs it, now: for an attempt that
        ignored terminate() past its grace. Its exit then shows up in poll()."""
        ...

    def poll(self) -> list[AttemptExit]:
        """Every ended attempt not yet acknowledged, including those that ended while no
        control plane was running. Reported again on every call until ack()."""
        ...

    def ack(self, job_id: str, attempt: int) -> None:
        """The caller has durably recorded this attempt's exit; poll() stops reporting it."""
        ...

    def active(self) -> list[tuple[str, int]]:
        """(job_id, attempt) of every attempt whose supervisor is alive (or starting)."""
        ...

    def log_path(self, job_id: str, attempt: int, worker: int) -> Path: ...

    def remove(self, job_id: str) -> None:
        """Delete what a finished job left (run dirs, logs): retention. Idempotent."""
        ...
