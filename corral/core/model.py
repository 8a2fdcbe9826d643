"""The core's own typed records: jobs as the scheduler sees them, and its decisions."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from corral.formats.types import JobSpec, Resources

# The records made per cycle or per job start write their own __init__ (init=False): mypyc
# compiles it, while the one @dataclass generates runs interpreted, 3-7 times slower.


@dataclass(slots=True, eq=False)
class Job:
    id: str
    name: str
    project: str
    user: str
    priority: int
    resources: Resources
    submit_time: float
    preemptible: bool = True
    max_runtime: float | None = None  # seconds; lets backfill fit around a reservation
    duration: float | None = None  # total run time needed, when known (simulator, srtf)
    run_time: float = 0.0  # seconds already run in earlier attempts (progress is kept)
    attained: float = 0.0  # accelerator-seconds already received (LAS)
    wait_since: float = 0.0  # when the job last became pending (submit or preemption)
    preemptions: int = 0
    interactive: bool = False  # counts against the project's interactive limit, if any
    # Derived from resources once: read in every inner loop of a cycle.
    demand: int = field(init=False)  # accelerators in all
    accelerator: str = field(init=False)
    per_worker: int = field(init=False)
    gang: int = field(init=False)  # worker processes in all slices
    shape: tuple[str, int, int] = field(init=False)  # (accelerator, per_worker, gang)

    @classmethod
    def from_spec(
        cls,
        spec: JobSpec,
        id: str,
        user: str,
        priority: int,
        submit_time: float,
        duration: float | None = None,
    ) -> Job:
        """The core's view of a submitted spec (`priority` resolved by the quota): the server
        and the simulator make theirs here, so both schedule the same job."""
        return cls(
            id=id,
            name=spec.name,
            project=spec.project,
            user=user,
            priority=priority,
            resources=spec.resources,
            submit_time=submit_time,
            preemptible=spec.preemptible,
            max_runtime=spec.max_runtime,
            duration=duration,
            wait_since=submit_time,
            interactive=spec.kind == "interactive",
        )

    def __post_init__(self) -> None:
        r = self.resources
        self.demand = r.total
        self.accelerator = r.accelerator
        self.per_worker = r.per_worker
        self.gang = r.gang
        self.shape = (r.accelerator, r.per_worker, self.gang)


@dataclass(slots=True, eq=False, init=False)
class Running:
    job: Job
    nodes: tuple[int, ...]  # node index of each worker, in worker order (slice-major)
    started_at: float
    terminating: bool = False  # preempted or cancelled, still releasing its accelerators

    def __init__(
        self, job: Job, nodes: tuple[int, ...], started_at: float, terminating: bool = False
    ) -> None:
        self.job, self.nodes, self.started_at = job, nodes, started_at
        self.terminating = terminating

    def expected_end(self) -> float | None:
        """When the job will end at the latest, if it declared a max_runtime."""
        if self.job.max_runtime is None:
            return None
        return self.started_at + self.job.max_runtime


class ReasonCode(StrEnum):
    """Why a job waits, in one word (DESIGN.md §3.11); `Reason.message` says it in full."""

    CAPACITY = "capacity"  # no room of the shape it needs
    QUOTA = "quota"  # beyond its project's share, too little idle to borrow
    LIMIT = "limit"  # a hard cap: project_limits, interactive limits
    RESERVED = "reserved"  # the room is held for a job ahead of it
    PREEMPTING = "preempting"  # jobs are stopping to make room
    ORDER = "order"  # not considered yet


@dataclass(frozen=True, slots=True)
class Reason:
    code: ReasonCode
    message: str


@dataclass(frozen=True, slots=True)
class Start:
    job_id: str
    nodes: tuple[str, ...]  # node name of each worker, in worker order


@dataclass(frozen=True, slots=True)
class Preempt:
    job_id: str
    reason: str
    preemptor: str  # id of the pending job the capacity goes to


@dataclass(slots=True, init=False)
class Decision:
    starts: list[Start]
    preemptions: list[Preempt]
    reasons: dict[str, Reason]  # why each pending job waits (all of them: decide.run_cycle)
    wake_at: float | None  # the decision may change at this time even with no event

    def __init__(self) -> None:
        self.starts, self.preemptions, self.reasons = [], [], {}
        self.wake_at = None

    def reason(self, job: Job) -> Reason:
        """Why the job waits; a job the decision does not know is waiting for the next one."""
        waiting = Reason(ReasonCode.ORDER, "waiting for the next scheduling cycle")
        return self.reasons.get(job.id, waiting)
