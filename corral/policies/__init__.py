"""Scheduling policies, chosen by name or loaded from a user's module as "module:Class"."""

from __future__ import annotations

import importlib

from corral.core.policy import Policy
from corral.formats.types import FormatError, SchedulerConfig
from corral.policies.fair import Fair
from corral.policies.fifo import Fifo
from corral.policies.las import Las
from corral.policies.srtf import Srtf

BUILTIN: dict[str, type[Policy]] = {p.name: p for p in (Fair, Fifo, Las, Srtf)}
PLACEMENTS = ("pack", "spread")


def load_policy(config: SchedulerConfig | None = None) -> Policy:
    config = config or SchedulerConfig()
    if config.placement not in PLACEMENTS:
        raise FormatError(f"scheduler.placement: {config.placement!r} is not one of pack, spread")
    name = config.policy
    if name in BUILTIN:
        return BUILTIN[name](config)
    if ":" not in name:
        known = ", ".join(sorted(BUILTIN))
        raise FormatError(
            f"scheduler.policy: unknown policy {name!r} (one of {known}, or module:Class)"
        )
    module_name, _, attr = name.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise FormatError(f"scheduler.policy: cannot load {name!r}: {err}") from None
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise FormatError(
            f"scheduler.policy: {name!r} is not a subclass of corral.core.policy.Policy"
        )
    return cls(config)
