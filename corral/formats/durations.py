"""Durations: a number of seconds, or a string like "30s", "5m", "72h", "1d", "1h30m", "1.5h"."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator

from corral.formats._common import show
from corral.formats.types import FormatError

FORMS = "seconds as a number, or a string like 30s, 5m, 72h, 1d, 1h30m, 1.5h"

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_PART = re.compile(rf"({_NUMBER})([smhd])")
_COMPOUND = re.compile(rf"(?:{_NUMBER}[smhd])+")
_PLAIN = re.compile(_NUMBER)


def seconds(value: Any) -> float:
    """Seconds in `value`; ValueError (without a key) if it is not a duration >= 0."""
    total: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        total = float(value)
    elif isinstance(value, str):
        text = "".join(value.split()).lower()  # "1h 30m" and "1H30M" read the same
        if _PLAIN.fullmatch(text):
            total = float(text)
        elif _COMPOUND.fullmatch(text):
            total = sum(float(n) * _UNITS[u] for n, u in _PART.findall(text))
    if total is None or not math.isfinite(total) or total < 0:
        raise ValueError(f"must be a duration >= 0 ({FORMS}), got {show(value)}")
    return total


def positive_seconds(value: Any) -> float:
    try:
        total = seconds(value)
    except ValueError:
        total = 0.0
    if total <= 0:
        raise ValueError(f"must be a duration > 0 ({FORMS}), got {show(value)}")
    return total


def _optional_positive(value: Any) -> float | None:
    return None if value is None else positive_seconds(value)


# pydantic field types; the validators raise ValueError, which the parsers turn into one line.
Duration = Annotated[float, BeforeValidator(seconds)]
PositiveDuration = Annotated[float, BeforeValidator(positive_seconds)]
OptionalPositiveDuration = Annotated[float | None, BeforeValidator(_optional_positive)]


def parse_duration(value: str | int | float, key: str) -> float:
    """Seconds in `value`, a duration >= 0; FormatError naming `key` otherwise."""
    try:
        return seconds(value)
    except ValueError as e:
        raise FormatError(f"{key}: {e}") from None
