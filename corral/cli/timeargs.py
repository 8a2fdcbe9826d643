"""Instants on the command line (--since, --until): a duration back from now, or a date."""

from __future__ import annotations

import time
from datetime import datetime

from corral.cli import fail

FORMS = "a duration back from now (30m, 2h, 7d) or a local date/time (2026-11-24, 2026-11-24T09:00)"


def parse_time(value: str | None, flag: str, now: float | None = None) -> float | None:
    """Unix time for `value`; one line and exit 2 if it is neither form."""
    if value is None:
        return None
    now = time.time() if now is None else now
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        pass
    from corral.formats.durations import seconds  # pydantic: only when the flag is given

    try:
        return now - seconds(value)
    except ValueError:
        fail(f"{flag}: {value!r} is not {FORMS}")
    return None
