"""A quota for a trace whose teams have no quota file: one project per team.

Membership lists each user seen in a team's jobs, escaped for re.fullmatch, so every job's
user is a member of its job's project and nobody else is (a catch-all ".*" would let any user
submit to any team). Traces without users (Philly) use the team name as the user.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from corral.formats.types import FormatError, Quota, ScenarioJob

HOW = ("equal", "demand")


def derive_quota(jobs: Iterable[ScenarioJob], accelerator: str, how: str = "equal") -> Quota:
    """Shares: "equal" (1 each) or "demand" (each team's GPU-seconds / all GPU-seconds)."""
    if how not in HOW:
        raise FormatError(f"shares: must be one of {', '.join(HOW)}, got {how!r}")
    users: dict[str, set[str]] = defaultdict(set)
    demand: dict[str, float] = defaultdict(float)
    for job in jobs:
        project = job.spec.project
        users[project].add(job.user)
        demand[project] += job.spec.resources.total * job.duration
    total = sum(demand.values())
    shares = {
        p: {accelerator: (demand[p] / total if how == "demand" and total > 0 else 1.0)}
        for p in sorted(users)
    }
    membership = {p: tuple(re.escape(u) for u in sorted(users[p])) for p in sorted(users)}
    return Quota(shares=shares, membership=membership)
