"""The synthetic workloads bench/bench_mixed.py replays (and the tests' busy pools): one like
the Philly trace on a smaller pool (mostly 1-GPU jobs, some whole-node gangs, one user per
project, a little more work than the pool can serve), and a smaller one with the rest of what
the core handles: two accelerator types and domains, priorities, several users in a project,
max_runtime, non-preemptible and exclusive jobs, multi-slice gangs. Both have projects with no
guarantee.
"""

from __future__ import annotations

import random

from corral.formats.types import JobSpec, Node, Quota, Resources, ScenarioJob

SIZES = {1: 930, 2: 22, 4: 23, 8: 20, 16: 3, 32: 1}  # GPUs -> weight (Philly's mix)
GPUS_PER_NODE = 8
PROJECTS = [f"team{i}" for i in range(12)]


def cluster(mixed: bool) -> list[Node]:
    """32 nodes of 8 V100; `mixed`: in four domains, plus four A100 nodes."""
    if not mixed:
        return [Node(f"v{i}", "v100", GPUS_PER_NODE) for i in range(32)]
    v100 = [Node(f"v{i}", "v100", GPUS_PER_NODE, f"rack{i // 8}") for i in range(32)]
    return v100 + [Node(f"a{i}", "a100", GPUS_PER_NODE) for i in range(4)]


def quota() -> Quota:
    # The last two projects have no guarantee: they only borrow.
    shares = {p: {"v100": float(i + 1), "a100": 1.0} for i, p in enumerate(PROJECTS[:-2])}
    membership = {p: (rf"{p}(-u\d)?",) for p in PROJECTS}
    priorities = {"low": -1, "normal": 0, "high": 10}
    return Quota(shares=shares, membership=membership, priority_classes=priorities)


def workload(n: int, mixed: bool, rng: random.Random) -> list[ScenarioJob]:
    """A little more work than the pool can serve; `mixed`: with every kind of job."""
    sizes, weights = list(SIZES), list(SIZES.values())
    jobs, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(1 / 40.0)
        project = rng.choice(PROJECTS)
        gpus = rng.choices(sizes, weights)[0]
        per_worker = min(gpus, GPUS_PER_NODE)
        odd = mixed and rng.random() < 0.1
        slices = 2 if odd and gpus >= 16 else 1
        resources = Resources(
            "a100" if odd and gpus < 8 else "v100",
            per_worker,
            workers=max(1, gpus // per_worker // slices),
            slices=slices,
            exclusive=odd and gpus >= 8,
        )
        spec = JobSpec(
            name=f"job{i}",
            project=project,
            resources=resources,
            priority=rng.choices(["normal", "high", "low"], [90, 5, 5])[0] if mixed else 0,
            preemptible=not (odd and gpus == 1),
            max_runtime=rng.uniform(600, 36000) if odd and gpus == 2 else None,
        )
        user = f"{project}-u{rng.randrange(2)}" if mixed and project in PROJECTS[:3] else project
        duration = 60 * 10 ** rng.uniform(0.5, 3)
        jobs.append(ScenarioJob(spec=spec, user=user, submit=t, duration=duration))
    return jobs
