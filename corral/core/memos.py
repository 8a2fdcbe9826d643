"""Every answer the core and the built-in policies keep beyond the moment they computed it,
declared as a typed field next to the rule that ends it (Kueue's scheduler keeps its caches
the same way). Three lifetimes:

- Across cycles, `SnapshotMemos` (`Snapshot.memos`): the only part of a snapshot that `decide`
  writes, each entry checked against what it read before it is used again.
- Within a cycle, the `Cycle`'s own fields (their comments say when each ends).
- A policy's `PolicyMemo` subclasses: within a cycle on `Cycle.memo` (fair's `FairCycleMemo`,
  the rank policies' `RankCycleMemo`), across cycles on `SnapshotMemos.policy` (`FairKept`).

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


@dataclass(slots=True)
class SnapshotMemos:
    """What `decide` keeps on a snapshot from cycle to cycle."""

    # The latest reservation plan, reused while reserve._same_plan holds; made afresh while
    # jobs are stopping.
    plan: PlanMemo | None = None
    # The policy's own, each entry checked against what it read before it is used.
    policy: PolicyMemo | None = None
