"""JSON on the hot paths (submit: spec, event, answer) through orjson, ~10x the standard
library's encoder; anything orjson refuses (an integer beyond 64 bits) falls back to `json`."""

from __future__ import annotations

import json
from typing import Any

import orjson

loads = orjson.loads  # raises orjson.JSONDecodeError, a json.JSONDecodeError (a ValueError)


def dumps_bytes(data: Any, sort_keys: bool = False) -> bytes:
    try:
        return orjson.dumps(data, option=orjson.OPT_SORT_KEYS if sort_keys else 0)
    except TypeError:  # orjson.JSONEncodeError: e.g. a priority of 10**30
        return json.dumps(data, sort_keys=sort_keys, separators=(",", ":")).encode()


def dumps(data: Any, sort_keys: bool = False) -> str:
    return dumps_bytes(data, sort_keys).decode()
