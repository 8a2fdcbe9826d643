"""A simulation run without the CLI: build the workload, cluster and quota, run policies, write
the outputs. `corral simulate` is a thin layer over this, and benches and tests call it too.

    workload = build_workload(WorkloadSpec(trace="philly.csv", cluster="64x8:v100"))
    configs = policy_configs(workload.quota.scheduler, ["fair", "fifo"])
    reports, written = run_policies(workload, configs, SimOptions(), Outputs(out="results/"))

(or, in this process: `runs = [simulate(workload, config, SimOptions()) ...]` and
`write_out_dir(runs, "results/")`).

Bad input raises FormatError with one line.

Choices written down here because results depend on them:
- Trace and synthetic jobs ask for the cluster's first accelerator type (in the order the
  cluster lists its nodes) and are split into workers of at most its largest node.
- Filters apply in the order window (times as loaded), projects, first N; each rebases the
  workload to start at 0. For a synthetic workload, `projects` names the projects it draws
  from instead of filtering.
- A trace's quota is derived from its jobs ("demand" shares by default), a synthetic one's
  with "equal" shares; a scenario keeps its own quota unless a quota file replaces it.
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import orjson

from corral.formats.types import FormatError, Node, Quota, ScenarioJob, SchedulerConfig
from corral.policies import PLACEMENTS, load_policy
from corral.sim.engine import SimOptions, SimResult, Simulator
from corral.sim.metrics import (
    Analysis,
    JobInfo,
    Series,
    analyse,
    fmt_seconds,
    infos_from_jobs,
    write_job_csv,
    write_project_csv,
    write_summary,
)

SYNTHETIC_PROJECTS = ("a", "b", "c", "d")
T = TypeVar("T")
R = TypeVar("R")
SHARES = ("equal", "demand")


@dataclass(slots=True)
class WorkloadSpec:
    """Where the jobs, the cluster and the quota come from. Exactly one of scenario, trace
    and synthetic must be given."""

    scenario: str | Path | None = None
    trace: str | Path | None = None
    trace_format: str | None = None  # philly | philly-json | helios; None: guessed
    synthetic: int | None = None  # number of jobs of a synthetic Poisson workload
    rate_per_hour: float | None = None
    seed: int = 0
    projects: Sequence[str] = ()  # synthetic: the projects; otherwise a filter
    cluster: str | Path | None = None  # shorthand like 64x8:v100, or a node-group YAML file
    quota: str | Path | None = None  # a quota TOML file
    shares: str | None = None  # equal | demand: derive the quota from the jobs
    skip_bad: bool = False
    first: int | None = None
    window: tuple[float, float] | None = None  # seconds, [start, end)


@dataclass(slots=True)
class Workload:
    nodes: tuple[Node, ...]
    quota: Quota
    jobs: list[ScenarioJob]
    infos: dict[str, JobInfo]
    description: str  # one line for people: what was loaded and how the quota was made
    skipped: int = 0  # trace rows left out


@dataclass(slots=True)
class PolicyRun:
    name: str  # as the user wrote it: fair, or module:Class
    result: SimResult
    summary: dict[str, Any]
    wall_s: float  # seconds the engine ran, without loading or metrics
    cpu_s: float  # its CPU time: what to compare on a loaded machine
    analysis: Analysis  # job table and time series (the summary is analysis.summary)


@dataclass(slots=True)
class Report:
    """What the comparison and the printout need of a run once its own files are written
    (small: a run in another process sends back this, not its event log)."""

    name: str
    summary: dict[str, Any]
    jcts: list[float]  # of the finished jobs
    written: list[Path]


# --- workload ----------------------------------------------------------------------------------


def build_workload(spec: WorkloadSpec) -> Workload:
    _check_spec(spec)
    if spec.scenario is not None:
        return _scenario_workload(spec)
    nodes = load_nodes(spec.cluster)  # not None: checked above
    accelerator, per_node = trace_shape(nodes)
    if spec.trace is not None:
        jobs, skipped, what = _trace_jobs(spec, accelerator, per_node)
        default_shares = "demand"
    else:
        jobs, skipped, what = _synthetic_jobs(spec, accelerator, per_node), 0, "synthetic"
        default_shares = "equal"
    jobs = _filtered(jobs, spec, what)
    quota, how = _trace_quota(spec, jobs, accelerator, default_shares)
    return _finish(nodes, quota, jobs, f"{what}; quota {how}", skipped)


def _check_spec(spec: WorkloadSpec) -> None:
    given = [spec.scenario is not None, spec.trace is not None, spec.synthetic is not None]
    if sum(given) != 1:
        raise FormatError(
            "give exactly one workload: a SCENARIO file, --trace FILE or --synthetic JOBS"
        )
    if spec.scenario is None and spec.cluster is None:
        raise FormatError("--cluster is required with --trace and --synthetic (e.g. 64x8:v100)")
    if spec.trace_format is not None and spec.trace is None:
        raise FormatError("--format applies to --trace only")
    if (spec.rate_per_hour is not None) != (spec.synthetic is not None):
        raise FormatError("--synthetic JOBS and --rate R/h go together")
    if spec.quota is not None and spec.shares is not None:
        raise FormatError("give either --quota FILE or --shares, not both")
    if spec.shares is not None and spec.shares not in SHARES:
        raise FormatError(f"--shares: must be one of {', '.join(SHARES)}, got {spec.shares!r}")
    if spec.scenario is not None and spec.shares is not None:
        raise FormatError("--shares derives a quota for a trace; a scenario has its own quota")


def _scenario_workload(spec: WorkloadSpec) -> Workload:
    from corral.formats import load_quota, load_scenario

    scenario = load_scenario(spec.scenario)
    nodes = scenario.nodes if spec.cluster is None else load_nodes(spec.cluster)
    quota = scenario.quota
    if spec.quota is not None:  # a quota file replaces the scenario's, [scheduler] included
        quota = load_quota(spec.quota)
    what = f"scenario {Path(spec.scenario).name}"
    jobs = _filtered(sorted(scenario.jobs, key=lambda j: j.submit), spec, what)
    return _finish(nodes, quota, jobs, what)


def _trace_jobs(spec: WorkloadSpec, accelerator: str, per_node: int):
    from corral.sim.traces import load_trace

    loaded = load_trace(
        spec.trace,
        spec.trace_format,
        accelerator=accelerator,
        gpus_per_node=per_node,
        skip_bad=spec.skip_bad,
    )
    what = f"trace {Path(spec.trace).name}"
    if loaded.skipped:
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(loaded.skip_reasons.items()))
        what += f" ({loaded.skipped} rows skipped: {why})"
    return loaded.jobs, loaded.skipped, what


def _synthetic_jobs(spec: WorkloadSpec, accelerator: str, per_node: int) -> list[ScenarioJob]:
    from corral.sim.traces import synthetic

    return synthetic(
        jobs=spec.synthetic,
        rate_per_hour=spec.rate_per_hour,
        seed=spec.seed,
        projects=list(spec.projects or SYNTHETIC_PROJECTS),
        accelerator=accelerator,
        gpus_per_node=per_node,
    )


def _trace_quota(spec: WorkloadSpec, jobs, accelerator: str, default: str) -> tuple[Quota, str]:
    if spec.quota is not None:
        from corral.formats import load_quota

        return load_quota(spec.quota), f"from {Path(spec.quota).name}"
    from corral.sim.traces import derive_quota

    how = spec.shares or default
    return derive_quota(jobs, accelerator, how), f"shares by {how}"


def _filtered(jobs: list[ScenarioJob], spec: WorkloadSpec, what: str) -> list[ScenarioJob]:
    """The jobs the filters keep; an error that says what there was when they keep none."""
    kept = apply_filters(jobs, spec, filter_projects=spec.synthetic is None)
    if kept:
        return kept
    if not jobs:
        raise FormatError(f"{what}: no jobs to simulate")
    span = f"{fmt_seconds(jobs[0].submit)} to {fmt_seconds(jobs[-1].submit)}"
    names = sorted({j.spec.project for j in jobs})
    shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
    raise FormatError(
        f"{what}: the filters leave no jobs (its jobs are submitted from {span}; projects: {shown})"
    )


def _finish(nodes, quota, jobs, what: str, skipped: int = 0) -> Workload:
    capacity = sum(n.count for n in nodes)
    projects = len({j.spec.project for j in jobs})
    description = (
        f"{_count(len(jobs), 'job')} of {_count(projects, 'project')} from {what}; "
        f"{_count(len(nodes), 'node')}, {_count(capacity, 'accelerator')}"
    )
    return Workload(nodes, quota, jobs, infos_from_jobs(jobs), description, skipped)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def load_nodes(cluster: str | Path) -> tuple[Node, ...]:
    """A shorthand like 64x8:v100, or the path of a node-group YAML file."""
    from corral.formats import load_cluster, parse_cluster_shorthand

    if Path(cluster).is_file():
        return load_cluster(cluster)
    return parse_cluster_shorthand(str(cluster), "--cluster")


def trace_shape(nodes: Sequence[Node]) -> tuple[str, int]:
    """(accelerator, largest node of it) that trace jobs ask for: the cluster's first type."""
    accelerator = nodes[0].accelerator
    return accelerator, max(n.count for n in nodes if n.accelerator == accelerator)


