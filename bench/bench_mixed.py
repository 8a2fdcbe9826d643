"""Replay a synthetic workload with everything that makes placement hard, per policy.

    python bench/bench_mixed.py [--jobs 8000] [--policy fair,fifo,las,srtf]

The workload is mixed_workload.py's mixed one: 32 V100 nodes in four domains of 8 plus four A100
nodes; priorities, several users in a project, max_runtime, non-preemptible, exclusive and
two-slice gangs, and projects with no guarantee. Each policy replays it once as events come
(`round off`) and once in 300 s rounds with a 30 s restart penalty (`round 300`).

Per run it prints the CPU time of the simulation, the cycles, the CPU time per cycle and a
hash of the event log (a change meant only to make the core faster must leave it unchanged).
It prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from bench_sim import events_hash
from mixed_workload import cluster, quota, workload

from corral.core import cycle
from corral.formats.types import SchedulerConfig
from corral.policies import load_policy
from corral.sim.engine import SimOptions, Simulator

RUNS = {"off": SimOptions(), "300": SimOptions(restart_penalty=30.0, round_s=300.0)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=8000)
    p.add_argument("--policy", default="fair,fifo,las,srtf", help="comma list")
    args = p.parse_args(argv)
    compiled = not cycle.__file__.endswith(".py")
    print("core: " + ("compiled with mypyc" if compiled else "plain Python (not compiled)"))
    jobs = workload(args.jobs, True, random.Random(1))
    print(f"{len(jobs)} jobs; {len(cluster(True))} nodes")
    print(f"{'policy':8} {'round':>5} {'CPU s':>7} {'cycles':>7} {'us/cycle':>9}  event log hash")
    for rounds, options in RUNS.items():
        for name in args.policy.split(","):
            policy = load_policy(SchedulerConfig(policy=name.strip()))
            sim = Simulator(cluster(True), quota(), jobs, policy, options)
            began = time.process_time()
            result = sim.run()
            cpu = time.process_time() - began
            per_cycle = 1e6 * cpu / max(1, result.cycles)
            print(
                f"{name:8} {rounds:>5} {cpu:7.2f} {result.cycles:7d} {per_cycle:9.0f}  "
                f"{events_hash(result.events)}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
