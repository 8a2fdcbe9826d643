"""SlotCounter: what-if searches (victims, reservations) count worker slots as running jobs are
released and try a placement only once the job could fit. Where the job's type lies in several
domains, or domains may be closed to it, the count is kept per domain, so "could fit" is what
placement finds: not true while the free slots are split across domains, which once made a
search place after every release.
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


def _pool(exclusive_runs: bool = False) -> tuple[Snapshot, dict[str, Running]]:
    """Two domains of two 8-GPU nodes, each node full with a one-node job (`rDN` on node
    `nDxN`); with `exclusive_runs`, r00 and r10 hold their domains alone."""
    nodes = [Node(f"n{d}x{i}", "gpu", 8, f"d{d}") for d in range(2) for i in range(2)]
    snap = Snapshot(nodes, parse_quota(quota({"p": {"gpu": 1}})))
    runs = {}
    for d in range(2):
        for i in range(2):
            name = f"r{d}{i}"
            exclusive = exclusive_runs and i == 0
            snap.submit(Job(name, name, "p", "p", 0, Resources("gpu", 8, exclusive=exclusive), 0))
            runs[name] = snap.start(name, [f"n{d}x{i}"], 0.0)
    return snap, runs


def _gang(workers: int, slices: int = 1, exclusive: bool = False) -> Job:
    resources = Resources("gpu", 8, workers=workers, slices=slices, exclusive=exclusive)
    return Job("g", "g", "p", "p", 0, resources, 0.0)


def test_slots_split_across_domains_are_not_enough_for_a_gang():
    snap, runs = _pool()
    counter = SlotCounter(Cycle(snap).probe(), _gang(workers=2), long=False)
    assert not counter.release(runs["r00"])
    assert not counter.release(runs["r10"])  # two free nodes, but one in each domain
    assert counter.release(runs["r01"])  # both nodes of d0


def test_each_slice_of_a_gang_takes_a_domain_with_room_for_it():
    snap, runs = _pool()
    counter = SlotCounter(Cycle(snap).probe(), _gang(workers=2, slices=2), long=False)
    for name in ("r00", "r01", "r10"):
        assert not counter.release(runs[name])
    assert counter.release(runs["r11"])


def test_an_exclusive_job_needs_a_domain_with_no_worker_left():
    snap, runs = _pool()
    counter = SlotCounter(Cycle(snap).probe(), _gang(workers=1, exclusive=True), long=False)
    assert not counter.release(runs["r00"])  # a free node, but r01 is still in d0
    assert not counter.release(runs["r10"])
    assert counter.release(runs["r01"])


def test_a_domain_closed_by_an_exclusive_job_opens_when_it_is_released():
    snap, runs = _pool(exclusive_runs=True)  # r00 and r10 hold their domains alone
    counter = SlotCounter(Cycle(snap).probe(), _gang(workers=1), long=False)
    assert not counter.release(runs["r01"])  # a free node in d0, which r00 keeps closed
    assert not counter.release(runs["r11"])
    assert counter.release(runs["r00"])


def _checking(base: type[Policy], seen: list[int]) -> Policy:
    """`base`, checking at every victim search that the counter, released run by run with
    each release applied, says "enough" exactly when the job then places. A subclass, so the
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
        assert enough == fits, f"t={cycle.snap.now} job={job.id} after releasing {run.job.id}"
        if counter.domains is not None:
            seen[0] += 1
            seen[1] += enough


@pytest.mark.parametrize("policy", [Fair, Las, Srtf])
@pytest.mark.parametrize("domains", [2, 3])
def test_the_count_is_what_placement_finds_in_busy_pools_with_domains(policy, domains):
    seen = [0, 0]  # checks made per domain; of them, "enough"
    for seed in range(4):
        scenario = load(busy(seed, policy.name, domains))
        simulate(scenario, _checking(policy, seen))
    assert seen[0] > 100 and 0 < seen[1] < seen[0]
