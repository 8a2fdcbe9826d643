"""How well each policy schedules the Philly trace, as an operator would judge it.

    python bench/bench_quality.py [TRACE] [--first N] [--policy fair,fifo,las,srtf]
                                  [--cluster 64x8:v100] [--every 6h]

TRACE defaults to shared/traces/philly/philly.csv next to the repository (or a folder
above); 64 nodes x 8 V100, quota shares derived from each team's demand (as
bench/bench_sim.py). Policies run in parallel processes. Per policy it prints:
- JCT mean and p99; mean wait (all time pending, after preemptions too);
- the longest time one project spent with pending work and nothing running (and which);
- the most preemptions of one job, attempts preempted within 60 s of their start and in the
  instant they started;
- idle accelerator-hours while some pending job would have fitted in the free accelerators
  (the core's own placement on the replayed state), and for how long that held;
- missed reclaims: the log's state rebuilt every 6 h into a fresh Snapshot, the policy's
  `decide` asked, and the instants counted where a project within its guarantee has a pending
  job that one preemption (of a job whose project stays at or above its guarantee) would let
  in, and the decision does nothing for it (corral/sim/quality.py has the exact definitions).

The last column is what fair aims at (issue 19). It prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from philly import DEFAULT_TRACE

from corral.formats import parse_duration
from corral.policies import load_policy
from corral.sim.engine import SimOptions
from corral.sim.metrics import fmt_seconds
from corral.sim.quality import Quality, audit
from corral.sim.run import WorkloadSpec, build_workload, in_processes, policy_configs, simulate

POLICIES = "fair,fifo,las,srtf"
SHORT_S = 60.0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    workload = build_workload(
        WorkloadSpec(trace=args.trace, cluster=args.cluster, shares="demand", first=args.first)
    )
    print(workload.description, flush=True)
    every = parse_duration(args.every, "--every")
    configs = policy_configs(workload.quota.scheduler, args.policy.split(","))

    def measure(config, _here: bool) -> tuple[dict, Quality]:
        run = simulate(workload, config, SimOptions())
        quality = audit(
            run.result.events,
            workload.nodes,
            workload.quota,
            workload.jobs,
            lambda: load_policy(config),
            every_s=every,
            short_s=SHORT_S,
        )
        return run.summary, quality

    results = dict(zip((c.policy for c in configs), in_processes(measure, configs), strict=True))
    print_table(results, every)
    print(f"\n{time.perf_counter() - began:.0f} s in all")
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE.resolve())
    p.add_argument("--first", type=int, default=None, help="only the N earliest jobs")
    p.add_argument("--policy", default=POLICIES, help=f"comma list (default {POLICIES})")
    p.add_argument("--cluster", default="64x8:v100")
    p.add_argument("--every", default="6h", help="sample interval for missed reclaims")
    return p.parse_args(argv)


def rows(every: float):
    """(label, figure from (summary, quality), fair's target)."""
    hours = 3600.0
    return (
        ("JCT mean", lambda s, q: fmt_seconds(s["jct"]["mean"]), "within 10 % of 16.0 h"),
        ("JCT p99", lambda s, q: fmt_seconds(s["jct"]["p99"]), ""),
        ("wait mean (all pending time)", lambda s, q: fmt_seconds(s["wait"]["mean"]), ""),
        ("longest starved project", lambda s, q: _starved(s), "<= 24 h"),
        ("most preemptions of a job", lambda s, q: str(q.most_preemptions), "<= 10"),
        (f"preempted within {SHORT_S:.0f} s", lambda s, q: f"{q.preempted_soon:,}", ""),
        ("preempted at start", lambda s, q: f"{q.preempted_at_start:,}", "0"),
        ("idle GPU-h, a job fitted", lambda s, q: f"{q.idle_fit_accel_s / hours:,.0f}", ""),
        ("  for how long", lambda s, q: fmt_seconds(q.idle_fit_s), ""),
        (
            f"missed reclaims (every {fmt_seconds(every)})",
            lambda s, q: f"{q.missed_instants} of {q.samples}",
            "0",
        ),
        ("  only behind a project's head", lambda s, q: str(q.missed_behind), ""),
    )


def _starved(summary: dict) -> str:
    longest = summary["starved_longest"]
    return f"{fmt_seconds(longest['seconds'])} ({longest['project'] or '-'})"


def print_table(results: dict[str, tuple[dict, Quality]], every: float) -> None:
    table = [("", *results, "fair target")]
    for label, figure, target in rows(every):
        table.append((label, *(figure(s, q) for s, q in results.values()), target))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    print()
    for row in table:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        print("  ".join(cells).rstrip())


if __name__ == "__main__":
    sys.exit(main())
