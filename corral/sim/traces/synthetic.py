"""Synthetic Poisson workloads, deterministic for a seed.

Arrivals: exponential inter-arrival times with mean 3600 / rate_per_hour s, the first job at 0.
Projects: uniform over `projects`; each job's user is its project.

Sizes (GPUs per job):
- "philly": the empirical mix of the Philly table (93 % 1 GPU, ..., a few of 128).
- "gavel": Gavel's and Blox's sampler: 1 (70 %), 2 (10 %), 4 (15 %), 8 (5 %).
- a list of (gpus, weight) pairs.

Durations (seconds):
- "gavel": Gavel's and Blox's sampler: 80 % of jobs 60 x 10^U(1.5, 3), 20 % 60 x 10^U(3, 4).
- "philly": the Philly table's empirical distribution (log-linear between 40-quantiles).
- "exp:MEAN": exponential with that mean.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from corral.formats.types import FormatError, ScenarioJob
from corral.sim.traces.common import BadRow, JobBuilder, project_label

# GPUs -> number of jobs in shared/traces/philly/philly.csv.
PHILLY_SIZES = {1: 76627, 2: 1818, 4: 1870, 8: 1643, 12: 7, 16: 199, 24: 7, 32: 67, 64: 6, 128: 3}
GAVEL_SIZES = {1: 0.70, 2: 0.10, 4: 0.15, 8: 0.05}
# Durations of philly.csv at quantiles 0, 1/40, ..., 1 (seconds).
PHILLY_DURATION_QUANTILES = (
    1.0, 30.0, 48.0, 56.0, 61.0, 64.0, 68.0, 71.0, 75.0, 84.0, 115.0, 164.0, 209.0, 292.0,
    371.0, 520.0, 599.0, 717.6, 863.0, 976.0, 1144.0, 1315.0, 1474.0, 1587.0, 1821.0, 1984.8,
    2140.0, 2406.0, 2549.0, 2675.0, 2932.0, 3638.0, 4243.8, 5290.0, 5903.0, 8489.2, 11264.8,
    18332.7, 43646.2, 113302.0, 4628226.0,
)  # fmt: skip


def synthetic(
    *,
    jobs: int,
    rate_per_hour: float,
    seed: int,
    projects: Sequence[str],
    sizes: str | Sequence[tuple[int, float]] = "philly",
    durations: str = "gavel",
    accelerator: str = "v100",
    gpus_per_node: int = 8,
) -> list[ScenarioJob]:
    if jobs < 0:
        raise FormatError(f"jobs: must be >= 0, got {jobs}")
    if not rate_per_hour > 0:
        raise FormatError(f"rate_per_hour: must be > 0, got {rate_per_hour}")
    teams = _teams(projects)
    gpus_table, weights = _size_table(sizes)
    rng = np.random.default_rng(seed)
    # Draw each quantity as one array, in a fixed order: the same seed gives the same trace.
    gaps = rng.exponential(3600.0 / rate_per_hour, jobs)
    submits = np.cumsum(gaps) - (gaps[0] if jobs else 0.0)
    gpus = rng.choice(gpus_table, size=jobs, p=weights)
    runs = _durations(rng, durations, jobs)
    owner = rng.integers(0, len(teams), jobs)
    raw = [
        (float(submits[i]), i, teams[owner[i]], teams[owner[i]], int(gpus[i]), float(runs[i]))
        for i in range(jobs)
    ]
    return JobBuilder(accelerator, gpus_per_node).jobs(raw)[0]


def gavel_durations(rng: np.random.Generator, n: int) -> np.ndarray:
    long = rng.random(n) >= 0.8
    exponent = np.where(long, rng.uniform(3.0, 4.0, n), rng.uniform(1.5, 3.0, n))
    return 60.0 * 10.0**exponent


def _durations(rng: np.random.Generator, how: str, n: int) -> np.ndarray:
    if how == "gavel":
        return gavel_durations(rng, n)
    if how == "philly":
        grid = np.linspace(0.0, 1.0, len(PHILLY_DURATION_QUANTILES))
        logs = np.log(PHILLY_DURATION_QUANTILES)
        return np.exp(np.interp(rng.random(n), grid, logs))
    if how.startswith("exp:"):
        try:
            mean = float(how[4:])
        except ValueError:
            mean = float("nan")
        if not mean > 0:
            raise FormatError(f"durations: exp:MEAN needs a mean > 0 seconds, got {how!r}")
        return np.maximum(rng.exponential(mean, n), 1.0)  # at least 1 s, like the loaders
    raise FormatError(f"durations: must be gavel, philly or exp:MEAN, got {how!r}")


def _size_table(sizes: str | Sequence[tuple[int, float]]) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(sizes, str):
        tables = {"philly": PHILLY_SIZES, "gavel": GAVEL_SIZES}
        if sizes not in tables:
            raise FormatError(f"sizes: must be philly, gavel or [(gpus, weight)], got {sizes!r}")
        pairs = list(tables[sizes].items())
    else:
        pairs = list(sizes)
    try:
        gpus = np.array([int(g) for g, _ in pairs])
        weights = np.array([float(w) for _, w in pairs])
    except (TypeError, ValueError):
        raise FormatError(f"sizes: must be a list of (gpus, weight) pairs, got {sizes!r}") from None
    if not len(pairs) or (gpus < 1).any() or (weights < 0).any() or not weights.sum() > 0:
        raise FormatError(f"sizes: need gpus >= 1 and weights >= 0 summing to > 0, got {sizes!r}")
    return gpus, weights / weights.sum()


def _teams(projects: Sequence[str]) -> list[str]:
    if isinstance(projects, str) or not projects:
        raise FormatError(f"projects: must be a non-empty list of names, got {projects!r}")
    try:
        return [project_label(p) for p in projects]
    except BadRow as err:
        raise FormatError(f"projects: {err}") from None
