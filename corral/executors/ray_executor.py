"""The Ray executor: the local executor's run directories and detached supervisors, with a
supervisor that carries the gang out on the Ray pool (ray_supervisor.py) instead of here.

Everything the local executor guarantees holds unchanged: launch is idempotent, a supervisor
outlives a SIGKILL of `corral up` and is adopted on restart, a vanished one makes its attempt
`lost`. What is new: ports are picked on worker 0's node by the supervisor, the nodes come
from the pool (ray_inventory.py), and spare supervisors are kept connected to Ray so that a
launch does not wait for a Python start and `ray.init()`.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
from pathlib import Path

from corral.executors.base import Launch
from corral.executors.local import LocalExecutor
from corral.executors.ray_inventory import RayInventory
from corral.executors.rundir import RunDir

log = logging.getLogger("corral.ray")

# Supervisors kept connected to Ray: a launch takes the oldest and starts one more. Three, so
# that launches closer together than a spare's start (a Python start and ray.init(): 1-2 s,
# 5 s and more on a loaded machine) still find one ready; each is a ~100 MB idle process.
SPARES = 3


class RayExecutor(LocalExecutor):
    def __init__(self, state_dir: Path, address: str) -> None:
        super().__init__(state_dir)
        self.address = address
        self.nodes = RayInventory(address, self.state_dir)
        self._spares: list[subprocess.Popen[bytes]] = []
        for _ in range(SPARES):
            self._start_spare()

    def _resolve(self, launch: Launch) -> Launch:
        return launch  # MASTER_PORT and MEGASCALE_PORT are picked on worker 0's node

    def _start_supervisor(self, run: RunDir) -> subprocess.Popen[bytes]:
        proc = None
        while proc is None and self._spares:  # the oldest first: the likeliest connected
            proc = self._hand_over(self._spares.pop(0), run)
        if proc is None:
            with open(run.file("supervisor.log"), "ab") as out:
                proc = subprocess.Popen(
                    self._argv(str(run.path)),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        self._start_spare()
        return proc

    def _hand_over(self, spare: subprocess.Popen[bytes], run: RunDir) -> subprocess.Popen | None:
        if spare.poll() is not None or spare.stdin is None:
            return None
        try:
            spare.stdin.write(f"{run.path}\n".encode())
            spare.stdin.close()
        except OSError:  # it died just now: start a fresh one instead
            return None
        return spare

    def _start_spare(self) -> None:
        with open(self.state_dir / "ray" / "spare.log", "ab") as out:
            spare = subprocess.Popen(
                self._argv(f"--spare={self.state_dir}"),
                stdin=subprocess.PIPE,  # EOF (we are gone) makes an unused spare exit
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._spares.append(spare)

    def _argv(self, run: str) -> list[str]:
        return [sys.executable, "-m", "corral.executors.ray_supervisor", run, self.address]

    def close(self) -> None:
        """Stop the inventory helper and the spares; running gangs are left running."""
        self.nodes.close()
        spares, self._spares = self._spares, []
        for spare in spares:
            if spare.stdin is not None:
                with contextlib.suppress(OSError):
                    spare.stdin.close()
        for spare in spares:
            with contextlib.suppress(subprocess.TimeoutExpired):
                spare.wait(timeout=5)
