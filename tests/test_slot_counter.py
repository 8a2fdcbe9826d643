"""SlotCounter: what-if searches (victims, reservations) count worker slots as running jobs are
released and try a placement only once the job could fit. The count is over all domains: a
bound (never "not enough" where placement would find room), exact in one domain with no
exclusive job.
"""

from __future__ import annotations

import pytest
from simkit import load, quota, simulate
from test_plan_memo import busy

from corral.core.cycle import Cycle
from corral.core.fit import place
from corral.core.model import Job, Running
from corral.core.policy import Policy
from corral.core.slots import SlotCounter
from corral.core.snapshot import Snapshot
from corral.formats import parse_quota
from corral.formats.types import Node, Resources
from corral.policies.fair import Fair
from corral.policies.las import Las
from corral.policies.srtf import Srtf


def _pool() -> tuple[Snapshot, dict[str, Running]]:
    """Two domains of two 8-GPU nodes, each node full with a one-node job (`rDN` on node
    `nDxN`)."""
    nodes = [Node(f"n{d}x{i}", "gpu", 8, f"d{d}") for d in range(2) for i in range(2)]
    snap = Snapshot(nodes, parse_quota(quota({"p": {"gpu": 1}})))
    runs = {}
    for d in range(2):
        for i in range(2):
            name = f"r{d}{i}"
            snap.submit(Job(name, name, "p", "p", 0, Resources("gpu", 8), 0))
            runs[name] = snap.start(name, [f"n{d}x{i}"], 0.0)
    return snap, runs


def _gang(workers: int, slices: int = 1, exclusive: bool = False) -> Job:
    resources = Resources("gpu", 8, workers=workers, slices=slices, exclusive=exclusive)
    return Job("g", "g", "p", "p", 0, resources, 0.0)


def test_slots_count_over_all_domains_and_placement_says_the_rest():
    snap, runs = _pool()
    probe = Cycle(snap).probe()
    job = _gang(workers=2)
    counter = SlotCounter(probe, job, long=False)
    assert not counter.release(runs["r00"])
    assert counter.release(runs["r10"])  # two free nodes, one in each domain: a bound
    counter.apply()
    assert place(probe, job, False) is None
    assert counter.release(runs["r01"])  # both nodes of d0
    counter.apply()
    assert place(probe, job, False) is not None


def _checking(base: type[Policy], seen: list[int]) -> Policy:
    """`base`, checking at every victim search that the counter, released run by run with
    each release applied, says "enough" whenever the job then places. A subclass, so the
    check runs on the compiled core too."""

    class Checking(base):  # type: ignore[misc, valid-type]
        def victims(self, cycle: Cycle, job: Job):
            _check_counter(cycle, job, seen)
            return super().victims(cycle, job)

    return Checking()


def _check_counter(cycle: Cycle, job: Job, seen: list[int]) -> None:
    probe = cycle.probe()
    long = cycle.reservation is not None and job is not cycle.reserver
    counter = SlotCounter(probe, job, long)
    runs = [
        r
        for r in cycle.snap.running.values()
        if r.job.accelerator == job.accelerator and not r.terminating
    ]
    for run in runs:
        enough = counter.release(run)
        counter.apply()
        fits = place(probe, job, long) is not None
        assert enough or not fits, f"t={cycle.snap.now} job={job.id} after {run.job.id}"
        seen[0] += 1
        seen[1] += fits


@pytest.mark.parametrize("policy", [Fair, Las, Srtf])
@pytest.mark.parametrize("domains", [2, 3])
def test_the_count_is_a_bound_on_what_placement_finds_in_busy_pools_with_domains(policy, domains):
    seen = [0, 0]  # checks made; of them, placed
    for seed in range(4):
        scenario = load(busy(seed, policy.name, domains))
        simulate(scenario, _checking(policy, seen))
    assert seen[0] > 100 and 0 < seen[1] < seen[0]
