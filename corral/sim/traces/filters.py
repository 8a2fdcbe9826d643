"""Cut a loaded trace down. Input and output are lists of ScenarioJob sorted by submit time.

Every filter rebases its result so the first kept job submits at 0 (like the loaders), which
keeps a filtered trace a valid scenario by itself. Window bounds refer to the times of the
input, i.e. to the trace as loaded. Job names are kept, so a job can be traced back to its row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from corral.formats.types import ScenarioJob


def rebase(jobs: Iterable[ScenarioJob]) -> list[ScenarioJob]:
    """The jobs sorted by submit time (stable), shifted so the first submits at 0."""
    ordered = sorted(jobs, key=lambda j: j.submit)
    if not ordered or ordered[0].submit == 0:
        return ordered
    t0 = ordered[0].submit
    return [dataclasses.replace(j, submit=j.submit - t0) for j in ordered]


def window(jobs: Sequence[ScenarioJob], start_s: float, end_s: float) -> list[ScenarioJob]:
    """Jobs submitted in [start_s, end_s), rebased."""
    return rebase(j for j in jobs if start_s <= j.submit < end_s)


def first(jobs: Sequence[ScenarioJob], n: int) -> list[ScenarioJob]:
    """The n earliest-submitted jobs, rebased (already at 0 when the input was)."""
    return rebase(sorted(jobs, key=lambda j: j.submit)[: max(n, 0)])


def only_projects(jobs: Sequence[ScenarioJob], names: Iterable[str]) -> list[ScenarioJob]:
    """Jobs of the given projects, rebased."""
    keep = set(names)
    return rebase(j for j in jobs if j.spec.project in keep)
