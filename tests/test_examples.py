"""Every scenario in examples/ loads, runs, passes check_invariants, and does what its comment
header says it shows."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from simkit import brief, events, load, preempted, run_checked, show, simulate, start_of, starts

from corral.policies import load_policy

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ALL = sorted(p.name for p in EXAMPLES.glob("*.yaml"))


def run(name: str):
    return run_checked(EXAMPLES / name)


@pytest.mark.parametrize("name", ALL)
def test_every_example_runs_and_explains_itself(name):
    text = (EXAMPLES / name).read_text()
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert len(header) >= 5 and "look for" in text, f"{name}: comment header missing"
    r = run(name)
    assert r.events, name


def test_required_examples_exist():
    for name in (
        "jobset-exclusive.yaml",
        "bastion-borrow.yaml",
        "reservation.yaml",
        "backfill.yaml",
        "reclaim.yaml",
        "priority.yaml",
        "user-round-robin.yaml",
        "rejection.yaml",
        "fair-share.yaml",
    ):
        assert name in ALL


def test_jobset_exclusive():
    # The 3-slice job runs alone first; then the 1- and 2-slice jobs run together, every
    # slice on a pool of its own.
    r = run("jobset-exclusive.yaml")
    every_pool = ("pool1-0", "pool1-1", "pool2-0", "pool2-1", "pool3-0", "pool3-1")
    assert brief(r, "start") == [
        (0, "start", "js-3slice", every_pool),
        (600, "start", "js-1slice", ("pool1-0", "pool1-1")),
        (600, "start", "js-2slice", ("pool2-0", "pool2-1", "pool3-0", "pool3-1")),
    ], show(r)


def _usage_timeline(r, project: str, per_job: dict[str, int]) -> list[tuple[float, int]]:
    """(t, chips held by the project) after each instant's events."""
    held, out = 0, []
    for e in r.events:
        if e["project"] != project:
            continue
        if e["event"] == "start":
            held += per_job[e["job"]]
        elif e["event"] in ("preempt", "finish", "fail"):
            held -= per_job[e["job"]]
        if out and out[-1][0] == e["t"]:
            out[-1] = (e["t"], held)
        else:
            out.append((e["t"], held))
    return out


def test_bastion_borrow():
    scenario = load(EXAMPLES / "bastion-borrow.yaml")
    r = simulate(scenario)
    assert r.guarantees == {"project1": {"v4": pytest.approx(614.4)}, "project2": {"v4": 409.6}}
    chips = {sj.spec.name: sj.spec.resources.total for sj in scenario.jobs}
    # project2 borrows the whole pool
    assert sorted(j for t, j, _ in starts(r) if t < 600) == [f"p2-{i:02d}" for i in range(16)]
    # project1 comes back: exactly 8 victims for the 512-chip job, most recent first, and the
    # job starts at once on their hosts
    assert preempted(r)[:8] == [(600, f"p2-{i:02d}") for i in range(15, 7, -1)], show(r)
    t, hosts = start_of(r, "train-512")
    assert t == 600 and hosts == [f"v4-{i:03d}" for i in range(64, 128)]
    # one more for eval-a; eval-b would take project1 beyond its guarantee: no victim for it
    assert preempted(r)[8:] == [(900, "p2-07")], show(r)
    assert start_of(r, "eval-a")[0] == 900 and start_of(r, "eval-b")[0] == 1500
    reasons = {e["reason"] for e in events(r, "preempt")}
    assert reasons == {
        f"reclaimed by project project1 for job {j} (within its guarantee; the victim's"
        " project is above its own)"
        for j in ("train-512", "eval-a")
    }
    # project2 never drops below its 40% (409.6 chips) once it has borrowed
    timeline = _usage_timeline(r, "project2", chips)
    after = [held for t, held in timeline if 15 <= t < 3600]
    assert min(after) == 448 and min(after) >= 409.6, timeline
    # and project1 never holds more than its guarantee while project2 waits
    p1 = _usage_timeline(r, "project1", chips)
    assert max(held for _, held in p1) == 576


