"""The snapshot's incremental indexes agree with the jobs they index, whatever the order of
changes, and a driver's bad call changes nothing."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from simkit import quota

from corral.core.model import Job
from corral.core.queues import SortedQueue
from corral.core.snapshot import Snapshot, victim_order
from corral.formats import Node, Resources, parse_quota


def _snapshot(n_nodes: int = 4) -> Snapshot:
    q = parse_quota(quota({"a": {"gpu": 1}, "b": {"gpu": 1}}))
    return Snapshot([Node(f"n{i}", "gpu", 8) for i in range(n_nodes)], q)


def _job(name: str, project: str = "a", per: int = 1, **kw) -> Job:
    submit = kw.pop("submit", 0.0)
    return Job(
        name,
        name,
        project,
        kw.pop("user", "u"),
        kw.pop("priority", 0),
        Resources(kw.pop("accel", "gpu"), per),
        submit,
        **kw,
    )


def test_running_by_end_orders_by_declared_end_then_oldest_then_id():
    snap = _snapshot()
    # Started out of time order (as a restarted server reloads them), with ties at t=5.
    plan = [
        ("late", 9.0, None),
        ("b5", 5.0, None),
        ("a5", 5.0, None),
        ("first", 1.0, None),
        ("bounded-late", 0.0, 100.0),
        ("bounded-soon", 2.0, 10.0),
    ]
    for name, t, limit in plan:
        snap.submit(_job(name, max_runtime=limit))
        snap.start(name, ["n0"], t)
    order = [run.job.id for run in snap.running_by_end]
    assert order == ["bounded-soon", "bounded-late", "first", "a5", "b5", "late"]
    snap.stop("a5")
    assert [run.job.id for run in snap.running_by_end][2:] == ["first", "b5", "late"]


def test_running_by_end_ties_at_one_instant_sort_by_id_in_time_order():
    snap = _snapshot()
    for name, t in [("x", 1.0), ("c", 3.0), ("b", 3.0), ("a", 4.0)]:
        snap.submit(_job(name))
        snap.start(name, ["n1"], t)
    assert [run.job.id for run in snap.running_by_end] == ["x", "b", "c", "a"]


def test_lazy_indexes_match_a_rebuild_after_random_changes():
    rng = random.Random(7)
    snap = _snapshot()
    _ = snap.pending.all  # built now, then kept up to date
    n = 0
    for _step in range(400):
        pending, running = list(snap.pending.jobs), list(snap.running)
        roll = rng.random()
        if roll < 0.45 or not pending and not running:
            n += 1
            job = _job(
                f"j{n}",
                rng.choice("ab"),
                rng.choice([1, 2, 4]),
                user=rng.choice(["u", "v"]),
                priority=rng.choice([0, 1]),
                submit=float(rng.randint(0, 50)),
            )
            snap.submit(job)
        elif roll < 0.75 and pending:
            job = snap.pending.jobs[rng.choice(pending)]
            free = [f"n{i}" for i, f in enumerate(snap.free) if f >= job.per_worker]
            if free:
                snap.set_time(snap.now + 1)
                snap.start(job.id, [rng.choice(free)], snap.now)
        elif running:
            snap.stop(rng.choice(running))
        if _step == 200:
            _ = snap.pending.by_user, snap.pending.by_shape, snap.preemptible  # built mid-way
            _ = snap.pending.by_user_shape
        for project in "ab":  # summaries kept across changes, and right after each one
            _check_summary(snap, project)
        _check_summary(snap, None)
    key = snap.pending.key
    expected = sorted(snap.pending.jobs.values(), key=key)
    assert list(snap.pending.all) == expected
    for shape, queue in snap.pending.by_shape.items():
        assert list(queue) == [j for j in expected if j.shape == shape]
    for project, users in snap.pending.by_user.items():
        for user, queue in users.items():
            mine = [j for j in expected if (j.project, j.user) == (project, user)]
            assert list(queue) == mine
    for (project, user), shapes in snap.pending.by_user_shape.items():
        for shape, queue in shapes.items():
            mine = [j for j in expected if (j.project, j.user, j.shape) == (project, user, shape)]
            assert mine and list(queue) == mine
    for projects in snap.preemptible.values():
        for project, runs in projects.items():
            mine = [r for r in snap.running.values() if r.job.project == project]
            assert list(runs) == sorted(mine, key=victim_order)
    assert sum(len(q) for q in snap.pending.by_shape.values()) == len(snap.pending)
    priorities = {}
    for job in expected:
        priorities.setdefault(job.project, Counter())[job.priority] += 1
    assert snap.pending.priorities == priorities


def test_counts_match_a_recount_after_every_change():
    """The plain-dict counts (usage, pending demand, priorities...), the global priority
    counts behind `outrank_possible`, the projects with room within their guarantee and the
    projects per worker size (`fewest_by_size`), checked against a recount after every
    change: built from the start in one snapshot, first asked for mid-way in the other."""
    rng = random.Random(11)
    nodes = [Node(f"g{i}", "gpu", 8) for i in range(3)] + [Node("t0", "tpu", 4)]
    q = parse_quota(quota({"a": {"gpu": 1, "tpu": 1}, "b": {"gpu": 1}}))
    eager, lazy = Snapshot(nodes, q), Snapshot(nodes, q)
    _ = eager.preemptible_sizes, eager.running_priorities
    outranks, rooms = set(), set()
    n = 0
    for step in range(600):
        pending, running = list(eager.pending.jobs), list(eager.running)
        roll = rng.random()
        if roll < 0.45 or not pending and not running:
            n += 1
            job = _job(
                f"j{n}",
                rng.choice("abc"),
                rng.choice([1, 2, 4]),
                accel=rng.choice(["gpu", "gpu", "tpu"]),
                priority=rng.choice([-1, 0, 0, 2, 5]),
                preemptible=rng.random() < 0.8,
                max_runtime=rng.choice([None, 100.0]),
            )
            for snap in (eager, lazy):
                snap.submit(job)
        elif roll < 0.6 and pending:
            for snap in (eager, lazy):
                snap.withdraw(pending[0])
        elif roll < 0.85 and pending:
            job = eager.pending.jobs[rng.choice(pending)]
            free = [
                eager.cluster.nodes[i].name
                for i, f in enumerate(eager.free)
                if f >= job.per_worker and eager.cluster.accelerator_of[i] == job.accelerator
            ]
            if free:
                where = [rng.choice(free)]
                for snap in (eager, lazy):
                    snap.start(job.id, where, float(step))
        elif running:
            victim = rng.choice(running)
            for snap in (eager, lazy):
                snap.stop(victim)
        if step == 300:
            _ = lazy.preemptible_sizes
            _ = lazy.running_priority_counts  # (builds running_priorities too)
        rooms.add(_check_counts(eager))
        if step >= 300:
            _check_counts(lazy)
        else:
            assert lazy.pending.priority_counts == eager.pending.priority_counts
        outranks.add(eager.outrank_possible())
    assert outranks == {True, False}  # both answers were checked
    assert rooms == {True, False}


def _check_counts(snap: Snapshot) -> bool:
    pending = list(snap.pending.jobs.values())
    runs = [r.job for r in snap.running.values()]
    victims = [job for job in runs if job.preemptible]

    def count(keys) -> dict:
        out: dict = {}
        for key in keys:
            out[key] = out.get(key, 0) + 1
        return out

    def by(jobs, outer, inner) -> dict:  # outer key -> inner key -> jobs
        return {k: count(inner(j) for j in jobs if outer(j) == k) for k in {outer(j) for j in jobs}}

    def total(jobs, outer, inner) -> dict:  # outer key -> inner key -> accelerators
        out: dict = {}
        for j in jobs:
            inside = out.setdefault(outer(j), {})
            inside[inner(j)] = inside.get(inner(j), 0) + j.demand
        return out

    project, priority = (lambda j: j.project), (lambda j: j.priority)
    assert snap.pending.priorities == by(pending, project, priority)
    assert snap.pending.priority_counts == count(j.priority for j in pending)
    assert snap.pending.demand == by(pending, project, lambda j: j.shape)
    assert snap.pending.shapes == count(j.shape for j in pending)
    assert snap.pending.fixed == count(j.shape for j in pending if not j.preemptible)
    bounded = count(j.project for j in pending if j.max_runtime is not None)
    assert {p: c for p, c in snap.pending.bounded.items() if c} == bounded
    for counts in (snap.pending.priorities, snap.pending.demand):
        assert all(c > 0 for inner in counts.values() for c in inner.values())
    # Projects stay in usage (and running_priorities) once they ran a job, maybe empty.
    held = total(runs, project, lambda j: j.accelerator)
    assert {p: c for p, c in snap.usage.items() if c} == held
    assert all(c > 0 for counts in snap.usage.values() for c in counts.values())
    in_use = {a: sum(j.demand for j in runs if j.accelerator == a) for a in ("gpu", "tpu")}
    assert {a: snap.in_use.get(a, 0) for a in in_use} == in_use
    running = by(victims, project, priority)
    assert {p: c for p, c in snap.running_priorities.items() if c} == running
    counts = count(j.priority for j in victims)
    assert snap.running_priority_counts == counts
    accels = {j.accelerator for j in victims}
    sizes = {
        a: by([j for j in victims if j.accelerator == a], project, lambda j: j.demand)
        for a in accels
    }
    assert {a: c for a, c in snap.preemptible_sizes.items() if c} == sizes
    # outrank_possible: exactly whether the highest pending priority beats the lowest running
    # one, and never False while some project has a pending job above a running one of its own.
    expected = bool(pending and victims) and max(j.priority for j in pending) > min(counts)
    assert snap.outrank_possible() == expected
    if any(p.priority > v.priority for p in pending for v in victims if p.project == v.project):
        assert snap.outrank_possible()
    # projects_with_room: a project's smallest pending job of some type fits in its guarantee.
    rooms = set()
    for j in pending:
        least = min(
            k.demand for k in pending if (k.project, k.accelerator) == (j.project, j.accelerator)
        )
        if (
            snap.held(j.project, j.accelerator) + least
            <= snap.guarantee_of(j.project, j.accelerator) + 1e-9
        ):
            rooms.add(j.project)
    assert snap.projects_with_room() == rooms
    return bool(rooms)


def _check_summary(snap: Snapshot, project: str | None) -> None:
    """A project's summary (None: the one over all projects) against a recount."""
    jobs = snap.pending.jobs.values()
    shapes = {j.shape for j in jobs if project is None or j.project == project}
    pending = snap.pending
    summary = pending.summary(project)
    fewest: dict = {}
    for accel, per, workers in shapes:
        fewest[(accel, per)] = min(workers, fewest.get((accel, per), workers))
    assert summary.fewest_workers == fewest
    least = {a: min(p * w for a2, p, w in shapes if a2 == a) for a, _, _ in shapes}
    assert summary.least_demand == least


