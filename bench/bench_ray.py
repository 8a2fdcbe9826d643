"""Benchmark the Ray executor: submit-to-running latency, and a node's death to its gang requeued.

    sudo python bench/bench_ray.py [--jobs 20] [--deaths 2]

Starts, as the tests do (tests/raykit.py), a real Ray cluster of 3 nodes (4 fake GPUs each, one
domain each) inside a loopback-only network namespace, and `corral up --executor ray` on it.

1. Latency, in steady state (the pool of warm actors up, the first launches done): one
   single-worker job at a time, each waiting for the one before to finish; the time from
   running `corral submit` to the worker process running on its node (its first act is to
   write the wall clock), and the same from the API's receipt of the POST. p50 and p99, and
   the p50 of each step on the way. Anchor: Ray Jobs (`ray job submit`) takes 1.3-3.3 s here
   to start an entrypoint; target p50 <= 1 s.
2. Node death: a gang of 2 slices runs on two nodes; the raylet of the one that is not the
   head is SIGKILLed; the time until corral has the attempt `lost` and the job requeued, and
   until its next attempt runs. A fresh node joins again before the next round.

Needs root (ip netns) and Ray (pip install -e '.[test]').
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from conftest import TEAM_QUOTA, LiveServer, free_port  # noqa: E402
from raykit import Netns, RayCluster  # noqa: E402

from corral.executors.ray_executor import SPARES  # noqa: E402
from corral.executors.ray_pool import PER_NODE  # noqa: E402


def submit(server: LiveServer, *args: str) -> str:
    return json.loads(server.cli("submit", "--json", *args, admin=True).stdout)["id"]


# The steps from `corral submit` to the worker running, each timed from the one before:
# the CLI's start and POST (the API's submitted_at), the control loop's decision (started_at),
# then the supervisor's own steps (its run dir's phases.json), then the worker's first act.
STEPS = {
    "api": "CLI start + POST",
    "decided": "API to the control loop's decision",
    "taken": "decision to the supervisor having the run dir",
    "claimed": "pooled actors claimed",
    "placed": "placement group ready",
    "actors": "actors ready and ports picked",
    "running": "the start call to the worker running",
}


def latency(server: LiveServer, marks: Path, jobs: int) -> tuple[list[float], list[dict]]:
    took, steps = [], []
    for i in range(jobs):
        mark = marks / f"start-{i}"
        sent = time.time()
        job = submit(server, "--per-worker", "1", "--", "sh", "-c", f"date +%s.%N > {mark}")
        row = server.wait(job, "succeeded", timeout=60)
        running = float(mark.read_text())
        took.append(running - sent)
        phases = json.loads((server.state / "runs" / job / "0" / "phases.json").read_text())
        phases.pop("started", None)  # after the worker runs: ray.get returns later
        times = {"sent": sent, "api": row["submitted_at"], "decided": row["started_at"]}
        times |= phases | {"running": running}
        order = sorted(times, key=times.__getitem__)
        steps.append({b: times[b] - times[a] for a, b in itertools.pairwise(order)})
    return took, steps


def breakdown(steps: list[dict]) -> None:
    print("where it goes (p50 of each step, in order):")
    for name, what in STEPS.items():
        values = [s[name] for s in steps if name in s]
        if values:
            print(f"  {statistics.median(values):7.3f} s  {what}")


def warm_up(server: LiveServer) -> None:
    """Steady state: the pool's warm actors up on every node (where the Ray executor keeps
    them), then as many jobs as there are spare supervisors, so the spares in use started
    after the pool was up (they reach it ahead)."""
    pool = server.state / "ray" / "pool.json"
    deadline = time.monotonic() + 120
    while not pool.exists() or len(json.loads(pool.read_text())) < 3 * PER_NODE:
        assert time.monotonic() < deadline, "the pool of warm actors did not come up"
        time.sleep(0.2)
    for _ in range(SPARES):
        server.wait(submit(server, "--", "true"), "succeeded", timeout=60)


def node_death(server: LiveServer, cluster: RayCluster, spare: str) -> tuple[float, float]:
    job = submit(
        server, "--slices", "2", "--per-worker", "4", "--", "sh", "-c", "echo up; sleep 600"
    )
    row = server.wait(job, "running", timeout=60)
    logs = [server.state / "logs" / job / "0" / f"worker-{i}.log" for i in range(2)]
    deadline = time.monotonic() + 60
    while not all(log.exists() and "up" in log.read_text() for log in logs):
        assert time.monotonic() < deadline, "the gang did not start"
        time.sleep(0.1)
    victim = next(p["node"] for p in row["placement"] if p["node"] != "n1")
    start = time.monotonic()
    cluster.nodes[victim].raylet().kill()
    server.wait(job, lambda j: j["attempt"] >= 1, timeout=60, what="requeued")
    requeued = time.monotonic() - start
    server.wait(
        job,
        lambda j: j["state"] == "running" and victim not in {p["node"] for p in j["placement"]},
        timeout=60,
    )
    running = time.monotonic() - start
    server.cli("cancel", job, admin=True)
    server.wait(job, "cancelled", timeout=30)
    cluster.nodes[victim].kill()
    cluster.start(spare, spare)
    cluster.wait(spare)
    return requeued, running


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--deaths", type=int, default=2)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    netns = Netns()
    cluster = RayCluster(root)
    server = None
    try:
        for name in ("n1", "n2", "n3"):
            cluster.start(name, name)
            cluster.wait(name)
        quota = root / "quota.toml"
        quota.write_text(TEAM_QUOTA + '[scheduler]\npreempt_grace = "2s"\n')
        flags = ["--executor", "ray", "--ray-address", cluster.address, "--quota", str(quota)]
        flags += ["--run-as", "corral"]
        server = LiveServer(root / "state", free_port(), flags).start(timeout=120)
        marks = root / "marks"
        marks.mkdir()
        warm_up(server)
        took, steps = latency(server, marks, args.jobs)
        print(
            f"submit to worker running ({args.jobs} jobs, one at a time): "
            f"p50 {statistics.median(took):.3f} s, p99 {pct(took, 0.99):.3f} s, "
            f"min {min(took):.3f} s, max {max(took):.3f} s; load {os.getloadavg()[0]:.1f}"
        )
        api = [t - s["api"] for t, s in zip(took, steps, strict=True)]
        print(
            f"  of which after the POST (without the CLI's start): "
            f"p50 {statistics.median(api):.3f} s, p99 {pct(api, 0.99):.3f} s"
        )
        breakdown(steps)
        for i in range(args.deaths):
            requeued, running = node_death(server, cluster, f"n{4 + i}")
            print(
                f"node death {i + 1}: raylet SIGKILL to attempt lost and job requeued "
                f"{requeued:.2f} s; to its next attempt running elsewhere {running:.2f} s"
            )
    finally:
        if server is not None:
            server.cancel_all()
            server.stop()
        cluster.close()
        netns.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
