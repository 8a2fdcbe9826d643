"""The Ray executor on a real 3-node Ray cluster (raykit.py), driven through the CLI and HTTP:
gangs land where corral placed them with the env contract, logs come back, a failing worker or
a dead node stops its gang, `corral up` can be SIGKILLed and restarted, nodes can join."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from conftest import CLI, LiveServer, free_port
from raykit import Netns, RayCluster, run_processes, skip_unless_ray_and_netns
from test_live_jobset import domains_of
from test_live_jobset import submit as submit_jobset

pytestmark = pytest.mark.live

# Every node is a TPU host of 4 chips, named for its pool (domain): pool1-0 is in pool1. The
# first three, one per pool, serve the gang tests; the Kueue tutorial's test fills each pool to
# two nodes.
TPU = "tpu-v5-lite-podslice"
FIRST_NODES = ("pool1-0", "pool2-0", "pool3-0")
QUOTA = f"""
[toml-schema]
version = "1"
[project_membership]
team = [".*"]
[project_resources.team]
{TPU} = 1.0
[scheduler]
preempt_grace = "2s"
"""
# The tutorial's Kueue queue as a project that has the pools.
JOBSET_QUOTA = QUOTA.replace('team = [".*"]\n', 'team = [".*"]\nmultislice-queue = [".*"]\n') + (
    f"[project_resources.multislice-queue]\n{TPU} = 1.0\n"
)
# On every node's PATH (so the workers'): the tutorial's commands install JAX from the internet
# and sleep 60 s; these answer at once (pip), as JAX would on 8 chips (python), and make its
# `sleep 60` wait until the test has queued the other jobs (the GO file), then 1 s. Other
# sleeps are the real one.
STUBS = {
    "pip": "exit 0",
    "python": 'echo "Global device count: 8"; exec /bin/sleep 1',
    "sleep": '[ "$1" = 60 ] || exec /bin/sleep "$@"\n'
    'until [ -e "$(dirname "$0")/GO" ]; do /bin/sleep 0.1; done; exec /bin/sleep 1',
}
LOST = {}  # the node the node-death test killed, for the tests after it


def domain_of(node: str) -> str:
    return node.rsplit("-", 1)[0]


# Every worker reports its env, then the gang meets at MASTER_ADDR:MASTER_PORT: worker 0
# listens, every other worker connects and sends its rank, and worker 0 prints the ranks.
WORKER = r"""
import json, os, socket, sys, time
env = {k: v for k, v in os.environ.items() if k.startswith(("CORRAL_", "MASTER_", "MEGASCALE_",
       "RANK", "WORLD_SIZE", "LOCAL_", "CUDA_VISIBLE", "JAX_"))}
print("ENV " + json.dumps(env), flush=True)
rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
addr = (env["MASTER_ADDR"], int(env["MASTER_PORT"]))
if rank == 0:
    server = socket.create_server(addr)
    got = []
    for _ in range(world - 1):
        conn, _ = server.accept()
        got.append(int(conn.recv(16)))
        conn.close()
    print("MET " + json.dumps(sorted(got)), flush=True)
else:
    deadline = time.time() + 30
    while True:
        try:
            with socket.create_connection(addr, timeout=2) as conn:
                conn.sendall(str(rank).encode())
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)
    print("CONNECTED", flush=True)
