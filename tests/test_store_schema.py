"""The store's schema version: a state directory written before versioning (or by an older
version) opens with the newest code, its jobs intact; a newer one is refused in one line."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from corral.server import store as store_mod
from corral.server.store import MIGRATIONS, SchemaTooNew, Store, migrate

FIXTURE = Path(__file__).parent / "fixtures" / "store_v0.sql"
TEAM_QUOTA = """
[toml-schema]
version = "1"
[project_membership]
team = [".*"]
[project_resources.team]
gpu = 1.0
"""


def _old_state_dir(state: Path) -> None:
    state.mkdir(mode=0o700)
    conn = sqlite3.connect(state / "corral.db")
    conn.executescript(FIXTURE.read_text())
    conn.close()


def _version(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("PRAGMA user_version").fetchone()[0]


@pytest.mark.live
def test_a_state_dir_from_before_versioning_opens_with_its_jobs(live_servers, tmp_path):
    server = live_servers(quota=TEAM_QUOTA, start=False)
    server.args += ["--retention", "36500d"]  # its jobs are from 2023: keep them
    _old_state_dir(server.state)
    assert _version(server.state / "corral.db") == 0
    server.start()
    assert _version(server.state / "corral.db") == len(MIGRATIONS)
    done = server.job("j1")
    assert (done["name"], done["state"], done["exit_code"]) == ("old-done", "succeeded", 0)
    assert done["attempts"][0]["placement"][0]["gpus"] == [0]
    # The job that was waiting runs under the new code; the next id follows the old ones.
    assert server.wait("j2", "succeeded")["name"] == "old-waiting"
    assert server.cli("logs", "j2", admin=True).stdout == "migrated\n"
    new = server.cli("submit", "--name", "new", "--", "true", admin=True).stdout.strip()
    assert new == "j3"
    # `corral up` logs each job event once it is committed.
    server.wait("j3", "succeeded")
    log = server.log()
    assert "corral.events: start job=j2 project=team" in log
    assert "corral.events: finish job=j3 project=team" in log


def test_migrations_run_once_each_in_order(tmp_path, monkeypatch):
    db = tmp_path / "corral.db"
    Store(db).close()
    assert _version(db) == len(MIGRATIONS)

    def backfill(conn: sqlite3.Connection) -> None:
        conn.execute("UPDATE jobs SET note = 'backfilled'")

    added = ("ALTER TABLE jobs ADD COLUMN note TEXT", backfill)
    monkeypatch.setattr(store_mod, "MIGRATIONS", MIGRATIONS + added)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(
        "INSERT INTO jobs (id, seq, name, project, user, priority, spec, state, submitted_at,"
        " wait_since) VALUES ('j1', 1, 'a', 'p', 'u', 0, '{}', 'succeeded', 0, 0)"
    )
    assert migrate(conn, db) == len(MIGRATIONS)
    assert migrate(conn, db) == len(MIGRATIONS) + 2  # nothing left to run
    assert conn.execute("SELECT note FROM jobs").fetchone()[0] == "backfilled"


def test_a_failed_migration_leaves_the_previous_version(tmp_path, monkeypatch):
    db = tmp_path / "corral.db"
    Store(db).close()
    broken = ("ALTER TABLE jobs ADD COLUMN note TEXT;\nSELECT * FROM no_such_table;",)
    monkeypatch.setattr(store_mod, "MIGRATIONS", MIGRATIONS + broken)
    with pytest.raises(sqlite3.OperationalError):
        Store(db)
    assert _version(db) == len(MIGRATIONS)
    with sqlite3.connect(db) as conn:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(jobs)")]
    assert "note" not in columns  # the half-run migration was rolled back


def test_a_newer_database_is_refused(tmp_path):
    db = tmp_path / "corral.db"
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    with pytest.raises(SchemaTooNew, match="run a newer corral"):
        Store(db)
