"""The original Philly `cluster_job_log`: a JSON list of job objects.

Each job: status, vc (the team), jobid, user, submitted_time, and attempts, each with
start_time, end_time and detail: [{ip, gpus: [...]}] (times 'YYYY-MM-DD HH:MM:SS' or null).
A job's GPUs and run time come from its last finished attempt (start and end both set): GPUs
= all gpus listed in that attempt's detail, duration = end - start. A job with no finished
attempt is a bad row. Errors name the line where the job's object begins.
"""

from __future__ import annotations

import json
from pathlib import Path

from corral.formats.types import FormatError
from corral.sim.gcpause import no_cyclic_gc
from corral.sim.traces.common import (
    BadRow,
    JobBuilder,
    RawJob,
    Skips,
    TraceLoad,
    bad_utf8,
    finish_load,
    open_text,
    project_label,
    wall_clock,
)

_decoder = json.JSONDecoder()
_SPACE = " \t\r\n"


def load_philly_json(
    path: str | Path,
    *,
    accelerator: str = "v100",
    gpus_per_node: int = 8,
    skip_bad: bool = False,
) -> TraceLoad:
    path = Path(path)
    builder = JobBuilder(accelerator, gpus_per_node)
    skips = Skips(path, skip_bad)
    with open_text(path) as f:
        try:
            text = f.read()
        except UnicodeDecodeError:
            raise FormatError(f"{path.name}:{bad_utf8(path)}") from None
    with no_cyclic_gc():
        raw: list[RawJob] = []
        for index, (line, obj) in enumerate(_objects(path.name, text)):
            try:
                raw.append(_job(index, obj))
            except BadRow as err:
                skips.bad(line, err)
        return finish_load(raw, builder, skips)


def _objects(name: str, text: str):
    """Yield (line, element) for each element of the top-level JSON list.

    Decoding element by element (rather than json.loads of the whole file) is what lets an
    error name the line where the offending job starts.
    """
    pos = _skip(text, 0)
    if not text.startswith("[", pos):
        raise FormatError(f"{name}:{_line(text, pos)}: expected a JSON list of jobs")
    pos, line, counted = _skip(text, pos + 1), 1, 0
    while not text.startswith("]", pos):
        line += text.count("\n", counted, pos)
        counted = pos
        try:
            obj, pos = _decoder.raw_decode(text, pos)
        except json.JSONDecodeError as err:
            raise FormatError(f"{name}:{err.lineno}: invalid JSON: {err.msg}") from None
        yield line, obj
        pos = _skip(text, pos)
        if text.startswith(",", pos):
            pos = _skip(text, pos + 1)
        elif not text.startswith("]", pos):
            raise FormatError(f"{name}:{_line(text, pos)}: invalid JSON: expected ',' or ']'")


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _SPACE:
        pos += 1
    return pos


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _job(index: int, obj: object) -> RawJob:
    if not isinstance(obj, dict):
        raise BadRow("job", f"must be a JSON object, got {type(obj).__name__}")
    team = project_label(_text(obj, "vc"))
    user = obj.get("user")
    user = user.strip() if isinstance(user, str) and user.strip() else team
    submit = wall_clock("submitted_time", obj.get("submitted_time"))  # type: ignore[arg-type]
    start, end, gpus = _last_finished_attempt(obj.get("attempts"))
    if gpus < 1:
        raise BadRow("attempts", "the last finished attempt lists no gpus")
    if end < start:
        raise BadRow("attempts", "the last finished attempt ends before it starts")
    return (submit, index, team, user, gpus, (end - start) or 1.0)


def _text(obj: dict, key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        raise BadRow(key, f"must be a non-empty string, got {value!r}")
    return value


def _last_finished_attempt(attempts: object) -> tuple[float, float, int]:
    if not isinstance(attempts, list):
        raise BadRow("attempts", f"must be a list, got {attempts!r}")
    for attempt in reversed(attempts):
        if isinstance(attempt, dict) and attempt.get("start_time") and attempt.get("end_time"):
            start = wall_clock("attempts.start_time", attempt["start_time"])
            end = wall_clock("attempts.end_time", attempt["end_time"])
            return start, end, _gpus(attempt.get("detail"))
    raise BadRow("attempts", "no finished attempt (one with start_time and end_time)")


def _gpus(detail: object) -> int:
    if not isinstance(detail, list):
        raise BadRow("attempts.detail", f"must be a list, got {detail!r}")
    total = 0
    for host in detail:
        gpus = host.get("gpus") if isinstance(host, dict) else None
        if not isinstance(gpus, list):
            raise BadRow("attempts.detail.gpus", f"must be a list, got {gpus!r}")
        total += len(gpus)
    return total
