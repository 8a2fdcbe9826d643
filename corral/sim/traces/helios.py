"""Helios-style CSV (SenseTime's Helios traces): one job per row, a header naming the columns.

Columns used: job_id, user, vc (the team), gpu_num, submit_time, duration; others are ignored.
submit_time is epoch seconds or 'YYYY-MM-DD HH:MM:SS' (naive local time). Rows with gpu_num 0
are CPU jobs: they are left out and counted in `skipped` (reason "cpu-only") whatever
skip_bad says.
"""

from __future__ import annotations

import math
from pathlib import Path

from corral.sim.traces.common import (
    BadRow,
    RawJob,
    Skips,
    TraceLoad,
    load_csv,
    non_negative_int,
    project_label,
    seconds,
    wall_clock,
)

COLUMNS = ("job_id", "user", "vc", "gpu_num", "submit_time", "duration")


def load_helios_csv(
    path: str | Path,
    *,
    accelerator: str = "v100",
    gpus_per_node: int = 8,
    skip_bad: bool = False,
) -> TraceLoad:
    return load_csv(
        path,
        COLUMNS,
        _rows,
        accelerator=accelerator,
        gpus_per_node=gpus_per_node,
        skip_bad=skip_bad,
    )


def _rows(reader, cols: list[int], skips: Skips) -> list[RawJob]:
    width = max(cols) + 1
    raw: list[RawJob] = []
    for index, row in enumerate(r for r in reader if r):
        try:
            if len(row) < width:
                raise BadRow("row", f"expected at least {width} columns, got {len(row)}")
            job = _row(index, row, cols)
        except BadRow as err:
            skips.bad(reader.line_num, err)
            continue
        if job is None:
            skips.ignore("cpu-only")
        else:
            raw.append(job)
    return raw


def _row(index: int, row: list[str], cols: list[int]) -> RawJob | None:
    _, i_user, i_vc, i_gpus, i_submit, i_dur = cols
    gpus = non_negative_int("gpu_num", row[i_gpus])
    if gpus == 0:
        return None
    team = project_label(row[i_vc])
    user = row[i_user].strip() or team
    return (_submit(row[i_submit]), index, team, user, gpus, seconds("duration", row[i_dur]))


def _submit(text: str) -> float:
    """Epoch seconds, or a wall-clock time; both end up as seconds on the same naive clock."""
    try:
        value = float(text)
    except ValueError:
        return wall_clock("submit_time", text.strip())
    if not math.isfinite(value):
        raise BadRow("submit_time", f"must be epoch seconds or a time, got {text!r}")
    return value
