"""fair's memos, each declared with the rule that ends it (see corral/core/memos.py), and the
projects that may give up jobs for a reclaim (`_givers`), which they keep."""

from __future__ import annotations

from dataclasses import dataclass, field

from corral.core import memos
from corral.core.cycle import Cycle
from corral.core.memos import PolicyMemo
from corral.core.model import Job, Running
from corral.core.pending import Shape
from corral.core.queues import SortedQueue
from corral.core.reserve import outlasts
from corral.core.snapshot import Snapshot


@dataclass(slots=True, init=False)  # its own __init__: compiled (see model.py)
class _Giver:
    """A project above its guarantee of a type with a preemptible job."""

    project: str
    held: float
    guarantee: float
    smallest: int
    runs: SortedQueue[Running]  # (compared by identity)
    # Fair._released, once asked: the same for as long as this answer is (its fields and
    # jobs are fixed while it is kept).
    released: dict[int, int] | None = field(compare=False)

    def __init__(
        self, project: str, held: float, guarantee: float, smallest: int, runs: SortedQueue[Running]
    ):
        self.project, self.held, self.guarantee = project, held, guarantee
        self.smallest, self.runs = smallest, runs
        self.released = None


def _found_short(cycle: Cycle, size: tuple[str, int, bool], workers: int) -> bool:
    """Did a reclaim for no more workers of this size find too little room (see _unfreed)?"""
    return cycle.policy_memo(FairCycleMemo).now(cycle).unfreed.get(size, workers + 1) <= workers


def _note_unfreed(cycle: Cycle, size: tuple[str, int, bool], job: Job) -> None:
    """Remember that a reclaim for the job found too little room, if more workers of its size
    would surely find too little as well: the job is `_plain` (one that is not may fail where
    a larger plain one fits)."""
    if _plain(cycle, job):
        cycle.policy_memo(FairCycleMemo).now(cycle).unfreed[size] = job.gang


def _plain(cycle: Cycle, job: Job) -> bool:
    """Not exclusive, and its workers may go to any domain (one each, or one domain of the
    type): of all jobs of its shape, the easiest to place."""
    r = job.resources
    anywhere = r.workers == 1 or len(cycle.snap.cluster.typed_domains.get(r.accelerator, {})) == 1
    return anywhere and not r.exclusive


def reclaim_key(cycle: Cycle, job: Job) -> tuple:
    """What a reclaim's outcome depends on in a cycle: the project, the shape, how the workers
    are placed (`_plain` or not), and whether the job may use capacity held for the
    reservation (two jobs alike in all this fare alike), and how many jobs the cycle told to
    stop (what they free beyond what was promised is free for the next search) and started
    (a project's usage grows: it may give up more)."""
    r = job.resources
    how = True if _plain(cycle, job) else (r.workers, r.exclusive)
    return (job.project, job.shape, how, outlasts(cycle, job)) + _moves(cycle)


def _moves(cycle: Cycle) -> tuple[int, int]:
    return (len(cycle.releasing), len(cycle.started))


def _reclaim_failed(cycle: Cycle, project: str, shape: Shape) -> bool:
    """Has a reclaim for a plain job of the project and shape that may use held capacity
    failed in this cycle (then one for any job of the shape would), or one for no more workers
    of the size found no room (for jobs of any length) since it last changed? Also with no
    use of held capacity when every job of the project outlasts the reservation."""
    failed = cycle.policy_memo(FairCycleMemo).reclaim_failed
    accel, per_worker, workers = shape
    longs = (False, True) if _all_outlast(cycle, project) else (False,)
    for long in longs:
        if (project, shape, True, long) + _moves(cycle) in failed:
            return True
        if _found_short(cycle, (accel, per_worker, long), workers):
            return True
    return False


def _all_outlast(cycle: Cycle, project: str) -> bool:
    """Does every pending job of the project outlast the cycle's reservation?"""
    pending = cycle.snap.pending
    return (
        cycle.reservation is not None
        and not pending.bounded.get(project)
        and not cycle.lends_to(project)
    )


def _givers(cycle: Cycle, accel: str) -> list[_Giver]:
    """The projects that may give up jobs of a type now: asked per project and shape in
    each pass, so kept until the cycle next changes what projects hold."""
    by_type = cycle.policy_memo(FairCycleMemo).now(cycle).givers
    found = by_type.get(accel)
    if found is not None and memos.CHECKING:
        memos.same("fair givers", found, _fresh_givers(cycle, accel))
    if found is None:
        found = by_type[accel] = _fresh_givers(cycle, accel)
    return found


def _fresh_givers(cycle: Cycle, accel: str) -> list[_Giver]:
    """The projects above their guarantee of the type with a preemptible job (a reclaim
    within its budget takes only jobs small enough to lose: Fair._given)."""
    snap, found = cycle.snap, []
    sizes = snap.preemptible_sizes.get(accel, {})
    for project, runs in snap.preemptible.get(accel, {}).items():
        held, guarantee = cycle.held(project, accel), snap.guarantee_of(project, accel)
        counts = sizes.get(project)
        if held > guarantee and counts:
            found.append(_Giver(project, float(held), guarantee, min(counts), runs))
    return found


class FairCycleMemo(PolicyMemo):
    """fair's memos of one cycle (`Cycle.memo`), each with the rule that ends it."""

    def __init__(self) -> None:
        self.reclaim = False  # in the first pass (set by `order`): reclaim is allowed
        # Projects whose first pass a head that may reserve ended: in the second, their jobs
        # within the guarantee behind it may reclaim (Fair.order).
        self.deferred: set[str] = set()
        # Victim searches that failed: they fail again for the rest of the cycle (capacity
        # and candidates only shrink). Reclaim per project and shape; outrank, and priority.
        self.reclaim_failed: set[tuple] = set()  # of reclaim_key
        self.outrank_failed: set[tuple[str, Shape, int]] = set()
        # Until the cycle changes (`at`: Cycle.changes when made, see `now`): per
        # (accelerator, per_worker, long), the fewest workers a reclaim found too little
        # room for (Fair._reclaim); per type, the projects that may give (_givers).
        self.at = 0
        self.unfreed: dict[tuple[str, int, bool], int] = {}
        self.givers: dict[str, list[_Giver]] = {}

    def now(self, cycle: Cycle) -> FairCycleMemo:
        """The memo, with what the cycle's latest change ended forgotten."""
        if self.at != cycle.changes:
            self.at, self.unfreed, self.givers = cycle.changes, {}, {}
        return self


class FairKept(PolicyMemo):
    """fair's memos across cycles (`SnapshotMemos.policy`), each entry checked before use."""

    def __init__(self) -> None:
        # Per (type, project), what `Fair._given` frees node by node with every job eligible:
        # (the project's preemptible jobs, (their changes, held, guarantee) then, amounts),
        # used while the jobs, changes, held and guarantee are the same.
        self.released: dict[tuple[str, str], tuple[SortedQueue[Running], tuple, dict[int, int]]]
        self.released = {}


def _kept(snap: Snapshot) -> FairKept:
    kept = snap.memos.policy
    if not isinstance(kept, FairKept):
        kept = snap.memos.policy = FairKept()
    return kept
