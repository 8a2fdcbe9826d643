"""The Philly job table: `timestamp,duration,num_gpus,gpu_time,cluster`, one job per row.

`timestamp` is the local submit time, `cluster` the virtual cluster, which is the team and
so the project. The trace has no users: each job's user is its project. `gpu_time` is ignored
(it is duration x num_gpus).
"""

from __future__ import annotations

from pathlib import Path

from corral.sim.traces.common import (
    BadRow,
    RawJob,
    Skips,
    TraceLoad,
    load_csv,
    positive_int,
    project_label,
    seconds,
    wall_clock,
)

COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")


def load_philly_csv(
    path: str | Path,
    *,
    accelerator: str = "v100",
    gpus_per_node: int = 8,
    skip_bad: bool = False,
) -> TraceLoad:
    """Load the Philly CSV. Bad rows raise FormatError('file:line: column: why'), or with
    skip_bad are left out and counted in `skipped`. Blank lines are ignored."""
    return load_csv(
        path,
        COLUMNS,
        _rows,
        accelerator=accelerator,
        gpus_per_node=gpus_per_node,
        skip_bad=skip_bad,
    )


def _rows(reader, cols: list[int], skips: Skips) -> list[RawJob]:
    i_time, i_dur, i_gpus, i_team = cols
    width = max(cols) + 1
    times: dict[str, float] = {}  # many jobs share a submit second; parse each string once
    raw: list[RawJob] = []
    for index, row in enumerate(_nonblank(reader)):
        try:
            if len(row) < width:
                raise BadRow("row", f"expected at least {width} columns, got {len(row)}")
            raw.append(_row(index, row, i_time, i_dur, i_gpus, i_team, times))
        except BadRow as err:
            skips.bad(reader.line_num, err)
    return raw


def _nonblank(reader):
    return (row for row in reader if row)


def _row(index, row, i_time, i_dur, i_gpus, i_team, times) -> RawJob:
    stamp = row[i_time]
    submit = times.get(stamp)
    if submit is None:
        submit = times[stamp] = wall_clock("timestamp", stamp)
    team = project_label(row[i_team])
    gpus = positive_int("num_gpus", row[i_gpus])
    return (submit, index, team, team, gpus, seconds("duration", row[i_dur]))
