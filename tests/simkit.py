"""Helpers for scheduling tests: build a scenario, run the simulator, check the event log.

`run_scenario(text_or_dict, **sim_options)` writes the scenario to a temporary file, loads it
with `load_scenario` (so tests go through the same parser users do) and runs the simulator.
`check_invariants(result, scenario)` replays the event log and checks what must hold for every
log, whatever the policy: no node over-committed, gangs placed whole and per domain, exclusive
domains alone, every job ending exactly once, time going forward.
"""

from __future__ import annotations

import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import yaml

from corral.formats import Scenario, load_scenario
from corral.policies import load_policy
from corral.sim.engine import SimOptions, SimResult, Simulator

FINAL = ("finish", "fail", "cancel", "reject")
STOPS = ("preempt", "finish", "fail", "cancel")

# --- building scenarios -----------------------------------------------------------------------


def quota(
    shares: dict[str, dict[str, float]],
    members: dict[str, list[str]] | None = None,
    extra: str = "",
) -> str:
    """Inline bastion TOML: shares per project and type; every project open to any user
    unless `members` says otherwise; `extra` is appended verbatim (limits, classes...)."""
    members = members or {}
    projects = sorted(set(shares) | set(members))
    lines = ['[toml-schema]\nversion = "1"', "[project_membership]"]
    for p in projects:
        pats = members.get(p, [".*"])
        lines.append(f"{p} = [{', '.join(repr(x).replace(chr(39), chr(34)) for x in pats)}]")
    for p in sorted(shares):
        lines.append(f"[project_resources.{p}]")
        lines += [f"{t} = {v}" for t, v in sorted(shares[p].items())]
    if extra:
        lines.append(extra.strip())
    return "\n".join(lines) + "\n"


def job(
    name: str,
    project: str,
    per_worker: int,
    *,
    accelerator: str = "gpu",
    workers: int = 1,
    slices: int = 1,
    exclusive: bool = False,
    submit: float = 0,
    duration: float = 100,
    user: str | None = None,
    **extra: Any,
) -> dict:
    """One scenario job as a dict (priority, max_runtime, preemptible... go in `extra`)."""
    spec = {
        "name": name,
        "project": project,
        "resources": {
            "accelerator": accelerator,
            "per_worker": per_worker,
            "workers": workers,
            "slices": slices,
            "exclusive": exclusive,
        },
        "submit": submit,
        "duration": duration,
        **extra,
    }
    if user is not None:
        spec["user"] = user
    return spec


# --- running ----------------------------------------------------------------------------------


def load(source: str | dict | Path | Scenario) -> Scenario:
    """A Scenario from YAML text, a dict, a path, or a Scenario (returned as is)."""
    if isinstance(source, Scenario):
        return source
    if isinstance(source, Path):
        return load_scenario(source)
    if isinstance(source, dict):
        source = without_protection(source)
    text = source if isinstance(source, str) else yaml.safe_dump(source, sort_keys=False)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.yaml"
        path.write_text(text)
        return load_scenario(path)


def without_protection(scenario: dict) -> dict:
    """The scenario with preempt_min_runtime 0 unless it sets one: most scenarios here specify
    one rule each, at instants a few seconds apart, and were written when 0 was the default.
    (Protection itself, the default included, is tested in test_fair_traces.py: its
    scenarios set `"scheduler": {"preempt_min_runtime": None}` to keep the default.)"""
    scheduler = dict(scenario.get("scheduler") or {})
    scheduler.setdefault("preempt_min_runtime", 0)
    if scheduler["preempt_min_runtime"] is None:
        del scheduler["preempt_min_runtime"]
    return {**scenario, "scheduler": scheduler}


def simulate(scenario: Scenario, policy=None, **options: Any) -> SimResult:
    """Run a loaded scenario; `policy` overrides the one the scenario names."""
    policy = policy or load_policy(scenario.quota.scheduler)
    sim = Simulator(scenario.nodes, scenario.quota, scenario.jobs, policy, SimOptions(**options))
    return sim.run()


def run_scenario(source: str | dict | Path | Scenario, **options: Any) -> SimResult:
    """Load a scenario (YAML text, dict or path) through a file and simulate it."""
    return simulate(load(source), **options)


def run_checked(source: str | dict | Path | Scenario, **options: Any) -> SimResult:
    """run_scenario, then check_invariants on its log."""
    scenario = load(source)
    result = simulate(scenario, **options)
    check_invariants(result, scenario)
    return result


# --- reading the log --------------------------------------------------------------------------


def events(result: SimResult, *kinds: str, job: str | None = None) -> list[dict]:
    return [
        e
        for e in result.events
        if (not kinds or e["event"] in kinds) and (job is None or e["job"] == job)
    ]


def starts(result: SimResult, job: str | None = None) -> list[tuple[float, str, list[str]]]:
    """(t, job, nodes) of every start, in log order."""
    return [(e["t"], e["job"], e["nodes"]) for e in events(result, "start", job=job)]


def start_of(result: SimResult, job: str, attempt: int = 0) -> tuple[float, list[str]]:
    """(t, nodes) of a job's n-th start."""
    found = starts(result, job)
    assert len(found) > attempt, f"{job} has {len(found)} starts\n{show(result)}"
    t, _, nodes = found[attempt]
    return t, nodes


def ends(result: SimResult) -> dict[str, tuple[float, str]]:
    """job -> (t, final event)."""
    return {e["job"]: (e["t"], e["event"]) for e in events(result, *FINAL)}


def preempted(result: SimResult) -> list[tuple[float, str]]:
    return [(e["t"], e["job"]) for e in events(result, "preempt")]


