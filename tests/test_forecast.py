"""Predicted starts (corral/sim/forecast.py): a forecast made during a replay, compared with
what the replay then did. No arrival comes after the sample instant unless a test says so, so
a known prediction must be exact."""

from __future__ import annotations

from simkit import job, load, quota

from corral.policies import load_policy
from corral.sim.forecast import error_figures


def predictions(sc: dict, at: float, **options) -> dict[str, tuple[float | None, float]]:
    """job -> (predicted start, actual start) for the jobs pending at the first instant from
    `at` on, after its cycle (one sample)."""
    scenario = load(sc)
    policy = load_policy(scenario.quota.scheduler)
    jobs = scenario.jobs
    found = error_figures(scenario.nodes, scenario.quota, jobs, policy, every=at, **options)
    first = min(s.t for s in found.samples)
    return {s.job: (s.predicted, s.actual) for s in found.samples if s.t == first}


def one_node(gpus: int) -> list[dict]:
    return [{"name": "n0", "accelerator": "gpu", "count": gpus}]


def test_a_job_waiting_for_one_with_a_max_runtime_starts_when_it_ends():
    sc = {
        "cluster": one_node(1),
        "jobs": [
            job("a", "p", 1, duration=100, max_runtime=100),
            job("b", "p", 1, submit=5, duration=30, max_runtime=30),
            job("c", "p", 1, submit=6, duration=30, max_runtime=30),
        ],
    }
    assert predictions(sc, at=6) == {"b": (100, 100), "c": (130, 130)}
    # Out of time after its first instant, the replay knows neither; within a horizon, b only.
    assert predictions(sc, at=6, budget=0) == {"b": (None, 100), "c": (None, 130)}
    assert predictions(sc, at=6, horizon=110) == {"b": (100, 100), "c": (None, 130)}


def test_a_start_that_waits_for_an_unknown_end_is_not_predicted():
    # a declares no max_runtime: b's start is unknown, and so is c's behind it.
    sc = {
        "cluster": one_node(1),
        "jobs": [
            job("a", "p", 1, duration=100),
            job("b", "p", 1, submit=5, duration=30, max_runtime=30),
            job("c", "p", 1, submit=6, duration=30, max_runtime=30),
        ],
    }
    assert predictions(sc, at=6) == {"b": (None, 100), "c": (None, 130)}
    # Now b declares none: its own start is known, c's behind it is not.
    sc["jobs"] = [
        job("a", "p", 1, duration=100, max_runtime=100),
        job("b", "p", 1, submit=5, duration=30),
        job("c", "p", 1, submit=6, duration=30, max_runtime=30),
    ]
    assert predictions(sc, at=6) == {"b": (100, 100), "c": (None, 130)}


def test_a_reservation_is_forecast_as_the_policy_holds_it():
    # b (2 GPUs) holds a reservation for when a ends; c (1 GPU, 200 s) would overrun it, so it
    # may not backfill beside a and starts when b is done. The policy that runs is the one
    # the forecast replays: fifo (EASY backfill) here.
    sc = {
        "cluster": one_node(2),
        "quota": quota({"p": {"gpu": 1}}, extra='[scheduler]\npolicy = "fifo"'),
        "jobs": [
            job("a", "p", 1, duration=100, max_runtime=100),
            job("b", "p", 2, submit=5, duration=50, max_runtime=50),
            job("c", "p", 1, submit=6, duration=200, max_runtime=200),
        ],
    }
    assert predictions(sc, at=6) == {"b": (100, 100), "c": (150, 150)}
