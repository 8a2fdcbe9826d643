"""Every answer the core and the built-in policies keep beyond the moment they computed it,
declared as a typed field next to the rule that ends it (Kueue's scheduler keeps its caches
the same way). Three lifetimes:

- Across cycles, `SnapshotMemos` (`Snapshot.memos`): the only part of a snapshot that `decide`
  writes. Each entry is checked against what it read before it is used again, and the
  snapshot marks on it what its own changes invalidate.
- Within a cycle, the `Cycle`'s own fields (their comments say when each ends).
- Within a cycle, a policy's `PolicyMemo` subclass (`Cycle.memo`, made by the policy on first
  use: fair's `FairCycleMemo`, the rank policies' `RankCycleMemo`); across cycles, its
  subclass on `SnapshotMemos.policy` (fair's `FairKept`).

Check mode: with CORRAL_CHECK_MEMOS=1 in the environment, every memoised answer is computed
again from scratch where it is used, and a difference stops the run (an AssertionError naming
the memo and both answers). Off, each check costs one test of a constant. CI runs the rule and
scenario tests once in this mode (tests/test_memo_check.py). A new memo gets its check.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

from mypy_extensions import mypyc_attr

from corral.core.model import Job, Running

CHECKING: Final = os.environ.get("CORRAL_CHECK_MEMOS") == "1"


def same(memo: str, kept: object, fresh: object) -> None:
    """Fail loudly unless the memoised answer is the one computed from scratch."""
    if kept != fresh:
        raise AssertionError(f"memo {memo}: kept {kept!r}, from scratch {fresh!r}")


@mypyc_attr(allow_interpreted_subclasses=True)
class PolicyMemo:
    """Base of a policy's own memos (a user's policy may subclass it too)."""


@dataclass(slots=True)
class PlanMemo:
    """The latest reservation plan and everything it read (see reserve.plan_reservation), so
    the next cycle can tell whether planning again would give the same answer."""

    job: Job
    spread: bool
    exclusive: dict[str, str]  # the cycle's exclusive domains
    node_jobs: list[int]  # the cycle's running workers per node
    free: list[int]  # the cycle's free map
    after: list[int]  # the free map once `releases` are gone
    releases: list[Running]  # running jobs released, in release order, until the job fit
    inserts: int  # running_by_end.inserts then
    nodes: tuple[int, ...]  # where the job fits then
    held: dict[int, int]
    one_domain: bool  # placed from one pool's histogram: nodes below one worker never matter
    # Nodes where the snapshot's free map may differ from `free` (the snapshot adds those it
    # changes), so an unchanged cycle finds what changed without comparing every node.
    touched: set[int]


class SnapshotMemos:
    """What `decide` keeps on a snapshot from cycle to cycle."""

    def __init__(self) -> None:
        # The latest reservation plan: reused while reserve._same_plan holds (the same job,
        # releases and what placement reads); the snapshot adds the nodes it changes to
        # `plan.touched`. Made afresh while jobs are stopping.
        self.plan: PlanMemo | None = None
        # The policy's own, each entry checked against what it read before it is used.
        self.policy: PolicyMemo | None = None
