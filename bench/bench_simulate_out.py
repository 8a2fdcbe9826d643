"""The researcher's command as a whole: `corral simulate --trace ... --out DIR` (load the trace,
replay, write events, per-job CSV, summaries and plots), timed from outside like `time`.

    python bench/bench_simulate_out.py [TRACE] [--cluster 64x8:v100] [--repeat 3]
                                       [--policy fair --policy fair,fifo,las,srtf]

TRACE defaults to shared/traces/philly/philly.csv next to the repository (or a folder
above). Per policy list it runs the real `corral` command in a subprocess `--repeat` times
into a fresh directory and prints the fastest wall-clock time, its CPU time (user + system,
children included: plots drawn aside and parallel policies count), jobs per second of
wall-clock time (jobs x policies / wall) and the engine's own time from the summaries. The
first line says whether the core runs compiled. It prints figures; it is not a test.

    python bench/bench_simulate_out.py --against DIR

runs the command alternately as it is here and with DIR first on PYTHONPATH (DIR holds
another `corral` package: a checkout of the code before a change, built the same way), so
that both see the same machine load, and prints the median and fastest of each side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

from philly import DEFAULT_TRACE

from corral.core import cycle


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    compiled = not cycle.__file__.endswith(".py")
    print("core: " + ("compiled with mypyc" if compiled else "plain Python (not compiled)"))
    if args.against is not None:
        return compare(args)
    for policies in args.policy or ["fair", "fair,fifo,las,srtf"]:
        best = min((run_once(args, policies) for _ in range(args.repeat)), key=lambda r: r[0])
        wall, cpu, summaries = best
        jobs = sum(s["jobs"] for s in summaries.values())
        engine = ", ".join(f"{p} {s['sim_wall_s']:.2f} s" for p, s in summaries.items())
        print(f"\n== --policy {policies}")
        print(f"   wall             {wall:.2f} s (best of {args.repeat})")
        print(f"   CPU              {cpu:.2f} s (user + system, with children)")
        print(f"   jobs/s           {jobs / wall:,.0f} (jobs x policies / wall)")
        print(f"   engine           {engine}")
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE.resolve())
    p.add_argument("--cluster", default="64x8:v100")
    p.add_argument("--policy", action="append", help="a --policy value; repeat for several")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--against", type=Path, help="a folder holding another corral package")
    args = p.parse_args(argv)
    args.trace = args.trace.resolve()  # (the command runs in a temporary folder)
    return args


def compare(args: argparse.Namespace) -> int:
    """Each policy list run alternately here and against args.against, --repeat times each."""
    sides = {"here": None, str(args.against): args.against.resolve()}
    for policies in args.policy or ["fair"]:
        runs: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
        for _ in range(args.repeat):
            for side, path in sides.items():
                wall, cpu, _ = run_once(args, policies, path)
                runs[side].append((wall, cpu))
        print(f"\n== --policy {policies} ({args.repeat} runs each, alternating)")
        for side, figures in runs.items():
            walls, cpus = sorted(w for w, _ in figures), sorted(c for _, c in figures)
            print(
                f"   {side:<30} wall median {median(walls):6.2f} s, fastest {walls[0]:6.2f} s;"
                f" CPU median {median(cpus):6.2f} s"
            )
    return 0


def run_once(
    args: argparse.Namespace, policies: str, pythonpath: Path | None = None
) -> tuple[float, float, dict]:
    """(wall seconds, CPU seconds, policy -> summary) of one run of the command, with
    `pythonpath` first on PYTHONPATH if given."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        cmd = [sys.executable, "-c", "from corral.cli import main; main()", "simulate"]
        cmd += ["--trace", str(args.trace), "--cluster", args.cluster, "--policy", policies]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        env = dict(os.environ)
        if pythonpath is not None:
            env["PYTHONPATH"] = os.pathsep.join(
                filter(None, [str(pythonpath), env.get("PYTHONPATH")])
            )
        # Run from the temporary folder: `python -c` puts the working directory first on
        # sys.path, before PYTHONPATH, so from a checkout's root both sides would run it.
        run = [*cmd, "--out", str(out)]
        subprocess.run(run, check=True, stdout=subprocess.DEVNULL, env=env, cwd=tmp)
        wall = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        summaries = json.loads((out / "comparison.json").read_text())
    return wall, cpu, summaries


if __name__ == "__main__":
    sys.exit(main())
