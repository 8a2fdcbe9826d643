"""Parsers for corral's user-facing files: job specs, cluster inventories, quotas, scenarios.

Each returns the plain dataclasses of `corral.formats.types`, or raises FormatError whose text
is one line naming the file, the line when known, the key and what is allowed.

The parsers are imported lazily: the core imports `corral.formats.types` on every start and
should not pay for pydantic and PyYAML (a quarter of a second) unless something parses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from corral.formats.types import (
    FormatError,
    JobSpec,
    Node,
    Quota,
    Resources,
    Scenario,
    ScenarioJob,
    SchedulerConfig,
)

if TYPE_CHECKING:
    from corral.formats.cluster import load_cluster, parse_cluster, parse_cluster_shorthand
    from corral.formats.durations import parse_duration
    from corral.formats.jobset import is_jobset, load_jobset, parse_jobset
    from corral.formats.jobspec import load_jobspec, parse_jobspec
    from corral.formats.quota import default_quota, load_quota, parse_quota
    from corral.formats.scenario import load_scenario, parse_scenario

_LAZY = {
    "load_cluster": "cluster",
    "parse_cluster": "cluster",
    "parse_cluster_shorthand": "cluster",
    "parse_duration": "durations",
    "is_jobset": "jobset",
    "load_jobset": "jobset",
    "parse_jobset": "jobset",
    "load_jobspec": "jobspec",
    "parse_jobspec": "jobspec",
    "default_quota": "quota",
    "load_quota": "quota",
    "parse_quota": "quota",
    "load_scenario": "scenario",
    "parse_scenario": "scenario",
}

__all__ = [
    "FormatError",
    "JobSpec",
    "Node",
    "Quota",
    "Resources",
    "Scenario",
    "ScenarioJob",
    "SchedulerConfig",
    "default_quota",
    "is_jobset",
    "load_jobset",
    "parse_jobset",
    "load_cluster",
    "load_jobspec",
    "load_quota",
    "load_scenario",
    "parse_cluster",
    "parse_cluster_shorthand",
    "parse_duration",
    "parse_jobspec",
    "parse_quota",
    "parse_scenario",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"corral.formats.{_LAZY[name]}"), name)
        globals()[name] = value  # later look-ups skip this hook
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
