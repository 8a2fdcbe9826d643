"""The Philly job table: `timestamp,duration,num_gpus,gpu_time,cluster`, one job per row.

`timestamp` is the local submit time, `cluster` the virtual cluster, which is the team and
so the project. The trace has no users: each job's user is its project. `gpu_time` is ignored
(it is duration x num_gpus).
"""

from __future__ import annotations

from operator import itemgetter
from pathlib import Path

import numpy as np

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
# The one shape of timestamp that the column-wise parse takes, as datetime.fromisoformat
# would (numpy checks the ranges of month, day and time the same way): YYYY-MM-DD HH:MM:SS,
# ASCII digits. Its characters as code points, 0 for "a digit".
_STAMP = np.array([ord(c) if c != "9" else 0 for c in "9999-99-99 99:99:99"], dtype=np.uint32)


def load_philly_csv(
    path: str | Path,
    *,
    accelerator: str = "v100",
    gpus_per_node: int = 8,
    skip_bad: bool = False,
) -> TraceLoad:
    """Load the Philly CSV. Bad rows raise FormatError('file:line: column: why'), or with
    skip_bad are left out and counted in `skipped`. Blank lines are ignored.

    The table is parsed a column at a time (numpy for times and numbers: a third of the
    loading time a row at a time); a table with any row that is bad, or that the column-wise
    parse does not take as it is, is read again a row at a time, which names the row."""
    return load_csv(
        path,
        COLUMNS,
        _rows,
        accelerator=accelerator,
        gpus_per_node=gpus_per_node,
        skip_bad=skip_bad,
        columnwise=_columns,
    )


def _columns(reader, cols: list[int], skips: Skips) -> list[RawJob] | None:
    """The good rows as _rows makes them, sorted; None when a row is not plainly good."""
    i_time, i_dur, i_gpus, i_team = cols
    body = [row for row in reader if row]
    if min(map(len, body), default=0) <= max(cols):
        return None  # a short row (or no rows): _rows says which
    stamps = list(map(itemgetter(i_time), body))
    if not _plain_stamps(stamps):
        return None
    try:
        when = np.array(stamps, dtype="datetime64[s]")
        durations = np.array(list(map(float, map(itemgetter(i_dur), body))))
        gpus = list(map(int, map(itemgetter(i_gpus), body)))  # "8.0": _rows takes it
        labels = {team: project_label(team) for team in set(map(itemgetter(i_team), body))}
    except (ValueError, BadRow):
        return None
    if when.min() < np.datetime64("0001-01-01") or min(gpus) < 1:
        return None  # (year 0: fromisoformat has none)
    if not (np.isfinite(durations).all() and (durations >= 0).all()):
        return None
    durations[durations == 0] = 1.0  # as seconds(): every job takes time
    submit = when.astype(np.int64).astype(float)
    order = np.argsort(submit, kind="stable")  # by (submit, row index), as RawJob sorts
    index = order.tolist()
    teams = [labels[body[i][i_team]] for i in index]
    return list(
        zip(
            submit[order].tolist(),
            index,
            teams,
            teams,
            [gpus[i] for i in index],
            durations[order].tolist(),
            strict=True,
        )
    )


def _plain_stamps(stamps: list[str]) -> bool:
    """Is every one of `stamps` in the shape of _STAMP? (Checked as an array of code points:
    a regular expression over the column took as long as parsing it.)"""
    if set(map(len, stamps)) != {len(_STAMP)}:
        return False
    codes = np.array(stamps, dtype=f"U{len(_STAMP)}").view(np.uint32).reshape(-1, len(_STAMP))
    digit = _STAMP == 0
    digits = codes[:, digit]
    return bool(
        ((digits >= ord("0")) & (digits <= ord("9"))).all()
        and (codes[:, ~digit] == _STAMP[~digit]).all()
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
