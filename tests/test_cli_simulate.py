"""`corral simulate` end to end: the real command in a subprocess, as a user runs it."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from corral.cli.simulate import parse_rate, parse_window
from corral.formats.types import FormatError
from corral.sim.run import per_policy_path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EVENTS = {"submit", "start", "preempt", "finish", "fail", "reject", "cancel"}

# Two projects with equal shares of 8 GPUs: b borrows all of them, a reclaims its half, one
# job can never run (rejected) and one is a two-worker gang.
SCENARIO = """
cluster: "2x4:gpu"
quota: |
  [toml-schema]
  version = "1"
  [project_membership]
  a = ["alice"]
  b = ["bob"]
  [project_resources.a]
  gpu = 1
  [project_resources.b]
  gpu = 1
jobs:
  - {name: b1, project: b, user: bob, resources: {accelerator: gpu, per_worker: 4}, submit: 0,
     duration: 1000}
  - {name: b2, project: b, user: bob, resources: {accelerator: gpu, per_worker: 4}, submit: 0,
     duration: 1000}
  - {name: a1, project: a, user: alice, resources: {accelerator: gpu, per_worker: 4}, submit: 10,
     duration: 100}
  - {name: gang, project: a, user: alice, resources: {accelerator: gpu, per_worker: 2, workers: 2},
     submit: 20, duration: 50}
  - {name: toobig, project: a, user: alice, resources: {accelerator: gpu, per_worker: 8},
     submit: 30, duration: 10}