def apply_filters(
    jobs: list[ScenarioJob], spec: WorkloadSpec, *, filter_projects: bool
) -> list[ScenarioJob]:
    from corral.sim.traces import first, only_projects, window

    if spec.window is not None:
        jobs = window(jobs, *spec.window)
    if filter_projects and spec.projects:
        jobs = only_projects(jobs, spec.projects)
    if spec.first is not None:
        jobs = first(jobs, spec.first)
    return jobs


# --- policies and runs -------------------------------------------------------------------------


def policy_configs(
    base: SchedulerConfig, names: Iterable[str] | None = None, placement: str | None = None
) -> list[SchedulerConfig]:
    """One config per policy name (default: the base's policy), duplicates dropped, each
    checked by loading it, so a typo fails before the first long run."""
    if placement is not None and placement not in PLACEMENTS:
        raise FormatError(f"--placement: must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
    wanted = list(dict.fromkeys(n.strip() for n in names or () if n.strip())) or [base.policy]
    configs = []
    for name in wanted:
        config = dataclasses.replace(base, policy=name, placement=placement or base.placement)
        load_policy(config)
        configs.append(config)
    return configs


def simulate(
    workload: Workload,
    config: SchedulerConfig,
    options: SimOptions,
    progress: Callable[[int], None] | None = None,
    replayed: Callable[[SimResult], object] | None = None,
    swept: Callable[[SimResult, Series], object] | None = None,
) -> PolicyRun:
    """Run one policy over the workload and summarise it. `replayed` is given the engine's
    result as soon as the engine is done, `swept` that and the time series as soon as the
    metrics have it (see run_policies). Summary extras: policy, cycles,
    stalls (instants where the policy kept preempting and the engine moved the clock on),
    sim_end_time, sim_wall_s and sim_jobs_per_s (jobs per second of engine time)."""
    policy = load_policy(config)
    sim = Simulator(workload.nodes, workload.quota, workload.jobs, policy, options)
    began, began_cpu = time.perf_counter(), time.process_time()
    result = sim.run(progress=progress)
    wall, cpu = time.perf_counter() - began, time.process_time() - began_cpu
    if replayed is not None:
        replayed(result)
    analysis = analyse(
        result.events,
        workload.infos,
        result.capacity,
        result.guarantees,
        None if swept is None else lambda series: swept(result, series),
    )
    analysis.summary = {
        "policy": config.policy,
        **analysis.summary,
        "cycles": result.cycles,
        "stalls": result.stalls,
        "sim_end_time": result.end_time,
        "sim_wall_s": wall,
        "sim_jobs_per_s": len(workload.jobs) / wall if wall > 0 else None,
    }
    return PolicyRun(config.policy, result, analysis.summary, wall, cpu, analysis)


# A bar per run, or None: given the policy's name, a context that yields the engine's progress
# callback (see Simulator.run).
ProgressFor = Callable[[str], AbstractContextManager[Callable[[int], None] | None]]


def run_policies(
    workload: Workload,
    configs: Sequence[SchedulerConfig],
    options: SimOptions,
    outputs: Outputs,
    progress: ProgressFor | None = None,
    processes: int | None = None,
    meanwhile: Callable[[list[Report], list[Path]], object] | None = None,
) -> tuple[list[Report], list[Path]]:
    """Run each policy and write its files (`write_run`), then the comparison
    (`write_comparison`). Several policies run in parallel processes, at most `processes`
    (default: the CPUs this process may use) at once, with the same outputs as one after
    another; progress bars are for runs in this process only. `meanwhile` is given the
    reports and the paths written once everything but the charts is written, while those may
    still be drawn aside (the CLI renders its printout then).

    When the runs go one after another here and there is a spare CPU, the outputs are a
    pipeline beside the metrics, whose time is the command's: plots are drawn beside this
    process (see Drawer) from as soon as the time series is made, and the event log is written
    by a forked process (see Aside) while the metrics are computed. The job tables are written
    last, once the comparison's charts are being drawn: the charts, not the table, are what
    the command waits for. (The tables stay here: written aside too, their copy-on-write cost
    more than it saved on a busy machine.) A run's event log and tables are let go of only
    then too: freeing them takes a tenth of a second."""
    several = len(configs) > 1
    cpus = usable_cpus()
    workers = min(len(configs), processes or cpus)
    spare = workers == 1 and cpus > 1
    with Drawer(spare and outputs.out is not None) as drawer, Aside(spare) as aside:

        def run_and_write(config: SchedulerConfig, here: bool) -> Report:
            if not here:  # a process of its own per policy: all in turn there
                return write_run(simulate(workload, config, options), outputs, several)
            bar = progress(config.policy) if progress is not None else nullcontext(None)
            paths = event_paths(config.policy, outputs, several)

            def replayed(result: SimResult) -> None:
                if paths:
                    aside.run(write_events, result.events, *paths)

            def swept(result: SimResult, series: Series) -> None:
                if outputs.out is not None:
                    draw_policy_plots(
                        series, result, policy_dir(outputs.out, config.policy), drawer
                    )

            with bar as update:
                run = simulate(workload, config, options, update, replayed, swept)
            kept.append(run)
            return write_run(run, outputs, several, drawer, early=True, tables=tables)

        tables: list[Callable[[], object]] = []  # job tables still to write (see above)
        kept: list[PolicyRun] = []  # runs made here, and their event logs (see above)
        # Policies in processes of their own: this one waits, so it readies matplotlib
        # meanwhile for the comparison's charts (drawn here, see write_comparison), rather
        # than after the last policy.
        warm = _warm_up_comparison if workers > 1 and outputs.out is not None else None
        reports = in_processes(run_and_write, configs, workers, meanwhile=warm)
        written = [path for report in reports for path in report.written]
        if outputs.out is not None:
            written.append(write_comparison(reports, outputs.out, drawer))
        for write in tables:
            write()
        if meanwhile is not None:
            meanwhile(reports, written)
        kept.clear()  # freed while the charts are still drawn (see above)
        tables.clear()
    return reports, written


class Drawer:
    """Draws plots here, or, `aside`, in a forked process beside this one: it imports
    matplotlib and draws a first figure (see plots.warm_up) while the engine runs, and draws
    the charts while this process writes the other files. (Each chart in a fork of that warm
    process, all at once, took a third more CPU time in all, for copy-on-write, and was no
    quicker on two cores. A second warm process drew the charts 0.13 s sooner, but warming it
    up beside the engine's set-up delayed the replay's start by 0.28 s.)
    Leaving the context waits for every plot (and raises what drawing one raised). Make it
    before any thread starts (a progress bar's); a process forked while it is open (Aside)
    may use nothing its threads could be holding: writing files is fine."""

    def __init__(self, aside: bool = False) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._drawn: list[Future] = []
        if aside and "fork" in multiprocessing.get_all_start_methods():
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))
            self._drawn.append(self._pool.submit(_warm_up_plots))

    def draw(self, plot: Callable[..., Path], *args: Any) -> None:
        if self._pool is None:
            plot(*args)
        else:
            self._drawn.append(self._pool.submit(plot, *args))

    def __enter__(self) -> Drawer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            try:
                for future in self._drawn:
                    future.result()
            finally:
                self._pool.shutdown(cancel_futures=True)