"""


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    skip_unless_ray_and_netns()
    root = tmp_path_factory.mktemp("ray")
    netns = Netns()
    server = None
    try:
        cluster = RayCluster(root)
        stubs = root / "bin"
        stubs.mkdir()
        for name, body in STUBS.items():
            (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
            (stubs / name).chmod(0o755)
        cluster.node_env = {"PATH": f"{stubs}:{os.environ['PATH']}"}
        for name in FIRST_NODES:
            cluster.start(name, domain_of(name), accelerator=TPU)
            cluster.wait(name)  # one at a time: nodes of one machine pick socket names
        quota = root / "quota.toml"
        quota.write_text(QUOTA)
        args = ["--executor", "ray", "--ray-address", cluster.address, "--quota", str(quota)]
        args += ["--run-as", "corral"]  # the test's users have no Unix accounts
        server = LiveServer(root / "state", free_port(), args).start(timeout=90)
        wait_nodes(server, 3)
        yield cluster, server
    finally:
        if server is not None:
            with contextlib.suppress(Exception):
                server.cancel_all()
            server.stop()
        with contextlib.suppress(NameError):
            cluster.close()
        netns.close()


def wait_nodes(server: LiveServer, count: int, timeout: float = 30.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        nodes = json.loads(server.cli("nodes", "--json", admin=True).stdout)
        if len(nodes) == count or time.monotonic() > deadline:
            assert len(nodes) == count, nodes
            return nodes
        time.sleep(0.2)


def submit(server: LiveServer, *args: str) -> str:
    done = server.cli("submit", "--json", *args, admin=True)
    return json.loads(done.stdout)["id"]


def run_dir(server: LiveServer, job_id: str, attempt: int) -> Path:
    return (server.state / "runs" / job_id / str(attempt)).resolve()


def wait_logged(
    server: LiveServer, job: str, attempt: int, text: str, workers: int, timeout: float = 30.0
) -> None:
    """Every worker's mirrored log has `text`: the gang really runs."""
    logs = [server.state / "logs" / job / str(attempt) / f"worker-{i}.log" for i in range(workers)]
    deadline = time.monotonic() + timeout
    while not all(log.exists() and text in log.read_text() for log in logs):
        assert time.monotonic() < deadline, f"{job}: no {text!r} in every worker's log"
        time.sleep(0.1)


def wait_gone(run: Path, timeout: float = 10.0) -> None:
    """No process of the attempt is left on any node."""
    deadline = time.monotonic() + timeout
    while (procs := run_processes(run)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not procs, [p.cmdline() for p in procs]


def test_gang_lands_where_placed_with_the_env_contract(pool, tmp_path):
    cluster, server = pool
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    job = submit(
        server, "--slices", "2", "--workers", "2", "--per-worker", "2", "--", "python3", str(script)
    )
    logs = subprocess.run(
        [*CLI, "logs", "-f", job, "--worker", "0"],
        env=server.env(server.admin_token),
        capture_output=True,
        text=True,
        timeout=60,
    )
    row = server.wait(job, "succeeded", timeout=30)
    assert "MET [1, 2, 3]" in logs.stdout, logs.stdout + logs.stderr
    placement = row["placement"]
    nodes = {p["node"] for p in placement}
    assert len(nodes) == 2
    ip = {name: node.ip for name, node in cluster.nodes.items()}
    envs = []
    for p in placement:
        text = server.cli("logs", job, "--worker", str(p["worker"]), admin=True).stdout
        env_line = next(line for line in text.splitlines() if line.startswith("ENV "))
        envs.append(json.loads(env_line[4:]))
        assert ("MET" in text) if p["worker"] == 0 else ("CONNECTED" in text)
    master = placement[0]["node"]
    for p, env in zip(placement, envs, strict=True):
        # The node's own environment (ray start's) says where the worker ran.
        assert env["CORRAL_TEST_NODE"] == p["node"]
        assert env["RANK"] == env["CORRAL_WORKER_INDEX"] == str(p["worker"])
        assert env["WORLD_SIZE"] == env["CORRAL_NUM_WORKERS"] == "4"
        assert env["CORRAL_SLICE_ID"] == env["MEGASCALE_SLICE_ID"] == str(p["slice"])
        assert env["CORRAL_NUM_SLICES"] == env["MEGASCALE_NUM_SLICES"] == "2"
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, p["gpus"]))
        assert env["MASTER_ADDR"] == env["MEGASCALE_COORDINATOR_ADDRESS"] == ip[master]
        assert env["MASTER_PORT"] == envs[0]["MASTER_PORT"]
        assert env["MEGASCALE_PORT"] == envs[0]["MEGASCALE_PORT"] != env["MASTER_PORT"]
        assert env["LOCAL_WORLD_SIZE"] == "2"
    assert len({p["node"] for p in placement[:2]}) == 1, "a slice is on one node here"
    wait_gone(run_dir(server, job, 0))


def test_worker_runs_on_its_node_and_a_failure_stops_the_gang(pool, tmp_path):
    cluster, server = pool
    marks = tmp_path / "marks"
    marks.mkdir()
    script = (
        f'echo "$CORRAL_TEST_NODE" > {marks}/node-$RANK; '
        f'if [ "$RANK" = 1 ]; then sleep 0.5; exit 3; fi; '
        f"trap 'echo term > {marks}/term-$RANK; exit 143' TERM; "
        "while true; do sleep 0.1; done"
    )
    job = submit(
        server, "--workers", "1", "--slices", "3", "--per-worker", "4", "--", "sh", "-c", script
    )
    row = server.wait(job, "failed", timeout=30)
    assert row["exit_code"] == 3
    placement = row["placement"]
    assert sorted(p["node"] for p in placement) == list(FIRST_NODES)
    for p in placement:
        assert (marks / f"node-{p['worker']}").read_text().strip() == p["node"]
    assert (marks / "term-0").read_text().strip() == "term"
    assert (marks / "term-2").read_text().strip() == "term"
    wait_gone(run_dir(server, job, 0))


