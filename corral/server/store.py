"""The control plane's durable state: jobs, attempts, placements, events and tokens in SQLite.

Every state change goes through one `Store.tx()` block, which is one SQLite transaction: a
SIGKILL at any instant leaves the database as it was before or after the change, never between.
The database runs in WAL mode with synchronous=NORMAL: a commit survives the process being
killed (the WAL is in the OS page cache); only a power loss or kernel crash can drop the last
few commits. That is the tradeoff that makes a submission cost tens of microseconds, not an
fsync (docs/live.md).

One connection writes, and only under the control plane's lock; readers use a connection per
thread, which WAL lets run beside the writer.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.formats.types import JobSpec, Resources
from corral.server import fastjson

LIVE_STATES = ("pending", "running")
FINAL_STATES = ("succeeded", "failed", "cancelled")
LIVE_ATTEMPT_STATES = ("launching", "running", "terminating")

log = logging.getLogger("corral.events")

# Migration 1: the schema as it stood when versioning began. CREATE ... IF NOT EXISTS, so a
# database written before then (user_version 0, these tables already there) passes through it
# unchanged. Never edit it: change the schema by appending to MIGRATIONS below.
SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL UNIQUE,
    name TEXT NOT NULL,
    project TEXT NOT NULL,
    user TEXT NOT NULL,
    priority INTEGER NOT NULL,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    message TEXT NOT NULL DEFAULT '',
    attempt INTEGER NOT NULL DEFAULT 0,
    restarts INTEGER NOT NULL DEFAULT 0,
    preemptions INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    exit_code INTEGER,
    submitted_at REAL NOT NULL,
    wait_since REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    run_time REAL NOT NULL DEFAULT 0,
    attained REAL NOT NULL DEFAULT 0
);
-- The database itself refuses two live jobs with one name, whatever the caller checked.
CREATE UNIQUE INDEX IF NOT EXISTS jobs_live_name ON jobs(name)
    WHERE state IN ('pending', 'running');
CREATE INDEX IF NOT EXISTS jobs_user ON jobs(user, seq);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state, seq);
CREATE TABLE IF NOT EXISTS attempts (
    job_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    state TEXT NOT NULL,
    stop_reason TEXT,
    master_port INTEGER,
    started_at REAL NOT NULL,
    finished_at REAL,
    exit_code INTEGER,
    worker_codes TEXT,
    message TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, attempt)
);
CREATE INDEX IF NOT EXISTS attempts_live ON attempts(state);
CREATE TABLE IF NOT EXISTS placements (
    job_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    worker INTEGER NOT NULL,
    slice_id INTEGER NOT NULL,
    node TEXT NOT NULL,
    gpus TEXT NOT NULL,
    PRIMARY KEY (job_id, attempt, worker)
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    t REAL NOT NULL,
    event TEXT NOT NULL,
    job TEXT,
    project TEXT,
    data TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS events_job ON events(job);
CREATE TABLE IF NOT EXISTS tokens (
    hash TEXT PRIMARY KEY,
    user TEXT NOT NULL,
    admin INTEGER NOT NULL,
    created_at REAL NOT NULL
);
"""

# A migration is an SQL script or a function of the connection; either runs in one transaction
# with the bump of `PRAGMA user_version`, so a crash leaves the database at one version or the
# next. MIGRATIONS[i] takes version i to i + 1. Append only; never reorder or edit one that
# has shipped (tests/test_store_schema.py opens a database written before versioning).
Migration = str | Callable[[sqlite3.Connection], None]
# 2: interactive jobs. The ports each holds on its node (the key makes a port unique per node,
# whatever the caller checked), and the SSH public keys users add for the `ssh` template.
INTERACTIVE_SCHEMA = """
CREATE TABLE IF NOT EXISTS ports (
    node TEXT NOT NULL,
    port INTEGER NOT NULL,
    job_id TEXT NOT NULL,
    name TEXT NOT NULL,
    PRIMARY KEY (node, port)
);
CREATE INDEX IF NOT EXISTS ports_job ON ports(job_id);
CREATE TABLE IF NOT EXISTS ssh_keys (
    user TEXT NOT NULL,
    key TEXT NOT NULL,
    added_at REAL NOT NULL,
    PRIMARY KEY (user, key)
);
"""
# 3: what a preemption holds for its preemptor (DESIGN.md §3.9), kept across a restart: the job
# each stopped attempt was preempted for, and whether a pending job still has first pick of
# what its victims free (ControlPlane._end_first_picks says when that ends).
FIRST_PICK_SCHEMA = """
ALTER TABLE attempts ADD COLUMN preemptor TEXT;
ALTER TABLE jobs ADD COLUMN first_pick INTEGER NOT NULL DEFAULT 0;
"""
MIGRATIONS: tuple[Migration, ...] = (SCHEMA, INTERACTIVE_SCHEMA, FIRST_PICK_SCHEMA)