def test_reservation_protects_the_big_gang():
    r = run("reservation.yaml")
    assert start_of(r, "pretrain") == (250, ["n0", "n1"]), show(r)
    sweeps = [t for t, j, _ in starts(r) if j.startswith("sweep")]
    assert min(sweeps) >= 350, show(r)
    assert [j for _, j, _ in starts(r) if j.startswith("sweep")] == sorted(
        j for _, j, _ in starts(r) if j.startswith("sweep")
    )


def test_backfill_uses_held_capacity_without_delaying_the_gang():
    r = run("backfill.yaml")
    assert start_of(r, "pretrain") == (250, ["n0", "n1"]), show(r)
    assert start_of(r, "sweep-00") == (100, ["n0"]), show(r)
    assert start_of(r, "sweep-01")[0] == 150, show(r)
    late = [t for t, j, _ in starts(r) if j.startswith("sweep") and j >= "sweep-02"]
    assert min(late) >= 350, show(r)


def test_reclaim():
    r = run("reclaim.yaml")
    assert preempted(r) == [(20, "v-low"), (20, "v4"), (20, "v3"), (20, "s3")], show(r)
    assert start_of(r, "rl-gang") == (20, ["gpu-0", "gpu-3", "gpu-4", "gpu-7", "gpu-9"])
    back = [j for t, j, _ in starts(r) if t == 120]
    assert back == ["s3", "v3", "v4", "v-low"], show(r)


def test_priority():
    r = run("priority.yaml")
    assert preempted(r) == [(10, "l2"), (10, "l4")], show(r)
    assert start_of(r, "urgent") == (10, ["gpu-1", "gpu-3"])
    assert [j for t, j, _ in starts(r) if t == 110] == ["l4", "normal-late"], show(r)
    assert start_of(r, "l2", attempt=1)[0] == 210
    ends = {e["job"]: e["t"] for e in events(r, "finish")}
    assert ends["l4"] == 1104, show(r)


def test_user_round_robin():
    r = run("user-round-robin.yaml")
    assert [(t, j) for t, j, _ in starts(r)] == [
        (0, "warmup"),
        (100, "carol-hi"),
        (100, "alice-1"),
        (100, "bob-1"),
        (100, "bob-2"),
        (200, "alice-2"),
        (200, "bob-3"),
    ], show(r)


def test_rejection():
    r = run("rejection.yaml")
    reasons = {e["job"]: e["reason"] for e in events(r, "reject")}
    assert reasons == {
        "wrong-type": "unknown accelerator 'h100' (this pool has: gpu)",
        "too-wide": "needs 16 gpu per worker; the largest node has 8",
        "too-big": "needs 40 gpu in all; the pool has 32",
        "three-racks": "needs 3 exclusive domains that each hold 1 workers; the pool has 2",
        "wide-slice": (
            "a slice needs 3 workers with 8 gpu each in one domain; the largest domain holds 2"
        ),
        "over-limit": "needs 16 gpu; project interns is limited to 8",
        "pinned-big": (
            "non-preemptible jobs run only within the guarantee: needs 32 gpu,"
            " project research is guaranteed 16"
        ),
    }
    assert all(e["t"] == 0 for e in events(r, "reject"))
    assert start_of(r, "fits") == (0, ["rack1-0", "rack1-1", "rack2-0", "rack2-1"])


def test_fair_share():
    r = run("fair-share.yaml")
    at_100 = [j for t, j, _ in starts(r) if t == 100]
    assert at_100 == ["r1", "r2", "r3", "p1", "r4", "r5", "r6", "p2"], show(r)
    split = Counter(j[0] for j in at_100)
    assert split == {"r": 6, "p": 2}


def test_examples_use_a_policy_that_loads():
    for name in ALL:
        scenario = load(EXAMPLES / name)
        policy = load_policy(scenario.quota.scheduler)
        policy.snapshot(scenario.nodes, scenario.quota)
