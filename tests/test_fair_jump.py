"""fair's walk jumps over runs of jobs that can do nothing (Fair._next_stop): the decisions, and
the jobs each cycle yields in order, must be exactly those of the walk that pops every job.
Deep one-user queues of mixed shapes, some whole-node jobs that never fit beside borrowers,
projects whose keys interleave or tie, and one project with two priorities (its queue is
walked job by job)."""

from __future__ import annotations

import random
from collections.abc import Iterator

from simkit import job, load, quota, simulate

from corral.core.cycle import Cycle
from corral.core.model import Job
from corral.policies.fair import Fair


class Recording(Fair):
    """fair, recording the jobs each cycle's walk yields, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.walks: list[list[str]] = []

    def order(self, cycle: Cycle) -> Iterator[Job]:
        walk: list[str] = []
        self.walks.append(walk)
        for pending in super().order(cycle):
            walk.append(pending.id)
            yield pending


class Counting(Recording):
    """fair, counting the jumps it looks for."""

    def __init__(self) -> None:
        super().__init__()
        self.looked = 0

    def _next_stop(self, answers, queue, project, bound, within):  # type: ignore[no-untyped-def]
        self.looked += 1
        return super()._next_stop(answers, queue, project, bound, within)


class JobByJob(Recording):
    """fair with the jumps turned off: the walk pops every job."""

    def __init__(self) -> None:
        super().__init__()
        self.jumps = False


def deep_queues(seed: int) -> dict:
    rng = random.Random(seed)
    jobs = []
    for i in range(160):
        project = rng.choice(["a", "a", "b", "c", "d"])
        extra = {"priority": rng.choice([0, 5])} if project == "d" else {}
        jobs.append(
            job(
                f"j{i:03d}",
                project,
                rng.choice([1, 1, 2, 4, 8, 8]),
                workers=rng.choice([1, 1, 2]),
                submit=rng.choice([0, 0, 0, 30]) + 20 * (i // 8),
                duration=rng.choice([50, 200, 700, 3000]),
                **extra,
            )
        )
    cluster = [{"name": "n{0..3}", "accelerator": "gpu", "count": 8}]
    q = quota({"a": {"gpu": 3}, "b": {"gpu": 1}, "c": {"gpu": 1}, "d": {"gpu": 1}})
    return {"cluster": cluster, "quota": q, "jobs": jobs}


def twin_queues(seed: int) -> dict:
    """Two projects with equal shares submit the same jobs at the same instants, so their
    keys often tie on share and submit time and the project name decides."""
    rng = random.Random(seed)
    jobs = []
    for i in range(60):
        per, t, d = rng.choice([1, 2, 8, 8]), 15 * (i // 3), rng.choice([40, 300, 900])
        for project in ("b", "c"):
            jobs.append(job(f"{project}{i:02d}", project, per, submit=t, duration=d))
        if i % 4 == 0:
            jobs.append(job(f"a{i:02d}", "a", 8, workers=2, submit=t, duration=500))
    cluster = [{"name": "n{0..3}", "accelerator": "gpu", "count": 8}]
    q = quota({"a": {"gpu": 2}, "b": {"gpu": 1}, "c": {"gpu": 1}})
    return {"cluster": cluster, "quota": q, "jobs": jobs}


def test_jumping_walk_decides_as_the_walk_that_pops_every_job():
    looked = 0
    for seed in range(8):
        for scenario in (load(deep_queues(seed)), load(twin_queues(seed))):
            counting, job_by_job = Counting(), JobByJob()
            events = simulate(scenario, counting).events
            assert events == simulate(scenario, job_by_job).events
            assert counting.walks == job_by_job.walks  # the same jobs looked at, in order
            looked += counting.looked
    assert looked > 100  # the jumps are exercised


def test_a_subclass_with_its_own_queue_key_is_walked_job_by_job():
    class Newest(Counting):
        def queue_key(self, job: Job) -> tuple:
            return (-job.submit_time, job.name)

    policy = Newest()
    assert not policy.jumps
    simulate(load(deep_queues(0)), policy)
    assert policy.looked == 0
