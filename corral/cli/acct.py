"""`corral acct`: who used how much, Slurm's sacct/sreport for corral (docs/live.md)."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from corral.cli import app, fail
from corral.cli.live import DEFAULT_URL, Client, TokenFileOpt, UrlOpt, _span
from corral.cli.output import FORMATS, Column, JsonOpt, NoHeadersOpt, check_format, print_rows

FIELDS = (
    "period",
    "project",
    "user",
    "accelerator",
    "accelerator_hours",
    "jobs",
    "succeeded",
    "failed",
    "cancelled",
    "started",
    "wait_seconds",
    "mean_wait_seconds",
    "preemptions",
)


def _wait(r: dict[str, Any]) -> str:
    mean = r["mean_wait_seconds"]
    return "-" if mean is None else _span(mean)


COLUMNS = [
    Column("PERIOD", lambda r: r["period"]),
    Column("PROJECT", lambda r: r["project"]),
    Column("USER", lambda r: r["user"]),
    Column("TYPE", lambda r: r["accelerator"]),
    Column("ACCEL-HOURS", lambda r: f"{r['accelerator_hours']:.3f}"),
    Column("JOBS", lambda r: str(r["jobs"])),
    Column("SUCCEEDED", lambda r: str(r["succeeded"])),
    Column("FAILED", lambda r: str(r["failed"])),
    Column("CANCELLED", lambda r: str(r["cancelled"])),
    Column("STARTED", lambda r: str(r["started"]), wide=True),
    Column("MEAN WAIT", _wait),
    Column("PREEMPTED", lambda r: str(r["preemptions"])),
]


@app.command()
def acct(
    since: Annotated[
        str, typer.Option(help="From: a duration back (7d) or a date (2026-11-01).")
    ] = "7d",
    until: Annotated[str | None, typer.Option(help="To (default: now); same forms.")] = None,
    project: Annotated[list[str] | None, typer.Option(help="Only these; repeatable.")] = None,
    user: Annotated[str | None, typer.Option(help="Only this user's jobs.")] = None,
    by: Annotated[str | None, typer.Option(help="day or week: a row per period as well.")] = None,
    output: Annotated[
        str | None,
        typer.Option("-o", "--output", metavar="FORMAT", help="wide, json or csv."),
    ] = None,
    no_headers: NoHeadersOpt = False,
    url: UrlOpt = DEFAULT_URL,
    token_file: TokenFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Accelerator-hours, jobs, wait and preemptions per project and user, from the store."""
    from corral.cli.timeargs import parse_time

    fmt = check_format(output, as_json, (*FORMATS, "csv"))
    if by not in (None, "day", "week"):
        fail(f"--by: {by!r} is not one of day, week")
    start = parse_time(since, "--since")
    end = parse_time(until, "--until")
    if end is not None and start is not None and end <= start:
        fail("--until must be later than --since")
    rows = Client(url, token_file).get(
        "/v1/acct", since=start, until=end, by=by or "total", project=project, user=user
    )
    if fmt == "csv":
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        if not no_headers:
            writer.writerow(FIELDS)
        writer.writerows([r[f] for f in FIELDS] for r in rows)
        return
    columns = COLUMNS if by else COLUMNS[1:]
    name = lambda r: f"{r['project']}/{r['user']}"  # noqa: E731
    print_rows(rows, columns, fmt, no_headers, empty="nothing ran in that window", name=name)