class Aside:
    """Runs functions in forked processes, one each, started at once: each has this process's
    memory as it is then, so what it is given (a whole event log) is not copied through a
    pipe; this process lets go of it once that one is done. Here instead when not `enabled`
    or where fork is missing. Leaving the context waits for them all (and raises what one
    raised). One at a time."""

    def __init__(self, enabled: bool = False) -> None:
        self.enabled = enabled and "fork" in multiprocessing.get_all_start_methods()
        self._pools: list[ProcessPoolExecutor] = []
        self._done: list[Future] = []

    def run(self, task: Callable[..., object], *args: Any) -> None:
        if not self.enabled:
            task(*args)
            return
        i = len(_ASIDE)
        _ASIDE.append((task, args))  # what the forked process finds
        pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))
        self._pools.append(pool)
        self._done.append(pool.submit(_run_aside, i))
        self._done[-1].add_done_callback(lambda _: _ASIDE.__setitem__(i, None))

    def __enter__(self) -> Aside:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            for future in self._done:
                future.result()
        finally:
            for pool in self._pools:
                pool.shutdown(cancel_futures=True)
            _ASIDE.clear()


_ASIDE: list[tuple[Callable[..., object], tuple] | None] = []  # Aside's tasks, until done


def _run_aside(i: int) -> None:
    task = _ASIDE[i]
    assert task is not None
    task[0](*task[1])


