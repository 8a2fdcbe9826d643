"""Replay the Philly trace through the simulator, per policy: speed and sanity figures.

    python bench/bench_sim.py [TRACE] [--first N] [--policy fair,fifo,las,srtf]
                              [--cluster 64x8:v100] [--restart-penalty S]

TRACE defaults to shared/traces/philly/philly.csv next to the repository. The cluster is
64 nodes x 8 V100, the quota shares are derived from each team's demand (GPU-seconds).

Per policy it prints the jobs, engine wall and CPU time (loading and metrics excluded: compare
two builds by CPU time on a loaded machine, running them alternately), simulated jobs/s,
scheduling cycles and preemptions, and four sanity checks:
- every job finished;
- mean JCT >= mean duration (no job finishes faster than it runs);
- utilisation <= 1;
- work conserved: the running time in the job table (from the event log) equals the sum of
  the durations plus one restart penalty per resume; the difference is printed. (A resumed job
  preempted again before its penalty is paid loses less than a whole penalty, so with a
  penalty the difference may be slightly negative; with none it must be 0.)

It also prints a hash of the event log: a change meant only to make the engine faster must
leave it (and the cycle and preemption counts) unchanged.

The first line says whether the core runs compiled (mypyc, the default install) or as plain
Python (CORRAL_PURE=1 at install time), about half as fast.

It prints figures; it is not a test. Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

from philly import DEFAULT_TRACE

from corral.core import cycle
from corral.sim.engine import SimOptions
from corral.sim.metrics import job_table
from corral.sim.run import (
    PolicyRun,
    Workload,
    WorkloadSpec,
    build_workload,
    policy_configs,
    simulate,
)

POLICIES = "fair,fifo,las,srtf"
TOLERANCE = 1e-6  # relative; sums of ~10^5 floats of up to ~10^6 s


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    compiled = not cycle.__file__.endswith(".py")
    print("core: " + ("compiled with mypyc" if compiled else "plain Python (not compiled)"))
    workload = build_workload(
        WorkloadSpec(trace=args.trace, cluster=args.cluster, shares="demand", first=args.first)
    )
    print(workload.description)
    options = SimOptions(restart_penalty=args.restart_penalty)
    configs = policy_configs(workload.quota.scheduler, args.policy.split(","))
    ok = True
    for config in configs:
        print(f"\n== {config.policy}", flush=True)
        ok &= report(simulate(workload, config, options), workload, args.restart_penalty)
    return 0 if ok else 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE.resolve())
    p.add_argument("--first", type=int, default=None, help="only the N earliest jobs")
    p.add_argument("--policy", default=POLICIES, help=f"comma list (default {POLICIES})")
    p.add_argument("--cluster", default="64x8:v100")
    p.add_argument("--restart-penalty", type=float, default=0.0, help="seconds per resume")
    return p.parse_args(argv)


def report(run: PolicyRun, workload: Workload, penalty: float) -> bool:
    """Print one policy's figures and checks; True when every check passes."""
    s = run.summary
    rows = job_table(run.result.events, workload.infos)
    finished = [r for r in rows if r.state == "finished"]
    ran = sum(r.run_time for r in rows)
    needed = sum(r.duration for r in finished) + penalty * sum(r.preemptions for r in finished)
    diff = ran - needed
    print(f"   jobs             {s['jobs']}")
    print(f"   sim wall         {run.wall_s:.2f} s (CPU {run.cpu_s:.2f} s)")
    print(f"   simulated jobs/s {_num(s['sim_jobs_per_s'], ',.0f')}")
    print(f"   cycles           {s['cycles']}")
    print(f"   preemptions      {s['preemptions']}")
    print(f"   stalls           {s['stalls']} (instants the policy kept preempting)")
    print(f"   JCT mean / p99   {_num(s['jct']['mean'])} s / {_num(s['jct']['p99'])} s")
    print(f"   mean duration    {_num(s['mean_duration'])} s")
    print(f"   utilisation      {s['utilisation']:.4f}")
    print(f"   run time sum     {ran:.1f} s; durations + penalties {needed:.1f} s; diff {diff:.3g}")
    print(f"   event log hash   {events_hash(run.result.events)}")
    checks = {
        "every job finished": s["finished"] == s["jobs"] == len(workload.jobs),
        "mean JCT >= mean duration": finished != []
        and s["jct"]["mean"] >= s["mean_duration"] - TOLERANCE,
        "utilisation <= 1": s["utilisation"] <= 1 + TOLERANCE,
        "work conserved": _conserved(diff, needed, penalty, finished),
    }
    for name, passed in checks.items():
        print(f"   {'ok  ' if passed else 'FAIL'} {name}")
    return all(checks.values())


def events_hash(events: list[dict]) -> str:
    digest = hashlib.sha256()
    for event in events:
        digest.update(repr(sorted(event.items())).encode())
    return digest.hexdigest()[:16]


def _num(value: float | None, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def _conserved(diff: float, needed: float, penalty: float, finished) -> bool:
    if abs(diff) <= TOLERANCE * max(needed, 1.0):
        return True
    # Penalties cut short by a second preemption make the run time fall short, never exceed.
    slack = penalty * sum(r.preemptions for r in finished)
    return -slack <= diff <= TOLERANCE * max(needed, 1.0)


if __name__ == "__main__":
    sys.exit(main())
