"""`corral simulate`: replay a scenario or a trace through the core on a virtual clock.

The work happens in corral.sim.run; this module parses flags, shows progress and prints.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from corral.cli import app, fail

if TYPE_CHECKING:  # Rich is imported by the commands that draw: other commands start quicker
    from rich.table import Table
from corral.formats.types import FormatError

_RATE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?:/\s*(s|min|m|h|d))?\s*")
_PER_HOUR = {"s": 3600.0, "min": 60.0, "m": 60.0, "h": 1.0, "d": 1 / 24, None: 1.0}
_EPILOG = """
Examples:

  corral simulate scenario.yaml --policy fair,fifo

  corral simulate --trace philly.csv --cluster 64x8:v100 --policy fair,las --out results/

  corral simulate --synthetic 2000 --rate 120/h --seed 1 --cluster 16x8:a100 --json
"""


@app.command(epilog=_EPILOG)
def simulate(
    scenario: Annotated[
        Path | None, typer.Argument(help="Scenario YAML: cluster, quota and timed jobs.")
    ] = None,
    trace: Annotated[Path | None, typer.Option("--trace", help="Trace file to replay.")] = None,
    trace_format: Annotated[
        str | None,
        typer.Option(
            "--format", help="Trace format: philly, philly-json, helios (default: guessed)."
        ),
    ] = None,
    synthetic: Annotated[
        int | None,
        typer.Option("--synthetic", help="Number of jobs of a synthetic Poisson workload."),
    ] = None,
    rate: Annotated[
        str | None,
        typer.Option("--rate", help="Synthetic arrival rate: 30/h (default unit), 2/min."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the synthetic workload.")] = 0,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            help="COUNTxPER_NODE:TYPE\\[@DOMAIN], e.g. 64x8:v100, or a node-group YAML file. "
            "Required with --trace/--synthetic; replaces a scenario's cluster.",
        ),
    ] = None,
    quota: Annotated[Path | None, typer.Option("--quota", help="Quota TOML file.")] = None,
    shares: Annotated[
        str | None,
        typer.Option(
            "--shares",
            help="Derive the quota from the jobs: equal or demand "
            "(default: demand for --trace, equal for --synthetic).",
        ),
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option(
            "--policy",
            help="Comma list of fair, fifo, las, srtf or module:Class (a module in the current "
            "directory or installed) "
            "(default: the quota's \\[scheduler].policy, else fair).",
        ),
    ] = None,
    placement: Annotated[str | None, typer.Option("--placement", help="pack or spread.")] = None,
    round_s: Annotated[
        str | None, typer.Option("--round", help="Fixed scheduling rounds (e.g. 300 or 5m).")
    ] = None,
    restart_penalty: Annotated[
        str,
        typer.Option("--restart-penalty", help="Seconds lost on each resume after a preemption."),
    ] = "0",
    slowdown: Annotated[
        float,
        typer.Option("--slowdown", help="Extra run time fraction for a gang spread too wide."),
    ] = 0.0,
    max_sim_time: Annotated[
        str | None, typer.Option("--max-sim-time", help="Stop the virtual clock here (e.g. 30d).")
    ] = None,
    no_shortcuts: Annotated[
        bool,
        typer.Option(
            "--no-shortcuts",
            help="Run a cycle at every event, as a live server would (same events, slower).",
        ),
    ] = False,
    first: Annotated[int | None, typer.Option("--first", help="Keep the N earliest jobs.")] = None,
    window: Annotated[
        str | None,
        typer.Option(
            "--window",
            help="Keep jobs submitted in \\[START, END): START:END in seconds or 2h-style.",
        ),
    ] = None,
    projects: Annotated[
        str | None,
        typer.Option(
            "--projects", help="Comma list: keep these projects (synthetic: generate them)."
        ),
    ] = None,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Skip bad trace rows.")] = False,
    events: Annotated[
        Path | None, typer.Option("--events", help="Write the event log (JSON Lines).")
    ] = None,
    summary: Annotated[
        Path | None, typer.Option("--summary", help="Write the summary (JSON).")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write events, CSV, summaries and plots here.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summaries as JSON.")] = False,
    processes: Annotated[
        int | None,
        typer.Option(
            "--processes",
            help="Run several policies in up to N processes at once (default: the CPUs there "
            "are; 1: one after another). The outputs are the same either way.",
        ),
    ] = None,
) -> None:
    """Replay a scenario, a trace or a synthetic workload through one or more policies.

    With several policies, --events and --summary write one file per policy: events.fair.jsonl.
    """
    # Imported here: main() registers this command on every `corral` invocation, and the
    # simulator's imports (numpy, the policies) should not slow down the live commands.
    from corral.sim import run as sim_run
    from corral.sim.gcpause import no_cyclic_gc

    _importable_cwd()
    # A batch command: loading, replay and metrics make millions of objects and no reference
    # cycles (tests/test_sim_gc.py), so the cyclic collector would only walk them again and
    # again (a tenth of the command's time).
    with no_cyclic_gc():
        try:
            spec = sim_run.WorkloadSpec(
                scenario=scenario,
                trace=trace,
                trace_format=trace_format,
                synthetic=synthetic,
                rate_per_hour=None if rate is None else parse_rate(rate),
                seed=seed,
                projects=_names(projects),
                cluster=cluster,
                quota=quota,
                shares=shares,
                skip_bad=skip_bad,
                first=_non_negative(first, "--first"),
                window=None if window is None else parse_window(window),
            )
            options = _sim_options(round_s, restart_penalty, slowdown, max_sim_time)
            options.shortcuts = not no_shortcuts
            workload = sim_run.build_workload(spec)
            configs = sim_run.policy_configs(workload.quota.scheduler, _names(policy), placement)
            outputs = sim_run.Outputs(events=events, summary=summary, out=out)
            outputs.prepare()
            label = f"{len(workload.jobs)} jobs"
            printout: list[str] = []

            def render(reports, written) -> None:  # while the last charts are drawn
                printout.append(_report(workload, reports, written))

            reports, written = sim_run.run_policies(
                workload,
                configs,
                options,
                outputs,
                progress=lambda policy: _progress(len(workload.jobs), f"{policy}: {label}"),
                processes=_positive(processes, "--processes"),
                meanwhile=None if as_json else render,
            )
        except FormatError as err:
            fail(str(err))
        except OSError as err:
            fail(_os_message(err))
        if as_json:
            _print_json({report.name: report.summary for report in reports})
        else:
            sys.stdout.write(printout[0])
        _exit_now()


def _exit_now() -> None:
    """End the `corral` process here: every file is written and closed. Freeing the loaded
    trace and what the metrics made (millions of objects), a collection when the cyclic
    collector comes back on, and the interpreter's teardown would cost a tenth of a second or
    more, for nothing (mypy ends the same way). Only in the command's own process: a caller
    that runs the command in its process (a test's runner) goes on."""
    import corral.cli

    if corral.cli.STANDALONE:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _importable_cwd() -> None:
    """Let --policy mymodule:MyPolicy find mymodule.py in the current directory, as
    `python -m` would; the console script only puts its own directory on sys.path. Appended,
    so a local file never shadows an installed package."""
    cwd = str(Path.cwd())
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


# --- flag parsing ------------------------------------------------------------------------------


def parse_rate(text: str) -> float:
    """Jobs per hour from '30', '30/h', '2/min', '0.5/s' or '100/d'."""
    m = _RATE.fullmatch(text)
    value = float(m[1]) * _PER_HOUR[m[2]] if m else math.nan
    if not value > 0 or not math.isfinite(value):
        raise FormatError(f"--rate: must be a rate > 0 like 30/h, 2/min or 100/d, got {text!r}")
    return value


def parse_window(text: str) -> tuple[float, float]:
    """'START:END' in seconds or durations (3600:2h); an empty END means to the end."""
    from corral.formats import parse_duration

    start, sep, end = text.partition(":")
    if not sep or not start.strip():
        raise FormatError(f"--window: must be START:END (seconds or 1h-style), got {text!r}")
    lo = parse_duration(start.strip(), "--window start")
    hi = parse_duration(end.strip(), "--window end") if end.strip() else math.inf
    if hi <= lo:
        raise FormatError(f"--window: END must be after START, got {text!r}")
    return lo, hi


def _sim_options(round_s, restart_penalty, slowdown, max_sim_time):
    from corral.formats import parse_duration
    from corral.sim.engine import SimOptions

    step = None if round_s is None else parse_duration(round_s, "--round")
    if step is not None and step <= 0:
        raise FormatError(f"--round: must be > 0 seconds, got {round_s!r}")
    if not (slowdown >= 0 and math.isfinite(slowdown)):
        raise FormatError(f"--slowdown: must be a fraction >= 0, got {slowdown}")
    return SimOptions(
        round_s=step,
        restart_penalty=parse_duration(restart_penalty, "--restart-penalty"),
        slowdown=slowdown,
        max_sim_time=None
        if max_sim_time is None
        else parse_duration(max_sim_time, "--max-sim-time"),
    )


def _names(text: str | None) -> list[str]:
    return [n.strip() for n in (text or "").split(",") if n.strip()]


def _positive(value: int | None, flag: str) -> int | None:
    if value is not None and value < 1:
        raise FormatError(f"{flag}: must be >= 1, got {value}")
    return value


def _non_negative(value: int | None, flag: str) -> int | None:
    if value is not None and value < 0:
        raise FormatError(f"{flag}: must be >= 0, got {value}")
    return value


def _os_message(err: OSError) -> str:
    where = f"{err.filename}: " if err.filename else ""
    return f"{where}{err.strerror or err}"


# --- progress ----------------------------------------------------------------------------------


@contextmanager
def _progress(total: int, label: str) -> Iterator[Callable[[int], None] | None]:
    """A transient bar on stderr when it is a terminal; nothing otherwise (logs, pipes, CI)."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    columns = (*Progress.get_default_columns()[:1], BarColumn(), MofNCompleteColumn())
    with Progress(
        *columns, TimeElapsedColumn(), console=Console(stderr=True), transient=True
    ) as bar:
        task = bar.add_task(label, total=total)
        step = max(1, total // 1000)  # the engine reports after every instant: redraw less
        last = -step

        def update(done: int) -> None:
            nonlocal last
            if done - last >= step or done == total:
                last = done
                bar.update(task, completed=done)

        yield update


# --- printing ----------------------------------------------------------------------------------


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=_plain_number) + "\n")


def _plain_number(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _report(workload, reports, written: list[Path]) -> str:
    """The printout: what was loaded, the summary tables and the files written."""
    from rich.console import Console

    from corral.sim.metrics import comparison_table

    summaries = [report.summary for report in reports]
    table = comparison_table({report.name: report.summary for report in reports})
    table.add_row("cycles", *(str(s["cycles"]) for s in summaries))
    if any(s["stalls"] for s in summaries):  # rare; a row of zeros would only distract
        table.add_row("stalls", *(str(s["stalls"]) for s in summaries))
    table.add_row("sim wall time", *(_wall(s["sim_wall_s"]) for s in summaries))
    table.add_row("sim jobs/s", *(_rate(s["sim_jobs_per_s"]) for s in summaries))
    if len(reports) == 1:
        table.title = f"Simulation summary ({reports[0].name})"
    console = Console(highlight=False)
    with console.capture() as printout:
        console.print(f"[dim]{workload.description}[/]")
        console.print(table)
        console.print(
            _project_table(summaries[0]) if len(reports) == 1 else _project_comparison(summaries)
        )
        for path in written:
            console.print(f"[dim]wrote {path}[/]")
    return printout.get()


def _wall(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _project_table(summary: dict[str, Any]) -> Table:
    from rich.table import Table

    from corral.sim.metrics import fmt_seconds

    table = Table(title=f"Per project ({summary['policy']})")
    columns = ("project", "jobs", "finished", "JCT mean", "wait mean", "share", "guarantee")
    for name in (*columns, "starved", "longest starved"):
        table.add_column(name, justify="left" if name == "project" else "right")
    for project, p in summary["per_project"].items():
        table.add_row(
            project,
            str(p["jobs"]),
            str(p["finished"]),
            fmt_seconds(p["jct_mean"]),
            fmt_seconds(p["wait_mean"]),
            f"{100 * p['mean_share']:.1f} %",
            f"{100 * p['guarantee_share']:.1f} %",
            fmt_seconds(p["starved_time"]),
            fmt_seconds(p["starved_longest"]),
        )
    return table


def _project_comparison(summaries: list[dict[str, Any]]) -> Table:
    """Per project, each policy's mean wait and longest starved spell side by side."""
    from rich.table import Table

    from corral.sim.metrics import fmt_seconds

    table = Table(title="Per project: mean wait / longest starved spell")
    table.add_column("project")
    for s in summaries:
        table.add_column(s["policy"], justify="right")
    for project in summaries[0]["per_project"]:
        cells = (s["per_project"].get(project) for s in summaries)
        table.add_row(
            project,
            *(f"{fmt_seconds(p['wait_mean'])} / {fmt_seconds(p['starved_longest'])}"
              if p else "-" for p in cells),
        )  # fmt: skip
    return table