def _warm_up_plots() -> None:
    from corral.sim.plots import warm_up

    warm_up()


def _warm_up_comparison() -> None:
    from corral.sim.plots import warm_up

    warm_up(comparison_only=True)


def in_processes(
    task: Callable[[T, bool], R],
    items: Sequence[T],
    processes=None,
    meanwhile: Callable[[], object] | None = None,
) -> list[R]:
    """[task(item, in_this_process) for item in items], in up to `processes` (default: the
    usable CPUs) forked processes at once when there are several items; in this process
    where fork is not available. Forked, the task and what it refers to (a loaded workload)
    are shared as they are, not pickled; only results travel back. `meanwhile` is run here
    once the processes are under way (not when the items run here)."""
    workers = min(len(items), processes or usable_cpus())
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [task(item, True) for item in items]
    global _FORKED
    _FORKED = (task, items)
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            results = pool.map(_forked_task, range(len(items)))  # (all forked by now)
            if meanwhile is not None:
                meanwhile()
            return list(results)
    finally:
        _FORKED = None


_FORKED: tuple[Callable, Sequence] | None = None  # (task, items) for the forked workers


def _forked_task(i: int) -> Any:
    assert _FORKED is not None
    task, items = _FORKED
    return task(items[i], False)


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the platform has one)."""
    counted = getattr(os, "process_cpu_count", None)  # Python 3.13
    if counted is not None:
        return counted() or 1
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


# --- outputs -----------------------------------------------------------------------------------


def safe_name(policy: str) -> str:
    """A policy name usable in a file name ("mod:Class" -> "mod_Class")."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", policy).strip("._") or "policy"


