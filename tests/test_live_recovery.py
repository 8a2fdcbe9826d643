"""The control plane's crash recovery, at the exact instants a random SIGKILL rarely hits.

In-process, with a scripted executor: each test "crashes" a control plane at one point (an
exception out of the executor, after which the object is dropped, as a killed process would
be) and starts a fresh one on the same store, as `corral up` on the same state dir would.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from corral.core.admission import check_admissible
from corral.core.decide import decide
from corral.executors.base import FAILED, SUCCEEDED, AttemptExit, Launch
from corral.formats.jobspec import parse_jobspec
from corral.policies import load_policy
from corral.server.auth import Principal
from corral.server.controlplane import ControlPlane
from corral.server.inventory import local_inventory
from corral.server.quotafile import QuotaSource
from corral.server.store import Store

pytestmark = pytest.mark.live

ALICE = Principal("alice", admin=False)


class Crash(BaseException):
    """The process dies here (BaseException: nothing in the control plane catches it)."""


class ScriptedExecutor:
    """Remembers what was launched; reports what the test says is active or has ended."""

    def __init__(self) -> None:
        self.launches: list[Launch] = []
        self.running: set[tuple[str, int]] = set()
        self.exits: dict[tuple[str, int], AttemptExit] = {}
        self.acked: list[tuple[str, int]] = []
        self.terminated: list[tuple[str, int]] = []
        self.crash_on: str | None = None

    def _maybe_crash(self, where: str) -> None:
        if self.crash_on == where:
            raise Crash(where)

    def launch(self, launch: Launch) -> None:
        self._maybe_crash("launch")
        key = (launch.job_id, launch.attempt)
        if key not in self.running and key not in self.exits:  # idempotent, like the real one
            self.launches.append(launch)
            self.running.add(key)

    def terminate(self, job_id: str, attempt: int, grace: float | None = None) -> None:
        self.terminated.append((job_id, attempt))

    def poll(self) -> list[AttemptExit]:
        return list(self.exits.values())

    def ack(self, job_id: str, attempt: int) -> None:
        self._maybe_crash("ack")
        self.exits.pop((job_id, attempt))
        self.acked.append((job_id, attempt))

    def active(self) -> list[tuple[str, int]]:
        return sorted(self.running)

    def log_path(self, job_id: str, attempt: int, worker: int) -> Path:
        return Path("/nonexistent")

    def finish(self, job_id: str, attempt: int, outcome: str, code: int | None) -> None:
        self.running.discard((job_id, attempt))
        self.exits[(job_id, attempt)] = AttemptExit(
            job_id, attempt, outcome, code, [code], time.time()
        )


def control_plane(db: Path, executor: ScriptedExecutor) -> ControlPlane:
    inventory = local_inventory(fake=4, accelerator="gpu", node_name="box")
    quota = QuotaSource(None, ["gpu"])
    return ControlPlane(
        Store(db), executor, inventory, quota, load_policy, decide, check_admissible
    )


def submit(cp: ControlPlane, name: str, gpus: int = 1, max_restarts: int = 0) -> str:
    spec = parse_jobspec(
        {
            "name": name,
            "project": "default",
            "command": "true",
            "resources": {"accelerator": "gpu", "per_worker": gpus},
            "max_restarts": max_restarts,
        }
    )
    return cp.submit(ALICE, spec, auto_name=False).id


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "corral.db"


def test_crash_between_start_and_launch_relaunches_the_same_attempt(db):
    ex = ScriptedExecutor()
    cp = control_plane(db, ex)
    job = submit(cp, "a")
    ex.crash_on = "launch"
    with pytest.raises(Crash):
        cp.cycle()
    assert cp.store.job(job).state == "running"
    assert cp.store.attempt(job, 0).state == "launching"

    fresh = ScriptedExecutor()  # the launch never reached the executor
    cp2 = control_plane(db, fresh)
    assert [(launch.job_id, launch.attempt) for launch in fresh.launches] == [(job, 0)]
    assert cp2.store.attempt(job, 0).state == "running"
    assert [e.event for e in cp2.store.events(job=job)].count("start") == 1


def test_launch_that_happened_is_adopted_not_repeated(db):
    ex = ScriptedExecutor()
    cp = control_plane(db, ex)
    job = submit(cp, "a")
    cp.cycle()
    assert ex.running == {(job, 0)}
    launched = len(ex.launches)

    cp2 = control_plane(db, ex)  # the same executor state: the supervisor lives on
    cp2.cycle()
    assert len(ex.launches) == launched
    assert cp2.store.job(job).state == "running"


def test_exit_recorded_before_a_crash_is_acknowledged_once_and_not_reapplied(db):
    ex = ScriptedExecutor()
    cp = control_plane(db, ex)
    job = submit(cp, "a", max_restarts=3)
    cp.cycle()
    ex.finish(job, 0, FAILED, 3)
    ex.crash_on = "ack"
    with pytest.raises(Crash):
        cp.cycle()
    row = cp.store.job(job)
    assert row.state == "pending" and row.attempt == 1 and row.restarts == 1

    ex.crash_on = None
    cp2 = control_plane(db, ex)
    row = cp2.store.job(job)
    assert row.restarts == 1 and row.attempt == 1, "the exit is not counted twice"
    assert ex.acked == [(job, 0)]
    assert job in cp2.backoff, "the restart back-off outlives the crash"
    cp2.backoff[job] = 0.0  # served
    cp2.cycle()
    assert cp2.store.job(job).state == "running"
    assert [launch.attempt for launch in ex.launches] == [0, 1]


def test_exit_while_down_is_applied_with_its_code(db):
    ex = ScriptedExecutor()
    cp = control_plane(db, ex)
    ok, bad = submit(cp, "ok"), submit(cp, "bad")
    cp.cycle()
    del cp  # killed
    ex.finish(ok, 0, SUCCEEDED, 0)
    ex.finish(bad, 0, FAILED, 7)
    cp2 = control_plane(db, ex)
    assert cp2.store.job(ok).state == "succeeded" and cp2.store.job(ok).exit_code == 0
    assert cp2.store.job(bad).state == "failed" and cp2.store.job(bad).exit_code == 7
    assert not cp2.live


def test_attempt_unknown_to_the_executor_is_lost_and_requeued(db):
    ex = ScriptedExecutor()
    cp = control_plane(db, ex)
    job = submit(cp, "a")
    cp.cycle()
    cp2 = control_plane(db, ScriptedExecutor())  # e.g. the machine rebooted
    row = cp2.store.job(job)
    assert row.state == "pending" and row.attempt == 1
    assert row.preemptions == 1 and row.restarts == 0
    assert cp2.store.attempt(job, 0).state == "lost"


def test_cancel_while_terminating_is_resent_after_restart(db):
    ex = ScriptedExecutor()
    cp = control_plane(db, ex)
    job = submit(cp, "a")
    cp.cycle()
    cp.cancel(ALICE, job)
    assert ex.terminated == [(job, 0)]
    control_plane(db, ex)
    assert ex.terminated == [(job, 0), (job, 0)]


def test_a_gpu_is_never_given_to_two_live_attempts_across_restarts(db):
    ex = ScriptedExecutor()
    cp = control_plane(db, ex)
    first = [submit(cp, f"a{i}", gpus=1) for i in range(2)]
    cp.cycle()
    cp2 = control_plane(db, ex)
    later = [submit(cp2, f"b{i}", gpus=1) for i in range(2)]
    cp2.cycle()
    devices = [g for launch in ex.launches for w in launch.workers for g in w.gpus]
    assert sorted(devices) == [0, 1, 2, 3]
    assert {launch.job_id for launch in ex.launches} == {*first, *later}