"""


def corral(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", "from corral.cli import main; main()", "simulate"]
    return subprocess.run(
        [*cmd, *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO)
    return path


def philly_csv(path: Path, rows: int = 30) -> Path:
    """A small table in the Philly CSV format: three teams, 1 to 16 GPUs, over a day."""
    t0 = datetime(2017, 10, 9, 6, 0, 0)
    teams, sizes = ("11cb48", "6214e9", "b436b2"), (1, 1, 2, 4, 8, 16)
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["timestamp", "duration", "num_gpus", "gpu_time", "cluster"])
        for i in range(rows):
            gpus, duration = sizes[i % len(sizes)], 60.0 * (1 + (i * 7) % 50)
            when = t0 + timedelta(minutes=17 * i)
            out.writerow(
                [f"{when:%Y-%m-%d %H:%M:%S}", duration, gpus, gpus * duration, teams[i % 3]]
            )
    return path


# --- scenario: event log, summary, JSON ---------------------------------------------------------


def test_scenario_events_summary_and_json(scenario: Path, tmp_path: Path) -> None:
    events_path, summary_path = tmp_path / "events.jsonl", tmp_path / "summary.json"
    proc = ok(corral(scenario, "--events", events_path, "--summary", summary_path, "--json"))

    events = [json.loads(line) for line in events_path.read_text().splitlines()]
    assert events and all({"t", "event", "job", "project"} <= e.keys() for e in events)
    assert {e["event"] for e in events} <= EVENTS
    assert [e["t"] for e in events] == sorted(e["t"] for e in events)
    for e in events:
        if e["event"] == "start":  # one node per worker, in worker order
            assert isinstance(e["nodes"], list) and all(isinstance(n, str) for n in e["nodes"])
        if e["event"] in ("preempt", "reject"):
            assert e["reason"]
    starts = {e["job"]: e["nodes"] for e in events if e["event"] == "start"}
    assert len(starts["gang"]) == 2 and len(starts["a1"]) == 1
    assert [e["job"] for e in events if e["event"] == "reject"] == ["toobig"]
    assert any(e["event"] == "preempt" and e["project"] == "b" for e in events)  # a reclaims

    summary = json.loads(summary_path.read_text())
    assert summary["policy"] == "fair"
    assert (summary["jobs"], summary["finished"], summary["rejected"]) == (5, 4, 1)
    assert set(summary["jct"]) == {"mean", "p50", "p95", "p99"}
    assert summary["jct"]["mean"] >= summary["mean_duration"]
    assert 0 < summary["utilisation"] <= 1
    assert set(summary["per_project"]) == {"a", "b"}
    assert summary["sim_wall_s"] >= 0 and summary["cycles"] > 0

    printed = json.loads(proc.stdout)  # --json: policy -> summary, nothing else on stdout
    assert list(printed) == ["fair"] and printed["fair"]["jobs"] == 5


# --- trace: several policies, output directory ------------------------------------------------


def test_trace_two_policies_out_dir(tmp_path: Path) -> None:
    trace = philly_csv(tmp_path / "philly.csv")
    out, summary = tmp_path / "results", tmp_path / "summary.json"
    args = ["--trace", trace, "--cluster", "4x8:v100", "--policy", "fair,fifo"]
    table = ok(corral(*args, "--out", out, "--summary", summary, "--processes", "2")).stdout
    for label in ("fair", "fifo", "preemptions", "JCT p99", "wait mean", "utilisation"):
        assert label in table
    assert "sim jobs/s" in table and "sim wall time" in table

    for policy in ("fair", "fifo"):
        d = out / policy
        for name in ("events.jsonl", "jobs.csv", "summary.json"):
            assert (d / name).stat().st_size > 0, name
        for name in ("utilisation.png", "shares.png"):
            assert (d / name).read_bytes().startswith(PNG_MAGIC), name
        assert len((d / "jobs.csv").read_text().splitlines()) == 1 + 30  # header + jobs
        per_policy = json.loads((tmp_path / f"summary.{policy}.json").read_text())
        assert per_policy["policy"] == policy and per_policy["jobs"] == 30
    assert (out / "jct_cdf.png").read_bytes().startswith(PNG_MAGIC)
    comparison = json.loads((out / "comparison.json").read_text())
    assert set(comparison) == {"fair", "fifo"}
    assert all(s["finished"] == 30 for s in comparison.values())
    assert "longest starved" in table and "first wait mean" in table
    assert (out / "starved.png").read_bytes().startswith(PNG_MAGIC)

    # The two policies ran in two processes; one after another, they write the same files.
    again = tmp_path / "in_series"
    ok(corral(*args, "--out", again, "--processes", "1"))
    assert_same_outputs(out, again)
    bad = corral(*args, "--processes", "0")
    assert bad.returncode != 0 and "--processes: must be >= 1" in bad.stderr


def test_comparison_has_the_per_project_figures(tmp_path: Path) -> None:
    """OUT/per_project.csv has every policy's per-project figures: its mean wait equals a
    recount from that policy's events.jsonl (all time pending, after preemptions too), the
    rest the summaries; the printed comparison has a row per project; starved.png is drawn.
    The scenario has preemptions (fair, las) and starved projects (fifo, las)."""
    out = tmp_path / "out"
    scenario = EXAMPLES / "bastion-borrow.yaml"
    table = ok(corral(scenario, "--policy", "fair,fifo,las", "--out", out)).stdout
    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison["fair"]["preemptions"] > 0 and comparison["fifo"]["starved_time"] > 0
    assert (out / "starved.png").read_bytes().startswith(PNG_MAGIC)
    with open(out / "per_project.csv", newline="") as f:
        lines = list(csv.DictReader(f))
    projects = sorted(comparison["fair"]["per_project"])
    assert [(r["policy"], r["project"]) for r in lines] == [
        (policy, p) for policy in comparison for p in projects
    ]
    assert "Per project" in table
    assert all(p in table for p in projects)
    for r in lines:
        figures = comparison[r["policy"]]["per_project"][r["project"]]
        for key in ("starved_time", "starved_longest", "jct_mean"):
            assert float(r[key]) == pytest.approx(figures[key]), (r["policy"], key)
    for policy in comparison:
        waits = recount_waits(out / policy / "events.jsonl")
        csv_waits = {r["project"]: float(r["wait_mean"]) for r in lines if r["policy"] == policy}
        assert csv_waits == pytest.approx(waits), policy


def recount_waits(events_path: Path) -> dict[str, float]:
    """project -> mean over its started jobs of the time each spent pending."""
    since: dict[str, float] = {}  # job -> pending since
    waited: dict[str, float] = {}
    project: dict[str, str] = {}
    for line in events_path.read_text().splitlines():
        e = json.loads(line)
        job, t = e["job"], e["t"]
        project[job] = e["project"]
        if e["event"] in ("submit", "preempt"):
            since[job] = t
        elif job in since:  # a start, or an end while pending
            waited[job] = waited.get(job, 0.0) + t - since.pop(job)
    by_project: dict[str, list[float]] = {}
    for job, seconds in waited.items():
        by_project.setdefault(project[job], []).append(seconds)
    return {p: sum(v) / len(v) for p, v in by_project.items()}


def assert_same_outputs(one: Path, other: Path) -> None:
    """The same files with the same bytes, but for the engine's timings in the summaries."""
    names = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(other) for p in other.rglob("*") if p.is_file())
    for name in names:
        if name.suffix != ".json":
            assert (one / name).read_bytes() == (other / name).read_bytes(), name
            continue
        summaries = [json.loads((d / name).read_text()) for d in (one, other)]
        for s in summaries:
            for summary in s.values() if "policy" not in s else [s]:
                del summary["sim_wall_s"], summary["sim_jobs_per_s"]
        assert summaries[0] == summaries[1], name


