"""las and srtf read running jobs from indexes the snapshot keeps (Snapshot.running_by) and
walk the pending queue shape by shape: the decisions must be exactly those of the direct
implementation, which ranks every running job and walks every pending job in every cycle.

`DirectLas` and `DirectSrtf` below are that implementation (the policies as they were before
the indexes). Random busy scenarios (two accelerator types, gangs, non-preemptible jobs, a
project limit, max_runtime, starvation promotion, preempt_min_runtime) run under both, and
the event logs and cycle counts must be identical.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from itertools import takewhile

import pytest
from simkit import check_invariants, job, load, quota, simulate

from corral.core.decide import run_cycle
from corral.core.memos import PolicyMemo
from corral.core.policy import Policy
from corral.core.preempt import could_free_room, eligible, find_victims
from corral.formats.types import SchedulerConfig
from corral.policies import load_policy
from corral.policies.las import _reach
from corral.policies.srtf import remaining
from corral.sim.engine import SimOptions, Simulator, arrival_may_act

INF = float("inf")

# --- the direct implementation ----------------------------------------------------------------


class DirectMemo(PolicyMemo):
    """The direct policy's memos of one cycle: failed searches, the worst rank after the
    cycle, the running jobs ranked per type."""

    def __init__(self) -> None:
        self.failed: dict = {}
        self.after: float | None = None
        self.after_known = False
        self.ranked: dict = {}


def memo(cycle) -> DirectMemo:
    if not isinstance(cycle.memo, DirectMemo):
        cycle.memo = DirectMemo()
    return cycle.memo


class DirectRank(Policy):
    preemptive = True

    def ranked_pending(self, cycle):
        yield from cycle.snap.pending.all

    def order(self, cycle):
        failed = memo(cycle).failed
        dead = set()
        shapes = cycle.snap.pending.shapes
        for job_ in self.ranked_pending(cycle):
            shape = job_.shape
            if shape in dead:
                continue
            if not cycle.may_fit(job_, long=False) and not cycle.releasing:
                rank = self.pending_rank(cycle, job_)
                worst = self._worst(cycle)
                if worst is None or rank >= min(worst, failed.get(shape, INF)):
                    dead.add(shape)
                    if len(dead) == len(shapes):
                        return
                    continue
            yield job_

    def _worst(self, cycle):
        ranked = (self._ranked_running(cycle, accel) for accel in cycle.snap.cluster.by_type)
        return max((r[0][0] for r in ranked if r), default=None)

    def may_preempt_for(self, cycle, job_):
        kept = memo(cycle)
        if not kept.after_known:
            # (protected jobs count: they come of age before the next cycle)
            runs = [r for r in cycle.running_after() if r.job.preemptible]
            kept.after = max(self.running_ranks(cycle, runs), default=None)
            kept.after_known = True
        worst = kept.after
        return worst is not None and self.pending_rank(cycle, job_) < worst

    def victims(self, cycle, job_):
        failed = memo(cycle).failed
        shape = job_.shape
        rank = self.pending_rank(cycle, job_)
        if rank >= failed.get(shape, INF):
            return None
        worse = takewhile(lambda kr: kr[0] > rank, self._ranked_running(cycle, job_.accelerator))
        candidates = [r for _, r in worse if r.job.id not in cycle.victims]
        found = None
        if could_free_room(cycle, job_, candidates):
            found = find_victims(cycle, job_, candidates)
        if found is None:
            failed[shape] = min(rank, failed.get(shape, INF))
            return None
        found.why = f"preempted by job {job_.name} ({self.name}: {self.describe(rank)})"
        return found

    def _ranked_running(self, cycle, accelerator):
        cache = memo(cycle).ranked
        ranked = cache.get(accelerator)
        if ranked is None:
            runs = [
                r
                for by_project in cycle.snap.preemptible.get(accelerator, {}).values()
                for r in by_project
                if eligible(cycle, r, self.protection)
            ]
            ranked = list(zip(self.running_ranks(cycle, runs), runs, strict=True))
            ranked.sort(key=lambda kr: (-kr[0], -kr[1].started_at, kr[1].job.id))
            cache[accelerator] = ranked
        return ranked

    def running_ranks(self, cycle, runs):
        return [self.running_rank(cycle, r) for r in runs]


class DirectLas(DirectRank):
    name = "las"

    def __init__(self, config=None):
        super().__init__(config)
        self.thresholds = sorted(float(x) for x in self.option("las_thresholds", [3600, 36000]))
        self.starve_factor = float(self.option("starve_factor", 4))

    def level(self, attained):
        return bisect_right(self.thresholds, attained)

    def queue_key(self, job_):
        return (self.level(job_.attained), job_.submit_time, job_.name, job_.id)

    def revisit_at(self, job_):
        if self.starve_factor <= 0 or job_.run_time <= 0 or self.level(job_.attained) == 0:
            return None
        return job_.wait_since + self.starve_factor * job_.run_time

    def pending_rank(self, cycle, job_):
        promote = self.revisit_at(job_)
        if promote is not None and cycle.snap.now >= promote:
            return 0
        return self.level(job_.attained)

    def running_rank(self, cycle, run):
        return self.level(run.job.attained + (cycle.snap.now - run.started_at) * run.job.demand)

    def describe(self, rank):
        return f"queue {rank:g}"

    def ranked_pending(self, cycle):
        pending = cycle.snap.pending
        first_later = pending.all.bisect_key_left((1,))
        due = pending.by_revisit.bisect_key_right((cycle.snap.now, "\uffff"))
        promoted = sorted(pending.by_revisit.islice(0, due), key=_arrival)
        chosen = {j.id for j in promoted}
        zero = list(pending.all.islice(0, first_later))
        yield from sorted(zero + promoted, key=_arrival)
        yield from (j for j in pending.all.islice(first_later) if j.id not in chosen)

    def wake_at(self, cycle):
        now = cycle.snap.now
        later = []
        thresholds, top = self.thresholds, len(self.thresholds)
        for run in cycle.running_after():
            j = run.job
            level = bisect_right(thresholds, j.attained)
            if level < top and j.demand:
                crossing = run.started_at + (thresholds[level] - j.attained) / j.demand
                if crossing > now:
                    later.append(crossing)
        waiting = cycle.snap.pending.by_revisit
        i = waiting.bisect_key_right((now, "\uffff"))
        if i < len(waiting):
            later.append(self.revisit_at(waiting[i]))
        aged = super().wake_at(cycle)
        if aged is not None:
            later.append(aged)
        return min(later) if later else None


def _arrival(job_):
    return (job_.submit_time, job_.name, job_.id)


class DirectSrtf(DirectRank):
    name = "srtf"

    def queue_key(self, job_):
        return (remaining(job_), job_.submit_time, job_.name, job_.id)

    def pending_rank(self, cycle, job_):
        return remaining(job_)

    def running_rank(self, cycle, run):
        return remaining(run.job) - (cycle.snap.now - run.started_at)

    def describe(self, rank):
        return f"{rank:g} s left"


DIRECT = {"las": DirectLas, "srtf": DirectSrtf}

# --- scenarios --------------------------------------------------------------------------------


def busy(policy: str, seed: int, min_runtime: float) -> dict:
    """Waves of jobs on a small pool of two types: many pending jobs of several shapes while
    jobs preempt each other, some jobs a limit or their guarantee stops, durations that are
    not round numbers (rank boundaries fall between events)."""
    rng = random.Random(seed)
    jobs = []
    for i in range(140):
        project = rng.choice(["a", "a", "b", "c"])
        accel = rng.choice(["gpu", "gpu", "gpu", "tpu"])
        extra = {}
        if rng.random() < 0.08:
            extra["preemptible"] = False
        if rng.random() < 0.15:
            extra["max_runtime"] = rng.choice([300, 1500])
        jobs.append(
            job(
                f"j{i:03d}",
                project,
                rng.choice([1, 1, 1, 2, 4]),
                accelerator=accel,
                workers=rng.choice([1, 1, 1, 2]),
                submit=round(rng.uniform(0, 3000) // 50 * 50 + rng.choice([0, 0, 0.1, 1 / 3]), 6),
                duration=rng.choice([20, 95.5, 300, 700, 1234.5, 4000]),
                user=f"u{i % 3}",
                **extra,
            )
        )
    scheduler: dict = {"policy": policy, "preempt_min_runtime": min_runtime}
    if policy == "las":
        scheduler["options"] = {"las_thresholds": [150, 1000 / 3, 2500], "starve_factor": 1.5}
    shares = {"a": {"gpu": 2, "tpu": 1}, "b": {"gpu": 1, "tpu": 1}, "c": {"gpu": 1, "tpu": 2}}
    cluster = [
        {"name": "g{0..3}", "accelerator": "gpu", "count": 4, "domain": "d0"},
        {"name": "h{0..1}", "accelerator": "gpu", "count": 4, "domain": "d1"},
        {"name": "t{0..2}", "accelerator": "tpu", "count": 4, "domain": "d2"},
    ]
    limit = "[project_limits.c]\ngpu = 6"
    return {"cluster": cluster, "quota": quota(shares, extra=limit), "scheduler": scheduler,
            "jobs": jobs}  # fmt: skip


def run_both(policy: str, seed: int, min_runtime: float):
    scenario = load(busy(policy, seed, min_runtime))
    indexed = simulate(scenario)
    direct = simulate(scenario, policy=DIRECT[policy](scenario.quota.scheduler))
    return scenario, indexed, direct


# --- tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["las", "srtf"])
@pytest.mark.parametrize("min_runtime", [0, 120])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_indexed_policies_decide_as_the_direct_ones(policy, min_runtime, seed):
    scenario, indexed, direct = run_both(policy, seed, min_runtime)
    check_invariants(indexed, scenario)
    assert indexed.cycles == direct.cycles
    assert indexed.events == direct.events
    assert any(e["event"] == "preempt" for e in indexed.events)


def test_the_scenarios_reach_what_the_indexes_must_get_right():
    # Promotion of starving jobs, every las queue, and victims while many jobs wait.
    _, result, _ = run_both("las", 1, 0)
    reasons = [e["reason"] for e in result.events if e["event"] == "preempt"]
    assert any("queue 0" in r for r in reasons) and any("queue 2" in r for r in reasons)
    assert sum(e["event"] == "preempt" for e in result.events) >= 20


@pytest.mark.parametrize("policy", ["las", "srtf"])
def test_each_cycle_decides_as_the_direct_policy_on_the_same_snapshot(policy):
    # decide is pure: on every snapshot the indexed run goes through, a second indexed policy
    # and the direct one make the same decision, down to the reasons of every pending job,
    # the wake-up and what an arrival may do.
    scenario = load(busy(policy, 4, 60))
    config = scenario.quota.scheduler
    plain, direct = load_policy(config), DIRECT[policy](config)
    compared = []

    class Checked(type(plain)):
        def order(self, cycle):
            ran, other = run_cycle(cycle.snap, plain, True), run_cycle(cycle.snap, direct, True)
            mine, theirs = ran.decision, other.decision
            assert (mine.starts, mine.preemptions) == (theirs.starts, theirs.preemptions)
            assert mine.reasons == theirs.reasons and mine.wake_at == theirs.wake_at
            for job_ in cycle.snap.pending.jobs.values():
                assert mine.reason(job_) == theirs.reason(job_)
                may_act = arrival_may_act(ran, plain, job_)
                assert may_act == arrival_may_act(other, direct, job_)
            compared.append(cycle.snap.now)
            yield from super().order(cycle)

    result = simulate(scenario, policy=Checked(config))
    assert len(compared) > 100 and any(e["event"] == "preempt" for e in result.events)


def test_running_indexes_hold_exactly_the_running_jobs_their_keys_accept():
    scenario = load(busy("las", 2, 0))
    policy = load_policy(scenario.quota.scheduler)
    options = SimOptions(max_sim_time=2000)  # stop with jobs still running
    sim = Simulator(scenario.nodes, scenario.quota, scenario.jobs, policy, options)
    sim.run()
    snap = sim.snap
    assert snap.running
    for name, key in policy.running_keys().items():
        index = snap.running_by[name]
        held = {e[1]: e[0] for entries in index.by_type.values() for e in entries}
        expected = {r.job.id: key(r) for r in snap.running.values() if key(r) is not None}
        assert held == expected, name
        for accel, entries in index.by_type.items():
            assert all(e[2].job.accelerator == accel for e in entries)


@pytest.mark.parametrize("seed", range(5))
def test_reach_is_the_first_float_time_the_level_formula_holds(seed):
    # A job is in a queue from the exact float time the rank formula says so: read from the
    # index, a level is never a rounding away from the one the formula gives.
    rng = random.Random(seed)
    thresholds = SchedulerConfig(options={"las_thresholds": [3600, 36000]})
    las = load_policy(SchedulerConfig(policy="las", options=thresholds.options))
    for _ in range(2000):
        start = rng.choice([0.0, rng.uniform(0, 1e7), float(rng.randrange(10**6))])
        demand = rng.choice([1, 2, 3, 7, 8, 64])
        attained = rng.choice([0.0, rng.uniform(0, 40000), 3600.0 - 1e-9, 1e-300])
        threshold = rng.choice([*las.thresholds, rng.uniform(0, 50000), 1 / 3])
        run = _running(attained, demand, start)
        t = _reach(run, threshold)

        def reached(at, run=run, threshold=threshold):
            return run.job.attained + (at - run.started_at) * run.job.demand >= threshold

        assert reached(t) and not reached(math.nextafter(t, -INF))


def test_reach_of_a_job_that_attains_nothing_more():
    assert _reach(_running(10.0, 0, 5.0), 5.0) == -INF
    assert _reach(_running(1.0, 0, 5.0), 5.0) is None
    assert _reach(_running(1.0, 1, 5.0, preemptible=False), 5.0) is None


def _running(attained: float, demand: int, start: float, preemptible: bool = True):
    from corral.core.model import Job, Running
    from corral.formats.types import Resources

    per = max(demand, 1)
    core = Job("j", "j", "p", "u", 0, Resources("gpu", per), 0.0, preemptible, attained=attained)
    core.demand = demand
    return Running(job=core, nodes=(0,), started_at=start)


def full_node_snapshot(policy: str):
    """One 8-GPU node, all of it held by the running job "r": where the walk tests start."""
    from corral.core.model import Job
    from corral.formats.types import Node, Resources

    scenario = load(busy(policy, 1, 0))
    snap = load_policy(scenario.quota.scheduler).snapshot([Node("n0", "gpu", 8)], scenario.quota)
    snap.submit(Job("r", "r", "a", "u", 0, Resources("gpu", 8), 0.0, duration=900.0))
    snap.start("r", ["n0"], 0.0)
    return snap


def test_a_sleeping_shape_goes_on_after_the_job_that_made_more_jobs_stop():
    # The walk skips a shape put to sleep while no more jobs are told to stop; once one is
    # (a preemption), the shape's queue goes on after the job being considered, so its jobs
    # that come later in the order are seen again.
    from corral.core.cycle import Cycle
    from corral.core.model import Job
    from corral.formats.types import Resources
    from corral.policies.ranked import _Walk

    snap = full_node_snapshot("srtf")
    ranks = {"a1": 10, "a2": 15, "b1": 20, "a3": 30, "b2": 40, "a4": 50}
    for name, rank in ranks.items():
        per = 1 if name[0] == "a" else 2
        snap.submit(Job(name, name, "a", "u", 0, Resources("gpu", per), 0.0, duration=rank))

    def walked(preempt_after: str | None) -> list[str]:
        cycle = Cycle(snap)
        cycle.releasing.append(snap.running["r"])  # jobs are stopping from the start
        walk, seen = _Walk(cycle, {}), []
        for shape, job_ in walk:
            seen.append(job_.name)
            if job_.name == "a1":
                walk.sleep(shape)
            if job_.name == preempt_after:
                cycle.preempt([snap.running["r"]], (0,), job_, "test")
        return seen

    assert walked(None) == ["a1", "b1", "b2"]
    assert walked("b1") == ["a1", "b1", "a3", "b2", "a4"]