def test_start_on_an_unknown_node_or_without_room_changes_nothing():
    snap = _snapshot(n_nodes=1)
    snap.submit(_job("big", per=8))
    snap.submit(_job("more", per=4))
    snap.start("big", ["n0"], 0.0)
    with pytest.raises(KeyError):
        snap.start("more", ["nope"], 0.0)
    with pytest.raises(ValueError, match="lacks 4 free"):
        snap.start("more", ["n0"], 0.0)
    assert "more" in snap.pending and list(snap.pending.all)[0].id == "more"
    assert snap.free == [0] and list(snap.running) == ["big"]


def test_sorted_queue_reads_like_a_sorted_list_as_items_come_and_go():
    rng = random.Random(3)
    queue: SortedQueue[str] = SortedQueue()
    present: list[tuple[tuple, str]] = []
    for n in range(2000):
        if present and rng.random() < 0.45:
            # mostly the first one leaves (the usual case), sometimes any
            key, item = present[0] if rng.random() < 0.7 else rng.choice(present)
            queue.remove(key, item)
            present.remove((key, item))
        else:
            # mostly in key order; equal keys keep the order they came in
            key = (rng.randint(0, 3), n // 3 if rng.random() < 0.8 else rng.randint(0, n))
            item = f"i{n}"  # (the queue finds an item by identity, as it does jobs)
            queue.add(key, item)
            present.append((key, item))
            present.sort(key=lambda entry: entry[0])
        items = [item for _, item in present]
        assert list(queue) == items and len(queue) == len(items)
        if items:
            middle = present[len(present) // 2][0]
            assert list(queue.after(middle)) == [item for key, item in present if key > middle]
    with pytest.raises(ValueError):
        queue.remove((9, 9), "absent")


def test_projects_with_room_follow_a_quota_change():
    """A new quota may give a project room (or take it away) with no job changing."""
    snap = _snapshot(n_nodes=1)  # a and b share 8 gpus: 4 each
    snap.submit(_job("a1", "a", per=4))
    snap.submit(_job("b1", "b", per=4))
    snap.submit(_job("b2", "b", per=2))
    snap.start("b1", ["n0"], 0.0)
    assert snap.projects_with_room() == {"a"}  # b holds its 4: its next 2 are beyond
    snap.set_quota(parse_quota(quota({"a": {"gpu": 1}, "b": {"gpu": 7}})))
    assert snap.projects_with_room() == {"b"}  # a's 1 cannot hold 4; b's 7 can hold 6
