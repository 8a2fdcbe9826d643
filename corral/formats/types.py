"""Plain typed results of parsing user files. Everything above `formats` builds on these.

Parsing (pydantic, YAML, TOML) lives beside this module; these classes carry no validation
logic of their own so the core can use them cheaply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property


class FormatError(ValueError):
    """Bad user input. str(err) is one line naming the file/line, the key and what is allowed."""


@dataclass(frozen=True, slots=True)
class Resources:
    accelerator: str
    per_worker: int
    workers: int = 1
    slices: int = 1
    exclusive: bool = False

    @property
    def total(self) -> int:
        return self.per_worker * self.workers * self.slices

    @property
    def gang(self) -> int:
        """Number of worker processes in the whole job."""
        return self.workers * self.slices


@dataclass(frozen=True, slots=True)
class JobSpec:
    name: str
    project: str
    resources: Resources
    command: str | tuple[str, ...] = ()
    priority: int | str = 0  # a class name is resolved against the quota's priority_classes
    env: dict[str, str] = field(default_factory=dict)
    max_restarts: int = 0
    preemptible: bool = True
    max_runtime: float | None = None  # seconds
    kind: str = "batch"  # batch | interactive
    template: str | None = None  # interactive: the template the command came from
    idle_timeout: float | None = None  # interactive: cancelled after this long idle (seconds)
    workdir: str | None = None  # absolute; None: the home directory of the job's account
    # An encrypting storage gateway beside the workers (docs/crypt.md): {"backend": URL,
    # "keyring": absolute path or absent}; None: none.
    crypt_proxy: dict[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    accelerator: str
    count: int
    domain: str = ""  # "" is the default domain shared by nodes that name none


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    policy: str = "fair"  # fair | fifo | las | srtf | "module:Class"
    placement: str = "pack"  # pack | spread
    preempt_grace: float = 30.0  # seconds between SIGTERM and SIGKILL
    preempt_min_runtime: float = 300.0  # a job younger than this is never a victim
    # project -> its own preempt_min_runtime ([project_preempt_min_runtime] of the quota file)
    project_min_runtime: dict[str, float] = field(default_factory=dict)
    # Fair share over time (DESIGN.md §3.3, §3.6; docs/scheduling.md has the figures): among
    # borrowers, the project with the least usage decayed with this half-life comes first
    # (0: by what each holds now); a job waiting longer than aging_limit since its submission
    # may hold the reservation as if within its guarantee (0: never).
    usage_half_life: float = 86400.0
    aging_limit: float = 43200.0
    options: dict[str, object] = field(default_factory=dict)  # policy-specific knobs
    # A failed job waits before its gang restarts: restart_backoff, doubling per restart up to
    # restart_backoff_max (Kubernetes' CrashLoopBackOff); 0 restarts at once. Live plane only.
    restart_backoff: float = 10.0
    restart_backoff_max: float = 300.0


@dataclass(frozen=True, slots=True)
class InteractiveConfig:
    """[interactive] of a quota file: what interactive jobs get when they ask for nothing,
    and the most they may ask for."""

    max_runtime: float | None = 8 * 3600.0  # default for an interactive job that gives none
    max_runtime_limit: float | None = None  # the longest an interactive job may ask for
    idle_timeout: float | None = 3600.0  # default idle timeout; None: never culled


@dataclass(frozen=True)  # no slots: cached_property keeps compiled patterns in __dict__
class Quota:
    """The AXLearn bastion quota file plus corral's optional extensions."""

    shares: dict[str, dict[str, float]]  # project -> type -> relative share (as written)
    membership: dict[str, tuple[str, ...]] = field(default_factory=dict)  # project -> regexes
    total_resources: dict[str, int] | None = None  # tiers already summed
    limits: dict[str, dict[str, int]] = field(default_factory=dict)
    priority_classes: dict[str, int] = field(default_factory=dict)
    admins: tuple[str, ...] = ()
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    # project -> type -> most accelerators its interactive jobs may hold together
    interactive_limits: dict[str, dict[str, int]] = field(default_factory=dict)
    interactive: InteractiveConfig = field(default_factory=InteractiveConfig)
    # corral user -> the Unix account their jobs run as when corral runs as root (DESIGN §5);
    # a user not listed runs as the account of the same name
    accounts: dict[str, str] = field(default_factory=dict)

    @cached_property
    def _patterns(self) -> dict[str, tuple[re.Pattern[str], ...]]:
        return {p: tuple(re.compile(x) for x in pats) for p, pats in self.membership.items()}

    def is_member(self, user: str, project: str) -> bool:
        return any(p.fullmatch(user) for p in self._patterns.get(project, ()))

    def projects_of(self, user: str) -> list[str]:
        return sorted(p for p in self.membership if self.is_member(user, p))

    @property
    def projects(self) -> list[str]:
        return sorted(set(self.shares) | set(self.membership) | set(self.limits))

    def fractions(self, accelerator: str) -> dict[str, float]:
        """Each project's share of `accelerator`, normalised so they sum to 1."""
        raw = {p: s.get(accelerator, 0.0) for p, s in self.shares.items()}
        total = sum(raw.values())
        if total <= 0:
            return {}
        return {p: v / total for p, v in raw.items() if v > 0}

    def resolve_priority(self, priority: int | str) -> int:
        if isinstance(priority, int):
            return priority
        if priority in self.priority_classes:
            return self.priority_classes[priority]
        allowed = ", ".join(sorted(self.priority_classes)) or "none defined"
        raise FormatError(f"priority: unknown class {priority!r} (classes: {allowed})")


@dataclass(frozen=True, slots=True)
class ScenarioJob:
    spec: JobSpec
    user: str
    submit: float  # seconds from 0
    duration: float  # seconds of running needed to finish


@dataclass(frozen=True, slots=True)
class Scenario:
    nodes: tuple[Node, ...]
    quota: Quota
    jobs: tuple[ScenarioJob, ...]
