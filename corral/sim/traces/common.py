"""What every trace loader shares: the result record, row parsing and the job builder.

Loaders collect one `RawJob` per good row, then `JobBuilder.jobs` sorts them by submit time,
rebases the times so the first job submits at 0, and turns them into `ScenarioJob`s. Bad rows raise
`BadRow(field, message)`; the loader adds the file name and line so the user sees one line like
``philly.csv:1234: num_gpus: must be a positive integer, got 'x'``.
"""

from __future__ import annotations

import csv
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path

from corral.formats.types import FormatError, JobSpec, Resources, ScenarioJob
from corral.sim.gcpause import no_cyclic_gc

# Naive wall-clock times (the Philly trace is in local time) are turned into seconds against
# this naive epoch. Differences of naive datetimes ignore DST, which is what a replay wants.
_EPOCH = datetime(1970, 1, 1)
_LABEL_BAD = re.compile(r"[^a-z0-9-]+")


class BadRow(ValueError):
    """One row of a trace is unusable: `field` names the column, the message says why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")


@dataclass(slots=True)
class TraceLoad:
    jobs: list[ScenarioJob]
    skipped: int = 0  # rows left out: bad rows under skip_bad, and rows a format ignores
    origin: datetime | None = None  # wall-clock time of submit 0, when the trace has one
    skip_reasons: dict[str, int] = field(default_factory=dict)  # e.g. {"cpu-only": 3}


# One good row: (submit, row index, team, user, gpus, duration). A plain tuple, because traces
# have ~10^5 rows and tuples sort natively on (submit, index) -- the index makes keys unique.
RawJob = tuple[float, int, str, str, int, float]


class Skips:
    """Counts skipped rows by reason; with skip_bad=False turns the first bad row into an error."""

    def __init__(self, path: Path, skip_bad: bool) -> None:
        self.name = path.name
        self.skip_bad = skip_bad
        self.reasons: Counter[str] = Counter()

    def bad(self, line: int, err: BadRow) -> None:
        if not self.skip_bad:
            raise FormatError(f"{self.name}:{line}: {err}") from None
        self.reasons["bad-row"] += 1

    def ignore(self, reason: str) -> None:
        self.reasons[reason] += 1

    @property
    def total(self) -> int:
        return sum(self.reasons.values())


@lru_cache(maxsize=4096)
def project_label(raw: str) -> str:
    """A team name as a DNS-1123 label: lowercase, [a-z0-9-], alphanumeric ends, <= 63 chars.

    Teams that differ only in case or punctuation end up as one project; traces we know of
    (Philly, Helios) never have such pairs.
    """
    label = _LABEL_BAD.sub("-", raw.strip().lower()).strip("-")[:63].rstrip("-")
    if not label:
        raise BadRow("team", f"cannot be made a project name, got {raw!r}")
    return label


def split_gpus(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(per_worker, workers) for a job of `gpus` on nodes of `gpus_per_node`.

    One worker when it fits on a node; else the fewest workers that fit, sharing the GPUs
    evenly, so 32 on 8-GPU nodes is 4 x 8, and 12 is 2 x 6 rather than 2 x 8 (which would
    inflate the job's demand). Only a count with no even split rounds up (17 -> 3 x 6).
    """
    workers = -(-gpus // gpus_per_node)
    return -(-gpus // workers), workers


def positive_int(name: str, text: str) -> int:
    """An integer > 0; "8.0" is accepted because some traces write counts as floats."""
    value = non_negative_int(name, text, "a positive integer")
    if value == 0:
        raise BadRow(name, f"must be a positive integer, got {text!r}")
    return value


def non_negative_int(name: str, text: str, what: str = "an integer >= 0") -> int:
    try:
        value = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        value = int(number) if number.is_integer() else -1
    if value < 0:  # (a negative count written as an integer once got through: "-2")
        raise BadRow(name, f"must be {what}, got {text!r}")
    return value


def seconds(name: str, text: str) -> float:
    """A run time in seconds: finite and >= 0. Zero becomes 1 s, so every job takes time."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise BadRow(name, f"must be a number of seconds >= 0, got {text!r}")
    return value or 1.0


def wall_clock(name: str, text: str) -> float:
    """'YYYY-MM-DD HH:MM:SS' (naive) as seconds since the naive epoch."""
    try:
        moment = datetime.fromisoformat(text)
    except (ValueError, TypeError):
        raise BadRow(name, f"must be a time 'YYYY-MM-DD HH:MM:SS', got {text!r}") from None
    if moment.tzinfo is not None:
        moment = moment.replace(tzinfo=None) - moment.utcoffset()  # type: ignore[operator]
    return (moment - _EPOCH).total_seconds()


def origin_of(first_submit: float) -> datetime:
    return _EPOCH + timedelta(seconds=first_submit)


class JobBuilder:
    """Makes ScenarioJobs, sharing one Resources object per shape (traces repeat few shapes)."""

    def __init__(self, accelerator: str, gpus_per_node: int) -> None:
        if gpus_per_node < 1:
            raise FormatError(f"gpus_per_node: must be a positive integer, got {gpus_per_node}")
        self.accelerator = accelerator
        self.gpus_per_node = gpus_per_node
        self._shapes: dict[int, Resources] = {}

    def resources(self, gpus: int) -> Resources:
        shape = self._shapes.get(gpus)
        if shape is None:
            per_worker, workers = split_gpus(gpus, self.gpus_per_node)
            shape = Resources(self.accelerator, per_worker=per_worker, workers=workers)
            self._shapes[gpus] = shape
        return shape

    def jobs(self, raw: list[RawJob]) -> tuple[list[ScenarioJob], float]:
        """Sort by (submit, row index), rebase to 0, build. Returns the jobs and the raw t0."""
        raw.sort()
        t0 = raw[0][0] if raw else 0.0
        shapes = {gpus: self.resources(gpus) for gpus in {r[4] for r in raw}}
        spec, job = JobSpec, ScenarioJob  # (locals: this runs once per job of a trace)
        return [
            job(spec(f"j{i}", team, shapes[gpus], ""), user, sub - t0, dur)
            for sub, i, team, user, gpus, dur in raw
        ], t0


def finish_load(raw: list[RawJob], builder: JobBuilder, skips: Skips, *, wall: bool = True):
    jobs, t0 = builder.jobs(raw)
    origin = origin_of(t0) if (jobs and wall) else None
    return TraceLoad(jobs, skips.total, origin, dict(skips.reasons))


def open_text(path: str | Path):
    """Open a trace for reading, turning OS errors into one FormatError line."""
    try:
        return open(path, encoding="utf-8-sig", newline="")  # noqa: SIM115 (caller closes)
    except OSError as err:
        raise FormatError(f"{path}: cannot read trace: {err.strerror}") from None


def header_index(name: str, header: list[str] | None, needed: tuple[str, ...]) -> list[int]:
    """Column positions of `needed` in a CSV header, or a FormatError naming what is missing."""
    if not header:
        raise FormatError(f"{name}:1: empty file, expected a CSV header")
    cols = [h.strip() for h in header]
    missing = [c for c in needed if c not in cols]
    if missing:
        raise FormatError(
            f"{name}:1: header: missing column(s) {', '.join(missing)} (found: {', '.join(cols)})"
        )
    return [cols.index(c) for c in needed]


def load_csv(
    path: str | Path,
    columns: tuple[str, ...],
    rows: Callable[[object, list[int], Skips], list[RawJob]],
    *,
    accelerator: str,
    gpus_per_node: int,
    skip_bad: bool,
    columnwise: Callable[[object, list[int], Skips], list[RawJob] | None] | None = None,
) -> TraceLoad:
    """The frame of a CSV trace loader: header check, `rows(reader, column positions, skips)`
    for the body, then sort, rebase and build. Unreadable bytes become one FormatError line.
    Given `columnwise` (the same, quicker, or None for a table it would rather `rows` read),
    that first."""
    path = Path(path)
    for parse in (rows,) if columnwise is None else (columnwise, rows):
        builder = JobBuilder(accelerator, gpus_per_node)
        skips = Skips(path, skip_bad)
        with open_text(path) as f, no_cyclic_gc():
            reader = csv.reader(f)
            try:
                cols = header_index(path.name, next(reader, None), columns)
                raw = parse(reader, cols, skips)
            except csv.Error as err:
                raise FormatError(
                    f"{path.name}:{reader.line_num}: not a readable CSV: {err}"
                ) from None
            except UnicodeDecodeError:
                raise FormatError(f"{path.name}:{bad_utf8(path)}") from None
            if raw is not None:
                return finish_load(raw, builder, skips)
    raise AssertionError("rows() gives a list")  # (not reached)


def bad_utf8(path: Path) -> str:
    """'LINE: why' for a file that is not UTF-8. Text files decode in chunks, so the error the
    reader saw has no usable position; decoding the bytes again finds the line."""
    data = path.read_bytes()
    try:
        data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        return f"{line}: not UTF-8 text (byte {data[err.start]:#04x} at offset {err.start})"
    return "1: not UTF-8 text"
