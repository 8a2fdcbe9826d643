"""How good is a predicted start? Forecasts made during a Philly replay, against what happened.

    python bench/bench_forecast.py [TRACE] [--first N] [--policy fair] [--factor 1,2]
                                   [--declared 1.0] [--every 6h] [--cluster 64x8:v100]

TRACE defaults to shared/traces/philly/philly.csv next to the repository (or a folder above);
the quota shares are derived from each team's demand. The trace declares no runtimes, so each
job is given a declared max_runtime of its actual duration times a factor (1: perfect
estimates; 2: a user who asks for twice what they need), for a `--declared` fraction of the
jobs (the rest declare none, and what waits for them gets no prediction).

Every `--every` of simulated time (at the first instant from then on) the pending jobs are
forecast (corral/sim/forecast.py: the same policy replayed forward with no new arrivals, no
horizon) and each prediction is compared with the job's next start in the replay, which had
arrivals the forecast did not know of. Per policy and factor it prints: jobs pending at the
samples and how many got a prediction; over those, the median and p90 absolute error, the
fractions within 1 h and within 10 % of the actual wait from the instant, and how many started
later than predicted; and the forecasts' mean and largest wall time.

Then what a forecast costs the control plane (`--live-queue`, 0 to skip): bench_core.py's queue
of 10,000 pending jobs on 1,000 x 8 H100 (each declaring 1.5 x its duration), the first cycle's
starts applied; one forecast with corral up's bounds (7 days, 2 s of replay): how long the
lock is held to take the state, how long the replay ran, and how many jobs got a prediction.

It prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time
from pathlib import Path

from bench_core import CLUSTER, make_jobs, make_quota
from philly import DEFAULT_TRACE

from corral.core.decide import decide
from corral.formats import parse_cluster_shorthand
from corral.formats.durations import parse_duration
from corral.policies import load_policy
from corral.sim.forecast import WhatIf, declare_runtimes, error_figures
from corral.sim.run import WorkloadSpec, build_workload, policy_configs


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workload = build_workload(
        WorkloadSpec(trace=args.trace, cluster=args.cluster, shares="demand", first=args.first)
    )
    print(workload.description)
    print(f"declared max_runtime: {args.declared:.0%} of the jobs; sampled every {args.every:g} s")
    configs = policy_configs(workload.quota.scheduler, args.policy.split(","))
    for config in configs:
        for factor in args.factor:
            jobs = declare_runtimes(workload.jobs, factor, args.declared)
            t0 = time.perf_counter()
            figures = error_figures(
                workload.nodes, workload.quota, jobs, load_policy(config), every=args.every
            )
            wall = time.perf_counter() - t0
            s = figures.summary()
            print(f"\n== {config.policy}, max_runtime = {factor:g} x duration ({wall:.1f} s)")
            print(f"   instants          {s['instants']}")
            share = s["predicted"] / s["pending"] if s["pending"] else 0.0
            print(f"   pending / known   {s['pending']} / {s['predicted']} ({share:.1%})")
            print(f"   error median/p90  {_h(s['median_error'])} / {_h(s['p90_error'])}")
            print(f"   within 1 h        {s['within_1h']:.1%}")
            print(f"   within 10 %       {s['within_10pct']:.1%} (of the actual wait)")
            print(f"   started later     {s['late']:.1%} than predicted")
            mean, most = s["forecast_mean_s"], s["forecast_max_s"]
            print(f"   forecast wall     {mean * 1e3:.1f} ms mean, {most * 1e3:.1f} ms max")
        if args.live_queue:
            live_cost(config, args.live_queue)
    return 0


def live_cost(config, jobs: int) -> None:
    quota = make_quota()
    policy = load_policy(dataclasses.replace(quota.scheduler, policy=config.policy))
    snap = policy.snapshot(parse_cluster_shorthand(CLUSTER), quota)
    for job in make_jobs(random.Random(0), jobs, "j", 0.0):
        job.max_runtime = 1.5 * job.duration
        snap.submit(job)
    snap.set_time(3600.0)
    for start in decide(snap, policy).starts:
        snap.start(start.job_id, start.nodes, 3600.0)
    t0 = time.perf_counter()
    what_if = WhatIf(snap, policy)
    held = time.perf_counter() - t0
    made = what_if.run()
    print(f"\n== {config.policy}, live: {len(snap.pending)} pending, {len(snap.running)} running")
    print(f"   lock held         {held * 1e3:.1f} ms (taking the state)")
    print(f"   replay            {made.seconds:.2f} s (budget {what_if.budget:g} s)")
    print(f"   predicted         {len(made.starts)} jobs")


def _h(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE.resolve())
    p.add_argument("--first", type=int, default=None, help="only the N earliest jobs")
    p.add_argument("--policy", default="fair", help="comma list (default fair)")
    p.add_argument("--cluster", default="64x8:v100")
    p.add_argument(
        "--factor",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[1.0, 2.0],
        help="declared max_runtime = duration x factor; comma list (default 1,2)",
    )
    p.add_argument("--declared", type=float, default=1.0, help="fraction of jobs that declare")
    p.add_argument("--live-queue", type=int, default=10_000, help="pending jobs; 0: skip")
    p.add_argument(
        "--every", type=lambda s: parse_duration(s, "--every"), default=6 * 3600.0, help="period"
    )
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
