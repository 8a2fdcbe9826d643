"""Parsers for corral's user-facing files: job specs, cluster inventories, quotas, scenarios.

Each returns the plain dataclasses of `corral.formats.types`, or raises FormatError whose text
is one line naming the file, the line when known, the key and what is allowed.
"""

from corral.formats.cluster import load_cluster, parse_cluster, parse_cluster_shorthand
from corral.formats.durations import parse_duration
from corral.formats.jobspec import load_jobspec, parse_jobspec
from corral.formats.quota import default_quota, load_quota, parse_quota
from corral.formats.scenario import load_scenario, parse_scenario
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