def brief(result: SimResult, *kinds: str) -> list[tuple]:
    """Compact log: (t, event, job[, nodes]) tuples, for exact assertions."""
    out = []
    for e in events(result, *kinds):
        row = (e["t"], e["event"], e["job"])
        if e["event"] == "start":
            row += (tuple(e["nodes"]),)
        out.append(row)
    return out


def show(result: SimResult) -> str:
    """The event log, one line per event, for assertion messages."""
    lines = []
    for e in result.events:
        extra = e.get("nodes") or e.get("reason") or ""
        lines.append(f"  t={e['t']:>8g} {e['event']:<7} {e['job']:<12} {e['project']:<10} {extra}")
    return "event log:\n" + "\n".join(lines)


# --- invariants -------------------------------------------------------------------------------


def check_invariants(result: SimResult, scenario: str | dict | Path | Scenario) -> None:
    """Replay the log against the scenario and assert what every schedule must satisfy."""
    scenario = load(scenario)
    log = show(result)
    nodes = {n.name: n for n in scenario.nodes}
    domain_nodes: dict[str, set[str]] = defaultdict(set)
    for n in scenario.nodes:
        domain_nodes[n.domain].add(n.name)
    specs = {sj.spec.name: sj for sj in scenario.jobs}

    capacity: Counter[str] = Counter()  # type -> what corral may hand out
    for n in scenario.nodes:
        capacity[n.accelerator] += n.count
    caps = scenario.quota.total_resources or {}
    for accel in capacity:
        if caps:
            capacity[accel] = min(capacity[accel], caps.get(accel, 0))
    in_use: Counter[str] = Counter()  # type -> accelerators in use
    used: Counter[str] = Counter()  # node -> accelerators in use
    on_node: dict[str, Counter[str]] = defaultdict(Counter)  # node -> job -> workers
    exclusive: dict[str, str] = {}  # domain -> job holding it alone
    running: dict[str, list[str]] = {}  # job -> its nodes
    submitted: set[str] = set()
    final: dict[str, str] = {}
    last_t = float("-inf")

    for e in result.events:
        t, kind, name = e["t"], e["event"], e["job"]
        assert t >= last_t, f"time went back to {t} at {e}\n{log}"
        last_t = t
        assert name in specs, f"unknown job {name} in {e}"
        assert name not in final, f"{name} has an event after its end ({final[name]}): {e}\n{log}"
        sj = specs[name]
        r = sj.spec.resources
        assert e["project"] == sj.spec.project, f"wrong project in {e}"
        if kind == "submit":
            assert name not in submitted, f"{name} submitted twice\n{log}"
            assert t == sj.submit, f"{name} submitted at {t}, not {sj.submit}"
            submitted.add(name)
        elif kind == "start":
            assert name in submitted, f"{name} started before its submission\n{log}"
            assert name not in running, f"{name} started while already running at t={t}\n{log}"
            where = e["nodes"]
            assert len(where) == r.workers * r.slices, (
                f"{name} started with {len(where)} workers, needs {r.workers}x{r.slices}\n{log}"
            )
            for s in range(r.slices):
                block = where[s * r.workers : (s + 1) * r.workers]
                domains = {nodes[n].domain for n in block}
                assert len(domains) == 1, f"{name} slice {s} spans domains {domains}\n{log}"
            slice_domains = [nodes[where[s * r.workers]].domain for s in range(r.slices)]
            if r.exclusive:
                assert len(set(slice_domains)) == r.slices, (
                    f"{name}: two exclusive slices share a domain {slice_domains}\n{log}"
                )
            for n in where:
                assert nodes[n].accelerator == r.accelerator, f"{name} on {n} (wrong type)\n{log}"
                used[n] += r.per_worker
                on_node[n][name] += 1
                assert used[n] <= nodes[n].count, f"node {n} over-committed at t={t}\n{log}"
            in_use[r.accelerator] += r.per_worker * len(where)
            assert in_use[r.accelerator] <= capacity[r.accelerator], (
                f"{in_use[r.accelerator]} {r.accelerator} in use at t={t}, more than the"
                f" {capacity[r.accelerator]} corral may hand out\n{log}"
            )
            if r.exclusive:
                for d in set(slice_domains):
                    assert d not in exclusive, f"{name} shares exclusive domain {d}\n{log}"
                    exclusive[d] = name
            # An exclusive domain holds exactly its slice: no other job on any of its nodes.
            for d, holder in exclusive.items():
                for n in domain_nodes[d]:
                    others = set(on_node[n]) - {holder}
                    assert not others, f"exclusive domain {d} of {holder} also runs {others}\n{log}"
            running[name] = where
        elif kind in STOPS:
            if kind == "cancel" and name not in running:
                final[name] = kind
                continue
            assert name in running, f"{name} {kind} while not running at t={t}\n{log}"
            in_use[r.accelerator] -= r.per_worker * len(running[name])
            for n in running.pop(name):
                used[n] -= r.per_worker
                on_node[n][name] -= 1
                if not on_node[n][name]:
                    del on_node[n][name]
            for d in [d for d, holder in exclusive.items() if holder == name]:
                del exclusive[d]
            if kind == "preempt":
                assert e.get("reason"), f"preempt without a reason: {e}"
            else:
                final[name] = kind
        elif kind == "reject":
            assert name not in running, f"{name} rejected while running\n{log}"
            assert e.get("reason"), f"reject without a reason: {e}"
            final[name] = kind
        else:
            raise AssertionError(f"unknown event {kind}: {e}")

    missing = sorted(set(specs) - set(final))
    assert not missing, f"jobs that never ended: {missing}\n{log}"
    assert not running, f"jobs still running at the end: {sorted(running)}\n{log}"
