"""Accounting on a store written by hand: runs split at period and window edges."""

from __future__ import annotations

from datetime import datetime

from corral.formats.types import JobSpec, Resources
from corral.server.acct import account
from corral.server.store import JobRow, Store


def _t(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def _job(store: Store, seq: int, submitted: str, runs: list[tuple[str, str | None]], gpus=2):
    spec = JobSpec(
        name=f"j{seq}",
        project="vision",
        resources=Resources(accelerator="gpu", per_worker=gpus),
        command="true",
    )
    row = JobRow(
        f"j{seq}", seq, spec.name, "vision", "alice", 0, spec, "pending",
        submitted_at=_t(submitted), wait_since=_t(submitted),
    )  # fmt: skip
    with store.tx() as tx:
        tx.insert_job(row)
        for attempt, (start, end) in enumerate(runs):
            tx.insert_attempt(row.id, attempt, _t(start), None)
            if end is not None:
                tx.update_attempt(row.id, attempt, state="succeeded", finished_at=_t(end))
        if runs and runs[-1][1] is not None:
            tx.update_job(row.id, state="succeeded", finished_at=_t(runs[-1][1]))


def test_a_run_is_split_at_midnight_and_at_the_window(tmp_path):
    store = Store(tmp_path / "corral.db")
    # 2 GPUs from Monday 22:00 to Tuesday 02:00, after an hour in the queue.
    _job(store, 1, "2026-11-23T21:00", [("2026-11-23T22:00", "2026-11-24T02:00")])
    # Still running at `now` (Wednesday 01:00), since Tuesday 23:00: 2 GPUs x 2 h.
    _job(store, 2, "2026-11-24T23:00", [("2026-11-24T23:00", None)])
    now = _t("2026-11-25T01:00")
    rows = account(store, _t("2026-11-23T00:00"), now, "day", now=now)
    by_day = {r.period: r for r in rows}
    assert {p: r.accelerator_hours for p, r in by_day.items()} == {
        "2026-11-23": 4.0,
        "2026-11-24": 4.0 + 2.0,
        "2026-11-25": 2.0,
    }
    assert by_day["2026-11-23"].jobs == 1 and by_day["2026-11-23"].wait_seconds == 3600
    assert by_day["2026-11-24"].succeeded == 1 and by_day["2026-11-24"].jobs == 1
    (week,) = account(store, _t("2026-11-23T00:00"), now, "week", now=now)
    assert (week.period, week.accelerator_hours, week.jobs) == ("2026-W48", 12.0, 2)
    # The window cuts runs: from Monday 23:00 to Tuesday 01:00 is 2 GPUs x 2 h.
    (cut,) = account(store, _t("2026-11-23T23:00"), _t("2026-11-24T01:00"), now=now)
    assert (cut.period, cut.accelerator_hours, cut.jobs, cut.succeeded) == ("", 4.0, 0, 0)
    store.close()