def test_sigkill_of_corral_up_keeps_the_gang_and_adopts_it(pool, tmp_path):
    _, server = pool
    job = submit(
        server,
        "--slices",
        "2",
        "--per-worker",
        "4",
        "--",
        "sh",
        "-c",
        'i=0; while true; do echo "tick $i"; i=$((i+1)); sleep 0.1; done',
    )
    wait_logged(server, job, 0, "tick", workers=2)
    log = server.state / "logs" / job / "0" / "worker-1.log"
    server.kill()
    size = log.stat().st_size
    time.sleep(1.5)
    assert log.stat().st_size > size, "the supervisor kept mirroring logs without corral up"
    server.start(timeout=90)
    row = server.job(job)
    assert row["state"] == "running" and row["attempt"] == 0, row
    server.cli("cancel", job, admin=True)
    server.wait(job, "cancelled", timeout=20)
    assert [a["attempt"] for a in server.job(job)["attempts"]] == [0]
    wait_gone(run_dir(server, job, 0))


def pooled_actors(server: LiveServer, job: str) -> set[str]:
    """The pool's actors (ray_pool.py) the attempt's supervisor claimed, by name."""
    text = (run_dir(server, job, 0) / "supervisor.log").read_text()
    return set(re.findall(r"pool: (corral-pool-\S+) \(pid \d+\) is ", text))


def test_a_reused_pooled_actor_leaks_nothing_between_jobs(pool, tmp_path):
    """Job 1 takes both warm actors of a node, sets an env var, leaves a process that left
    its group (setsid) and moves into another directory; job 2 fills the whole pool, so it
    reuses job 1's actors: it sees none of that."""
    _, server = pool
    first = submit(
        server,
        *("--workers", "2", "--per-worker", "2", "-e", "LEAKED=job1", "--workdir", "/tmp"),
        *("--", "sh", "-c", "setsid sleep 300 & cd /; echo $LEAKED"),
    )
    server.wait(first, "succeeded", timeout=30)
    wait_gone(run_dir(server, first, 0))
    probe = 'echo "leaked=${LEAKED:-none} cwd=$(pwd) gpus=$CUDA_VISIBLE_DEVICES"'
    second = submit(
        server,
        *("--slices", "3", "--workers", "2", "--per-worker", "2", "--workdir", str(tmp_path)),
        *("--", "sh", "-c", probe),
    )
    row = server.wait(second, "succeeded", timeout=30)
    reused = pooled_actors(server, first)
    assert len(reused) == 2 and reused <= pooled_actors(server, second)
    for p in row["placement"]:
        text = server.cli("logs", second, "--worker", str(p["worker"]), admin=True).stdout
        gpus = ",".join(map(str, p["gpus"]))
        assert f"leaked=none cwd={tmp_path} gpus={gpus}" in text, text


def test_a_killed_worker_host_loses_the_attempt_not_hangs_it(pool):
    """The process holding a worker (ray_host.py) dies without a word (the OOM killer): the
    attempt is lost and requeued, and what its worker left running is killed."""
    _, server = pool
    job = submit(server, "--per-worker", "4", "--", "sh", "-c", "echo up; sleep 300")
    server.wait(job, "running", timeout=30)
    wait_logged(server, job, 0, "up", workers=1)
    run = run_dir(server, job, 0)
    host = run_processes(run)[0].parent()
    assert "corral.executors.ray_host" in " ".join(host.cmdline()), host.cmdline()
    host.kill()
    row = server.wait(job, lambda j: j["attempt"] >= 1, timeout=20, what="requeued")
    lost = row["attempts"][0]
    # The worker was lost, not its node: the message says which and why.
    assert lost["state"] == "lost" and "worker 0 on node " in lost["message"], lost["message"]
    wait_gone(run)
    server.cli("cancel", job, admin=True)
    server.wait(job, "cancelled", timeout=20)


