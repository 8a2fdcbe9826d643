"""A live `corral up` (fake GPUs) driven through the CLI: gangs, logs, restarts, cancel."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import CLI

pytestmark = pytest.mark.live

QUOTA = """
[toml-schema]
version = "1"
[project_membership]
vision = ["alice"]
[project_resources.vision]
gpu = 1.0
[scheduler]
preempt_grace = "1s"
restart_backoff = "0s"  # restarts at once: this file tests the restarts, not their back-off
"""

ENV_KEYS = [
    "CORRAL_JOB_ID",
    "CORRAL_JOB_NAME",
    "CORRAL_PROJECT",
    "CORRAL_USER",
    "CORRAL_ATTEMPT",
    "CORRAL_WORKER_INDEX",
    "CORRAL_NUM_WORKERS",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "CUDA_VISIBLE_DEVICES",
    "FROM_USER",
]
PRINT_ENV = f"import os, json; print(json.dumps({{k: os.environ.get(k) for k in {ENV_KEYS!r}}}))"


@pytest.fixture(scope="module")
def server(module_servers):
    return module_servers(QUOTA, fake_gpus=4)


@pytest.fixture(scope="module")
def alice(server):
    return server.token("alice")


def test_gang_gets_the_env_contract_and_logs_come_back(server, alice):
    cmd = [sys.executable, "-c", PRINT_ENV]
    out = server.cli(
        "submit",
        "--name",
        "gang",
        "--workers",
        "2",
        "--per-worker",
        "2",
        "--env",
        "FROM_USER=yes",
        "--",
        *cmd,
        token=alice,
    )
    job_id = out.stdout.strip()
    assert job_id.startswith("j")
    server.wait(job_id, "succeeded")

    envs = []
    for worker in (0, 1):
        logs = server.cli("logs", job_id, "--worker", str(worker), token=alice).stdout
        envs.append(json.loads(logs.strip().splitlines()[-1]))
    for rank, env in enumerate(envs):
        assert env["RANK"] == env["CORRAL_WORKER_INDEX"] == str(rank)
        assert env["WORLD_SIZE"] == env["CORRAL_NUM_WORKERS"] == "2"
        assert env["LOCAL_RANK"] == str(rank) and env["LOCAL_WORLD_SIZE"] == "2"
        assert env["CORRAL_JOB_ID"] == job_id and env["CORRAL_JOB_NAME"] == "gang"
        assert env["CORRAL_PROJECT"] == "vision" and env["CORRAL_USER"] == "alice"
        assert env["CORRAL_ATTEMPT"] == "0" and env["FROM_USER"] == "yes"
        assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == 2
    assert envs[0]["MASTER_ADDR"] == envs[1]["MASTER_ADDR"]
    assert envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"] and int(envs[0]["MASTER_PORT"]) > 0
    devices = [set(e["CUDA_VISIBLE_DEVICES"].split(",")) for e in envs]
    assert not devices[0] & devices[1], "workers must get distinct GPUs"

    shown = json.loads(server.cli("show", job_id, "--json", token=alice).stdout)
    for key in (
        "id",
        "name",
        "project",
        "user",
        "state",
        "reason",
        "attempt",
        "exit_code",
        "submitted_at",
        "started_at",
        "finished_at",
        "placement",
    ):
        assert key in shown
    assert shown["exit_code"] == 0 and shown["attempt"] == 0
    gpus = [tuple(p["gpus"]) for p in shown["placement"]]
    assert [",".join(map(str, g)) for g in gpus] == [e["CUDA_VISIBLE_DEVICES"] for e in envs]

    listed = json.loads(server.cli("ls", "--json", token=alice).stdout)
    assert [j["id"] for j in listed] == [job_id]


def test_failing_worker_restarts_the_gang_then_fails_with_its_code(server, alice, tmp_path):
    marker, pids = tmp_path / "starts", tmp_path / "pids"
    script = (
        f'echo "$CORRAL_ATTEMPT $RANK" >> {marker}; echo "attempt $CORRAL_ATTEMPT"; '
        f'if [ "$RANK" = 1 ]; then sleep 0.3; exit 3; fi; echo $$ >> {pids}; sleep 60'
    )
    script = f'[ "$CORRAL_ATTEMPT" = 0 ] && sleep 2; {script}'  # time for `logs -f` to attach
    job_id = server.cli(
        "submit", "--workers", "2", "--max-restarts", "2", "--", script, token=alice
    ).stdout.strip()
    # `logs -f` follows the failing worker across the gang's restarts, and stops at the end.
    follow = subprocess.Popen(
        [*CLI, "logs", job_id, "-f", "--worker", "1"],
        env=server.env(alice),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    job = server.wait(job_id, "failed", timeout=40)
    assert job["exit_code"] == 3
    assert job["restarts"] == 2 and job["attempt"] == 2
    assert [a["state"] for a in job["attempts"]] == ["failed"] * 3
    lines = sorted(marker.read_text().split("\n")[:-1])
    assert lines == sorted(f"{a} {r}" for a in range(3) for r in range(2))
    # The healthy worker of each failed attempt was stopped, not left sleeping.
    deadline = time.monotonic() + 5
    healthy = [int(p) for p in pids.read_text().split()]
    while any(_alive(p) for p in healthy) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(healthy) == 3 and not any(_alive(p) for p in healthy)

    out, _ = follow.communicate(timeout=20)
    assert follow.returncode == 0
    # Attached during attempt 0, it shows every attempt, even one that ran whole between polls.
    assert out.split("\n")[:-1] == ["attempt 0", "attempt 1", "attempt 2"]
    one = server.cli("logs", job_id, "--worker", "1", "--attempt", "1", token=alice).stdout
    assert one == "attempt 1\n"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_cancel_stops_the_whole_process_tree(server, alice, tmp_path):
    pids = tmp_path / "pids"
    script = (
        f"sleep 301 & echo $! >> {pids}; "
        f"(sleep 302 & echo $! >> {pids}; wait) & echo $! >> {pids}; "
        f"echo $$ >> {pids}; wait"
    )
    job_id = server.cli("submit", "--name", "tree", "--", script, token=alice).stdout.strip()
    server.wait(job_id, "running")
    deadline = time.monotonic() + 10
    while (not pids.exists() or len(pids.read_text().split()) < 4) and time.monotonic() < deadline:
        time.sleep(0.05)
    found = [int(p) for p in pids.read_text().split()]
    assert len(found) == 4 and all(_alive(p) for p in found)

    out = server.cli("cancel", "tree", token=alice).stdout
    assert job_id in out
    job = server.wait(job_id, "cancelled", timeout=15)
    assert job["finished_at"] is not None
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in found) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in found if _alive(p)]
    # The name is free again once the job is no longer live.
    again = server.cli("submit", "--name", "tree", "--", "true", token=alice).stdout.strip()
    server.wait(again, "succeeded")


def test_cancel_pending_and_queue_shows_position_and_reason(server, alice):
    hog = server.cli("submit", "--per-worker", "4", "--", "sleep 60", token=alice).stdout.strip()
    server.wait(hog, "running")
    waiting = [server.cli("submit", "--", "sleep 60", token=alice).stdout.strip() for _ in range(2)]
    queue = json.loads(server.cli("queue", "--json", token=alice).stdout)
    assert [q["id"] for q in queue] == waiting
    assert [q["position"] for q in queue] == [1, 2]
    assert all(q["reason_code"] and q["reason"] for q in queue)
    table = server.cli("queue", token=alice).stdout
    assert waiting[0] in table

    quota = json.loads(server.cli("quota", "--json", token=alice).stdout)
    vision = next(p for p in quota["projects"] if p["project"] == "vision")
    assert vision["in_use"]["gpu"] == 4 and vision["pending"]["gpu"] == 2
    nodes = json.loads(server.cli("nodes", "--json", token=alice).stdout)
    assert nodes[0]["count"] == 4 and nodes[0]["free"] == 0 and nodes[0]["jobs"] == [hog]

    for job_id in [*waiting, hog]:
        server.cli("cancel", job_id, token=alice)
    for job_id in waiting:
        assert server.job(job_id)["state"] == "cancelled"
    server.wait(hog, "cancelled", timeout=15)


def test_logs_follow_prints_until_the_job_ends(server, alice):
    script = "for i in 1 2 3; do echo line-$i; sleep 0.3; done"
    job_id = server.cli("submit", "--", script, token=alice).stdout.strip()
    out = server.cli("logs", job_id, "-f", token=alice).stdout
    assert out.split() == ["line-1", "line-2", "line-3"]
    assert server.job(job_id)["state"] == "succeeded"


def test_cli_without_server_says_so_in_one_line(tmp_path: Path, server):
    import subprocess

    from conftest import CLI, free_port

    env = server.env("x") | {"CORRAL_URL": f"http://127.0.0.1:{free_port()}"}
    done = subprocess.run([*CLI, "ls"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0
    assert "cannot reach corral at" in done.stderr and "corral up" in done.stderr