class SchemaTooNew(RuntimeError):
    pass


def migrate(conn: sqlite3.Connection, path: Path) -> int:
    """Bring the database to the newest schema version; returns the version it was at."""
    found = conn.execute("PRAGMA user_version").fetchone()[0]
    if found > len(MIGRATIONS):
        raise SchemaTooNew(
            f"{path} has schema version {found}; this corral knows up to {len(MIGRATIONS)}:"
            " run a newer corral on it"
        )
    for version in range(found + 1, len(MIGRATIONS) + 1):
        step = MIGRATIONS[version - 1]
        conn.execute("BEGIN IMMEDIATE")
        try:
            if callable(step):
                step(conn)
            else:
                # Statement by statement: executescript() would commit our transaction first.
                for statement in _statements(step):
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return found


def _statements(script: str) -> Iterator[str]:
    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            yield statement
            statement = ""
    if statement.strip():
        yield statement


# -- records -----------------------------------------------------------------------------------


@dataclass(slots=True)
class JobRow:
    id: str
    seq: int
    name: str
    project: str
    user: str
    priority: int
    spec: JobSpec
    state: str
    message: str = ""
    attempt: int = 0
    restarts: int = 0
    preemptions: int = 0
    cancel_requested: bool = False
    exit_code: int | None = None
    submitted_at: float = 0.0
    wait_since: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    run_time: float = 0.0
    attained: float = 0.0
    first_pick: bool = False  # preempted others: first pick of what they free (§3.9)

    @classmethod
    def from_sql(cls, row: sqlite3.Row) -> JobRow:
        values = dict(row)
        values["spec"] = spec_from_json(values["spec"])
        values["cancel_requested"] = bool(values["cancel_requested"])
        values["first_pick"] = bool(values["first_pick"])
        return cls(**values)


@dataclass(slots=True)
class AttemptRow:
    job_id: str
    attempt: int
    state: str
    stop_reason: str | None
    master_port: int | None
    started_at: float
    finished_at: float | None = None
    exit_code: int | None = None
    worker_codes: list[int | None] | None = None
    message: str = ""
    preemptor: str | None = None  # the job this attempt was preempted for

    @classmethod
    def from_sql(cls, row: sqlite3.Row) -> AttemptRow:
        values = dict(row)
        codes = values["worker_codes"]
        values["worker_codes"] = json.loads(codes) if codes else None
        return cls(**values)


@dataclass(frozen=True, slots=True)
class PlacementRow:
    worker: int
    slice_id: int
    node: str
    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TokenRow:
    hash: str
    user: str
    admin: bool
    created_at: float = 0.0


@dataclass(frozen=True, slots=True)
class AcctRun:
    """One attempt's run, for accounting."""

    project: str
    user: str
    accelerator: str
    accelerators: int
    started_at: float
    finished_at: float | None


@dataclass(frozen=True, slots=True)
class AcctJob:
    project: str
    user: str
    accelerator: str
    state: str
    submitted_at: float
    finished_at: float | None
    runs: tuple[tuple[float, float | None], ...]  # its attempts' (start, end), in order


@dataclass(frozen=True, slots=True)
class AcctPreemption:
    t: float
    project: str
    user: str
    accelerator: str


@dataclass(frozen=True, slots=True)
class EventRow:
    seq: int
    t: float
    event: str
    job: str | None
    project: str | None
    data: dict[str, Any]


# -- the job spec as stored ----------------------------------------------------------------------