def per_policy_path(path: str | Path, policy: str, several: bool) -> Path:
    """`path` itself for one policy; with several, the policy's name before the extension:
    events.jsonl -> events.fair.jsonl."""
    path = Path(path)
    if not several:
        return path
    return path.with_name(f"{path.stem}.{safe_name(policy)}{path.suffix}")


def write_events(events: Iterable[dict], path: str | Path, *more: str | Path) -> None:
    """JSON Lines, one compact object per line (orjson: a tenth of the json module's time),
    to `path`, then copied to each of `more`. Streamed: a list of the lines would make the
    process touch a gigabyte more memory on a whole trace (twice its system time)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.writelines(orjson.dumps(event, option=orjson.OPT_APPEND_NEWLINE) for event in events)
    for where in more:
        Path(where).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, where)


def event_paths(policy: str, outputs: Outputs, several: bool) -> list[Path]:
    """Where a run's event log goes: the --events file (per policy when there are several)
    and OUT/POLICY/events.jsonl, as `outputs` asks."""
    paths = []
    if outputs.events is not None:
        paths.append(per_policy_path(outputs.events, policy, several))
    if outputs.out is not None:
        paths.append(policy_dir(outputs.out, policy) / "events.jsonl")
    return paths


def write_summary_file(summary: dict[str, Any], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_summary(summary, path)


def policy_dir(out: str | Path, policy: str) -> Path:
    return Path(out) / safe_name(policy)


def draw_policy_plots(series: Series, result: SimResult, directory: Path, drawer: Drawer) -> None:
    """DIR/utilisation.png and DIR/shares.png."""
    from corral.sim.plots import binned, plot_shares, plot_utilisation

    directory.mkdir(parents=True, exist_ok=True)
    series = binned(series)
    drawer.draw(plot_utilisation, series, directory / "utilisation.png")
    drawer.draw(plot_shares, series, result.guarantees, result.capacity, directory / "shares.png")


def write_policy_dir(
    run: PolicyRun,
    directory: str | Path,
    drawer: Drawer | None = None,
    early: bool = False,
    tables: list[Callable[[], object]] | None = None,
) -> Path:
    """DIR/jobs.csv, summary.json, utilisation.png, shares.png (the plots not when `early`:
    drawn already, see run_policies). DIR/events.jsonl is write_run's. Given `tables`, the
    job table is not written now: what writes it is appended there."""
    drawer = drawer or Drawer()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if not early:
        draw_policy_plots(run.analysis.series, run.result, directory, drawer)
    if tables is None:
        write_job_csv(run.analysis.rows, directory / "jobs.csv")
    else:  # the rows alone, not the run and its event log, are kept until then
        tables.append(functools.partial(write_job_csv, run.analysis.rows, directory / "jobs.csv"))
    write_summary(run.summary, directory / "summary.json")
    return directory


def write_run(
    run: PolicyRun,
    outputs: Outputs,
    several: bool,
    drawer: Drawer | None = None,
    early: bool = False,
    tables: list[Callable[[], object]] | None = None,
) -> Report:
    """The files of one run that `outputs` asks for: its events and summary files (named per
    policy when there are several) and OUT/POLICY/ (see write_policy_dir, and `tables`
    there); the event logs (event_paths) and plots not when `early` (see run_policies)."""
    written: list[Path] = []
    paths = event_paths(run.name, outputs, several)
    if paths and not early:
        write_events(run.result.events, *paths)
    if outputs.events is not None:
        written.append(paths[0])
    if outputs.summary is not None:
        written.append(per_policy_path(outputs.summary, run.name, several))
        write_summary_file(run.summary, written[-1])
    if outputs.out is not None:
        write_policy_dir(run, policy_dir(outputs.out, run.name), drawer, early, tables)
    jcts = [r.jct for r in run.analysis.rows if r.jct is not None]
    return Report(run.name, run.summary, jcts, written)


def write_comparison(
    reports: Sequence[Report], out: str | Path, drawer: Drawer | None = None
) -> Path:
    """OUT/jct_cdf.png (every policy on one chart), OUT/starved.png (per project and policy:
    time starved, longest starved spell, mean wait), OUT/per_project.csv (the same figures and
    more, a line per policy and project) and OUT/comparison.json (policy -> summary)."""
    from corral.sim.plots import plot_jct_cdf, plot_starved

    drawer = drawer or Drawer()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summaries = {r.name: r.summary for r in reports}
    drawer.draw(plot_jct_cdf, {r.name: r.jcts for r in reports}, out / "jct_cdf.png")
    drawer.draw(plot_starved, summaries, out / "starved.png")
    write_project_csv(summaries, out / "per_project.csv")
    write_summary(summaries, out / "comparison.json")
    return out


def write_out_dir(runs: Sequence[PolicyRun], out: str | Path) -> Path:
    """Per policy, OUT/POLICY/ (see write_policy_dir); then the comparison (write_comparison)."""
    outputs = Outputs(out=out)
    return write_comparison([write_run(run, outputs, True) for run in runs], out)


@dataclass(slots=True)
class Outputs:
    """Where a run's results go; all optional."""

    events: str | Path | None = None
    summary: str | Path | None = None
    out: str | Path | None = None

    def prepare(self) -> None:
        """Create the directories now, so a bad path fails before a long run, not after."""
        for path in (self.events, self.summary):
            if path is not None:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
        if self.out is not None:
            Path(self.out).mkdir(parents=True, exist_ok=True)