def test_dead_node_loses_its_gang_which_is_requeued(pool):
    cluster, server = pool
    job = submit(
        server, "--slices", "2", "--per-worker", "4", "--", "sh", "-c", "echo up; sleep 300"
    )
    row = server.wait(job, "running", timeout=30)
    wait_logged(server, job, 0, "up", workers=2)
    victim = next(p["node"] for p in row["placement"] if p["node"] != FIRST_NODES[0])
    LOST["node"] = victim
    killed = time.monotonic()
    cluster.nodes[victim].raylet().kill()
    row = server.wait(job, lambda j: j["attempt"] >= 1, timeout=10, what="requeued")
    requeued = time.monotonic() - killed
    first = row["attempts"][0]
    assert first["state"] == "lost" and victim in first["message"], first
    assert row["restarts"] == 0, "a lost attempt is not charged to max_restarts"
    wait_gone(run_dir(server, job, 0))
    wait_nodes(server, 2)
    print(f"node death to requeue: {requeued:.1f}s")
    # Two nodes are left, in two domains: an attempt runs on them. (One placed on the dead
    # node before Ray reported it gone is lost at once, and requeued again.)
    row = server.wait(
        job,
        lambda j: j["state"] == "running" and victim not in {p["node"] for p in j["placement"]},
        timeout=20,
    )
    assert row["restarts"] == 0
    server.cli("cancel", job, admin=True)
    server.wait(job, "cancelled", timeout=20)
    cluster.nodes[victim].kill()


def test_a_node_that_joins_takes_work(pool):
    cluster, server = pool
    wait_nodes(server, 2)
    full = submit(server, "--slices", "2", "--per-worker", "4", "--", "sleep", "300")
    server.wait(full, "running", timeout=30)
    job = submit(server, "--per-worker", "4", "--", "echo", "hi")
    time.sleep(0.5)
    assert server.job(job)["state"] == "pending"
    joiner = f"{domain_of(LOST['node'])}-1"  # a new node where the dead one was
    cluster.start(joiner, domain_of(joiner), accelerator=TPU)
    cluster.wait(joiner)
    wait_nodes(server, 3)
    joined = time.monotonic()
    row = server.wait(job, "succeeded", timeout=30)
    assert [p["node"] for p in row["placement"]] == [joiner]
    print(f"node join to job done: {time.monotonic() - joined:.1f}s")
    server.cli("cancel", full, admin=True)
    server.wait(full, "cancelled", timeout=20)


def test_kueue_tutorial_jobsets_on_a_six_node_pool_in_three_domains(pool):
    """The tutorial's three JobSets, as files: 3 slices alone first, then 1 and 2 together."""
    cluster, server = pool
    quota = server.state.parent / "quota.toml"
    quota.write_text(JOBSET_QUOTA)  # reloaded when it changes: the queue becomes a project
    # Three pools of 2 nodes: a node more in each pool that has one.
    alive = [n["name"] for n in wait_nodes(server, 3)]
    for domain in ("pool1", "pool2", "pool3"):
        if sum(domain_of(name) == domain for name in alive) < 2:
            name = f"{domain}-2"
            cluster.start(name, domain, accelerator=TPU)
            cluster.wait(name)
    wait_nodes(server, 6)
    three = submit_jobset(server, 3)
    server.wait(three, "running", timeout=30)
    one, two = submit_jobset(server, 1), submit_jobset(server, 2)
    assert server.job(one)["state"] == server.job(two)["state"] == "pending"  # no pool is free
    (server.state.parent / "bin" / "GO").touch()
    job3 = server.wait(three, "succeeded", timeout=60)
    job1 = server.wait(one, "succeeded", timeout=60)
    job2 = server.wait(two, "succeeded", timeout=60)
    assert domains_of(job3) == [{"pool1"}, {"pool2"}, {"pool3"}]
    for job in (job1, job2):
        assert job["started_at"] >= job3["finished_at"]
        assert job["project"] == "multislice-queue"
        assert job["resources"]["exclusive"] and job["resources"]["per_worker"] == 4
    # Together: each started before the other finished; between them they hold all 3 pools.
    assert job1["started_at"] < job2["finished_at"] and job2["started_at"] < job1["finished_at"]
    slices = domains_of(job1) + domains_of(job2)
    assert all(len(d) == 1 for d in slices) and set().union(*slices) == {"pool1", "pool2", "pool3"}
    assert "Global device count: 8" in server.cli("logs", one, admin=True).stdout
