"""The local executor with real processes: gangs, signals, and control-plane restarts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import psutil
import pytest

from corral.executors.base import AttemptExit, Launch, WorkerLaunch
from corral.executors.local import LocalExecutor

pytestmark = pytest.mark.live

GRACE = 0.5
PROMPT = 5.0  # "promptly": far below the 30-300 s the workers would otherwise run
T = TypeVar("T")

# Each worker dumps its environment to DIR/env-RANK.json and writes to both output streams.
DUMP_ENV = (
    "import json, os, sys\n"
    "rank = os.environ['RANK']\n"
    "with open(os.path.join(sys.argv[1], f'env-{rank}.json'), 'w') as f:\n"
    "    json.dump(dict(os.environ), f)\n"
    "print(f'stdout of {rank}')\n"
    "print(f'stderr of {rank}', file=sys.stderr)\n"
)


def make_launch(
    job_id: str,
    command: str | tuple[str, ...],
    workers: int = 1,
    slices: int = 1,
    nodes: list[str] | None = None,
    **kwargs,
) -> Launch:
    total = workers * slices
    nodes = nodes or ["node0"] * total
    gang = [WorkerLaunch(i, i // workers, nodes[i], (i,)) for i in range(total)]
    kwargs.setdefault("grace", GRACE)
    kwargs.setdefault("env", {})
    return Launch(
        job_id,
        f"{job_id}-name",
        "vision",
        "alice",
        0,
        command,
        workers=gang,
        workers_per_slice=workers,
        num_slices=slices,
        **kwargs,
    )


def wait_for(probe: Callable[[], T | None], timeout: float = 10.0) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {probe}")


def wait_exit(ex: LocalExecutor, job_id: str, attempt: int = 0) -> AttemptExit:
    def probe() -> AttemptExit | None:
        return next((e for e in ex.poll() if (e.job_id, e.attempt) == (job_id, attempt)), None)

    return wait_for(probe)


def wait_pids(directory: Path, count: int) -> list[int]:
    """Pids the workers wrote to DIR/*.pid, once all `count` files are complete."""

    def probe() -> list[int] | None:
        texts = [p.read_text() for p in sorted(directory.glob("*.pid"))]
        done = [t for t in texts if t.endswith("\n")]
        return [int(t) for t in done] if len(done) == count else None

    return wait_for(probe)


def is_dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def supervisor_pid(state: Path, job_id: str, attempt: int = 0) -> int:
    data = json.loads((state / "runs" / job_id / str(attempt) / "supervisor.pid").read_text())
    return data["pid"]


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    state = tmp_path / "state"
    yield state
    # A failed test must not leave sleeping gangs behind.
    cleanup = LocalExecutor(state)
    for key in cleanup.active():
        cleanup.terminate(*key, grace=0)


@pytest.fixture
def ex(state: Path) -> LocalExecutor:
    return LocalExecutor(state)


def test_two_worker_gang_gets_env_contract_and_logs(ex: LocalExecutor, tmp_path: Path) -> None:
    launch = make_launch(
        "envjob", (sys.executable, "-c", DUMP_ENV, str(tmp_path)), workers=2, env={"FOO": "bar"}
    )
    ex.launch(launch)
    result = wait_exit(ex, "envjob")
    assert (result.outcome, result.exit_code, result.worker_codes) == ("succeeded", 0, [0, 0])

    envs = [json.loads((tmp_path / f"env-{rank}.json").read_text()) for rank in (0, 1)]
    assert [e["RANK"] for e in envs] == ["0", "1"]
    assert [e["CORRAL_WORKER_INDEX"] for e in envs] == ["0", "1"]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1"]
    assert {e["CUDA_VISIBLE_DEVICES"] for e in envs} == {"0", "1"}
    for env in envs:
        assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == env["JAX_NUM_PROCESSES"] == "2"
        assert env["JAX_PROCESS_ID"] == env["RANK"]
        assert env["FOO"] == "bar"
        assert env["PATH"] == os.environ["PATH"]  # user env is added, not substituted
        assert (env["CORRAL_JOB_ID"], env["CORRAL_JOB_NAME"]) == ("envjob", "envjob-name")
        assert (env["CORRAL_PROJECT"], env["CORRAL_USER"], env["CORRAL_ATTEMPT"]) == (
            "vision",
            "alice",
            "0",
        )
        assert (env["CORRAL_SLICE_ID"], env["CORRAL_NUM_SLICES"]) == ("0", "1")
        assert "MEGASCALE_NUM_SLICES" not in env
    assert envs[0]["MASTER_ADDR"] == envs[1]["MASTER_ADDR"] == "127.0.0.1"
    port = envs[0]["MASTER_PORT"]
    assert port == envs[1]["MASTER_PORT"] and int(port) > 0
    assert envs[0]["JAX_COORDINATOR_ADDRESS"] == f"127.0.0.1:{port}"
    recorded = json.loads((ex.state_dir / "runs/envjob/0/launch.json").read_text())
    assert recorded["master_port"] == int(port)

    for rank in (0, 1):
        text = ex.log_path("envjob", 0, rank).read_text()
        assert f"stdout of {rank}" in text and f"stderr of {rank}" in text


def test_multislice_env(ex: LocalExecutor, tmp_path: Path) -> None:
    # Two slices of two workers, each slice spread over nodes a and b.
    launch = make_launch(
        "slices",
        (sys.executable, "-c", DUMP_ENV, str(tmp_path)),
        workers=2,
        slices=2,
        nodes=["a", "b", "a", "b"],
        env={"RANK": "99"},  # the contract wins over the user's env
    )
    ex.launch(launch)
    assert wait_exit(ex, "slices").outcome == "succeeded"
    envs = [json.loads((tmp_path / f"env-{rank}.json").read_text()) for rank in range(4)]
    assert [e["RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "0", "1", "1"]
    assert {e["LOCAL_WORLD_SIZE"] for e in envs} == {"2"}
    assert [e["CORRAL_SLICE_ID"] for e in envs] == ["0", "0", "1", "1"]
    assert [e["MEGASCALE_SLICE_ID"] for e in envs] == ["0", "0", "1", "1"]
    assert {e["MEGASCALE_NUM_SLICES"] for e in envs} == {"2"}
    assert {e["MEGASCALE_COORDINATOR_ADDRESS"] for e in envs} == {"127.0.0.1"}
    megascale_ports = {e["MEGASCALE_PORT"] for e in envs}
    assert len(megascale_ports) == 1
    assert megascale_ports != {envs[0]["MASTER_PORT"]} and int(megascale_ports.pop()) > 0


def test_failing_worker_fails_gang_and_kills_the_rest(ex: LocalExecutor) -> None:
    ex.launch(make_launch("fail", 'if [ "$RANK" = 1 ]; then exit 3; fi; sleep 30', workers=2))
    started = time.monotonic()
    result = wait_exit(ex, "fail")
    assert time.monotonic() - started < PROMPT
    assert (result.outcome, result.exit_code) == ("failed", 3)
    assert result.worker_codes == [-signal.SIGTERM, 3]


def test_terminate_kills_whole_tree(ex: LocalExecutor, tmp_path: Path) -> None:
    # Each worker backgrounds a grandchild in its own process group and waits for it.
    command = f"sleep 300 & echo $! > {tmp_path}/gc-$RANK.pid; wait"
    ex.launch(make_launch("tree", command, workers=2))
    grandchildren = wait_pids(tmp_path, 2)
    assert ex.active() == [("tree", 0)]

    ex.terminate("tree", 0)
    result = wait_exit(ex, "tree")
    assert (result.outcome, result.exit_code) == ("terminated", None)
    assert result.worker_codes == [-signal.SIGTERM, -signal.SIGTERM]
    assert all(is_dead(pid) for pid in grandchildren)
    assert ex.active() == []
    ex.terminate("tree", 0)  # idempotent once over, too
    assert [e.outcome for e in ex.poll()] == ["terminated"]


def test_worker_ignoring_sigterm_is_killed_after_grace(ex: LocalExecutor, tmp_path: Path) -> None:
    command = f"trap '' TERM; echo $$ > {tmp_path}/w.pid; while :; do sleep 0.1; done"
    ex.launch(make_launch("stubborn", command))
    wait_pids(tmp_path, 1)
    started = time.monotonic()
    ex.terminate("stubborn", 0)
    result = wait_exit(ex, "stubborn")
    assert GRACE <= time.monotonic() - started < PROMPT
    assert (result.outcome, result.worker_codes) == ("terminated", [-signal.SIGKILL])


def test_terminate_grace_overrides_launch_grace(ex: LocalExecutor, tmp_path: Path) -> None:
    command = f"trap '' TERM; echo $$ > {tmp_path}/w.pid; while :; do sleep 0.1; done"
    ex.launch(make_launch("forced", command, grace=60.0))
    wait_pids(tmp_path, 1)
    started = time.monotonic()
    ex.terminate("forced", 0, grace=0)
    result = wait_exit(ex, "forced")
    assert time.monotonic() - started < PROMPT
    assert result.worker_codes == [-signal.SIGKILL]


def test_max_runtime_times_out(ex: LocalExecutor) -> None:
    started = time.monotonic()
    ex.launch(make_launch("slow", "sleep 30", max_runtime=0.5))
    result = wait_exit(ex, "slow")
    assert 0.5 <= time.monotonic() - started < PROMPT
    assert (result.outcome, result.exit_code, result.worker_codes) == (
        "timeout",
        None,
        [-signal.SIGTERM],
    )


def test_leftovers_of_a_successful_gang_are_killed(ex: LocalExecutor, tmp_path: Path) -> None:
    # One grandchild stays in the worker's group, the other escapes it with setsid.
    command = (
        f"sleep 300 & echo $! > {tmp_path}/in-group.pid; "
        f"setsid sleep 300 & echo $! > {tmp_path}/escaped.pid"
    )
    ex.launch(make_launch("litter", command))
    result = wait_exit(ex, "litter")
    assert (result.outcome, result.exit_code) == ("succeeded", 0)
    assert all(is_dead(pid) for pid in wait_pids(tmp_path, 2))


def test_command_that_cannot_start_fails(ex: LocalExecutor) -> None:
    ex.launch(make_launch("missing", ("/nonexistent/train",), workers=2))
    result = wait_exit(ex, "missing")
    assert (result.outcome, result.exit_code, result.worker_codes) == ("failed", 127, [127, None])
    assert "cannot start" in ex.log_path("missing", 0, 0).read_text()


def test_launch_is_idempotent_and_validated(ex: LocalExecutor, tmp_path: Path) -> None:
    launch = make_launch("once", f"echo $RANK >> {tmp_path}/ran", workers=2)
    ex.launch(launch)
    ex.launch(launch)
    assert wait_exit(ex, "once").outcome == "succeeded"
    assert sorted((tmp_path / "ran").read_text().split()) == ["0", "1"]
    with pytest.raises(ValueError, match="directory name"):
        ex.launch(make_launch("../escape", "true"))
    bad = make_launch("shape", "true", workers=2)
    bad.workers.pop()
    with pytest.raises(ValueError, match="workers expected"):
        ex.launch(bad)


def test_launch_cut_short_before_its_supervisor_started_is_done_again(
    state: Path, tmp_path: Path
) -> None:
    # The control plane died after making the attempt's directory, before any supervisor
    # recorded itself; the restarted one launches the attempt again, and it runs once.
    launch = make_launch("cut", f"echo $RANK >> {tmp_path}/ran", workers=2)
    (state / "runs" / "cut" / "0").mkdir(parents=True)
    restarted = LocalExecutor(state)
    restarted.launch(launch)
    result = wait_exit(restarted, "cut")
    assert (result.outcome, result.worker_codes) == ("succeeded", [0, 0])
    assert sorted((tmp_path / "ran").read_text().split()) == ["0", "1"]


def test_a_second_supervisor_of_an_attempt_leaves_it_alone(
    ex: LocalExecutor, state: Path, tmp_path: Path
) -> None:
    ex.launch(make_launch("one", f"echo $RANK >> {tmp_path}/ran; sleep 0.5", workers=2))
    run = state / "runs" / "one" / "0"
    wait_for(lambda: (run / "supervisor.claim").exists())
    second = subprocess.run(
        [sys.executable, "-m", "corral.executors.supervisor", str(run)], timeout=30
    )
    assert second.returncode == 0
    assert wait_exit(ex, "one").outcome == "succeeded"
    assert sorted((tmp_path / "ran").read_text().split()) == ["0", "1"]


def test_terminate_right_after_launch(ex: LocalExecutor) -> None:
    # The supervisor may not even have its SIGTERM handler yet; the request must still hold.
    ex.launch(make_launch("early", "sleep 30", workers=2))
    ex.terminate("early", 0)
    started = time.monotonic()
    assert wait_exit(ex, "early").outcome == "terminated"
    assert time.monotonic() - started < PROMPT


def test_restarted_control_plane_adopts_running_attempt(state: Path, tmp_path: Path) -> None:
    go = tmp_path / "go"
    launch = make_launch("adopt", f"while [ ! -e {go} ]; do sleep 0.05; done", workers=2)
    # The first control plane is a real process, SIGKILLed right after it launched the job.
    script = (
        "import json, sys, time\n"
        "from pathlib import Path\n"
        "from corral.executors.base import Launch\n"
        "from corral.executors.local import LocalExecutor\n"
        "LocalExecutor(Path(sys.argv[1])).launch(Launch.from_dict(json.loads(sys.argv[2])))\n"
        "print('launched', flush=True)\n"
        "time.sleep(300)\n"
    )
    plane = subprocess.Popen(
        [sys.executable, "-c", script, str(state), json.dumps(launch.to_dict())],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert plane.stdout is not None and plane.stdout.readline() == "launched\n"
    plane.kill()
    plane.wait()

    restarted = LocalExecutor(state)
    assert restarted.active() == [("adopt", 0)]
    assert restarted.poll() == []
    go.touch()
    result = wait_exit(restarted, "adopt")
    assert (result.outcome, result.worker_codes) == ("succeeded", [0, 0])


def test_exit_while_no_control_plane_is_reported_until_acked(state: Path) -> None:
    first = LocalExecutor(state)
    first.launch(make_launch("offline", "exit 0"))
    del first  # the control plane is down while the attempt ends
    wait_for(lambda: (state / "runs/offline/0/status.json").exists())

    restarted = LocalExecutor(state)
    assert [e.outcome for e in restarted.poll()] == ["succeeded"]
    assert [e.outcome for e in restarted.poll()] == ["succeeded"]  # not consumed by poll()
    restarted.ack("offline", 0)
    restarted.ack("offline", 0)  # the server may ack twice
    assert restarted.poll() == []
    assert LocalExecutor(state).poll() == []  # acked survives a restart
    with pytest.raises(ValueError, match="not ended"):
        restarted.ack("never-launched", 0)


def test_killed_supervisor_is_lost_and_its_workers_stopped(
    ex: LocalExecutor, state: Path, tmp_path: Path
) -> None:
    ex.launch(make_launch("orphan", f"echo $$ > {tmp_path}/w$RANK.pid; exec sleep 300", workers=2))
    workers = wait_pids(tmp_path, 2)
    os.kill(supervisor_pid(state, "orphan"), signal.SIGKILL)
    result = wait_exit(ex, "orphan")
    assert (result.outcome, result.exit_code, result.worker_codes) == ("lost", None, [None, None])
    wait_for(lambda: all(is_dead(pid) for pid in workers))


def test_terminate_with_supervisor_gone_kills_workers(
    ex: LocalExecutor, state: Path, tmp_path: Path
) -> None:
    ex.launch(make_launch("headless", f"echo $$ > {tmp_path}/w.pid; exec sleep 300"))
    (worker,) = wait_pids(tmp_path, 1)
    supervisor = psutil.Process(supervisor_pid(state, "headless"))
    supervisor.kill()
    supervisor.wait(5)
    ex.terminate("headless", 0)
    wait_for(lambda: is_dead(worker))
    assert wait_exit(ex, "headless").outcome == "terminated"