def spec_to_json(spec: JobSpec) -> str:
    # Spelled out rather than dataclasses.asdict, which deep-copies and costs 10x on the
    # submit path.
    r = spec.resources
    data = {
        "name": spec.name,
        "project": spec.project,
        "resources": {
            "accelerator": r.accelerator,
            "per_worker": r.per_worker,
            "workers": r.workers,
            "slices": r.slices,
            "exclusive": r.exclusive,
        },
        "command": spec.command if isinstance(spec.command, str) else list(spec.command),
        "priority": spec.priority,
        "env": spec.env,
        "max_restarts": spec.max_restarts,
        "preemptible": spec.preemptible,
        "max_runtime": spec.max_runtime,
        "kind": spec.kind,
        "workdir": spec.workdir,
    }
    if spec.crypt_proxy is not None:
        data["crypt_proxy"] = spec.crypt_proxy
    if spec.kind == "interactive":
        data["template"] = spec.template
        data["idle_timeout"] = spec.idle_timeout
    return fastjson.dumps(data)


def spec_from_json(text: str) -> JobSpec:
    """Rebuild a spec that was validated when it was submitted: no second validation, so a
    stricter parser in a later version can never strand a job already in the store."""
    data = fastjson.loads(text)
    command = data["command"]
    return JobSpec(
        name=data["name"],
        project=data["project"],
        resources=Resources(**data["resources"]),
        command=command if isinstance(command, str) else tuple(command),
        priority=data["priority"],
        env=dict(data["env"]),
        max_restarts=data["max_restarts"],
        preemptible=data["preemptible"],
        max_runtime=data["max_runtime"],
        kind=data["kind"],
        workdir=data.get("workdir"),  # absent in rows stored before workdir existed
        template=data.get("template"),
        idle_timeout=data.get("idle_timeout"),
        crypt_proxy=data.get("crypt_proxy"),
    )


# -- writes --------------------------------------------------------------------------------------


class Tx:
    """The writes of one transaction. Only `Store.tx()` makes one."""

    __slots__ = ("_cur", "logged")

    def __init__(self, cur: sqlite3.Cursor):
        self._cur = cur
        self.logged: list[tuple[str, str | None, str | None, str]] = []  # once committed

    def insert_job(self, job: JobRow) -> None:
        self._cur.execute(
            "INSERT INTO jobs (id, seq, name, project, user, priority, spec, state, attempt,"
            " submitted_at, wait_since) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                job.id,
                job.seq,
                job.name,
                job.project,
                job.user,
                job.priority,
                spec_to_json(job.spec),
                job.state,
                job.attempt,
                job.submitted_at,
                job.wait_since,
            ),
        )

    def update_job(self, job_id: str, **fields: Any) -> None:
        for flag in ("cancel_requested", "first_pick"):
            if flag in fields:
                fields[flag] = int(bool(fields[flag]))
        cols = ", ".join(f"{k} = ?" for k in fields)  # keys come from our code, never a user
        self._cur.execute(f"UPDATE jobs SET {cols} WHERE id = ?", (*fields.values(), job_id))

    def insert_attempt(
        self, job_id: str, attempt: int, started_at: float, master_port: int | None
    ) -> None:
        self._cur.execute(
            "INSERT INTO attempts (job_id, attempt, state, master_port, started_at)"
            " VALUES (?, ?, 'launching', ?, ?)",
            (job_id, attempt, master_port, started_at),
        )

    def update_attempt(self, job_id: str, attempt: int, **fields: Any) -> None:
        if "worker_codes" in fields and fields["worker_codes"] is not None:
            fields["worker_codes"] = json.dumps(list(fields["worker_codes"]))
        cols = ", ".join(f"{k} = ?" for k in fields)
        self._cur.execute(
            f"UPDATE attempts SET {cols} WHERE job_id = ? AND attempt = ?",
            (*fields.values(), job_id, attempt),
        )

    def insert_placements(self, job_id: str, attempt: int, rows: Sequence[PlacementRow]) -> None:
        self._cur.executemany(
            "INSERT INTO placements (job_id, attempt, worker, slice_id, node, gpus)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            [
                (job_id, attempt, p.worker, p.slice_id, p.node, json.dumps(list(p.gpus)))
                for p in rows
            ],
        )

    def event(
        self, t: float, event: str, job: str | None = None, project: str | None = None, **data: Any
    ) -> None:
        text = fastjson.dumps(data, sort_keys=True)
        self._cur.execute(
            "INSERT INTO events (t, event, job, project, data) VALUES (?, ?, ?, ?, ?)",
            (t, event, job, project, text),
        )
        if log.isEnabledFor(logging.INFO):
            self.logged.append((event, job, project, text))

    def insert_token(self, digest: str, user: str, admin: bool, now: float) -> None:
        self._cur.execute(
            "INSERT INTO tokens (hash, user, admin, created_at) VALUES (?, ?, ?, ?)",
            (digest, user, int(admin), now),
        )

    def insert_ports(self, job_id: str, node: str, ports: dict[str, int]) -> None:
        self._cur.executemany(
            "INSERT INTO ports (node, port, job_id, name) VALUES (?, ?, ?, ?)",
            [(node, port, job_id, name) for name, port in ports.items()],
        )

    def delete_ports(self, job_ids: Sequence[str]) -> None:
        self._cur.executemany("DELETE FROM ports WHERE job_id = ?", [(j,) for j in job_ids])

    def insert_ssh_key(self, user: str, key: str, now: float) -> None:
        self._cur.execute(
            "INSERT OR IGNORE INTO ssh_keys (user, key, added_at) VALUES (?, ?, ?)",
            (user, key, now),
        )

    def delete_jobs(self, job_ids: Sequence[str]) -> None:
        """Forget finished jobs: their rows, attempts, placements and events (retention)."""
        ids = [(j,) for j in job_ids]
        for table, key in (
            ("jobs", "id"),
            ("attempts", "job_id"),
            ("placements", "job_id"),
            ("events", "job"),
            ("ports", "job_id"),  # freed when the job ended; none should be left
        ):
            self._cur.executemany(f"DELETE FROM {table} WHERE {key} = ?", ids)

    def delete_events_before(self, t: float, limit: int) -> int:
        """Delete up to `limit` of the oldest events older than `t`; how many went. Oldest
        first by seq, so the scan stops at the first young event."""
        self._cur.execute(
            "DELETE FROM events WHERE seq IN"
            " (SELECT seq FROM events WHERE t < ? ORDER BY seq LIMIT ?)",
            (t, limit),
        )
        return self._cur.rowcount

    def delete_tokens(self, digests: Sequence[str]) -> None:
        self._cur.executemany("DELETE FROM tokens WHERE hash = ?", [(d,) for d in digests])