def test_synthetic_workload_and_own_policy(tmp_path: Path) -> None:
    # A researcher's policy in one file in the current directory (DESIGN.md section 1).
    (tmp_path / "mypolicy.py").write_text(
        "from corral.policies.fifo import Fifo\n\nclass Mine(Fifo):\n    name = 'mine'\n"
    )
    args = ["--synthetic", "40", "--rate", "20/h", "--seed", "7", "--cluster", "2x8:a100"]
    args += ["--projects", "x,y", "--policy", "fifo,mypolicy:Mine", "--json"]
    summaries = json.loads(ok(corral(*args, cwd=tmp_path)).stdout)
    assert list(summaries) == ["fifo", "mypolicy:Mine"]
    for summary in summaries.values():
        assert summary["jobs"] == 40 and set(summary["per_project"]) == {"x", "y"}
    assert summaries["fifo"]["jct"] == summaries["mypolicy:Mine"]["jct"]  # same order as fifo


def test_no_shortcuts_runs_every_cycle_to_the_same_events(tmp_path: Path) -> None:
    # docs/policies.md's example, in its own file: the same events with and without the
    # simulator's shortcuts, more cycles without.
    (tmp_path / "mypolicy.py").write_text(
        "from corral.policies.fifo import Fifo\n\n"
        "class SmallestFirst(Fifo):\n"
        "    def order(self, cycle):\n"
        "        key = lambda j: (j.demand, j.submit_time, j.id)\n"
        "        yield from sorted(cycle.snap.pending.all, key=key)\n"
    )
    args = ["--synthetic", "60", "--rate", "40/h", "--seed", "3", "--cluster", "2x8:a100"]
    args += ["--policy", "mypolicy:SmallestFirst", "--json"]
    runs = []
    for extra in ([], ["--no-shortcuts"]):
        events = tmp_path / f"events{len(extra)}.jsonl"
        summary = json.loads(ok(corral(*args, *extra, "--events", events, cwd=tmp_path)).stdout)
        runs.append((events.read_text(), summary["mypolicy:SmallestFirst"]["cycles"]))
    (fewer, cycles), (every, all_cycles) = runs
    assert fewer == every and cycles <= all_cycles


# --- bad input: one line, exit 2, no traceback ------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["missing.yaml"], id="missing-scenario"),
        pytest.param(["--trace", "missing.csv", "--cluster", "64x8:v100"], id="missing-trace"),
        pytest.param(["--trace", "TRACE", "--cluster", "64y8"], id="bad-cluster"),
        pytest.param(
            ["--trace", "TRACE", "--cluster", "4x8:v100", "--policy", "fair,nope"],
            id="unknown-policy",
        ),  # fmt: skip
        pytest.param(["--events", "events.jsonl"], id="no-workload"),
        # (written aside, in a forked process, where there is a spare CPU)
        pytest.param(["SCENARIO", "--events", "."], id="events-into-a-directory"),
    ],
)
def test_bad_input(args: list[str], tmp_path: Path, scenario: Path) -> None:
    trace = philly_csv(tmp_path / "philly.csv", rows=3)
    args = [str(trace) if a == "TRACE" else str(scenario) if a == "SCENARIO" else a for a in args]
    proc = corral(*args, cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("corral: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "events.jsonl").exists()


# --- flag parsing, in process -----------------------------------------------------------------


def test_rate_and_window_parsing() -> None:
    assert parse_rate("30") == parse_rate("30/h") == 30.0
    assert parse_rate("2/min") == 120.0 and parse_rate("0.01/s") == pytest.approx(36.0)
    assert parse_window("3600:2h") == (3600.0, 7200.0)
    assert parse_window("1h:") == (3600.0, float("inf"))
    for bad in ("0", "-1/h", "fast"):
        with pytest.raises(FormatError):
            parse_rate(bad)
    for bad in ("5", ":5", "5:1"):
        with pytest.raises(FormatError):
            parse_window(bad)


def test_per_policy_paths() -> None:
    assert per_policy_path("out/events.jsonl", "fair", several=False) == Path("out/events.jsonl")
    assert per_policy_path("out/events.jsonl", "fair", several=True) == Path(
        "out/events.fair.jsonl"
    )
    assert per_policy_path("s.json", "my.mod:Cls", several=True) == Path("s.my.mod_Cls.json")
