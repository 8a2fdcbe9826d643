"""Benchmark one scheduling cycle of the core: `decide(snapshot, policy)` on a big queue.

    python bench/bench_core.py [--policy fair] [--jobs 10000] [--repeat 5] [--seed 0]

Setup: 1,000 nodes x 8 H100 in domains of 4 nodes (`1000x8:h100@4`); 50 projects with equal
shares, 3 users each; --jobs pending jobs with mixed priorities (-100/0/0/0/100) and gang
sizes 1, 2, 4, 8 (one worker) and 16, 32, 64 (2, 4, 8 workers x 8), submitted over an hour.

1. Full cycle: the cluster is empty and every job is pending, so the cycle admits as many as
   fit (thousands of placements) and gives every other job it examines a reason.
2. Steady state: the first cycle's starts are applied (snap.start), then --finish running
   jobs end and --more jobs arrive, as between two cycles of a busy simulation, and the next
   cycle is timed.

Each cycle is timed --repeat times on the same snapshot (decide is pure, so every repeat does
the same work); min and median are printed.

Admission decisions/s = pending jobs / (cycle time + time to give every job left pending its
reason): every job in the queue decided, started or told why it waits. The cycle itself gives
explicit reasons only to the jobs it starts or acts for (preempting, limits); the reason of a
blocked job is derived on request from the cycle's final state, and that cost is included.
Targets: full cycle < 100 ms, >= 20,000 admission decisions/s.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time

from corral.core.decide import decide
from corral.core.model import Decision, Job
from corral.core.policy import Policy
from corral.core.snapshot import Snapshot
from corral.formats import parse_cluster_shorthand
from corral.formats.types import Quota, Resources, SchedulerConfig
from corral.policies import load_policy

CLUSTER = "1000x8:h100@4"
ACCEL = "h100"
PROJECTS = 50
USERS_PER_PROJECT = 3
# (accelerators, workers x per_worker, weight): mostly small jobs, a tail of big gangs.
SHAPES = (
    (Resources(ACCEL, per_worker=1), 35),
    (Resources(ACCEL, per_worker=2), 15),
    (Resources(ACCEL, per_worker=4), 15),
    (Resources(ACCEL, per_worker=8), 15),
    (Resources(ACCEL, per_worker=8, workers=2), 10),
    (Resources(ACCEL, per_worker=8, workers=4), 6),
    (Resources(ACCEL, per_worker=8, workers=8), 4),
)
PRIORITIES = (-100, 0, 0, 0, 100)
TARGET_MS = 100.0
TARGET_RATE = 20_000.0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rng = random.Random(args.seed)
    policy = load_policy(SchedulerConfig(policy=args.policy))
    snap = policy.snapshot(parse_cluster_shorthand(CLUSTER), make_quota())
    for job in make_jobs(rng, args.jobs, prefix="j", t0=0.0):
        snap.submit(job)
    print(f"policy {args.policy}; {CLUSTER}; {PROJECTS} projects; {args.jobs} pending jobs")

    first = timed(snap, policy, args.repeat)
    show("full cycle (empty cluster)", first, snap)
    steady_state(snap, first[0], rng, args)
    second = timed(snap, policy, args.repeat)
    show(
        f"steady state (+{args.more} jobs, -{args.finish} running)",
        second,
        snap,
        targets=False,  # the targets are for the full cycle; this one does less work
    )
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", default="fair", help="fair, fifo, las, srtf or module:Class")
    p.add_argument("--jobs", type=int, default=10_000, help="pending jobs at the start")
    p.add_argument("--repeat", type=int, default=10, help="timings per cycle")
    p.add_argument("--more", type=int, default=200, help="jobs arriving before cycle 2")
    p.add_argument("--finish", type=int, default=50, help="running jobs ending before cycle 2")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def make_quota() -> Quota:
    projects = [f"p{i:02d}" for i in range(PROJECTS)]
    return Quota(
        shares={p: {ACCEL: 1.0} for p in projects},
        membership={p: tuple(f"{p}-u{u}" for u in range(USERS_PER_PROJECT)) for p in projects},
    )


def make_jobs(rng: random.Random, n: int, prefix: str, t0: float) -> list[Job]:
    shapes, weights = zip(*SHAPES, strict=True)
    jobs = []
    for i in range(n):
        project = f"p{rng.randrange(PROJECTS):02d}"
        resources = rng.choices(shapes, weights)[0]
        submit = t0 + rng.uniform(0.0, 3600.0)
        duration = rng.uniform(600.0, 36_000.0)  # srtf and las read these
        jobs.append(
            Job(
                id=f"{prefix}{i}",
                name=f"{prefix}{i}",
                project=project,
                user=f"{project}-u{rng.randrange(USERS_PER_PROJECT)}",
                priority=rng.choice(PRIORITIES),
                resources=resources,
                submit_time=submit,
                duration=duration,
                wait_since=submit,
            )
        )
    return jobs


def timed(snap: Snapshot, policy: Policy, repeat: int) -> tuple[Decision, list[float], list[float]]:
    """The decision, and the wall and CPU seconds of each of `repeat` identical cycles. CPU
    time is printed too because on a shared machine wall time includes other processes."""
    wall, cpu = [], []
    decision = Decision()
    for _ in range(max(repeat, 1)):
        gc.collect()  # start each repeat with the same heap, so the timings agree better
        began, began_cpu = time.perf_counter(), time.process_time()
        decision = decide(snap, policy)
        wall.append(time.perf_counter() - began)
        cpu.append(time.process_time() - began_cpu)
    return decision, wall, cpu


def all_reasons(snap: Snapshot, decision: Decision) -> tuple[int, float]:
    """Give every job left pending its reason, as `corral queue` does: (jobs, seconds)."""
    started = {s.job_id for s in decision.starts}
    waiting = [job for job_id, job in snap.pending.jobs.items() if job_id not in started]
    began = time.perf_counter()
    for job in waiting:
        decision.reason(job)
    return len(waiting), time.perf_counter() - began


def steady_state(snap: Snapshot, decision: Decision, rng: random.Random, args) -> None:
    """Apply the first decision, then let some jobs finish and more arrive, an hour later."""
    now = 3600.0
    snap.set_time(now)
    for start in decision.starts:
        snap.start(start.job_id, start.nodes, now)
    now += 600.0
    snap.set_time(now)
    ending = rng.sample(sorted(snap.running), min(args.finish, len(snap.running)))
    for job_id in ending:
        snap.stop(job_id)
    for job in make_jobs(rng, args.more, prefix="k", t0=now - 3600.0):
        snap.submit(job)


def show(
    label: str,
    result: tuple[Decision, list[float], list[float]],
    snap: Snapshot,
    targets: bool = True,
) -> None:
    decision, times, cpu = result
    queue = len(snap.pending)
    best, median = min(times), statistics.median(times)
    waiting, explain = all_reasons(snap, decision)
    print(f"\n{label}")
    print(f"  pending before     {queue}")
    print(f"  started            {len(decision.starts)}")
    print(f"  preempted          {len(decision.preemptions)}")
    print(f"  cycle time         min {best * 1e3:.1f} ms, median {median * 1e3:.1f} ms (wall)")
    cpu_best, cpu_median = min(cpu), statistics.median(cpu)
    print(f"  cycle CPU time     min {cpu_best * 1e3:.1f} ms, median {cpu_median * 1e3:.1f} ms")
    print(f"  reasons of the rest {explain * 1e3:.1f} ms for {waiting} jobs")
    rate = queue / (best + explain)
    print(f"  decisions/s        {rate:,.0f} ({queue} jobs / (cycle + reasons), at min)")
    if not targets:
        return
    meets = best * 1e3 < TARGET_MS and rate >= TARGET_RATE
    print(f"  targets            {'met' if meets else 'NOT met'} (< 100 ms, >= 20,000/s)")


if __name__ == "__main__":
    sys.exit(main())