# -- the store -----------------------------------------------------------------------------------


class Store:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._writer = self._connect()
        self.migrated_from = migrate(self._writer, self.path)
        # Checkpoints (copying the WAL into the database, with an fsync) are taken by
        # `checkpoint()` from the control loop, off the request path, instead of by whichever
        # commit happens to cross the WAL size threshold.
        self._writer.execute("PRAGMA wal_autocheckpoint=0")
        self._checkpointer = self._connect()
        self._readers = threading.local()
        self._reader_conns: list[sqlite3.Connection] = []  # every thread's, to close them

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN IMMEDIATE ourselves, so a transaction is exactly
        # the block the caller wrote, and takes the write lock up front.
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=5000")
        return conn

    def close(self) -> None:
        """Close every connection, readers first: then nothing holds an old snapshot and the
        WAL can be folded into the database and emptied."""
        for conn in self._reader_conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        with contextlib.suppress(sqlite3.Error):
            self.truncate_wal()
        self._checkpointer.close()
        self._writer.close()

    def checkpoint(self) -> None:
        """Copy committed WAL frames into the database file. PASSIVE: never blocks a writer
        or a reader; whatever it cannot copy now, the next call will."""
        self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def wal_bytes(self) -> int:
        try:
            return os.stat(f"{self.path}-wal").st_size
        except FileNotFoundError:
            return 0

    def truncate_wal(self) -> None:
        """Checkpoint everything and cut the WAL file to zero bytes. Under steady writes a
        PASSIVE checkpoint never catches up with the last commit, so the WAL is never reset
        and only grows; this one waits for readers (busy_timeout) and needs the caller to
        hold off writers (the control plane's lock)."""
        self._writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    @contextmanager
    def tx(self) -> Iterator[Tx]:
        cur = self._writer.cursor()
        cur.execute("BEGIN IMMEDIATE")
        tx = Tx(cur)
        try:
            yield tx
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        cur.execute("COMMIT")
        # One log line per job event, written only once it is committed.
        for event, job, project, data in tx.logged:
            log.info("%s job=%s project=%s %s", event, job or "-", project or "-", data)

    def _read(self) -> sqlite3.Connection:
        conn = getattr(self._readers, "conn", None)
        if conn is None:
            conn = self._connect()
            self._readers.conn = conn
            self._reader_conns.append(conn)
        return conn

    # -- reads -----------------------------------------------------------------------------------

    def max_seq(self) -> int:
        row = self._read().execute("SELECT COALESCE(MAX(seq), 0) FROM jobs").fetchone()
        return int(row[0])

    def job(self, job_id: str) -> JobRow | None:
        row = self._read().execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return JobRow.from_sql(row) if row else None

    def job_by_name(self, name: str, user: str | None = None) -> JobRow | None:
        """The newest job with this name (live first), optionally only among a user's jobs."""
        sql = "SELECT * FROM jobs WHERE name = ?"
        args: list[Any] = [name]
        if user is not None:
            sql += " AND user = ?"
            args.append(user)
        sql += " ORDER BY state IN ('pending', 'running') DESC, seq DESC LIMIT 1"
        row = self._read().execute(sql, args).fetchone()
        return JobRow.from_sql(row) if row else None

    def jobs(
        self,
        *,
        user: str | None = None,
        states: Sequence[str] | None = None,
        projects: Sequence[str] | None = None,
        since: float | None = None,
        limit: int | None = None,
    ) -> list[JobRow]:
        """Jobs in submission order; with a limit, the most recent `limit` of them."""
        where, args = [], []
        if since is not None:
            where.append("submitted_at >= ?")
            args.append(since)
        if user is not None:
            where.append("user = ?")
            args.append(user)
        if states:
            where.append(f"state IN ({', '.join('?' * len(states))})")
            args.extend(states)
        if projects is not None:
            where.append(f"project IN ({', '.join('?' * len(projects))})")
            args.extend(projects)
        sql = "SELECT * FROM jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY seq DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        rows = [JobRow.from_sql(r) for r in self._read().execute(sql, args)]
        rows.reverse()
        return rows

    def expired_jobs(self, finished_before: float, keep: int, limit: int) -> list[str]:
        """Finished jobs to forget: those finished before `finished_before`, and the oldest
        beyond the newest `keep` finished ones; at most `limit`. The newest job of all is
        never one, so `max_seq` (and so job ids) never goes back."""
        final = ", ".join(f"'{s}'" for s in FINAL_STATES)
        rows = self._read().execute(
            f"SELECT id FROM jobs WHERE state IN ({final})"
            " AND seq < (SELECT MAX(seq) FROM jobs)"
            f" AND (finished_at < ? OR seq <= COALESCE((SELECT seq FROM jobs"
            f" WHERE state IN ({final}) ORDER BY seq DESC LIMIT 1 OFFSET ?), -1))"
            " ORDER BY seq LIMIT ?",
            (finished_before, keep, limit),
        )
        return [r[0] for r in rows]

    def attempts(self, job_id: str) -> list[AttemptRow]:
        rows = self._read().execute(
            "SELECT * FROM attempts WHERE job_id = ? ORDER BY attempt", (job_id,)
        )
        return [AttemptRow.from_sql(r) for r in rows]

    def attempt(self, job_id: str, attempt: int) -> AttemptRow | None:
        row = (
            self._read()
            .execute("SELECT * FROM attempts WHERE job_id = ? AND attempt = ?", (job_id, attempt))
            .fetchone()
        )
        return AttemptRow.from_sql(row) if row else None

    def live_attempts(self) -> list[AttemptRow]:
        marks = ", ".join("?" * len(LIVE_ATTEMPT_STATES))
        rows = self._read().execute(
            f"SELECT * FROM attempts WHERE state IN ({marks}) ORDER BY job_id, attempt",
            LIVE_ATTEMPT_STATES,
        )
        return [AttemptRow.from_sql(r) for r in rows]

    def placements(self, job_id: str, attempt: int) -> list[PlacementRow]:
        rows = self._read().execute(
            "SELECT worker, slice_id, node, gpus FROM placements"
            " WHERE job_id = ? AND attempt = ? ORDER BY worker",
            (job_id, attempt),
        )
        return [
            PlacementRow(r["worker"], r["slice_id"], r["node"], tuple(json.loads(r["gpus"])))
            for r in rows
        ]

    def counts_by_state(self) -> dict[str, int]:
        rows = self._read().execute("SELECT state, COUNT(*) FROM jobs GROUP BY state")
        return {r[0]: r[1] for r in rows}

    def events(self, job: str | None = None, after: int = 0, limit: int = 1000) -> list[EventRow]:
        sql = "SELECT * FROM events WHERE seq > ?"
        args: list[Any] = [after]
        if job is not None:
            sql += " AND job = ?"
            args.append(job)
        sql += " ORDER BY seq LIMIT ?"
        args.append(limit)
        return [
            EventRow(r["seq"], r["t"], r["event"], r["job"], r["project"], json.loads(r["data"]))
            for r in self._read().execute(sql, args)
        ]

    def ports(self) -> dict[str, tuple[str, dict[str, int]]]:
        """job id -> (node, port name -> port) for every port held."""
        held: dict[str, tuple[str, dict[str, int]]] = {}
        for r in self._read().execute("SELECT node, port, job_id, name FROM ports ORDER BY port"):
            held.setdefault(r["job_id"], (r["node"], {}))[1][r["name"]] = r["port"]
        return held

    def ssh_keys(self, user: str) -> list[str]:
        rows = self._read().execute(
            "SELECT key FROM ssh_keys WHERE user = ? ORDER BY added_at", (user,)
        )
        return [r["key"] for r in rows]

    def tokens(self) -> list[TokenRow]:
        rows = self._read().execute(
            "SELECT hash, user, admin, created_at FROM tokens ORDER BY created_at"
        )
        return [TokenRow(r["hash"], r["user"], bool(r["admin"]), r["created_at"]) for r in rows]

    # -- accounting (corral/server/acct.py) --------------------------------------------------------

    def _acct_filter(
        self, projects: Sequence[str] | None, user: str | None
    ) -> tuple[str, list[Any]]:
        where, args = "", []
        if projects is not None:
            where += f" AND j.project IN ({', '.join('?' * len(projects))})"
            args.extend(projects)
        if user is not None:
            where += " AND j.user = ?"
            args.append(user)
        return where, args

    def acct_attempts(
        self, since: float, until: float, projects: Sequence[str] | None, user: str | None
    ) -> list[AcctRun]:
        """Attempts that ran at some time in [since, until)."""
        where, args = self._acct_filter(projects, user)
        sql = (
            "SELECT j.project, j.user, j.spec, a.started_at, a.finished_at FROM attempts a"
            " JOIN jobs j ON j.id = a.job_id WHERE a.started_at < ?"
            " AND (a.finished_at IS NULL OR a.finished_at > ?)" + where
        )
        out = []
        for r in self._read().execute(sql, [until, since, *args]):
            res = json.loads(r["spec"])["resources"]
            demand = res["per_worker"] * res["workers"] * res["slices"]
            out.append(
                AcctRun(r["project"], r["user"], res["accelerator"], demand, r[3], r["finished_at"])
            )
        return out

    def acct_jobs(
        self, since: float, until: float, projects: Sequence[str] | None, user: str | None
    ) -> list[AcctJob]:
        """Jobs submitted, ended or started in [since, until), with their attempts' runs."""
        where, args = self._acct_filter(projects, user)
        sql = (
            "SELECT j.project, j.user, j.spec, j.state, j.submitted_at, j.finished_at,"
            " (SELECT json_group_array(json_array(a.started_at, a.finished_at))"
            " FROM attempts a WHERE a.job_id = j.id) AS runs"
            " FROM jobs j WHERE (j.submitted_at >= ? AND j.submitted_at < ?"
            " OR j.finished_at >= ? AND j.finished_at < ?"
            " OR j.started_at >= ?)" + where  # any start is no later than the latest
        )
        rows = self._read().execute(sql, [since, until, since, until, since, *args])
        return [
            AcctJob(
                r["project"],
                r["user"],
                json.loads(r["spec"])["resources"]["accelerator"],
                r["state"],
                r["submitted_at"],
                r["finished_at"],
                tuple(sorted(map(tuple, json.loads(r["runs"])), key=lambda run: run[0])),
            )
            for r in rows
        ]

    def acct_preemptions(
        self, since: float, until: float, projects: Sequence[str] | None, user: str | None
    ) -> list[AcctPreemption]:
        where, args = self._acct_filter(projects, user)
        sql = (
            "SELECT e.t, j.project, j.user, j.spec FROM events e JOIN jobs j ON j.id = e.job"
            " WHERE e.event = 'preempt' AND e.t >= ? AND e.t < ?" + where
        )
        return [
            AcctPreemption(
                r["t"], r["project"], r["user"], json.loads(r["spec"])["resources"]["accelerator"]
            )
            for r in self._read().execute(sql, [since, until, *args])
        ]
