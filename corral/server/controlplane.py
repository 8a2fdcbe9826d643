"""The live control plane: the store, the in-memory snapshot, the executor, and the loop.

The store is the truth; the Snapshot and the `live` records mirror its pending and running jobs
so a cycle costs what changed. Every change follows one pattern: check, write one transaction,
then update memory, then act on the outside world (executor). A crash between any two steps
leaves a store that `_recover` can finish from:

- a start writes the job as running and its attempt as "launching" BEFORE executor.launch; on
  restart an attempt still "launching" that the executor does not know is launched again
  (launch is idempotent per attempt: a done launch is not repeated, a half-done one is
  finished, and only one supervisor ever runs an attempt);
- an exit is written, then acknowledged to the executor; an exit reported again for an attempt
  the store already closed is only acknowledged;
- an attempt the store has as live that the executor neither runs nor has an exit for is
  "lost": its job goes back to the queue as the next attempt, like a preemption.

All methods that touch state take `self._lock`; the API calls them from its event loop or
worker threads, the loop from its own thread. Only the loop thread launches attempts and polls
exits, and it launches after releasing the lock (`_launch_all`).
"""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from corral.core.model import Decision, Job, Preempt, Start
from corral.core.snapshot import Snapshot, decayed, within
from corral.executors.base import (
    FAILED,
    LOST,
    SUCCEEDED,
    TIMEOUT,
    AttemptExit,
    Executor,
    Launch,
    WorkerLaunch,
)
from corral.formats.types import FormatError, JobSpec, Node, Quota, SchedulerConfig
from corral.server.accounts import CORRAL, NoAccount, RunAs
from corral.server.auth import Principal, TokenBook
from corral.server.interactive import Interactive
from corral.server.inventory import Inventory, free_port
from corral.server.metrics import Metrics, PoolState, ProjectRow, preempt_reason
from corral.server.quotafile import DEFAULT_PROJECT, QuotaSource
from corral.server.store import (
    LIVE_STATES,
    AttemptRow,
    JobRow,
    PlacementRow,
    Store,
)
from corral.sim.forecast import Forecast, WhatIf

log = logging.getLogger("corral.server")

POLL_INTERVAL = 0.1  # seconds between looks for finished attempts
MAX_CYCLE_GAP = 2.0  # a full scheduling cycle at least this often, even with no event
# After a wake-up, wait this long before deciding so that a burst of submissions is decided
# in one cycle rather than one cycle each (costs this much submit-to-running latency).
COALESCE = 0.005
# Under a stream of events, woken cycles are at least this far apart: each cycle takes the
# lock and the GIL from the API, and one per 20 ms decides a burst as well as one per submit.
BURST_GAP = 0.02
CHECKPOINT_INTERVAL = 1.0  # seconds between SQLite WAL checkpoints (store.checkpoint)
# Past a stop's grace, this long for the supervisor's own SIGKILL (and its KILL_WAIT) before
# the control plane kills the attempt itself: a stopped or hung supervisor must not keep a
# cancelled job's accelerators forever.
KILL_AFTER = 6.0
BACKOFF_RESET = 600.0
SWEEP_INTERVAL = 60.0  # seconds between retention sweeps (shorter for a short retention)
SWEEP_BATCH = 500  # finished jobs forgotten per sweep, so a sweep holds the lock briefly
REJECT_EVENTS_PER_MINUTE = 60  # per user; further rejections are answered, not recorded
# A WAL past this size is checkpointed in full and truncated, under the lock (a few ms).
WAL_TRUNCATE_BYTES = 4 << 20
# Predicted starts (corral/sim/forecast.py) are made by a thread of their own after a change,
# at least this far apart, and at most this share of a core (a long queue takes a while) ...
FORECAST_GAP = 1.0
FORECAST_SHARE = 0.1
# ... and this often with nothing changed (a job past its max_runtime moves starts along).
FORECAST_EVERY = 60.0


# Automatic ids and names are j<seq>: a user's name of that form could take the id (and so
# the name) of the next unnamed job of every user, so such names are refused.
AUTO_ID = re.compile(r"j[0-9]+")


class NodeSource(Protocol):
    def poll(self) -> tuple[Node, ...] | None:
        """The pool's nodes if they changed since the last call (a node joined or left)."""
        ...


Submission = tuple[Principal, JobSpec, bool]  # who, parsed spec, whether the name is automatic


class Refused(Exception):
    """A request the control plane will not carry out; `status` is the HTTP code to answer."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)
class Verdict:
    """What an attempt's end means for its job."""

    state: str  # the job's next state: pending (requeued) or a final state
    event: str | None  # event to record, if any (cancel was recorded when it was asked)
    message: str
    restart: bool = False  # counts against max_restarts
    preempted: bool = False  # counts as a preemption
    data: dict[str, Any] = field(default_factory=dict)


def job_changes(row: JobRow, att: AttemptRow, ex: AttemptExit, v: Verdict) -> dict[str, Any]:
    """The job's columns after an attempt ended with verdict `v`."""
    ran = max(0.0, ex.finished_at - att.started_at)
    fields: dict[str, Any] = {
        "state": v.state,
        "run_time": row.run_time + ran,
        "attained": row.attained + ran * row.spec.resources.total,
    }
    if v.state != "pending":
        return fields | {"exit_code": ex.exit_code, "finished_at": ex.finished_at}
    # Back in the queue as the next attempt, with its original submit time.
    return fields | {
        "attempt": row.attempt + 1,
        "restarts": row.restarts + int(v.restart),
        "preemptions": row.preemptions + int(v.preempted),
        "wait_since": ex.finished_at,
    }


@dataclass(frozen=True, slots=True)
class Retention:
    """How long finished jobs (with their events, run dirs and logs) and events are kept
    (`corral up --retention`, `--max-finished-jobs`; docs/live.md)."""

    age: float = 30 * 86400.0
    finished_jobs: int = 100_000


def backoff_delay(config: SchedulerConfig, restarts: int, ran: float) -> float:
    """Seconds a failed job waits before gang restart number `restarts` (1, 2, ...): the
    base, doubled per restart, capped; back to the base after an attempt that ran
    BACKOFF_RESET (as Kubernetes forgets a crash loop after 10 minutes of running)."""
    if ran >= BACKOFF_RESET:
        restarts = 1
    return min(config.restart_backoff * 2.0 ** min(restarts - 1, 30), config.restart_backoff_max)


def core_job(row: JobRow) -> Job:
    """The core's view of a stored job: its spec, and the progress of its earlier attempts."""
    job = Job.from_spec(row.spec, row.id, row.user, row.priority, row.submitted_at)
    job.run_time, job.attained = row.run_time, row.attained
    job.wait_since, job.preemptions = row.wait_since, row.preemptions
    return job


def _exit_words(code: int | None) -> str:
    if code is None:
        return "a worker failed"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"a worker was killed by {name}"
    return f"a worker exited {code}"


def verdict(row: JobRow, attempt: AttemptRow, ex: AttemptExit) -> Verdict:
    """The job's fate after one attempt ended. Pure, so the rules read in one place."""
    if row.cancel_requested:
        return Verdict("cancelled", None, row.message or "cancelled")
    if attempt.stop_reason == "preempt":
        # Requeued whatever the exit code: a job that checkpoints on SIGTERM and exits 0 has
        # not finished its work (Slurm requeue and JobSet restart do the same).
        return Verdict("pending", None, "preempted; back in the queue", preempted=True)
    if ex.outcome == SUCCEEDED:
        return Verdict("succeeded", "finish", "exited 0", data={"exit_code": 0})
    if ex.outcome == LOST:
        lost = ex.message or "its supervisor vanished without an exit status"
        why = f"lost: {lost}; requeued"
        return Verdict("pending", "preempt", why, preempted=True, data={"reason": why})
    if ex.outcome == TIMEOUT:
        limit = row.spec.max_runtime
        why = f"killed after its max_runtime of {limit:g}s"
        return Verdict("failed", "fail", why, data={"exit_code": ex.exit_code, "reason": why})
    code = ex.exit_code
    what = _exit_words(code) if ex.outcome == FAILED else f"the gang stopped ({ex.outcome})"
    if ex.message:
        what = ex.message
    if row.restarts < row.spec.max_restarts:
        n = row.restarts + 1
        why = f"{what}; gang restart {n} of {row.spec.max_restarts}"
        data = {"exit_code": code, "restart": n, "reason": why}
        return Verdict("pending", "fail", why, restart=True, data=data)
    why = what
    if row.spec.max_restarts:
        why += f" after {row.restarts} restarts"
    return Verdict("failed", "fail", why, data={"exit_code": code, "reason": why})


class ControlPlane:
    def __init__(
        self,
        store: Store,
        executor: Executor,
        inventory: Inventory,
        quota: QuotaSource,
        load_policy: Callable[..., Any],
        decide: Callable[..., Decision],
        check_admissible: Callable[[Snapshot, Job], str | None],
        run_as: RunAs | None = None,
        interactive: Interactive | None = None,
        node_source: NodeSource | None = None,
    ):
        self.store = store
        self.run_as = run_as or RunAs(CORRAL)
        self.interactive = interactive
        self.node_source = node_source
        self._lock = threading.RLock()
        self.tokens = TokenBook(store, self._lock)
        self.executor = executor
        self.inventory = inventory
        self.quota_source = quota
        self.quota: Quota = quota.quota
        self._load_policy = load_policy
        self._decide = decide
        self._check_admissible = check_admissible
        self.policy = load_policy(self.quota.scheduler)
        self.metrics = Metrics(self._pool_state, lambda: self.quota.projects)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._forecaster: threading.Thread | None = None
        self._forecast_due = threading.Event()
        self.forecast: Forecast | None = None  # the latest (replaced whole, read without lock)
        self.last_decide = 0.0  # wall time of the last decision; later arrivals await one
        self._wake_at: float | None = None
        # Mirrors of the store's live jobs; all changed only under the lock.
        self.live: dict[str, JobRow] = {}
        self.names: dict[str, str] = {}  # live job name -> id
        self.attempts: dict[str, AttemptRow] = {}  # job id -> its live attempt
        self.placed: dict[str, list[PlacementRow]] = {}  # job id -> where its workers run
        self.seq = store.max_seq()
        self._rejects: dict[str, tuple[float, int]] = {}  # user -> (window start, count)
        self._unlaunched: list[Launch] = []  # started in the store, to launch once unlocked
        self.retention = Retention()
        # Pending jobs waiting out a restart back-off (job -> wall time), not yet in the
        # snapshot's queue.
        self.backoff: dict[str, float] = {}
        self._kill_at: dict[str, tuple[int, float]] = {}  # job -> (attempt, monotonic) to kill
        # Preempted jobs still stopping -> the job each was preempted for (that job keeps first
        # pick of what they free: _end_first_picks).
        self.stopping_for: dict[str, str] = {}
        self.decision = Decision()
        self.snap = self.policy.snapshot(inventory.nodes, self.quota)
        self._recover()

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="corral-loop", daemon=True)
        self._thread.start()
        self._forecast_due.set()  # the jobs recovered get their predictions at once
        self._forecaster = threading.Thread(
            target=self._forecast_loop, name="corral-forecast", daemon=True
        )
        self._forecaster.start()

    def stop(self) -> None:
        """Stop the loop. Running jobs keep running: their supervisors outlive us."""
        self._stopping.set()
        self._wake.set()
        self._forecast_due.set()
        for thread in (self._thread, self._forecaster):
            if thread is not None:
                thread.join(timeout=10)

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        last_poll = last_checkpoint = last_woken = next_sweep = 0.0
        while not self._stopping.is_set():
            woken = self._wake.wait(POLL_INTERVAL)
            if woken:
                time.sleep(max(COALESCE, last_woken + BURST_GAP - time.monotonic()))
                last_woken = time.monotonic()
            self._wake.clear()
            if self._stopping.is_set():
                break
            # Exits and the quota file are looked at every POLL_INTERVAL, not on every
            # submission: a burst of submits then costs decisions only.
            poll = time.monotonic() - last_poll >= POLL_INTERVAL
            if poll:
                last_poll = time.monotonic()
            try:
                self.cycle(force=woken, poll=poll)
                if time.monotonic() - last_checkpoint >= CHECKPOINT_INTERVAL:
                    last_checkpoint = time.monotonic()
                    self.store.checkpoint()  # outside the lock: the API keeps committing
                    if self.store.wal_bytes() > WAL_TRUNCATE_BYTES:
                        with self._lock:  # no commit may start while the WAL is cut
                            self.store.truncate_wal()
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + min(SWEEP_INTERVAL, self.retention.age / 4)
                    self.sweep()
            except Exception:  # one bad cycle must not stop scheduling; it is retried
                log.exception("scheduling cycle failed")
                time.sleep(POLL_INTERVAL)

    def cycle(self, force: bool = True, poll: bool = True) -> None:
        """Apply finished attempts; then, if anything may have changed, decide and act."""
        t0 = time.perf_counter()
        try:
            with self._lock:
                changed = poll and self._reload_quota()
                changed |= poll and self._reload_nodes()
                changed |= poll and self._drain_exits() > 0
                changed |= bool(self.backoff) and self._end_backoffs(time.time())
                if poll and self._kill_at:
                    self._escalate()
                now = time.time()
                due = now - self.last_decide >= MAX_CYCLE_GAP or (
                    self._wake_at is not None and now >= self._wake_at
                )
                if not (force or changed or due):
                    return
                self._schedule(now)
                if force or changed or self.decision.starts or self.decision.preemptions:
                    self._forecast_due.set()
            self.metrics.cycle_seconds.observe(time.perf_counter() - t0)
        finally:
            # Even if the cycle failed halfway, what it recorded as started gets launched.
            with self._lock:
                launches, self._unlaunched = self._unlaunched, []
            self._launch_all(launches)

    def _schedule(self, now: float) -> None:
        self.snap.set_time(now)
        decision = self._decide(self.snap, self.policy)
        for p in decision.preemptions:
            self._preempt(p, now)
        for s in decision.starts:
            self._unlaunched.append(self._start(s, now))
        self._end_first_picks()
        self.decision = decision
        self._wake_at = decision.wake_at
        self.last_decide = now

    # -- predicted starts ------------------------------------------------------------------------

    def _forecast_loop(self) -> None:
        took = 0.0
        while not self._stopping.is_set():
            self._forecast_due.wait(FORECAST_EVERY)
            # A burst of changes makes one forecast, and a slow one leaves the core be.
            if self._stopping.wait(max(FORECAST_GAP, took / FORECAST_SHARE)):
                break
            self._forecast_due.clear()
            try:
                self.forecast = self.make_forecast()
                took = self.forecast.seconds
            except Exception:  # a failed forecast leaves the last one; the next may work
                log.exception("forecast failed")

    def make_forecast(self) -> Forecast:
        """Predicted starts of the pending jobs, from the state now: the replay runs after
        the lock is released (WhatIf only keeps references under it)."""
        with self._lock:
            what_if = WhatIf(self.snap, self.policy, now=time.time())
        return what_if.run()

    def predicted_start(self, job_id: str) -> tuple[float | None, float | None]:
        """(predicted start, when that forecast was made) of a pending job; None where there
        is none (not known, or no forecast yet)."""
        made = self.forecast
        if made is None:
            return None, None
        return made.starts.get(job_id), made.at

    # -- quota -----------------------------------------------------------------------------------

    def _reload_quota(self) -> bool:
        quota = self.quota_source.poll()
        if quota is None:
            return False
        old, guarantees = self.quota.scheduler, self._preemptor_guarantees()
        self.quota = quota
        if quota.scheduler != old:
            try:
                self.policy = self._load_policy(quota.scheduler)
            except (FormatError, ImportError, ValueError) as err:
                log.error("scheduler settings refused, keeping policy: %s", err)
            # The policy's queue key orders the pending index: rebuild rather than patch.
            self.snap = self._build_snapshot()
        else:
            self.snap.set_quota(quota)
        self._first_picks_after_reload(guarantees)
        return True

    def _preemptor_guarantees(self) -> dict[str, float]:
        """Each preemptor's project's guarantee of its type (before a reload changes it)."""
        jobs = self.snap.pending.jobs
        found = (jobs[i] for i in self.snap.preemptors if i in jobs)
        return {j.id: self.snap.guarantee_of(j.project, j.accelerator) for j in found}

    def _first_picks_after_reload(self, guarantees: dict[str, float]) -> None:
        """A preemptor keeps its first pick across a reload, unless the new quota shrank its
        project's guarantee so that the job no longer fits within it: the reclaim it made is
        no longer owed, and what its victims free goes by the new quota's order."""
        snap, lost = self.snap, []
        for job_id, before in guarantees.items():
            job = snap.pending.jobs.get(job_id)
            if job is None:
                continue
            project, kind = job.project, job.accelerator
            now = snap.guarantee_of(project, kind)
            if now < before and not within(snap.held(project, kind), job.demand, now):
                lost.append(job_id)
        self._drop_first_picks(lost)

    # -- nodes -----------------------------------------------------------------------------------

    def _reload_nodes(self) -> bool:
        """A pool that changes (Ray): rebuild the snapshot on the new nodes. A running job on a
        node that left is withdrawn from it until its attempt ends (the executor reports it
        lost), and requeued then."""
        nodes = None if self.node_source is None else self.node_source.poll()
        if nodes is None or nodes == self.inventory.nodes:
            return False
        gone = {n.name for n in self.inventory.nodes} - {n.name for n in nodes}
        joined = {n.name for n in nodes} - {n.name for n in self.inventory.nodes}
        log.info("nodes: %d (joined: %s; left: %s)", len(nodes), sorted(joined), sorted(gone))
        self.inventory.set_nodes(nodes)
        self.quota_source.set_pool(self.inventory.types)
        self.quota = self.quota_source.quota
        self.snap = self._build_snapshot()
        return True

    # -- recovery --------------------------------------------------------------------------------

    def _recover(self) -> None:
        """Rebuild memory from the store, then square it with what the executor reports."""
        for row in self.store.jobs(states=LIVE_STATES):
            self.live[row.id] = row
            self.names[row.name] = row.id
        for att in self.store.live_attempts():
            self.attempts[att.job_id] = att
            if att.state == "terminating" and att.preemptor:
                self.stopping_for[att.job_id] = att.preemptor
            self.placed[att.job_id] = self.store.placements(att.job_id, att.attempt)
            self.inventory.claim(self.placed[att.job_id])
        self._requeue_orphans()
        self._restore_backoffs()
        self.snap = self._build_snapshot()
        # active() before poll(): an attempt that ends in between shows up in poll(), so no
        # live attempt can be missed by both and wrongly called lost.
        active = set(self.executor.active())
        exits = {(e.job_id, e.attempt): e for e in self.executor.poll()}
        relaunch: list[Launch] = []
        for job_id, att in list(self.attempts.items()):
            key = (job_id, att.attempt)
            if key in exits:
                continue
            if att.state == "launching":
                # Launched again whatever the executor says: launch is idempotent, and finishes
                # one cut short (a run dir whose supervisor never started would otherwise pass
                # for one still starting, then be lost and rerun as the next attempt).
                log.warning("job %s attempt %d: launching again (launch was interrupted)", *key)
                relaunch.append(self._launch_spec(self.live[job_id], att, self.placed[job_id]))
            elif key in active:
                self._adopt(job_id, att)
            else:
                log.warning("job %s attempt %d: lost while the control plane was down", *key)
                self._apply_exit(AttemptExit(job_id, att.attempt, LOST, None, [], time.time()))
        for ex in exits.values():
            self._apply_exit(ex)
            self.executor.ack(ex.job_id, ex.attempt)
        self._launch_all(relaunch)

    def _restore_backoffs(self) -> None:
        """Pending jobs whose last attempt failed wait out the rest of their back-off."""
        now = time.time()
        for row in self.live.values():
            if row.state != "pending" or not row.restarts or not row.attempt:
                continue
            prev = self.store.attempt(row.id, row.attempt - 1)
            if prev is None or prev.state != FAILED or prev.finished_at is None:
                continue
            ran = prev.finished_at - prev.started_at
            until = prev.finished_at + backoff_delay(self.quota.scheduler, row.restarts, ran)
            if until > now:
                self.backoff[row.id] = until

    def _requeue_orphans(self) -> None:
        """A running job with no live attempt cannot come from our transactions (the two are
        written together); if a hand-edited or damaged store has one, queue it again rather
        than show a job running that nothing runs."""
        for row in self.live.values():
            if row.state == "running" and row.id not in self.attempts:
                log.error("job %s is running with no live attempt; requeued", row.id)
                with self.store.tx() as tx:
                    tx.update_job(row.id, state="pending", attempt=row.attempt + 1)
                row.state, row.attempt = "pending", row.attempt + 1

    def _adopt(self, job_id: str, att: AttemptRow) -> None:
        if att.state == "launching":
            self._set_attempt_state(job_id, "running")
        elif att.state == "terminating":
            # The stop may not have reached the supervisor before the crash; terminate is
            # idempotent, so ask again.
            self._terminate(job_id, att.attempt)

    def _build_snapshot(self) -> Snapshot:
        snap = self.policy.snapshot(self.inventory.nodes, self.quota)
        snap.set_time(time.time())
        for row in sorted(self.live.values(), key=lambda r: r.seq):
            if row.id in self.backoff:
                continue
            snap.submit(core_job(row))
            if row.state != "running":
                if row.first_pick:
                    snap.preemptors.add(row.id)
                continue
            att = self.attempts[row.id]
            nodes = [p.node for p in self.placed[row.id]]
            try:
                snap.start(row.id, nodes, att.started_at)
            except (KeyError, ValueError) as err:
                # The inventory shrank under a running job (e.g. fewer --fake-gpus): keep the
                # job running and tracked in the store; the scheduler just cannot see it.
                log.error("job %s runs on %s, which the inventory lacks: %s", row.id, nodes, err)
                snap.withdraw(row.id)
                continue
            if att.state == "terminating":
                snap.mark_terminating(row.id)
        snap.recent = self._recent_usage(snap.now, snap.half_life)
        return snap

    def _recent_usage(self, now: float, half_life: float) -> dict[str, tuple[float, float]]:
        """Each project's decayed usage at `now`, from the attempts in the store (DESIGN.md
        §3.3): a restart or a new policy keeps it. (Attempts ended 40 half-lives ago weigh
        less than 1e-12 of what they did.)"""
        used: dict[str, float] = {}
        if half_life > 0:
            for run in self.store.acct_attempts(now - 40 * half_life, now, None, None):
                end = now if run.finished_at is None else min(run.finished_at, now)
                ran = decayed(0.0, run.accelerators, end - run.started_at, half_life)
                used[run.project] = used.get(run.project, 0.0) + decayed(
                    ran, 0, now - end, half_life
                )
        return {project: (amount, now) for project, amount in used.items()}

    # -- submit and cancel -----------------------------------------------------------------------

    def submit(self, who: Principal, spec: JobSpec, auto_name: bool) -> JobRow:
        """Queue a parsed spec for `who`. Raises Refused with the status and a one-line reason."""
        result = self.submit_many([(who, spec, auto_name)])[0]
        if isinstance(result, Refused):
            raise result
        return result

    def submit_many(self, items: Sequence[Submission]) -> list[JobRow | Refused]:
        """Queue several specs in ONE transaction (group commit); one result per item, in
        order: the stored row, or Refused saying why that item was not.

        Each item is checked as if it were submitted alone after the ones before it (ids,
        name clashes), and all accepted jobs and recorded rejections are committed together
        before any is answered: either all of them are in the store or none is. If that
        commit fails, each item is retried on its own, so one bad item cannot sink the rest.
        """
        with self._lock:
            results: list[JobRow | Refused] = []
            accepted: list[tuple[JobRow, Job]] = []
            rejected: list[tuple[JobRow, str]] = []
            batch_names: dict[str, JobRow] = {}
            seq = self.seq
            for who, spec, auto_name in items:
                try:
                    row = self._new_row(who, spec, auto_name, seq + 1, batch_names)
                except Refused as err:
                    results.append(err)
                    continue
                job = core_job(row)
                self.snap.set_time(row.submitted_at)
                why = self._check_admissible(self.snap, job)
                if why:
                    rejected.append((row, why))
                    results.append(Refused(422, why))
                    continue
                seq = row.seq
                batch_names[row.name] = row
                accepted.append((row, job))
                results.append(row)
            if not accepted and not rejected:
                return results
            try:
                with self.store.tx() as tx:
                    for row, _ in accepted:
                        tx.insert_job(row)
                        tx.event(
                            row.submitted_at,
                            "submit",
                            row.id,
                            row.project,
                            name=row.name,
                            user=row.user,
                        )
                    for row, why in rejected:
                        if not self._reject_recorded(row.user, row.submitted_at):
                            continue
                        tx.event(
                            row.submitted_at,
                            "reject",
                            None,
                            row.project,
                            name=row.name,
                            user=row.user,
                            reason=why,
                        )
            except Exception:
                if len(items) == 1:
                    raise
                log.exception("a batch of %d submissions failed; retrying one by one", len(items))
                return [self._submit_alone(item) for item in items]
            self.seq = seq
            for row, job in accepted:
                self.snap.submit(job)
                self.live[row.id] = row
                self.names[row.name] = row.id
        if accepted:
            self.metrics.events.labels("submit").inc(len(accepted))
            self._wake.set()
        if rejected:
            self.metrics.events.labels("reject").inc(len(rejected))
        return results

    def _reject_recorded(self, user: str, now: float) -> bool:
        """Whether this rejection gets an event row: at most REJECT_EVENTS_PER_MINUTE per user
        and minute, so a client retrying a job that can never run cannot fill the store (every
        rejection is still answered with its reason and counted in the metrics)."""
        start, count = self._rejects.get(user, (now, 0))
        if now - start >= 60.0:
            start, count = now, 0
        self._rejects[user] = (start, count + 1)
        return count < REJECT_EVENTS_PER_MINUTE

    def _submit_alone(self, item: Submission) -> JobRow | Refused:
        try:
            return self.submit_many([item])[0]
        except Exception as err:  # not Refused: a store failure for this item alone
            log.exception("submission failed")
            return Refused(500, f"the store could not record the job: {err}")

    def _new_row(
        self,
        who: Principal,
        spec: JobSpec,
        auto_name: bool,
        seq: int,
        batch_names: dict[str, JobRow],
    ) -> JobRow:
        """The job as it would be stored with id j<seq>; Refused if `who` may not submit it.
        `batch_names`: live names taken by jobs of the same batch, not yet in memory."""
        quota = self.quota
        if not quota.is_member(who.user, spec.project):
            mine = ", ".join(quota.projects_of(who.user)) or "none"
            raise Refused(
                403,
                f"user {who.user} is not a member of project {spec.project!r} (member of: {mine})",
            )
        try:
            self.run_as.check(who.user, quota)
        except NoAccount as err:
            raise Refused(403, str(err)) from None
        try:
            priority = quota.resolve_priority(spec.priority)
        except FormatError as err:
            raise Refused(422, str(err)) from None
        if not -(2**63) <= priority < 2**63:  # an SQLite integer
            raise Refused(422, f"priority: {priority} is out of range (a 64-bit integer)")
        # seq is taken only if the job is stored: ids stay dense
        if auto_name:
            spec = replace(spec, name=f"j{seq}")
        elif AUTO_ID.fullmatch(spec.name):
            raise Refused(
                422,
                f"name: {spec.name!r} has the form of a job id (j and digits), which is kept for"
                " automatic ids; choose another name or leave it out",
            )
        other = batch_names.get(spec.name)
        if other is None and spec.name in self.names:
            other = self.live[self.names[spec.name]]
        if other is not None:
            raise Refused(409, self._name_taken(who, spec.name, other))
        now = time.time()
        return JobRow(
            id=f"j{seq}",
            seq=seq,
            name=spec.name,
            project=spec.project,
            user=who.user,
            priority=priority,
            spec=spec,
            state="pending",
            submitted_at=now,
            wait_since=now,
        )

    def _name_taken(self, who: Principal, name: str, other: JobRow) -> str:
        """The 409 message: which job holds the name, only to someone who may see that job."""
        if other.user == who.user or self.is_admin(who):
            return f"name {name!r} is taken by live job {other.id} ({other.state})"
        return f"name {name!r} is taken by another user's live job; choose another name"

    def cancel(
        self, who: Principal, job_id: str, reason: str | None = None, message: str | None = None
    ) -> JobRow:
        """Cancel for `who`; `reason` (a code, e.g. idle) and `message` say why when it is not
        the user's own doing."""
        with self._lock:
            row = self.live.get(job_id)
            if row is None:
                stored = self.store.job(job_id)
                if stored is None:
                    raise Refused(404, f"no job {job_id}")
                self.check_owner(who, stored)
                raise Refused(409, f"job {job_id} already {stored.state}")
            self.check_owner(who, row)
            why = {"reason": reason} if reason else {}
            if row.state == "pending":
                self._cancel_pending(who, row, message, why)
            elif not row.cancel_requested:
                self._cancel_running(who, row, message, why)
        self._wake.set()
        return row

    def _cancel_pending(
        self, who: Principal, row: JobRow, message: str | None, why: dict[str, str]
    ) -> None:
        now = time.time()
        message = message or f"cancelled by {who.user} while pending"
        with self.store.tx() as tx:
            tx.update_job(
                row.id, state="cancelled", finished_at=now, message=message, first_pick=False
            )
            tx.event(now, "cancel", row.id, row.project, by=who.user, **why)
        if self.backoff.pop(row.id, None) is None:
            self.snap.withdraw(row.id)
        row.state, row.finished_at, row.message = "cancelled", now, message
        row.first_pick = False
        self._forget(row)
        self.metrics.events.labels("cancel").inc()

    def _cancel_running(
        self, who: Principal, row: JobRow, message: str | None, why: dict[str, str]
    ) -> None:
        now = time.time()
        att = self.attempts[row.id]
        message = message or f"cancelled by {who.user}"
        with self.store.tx() as tx:
            tx.update_job(row.id, cancel_requested=True, message=message)
            if att.state != "terminating":
                tx.update_attempt(row.id, att.attempt, state="terminating", stop_reason="cancel")
            tx.event(now, "cancel", row.id, row.project, by=who.user, **why)
        row.cancel_requested, row.message = True, message
        if att.state != "terminating":
            att.state, att.stop_reason = "terminating", "cancel"
            if row.id in self.snap.running:
                self.snap.mark_terminating(row.id)
        self._terminate(row.id, att.attempt)
        self.metrics.events.labels("cancel").inc()

    # -- access ----------------------------------------------------------------------------------

    def is_admin(self, who: Principal) -> bool:
        return who.admin or who.user in self.quota.admins

    def check_owner(self, who: Principal, row: JobRow) -> None:
        if row.user != who.user and not self.is_admin(who):
            raise Refused(403, f"job {row.id} belongs to another user")

    def default_project(self, who: Principal) -> str:
        """The project a spec without one goes to: the user's only project, or "default"."""
        mine = self.quota.projects_of(who.user)
        if len(mine) == 1:
            return mine[0]
        if DEFAULT_PROJECT in mine:
            return DEFAULT_PROJECT
        listed = ", ".join(mine) or "none"
        raise Refused(422, f"project: required; you are a member of: {listed}")

    # -- starting and stopping attempts ----------------------------------------------------------

    def _start(self, start: Start, now: float) -> Launch:
        """Record the start (job running, attempt "launching") and return what to launch:
        the launch itself happens after the lock is released (_launch_all)."""
        row = self.live[start.job_id]
        res = row.spec.resources
        gpus = self.inventory.assign(start.nodes, res.per_worker)
        placed = [
            PlacementRow(i, i // res.workers, node, devices)
            for i, (node, devices) in enumerate(zip(start.nodes, gpus, strict=True))
        ]
        port = free_port()
        ports = None
        if self.interactive is not None and row.spec.kind == "interactive":
            ports = self.interactive.choose_ports(row, start.nodes[0], self.attempts)
        self.snap.start(row.id, start.nodes, now)  # validates the placement before we write
        with self.store.tx() as tx:
            if ports is not None:
                self.interactive.record_ports(tx, row, start.nodes[0], ports)  # type: ignore[union-attr]
            tx.update_job(row.id, state="running", started_at=now, message="", first_pick=False)
            tx.insert_attempt(row.id, row.attempt, now, port)
            tx.insert_placements(row.id, row.attempt, placed)
            tx.event(
                now, "start", row.id, row.project, nodes=list(start.nodes), attempt=row.attempt
            )
        self.inventory.claim(placed)
        row.state, row.started_at, row.message, row.first_pick = "running", now, "", False
        self.attempts[row.id] = AttemptRow(row.id, row.attempt, "launching", None, port, now)
        self.placed[row.id] = placed
        self.metrics.events.labels("start").inc()
        if row.attempt == 0:
            self.metrics.submit_to_running.observe(now - row.submitted_at)
        return self._launch_spec(row, self.attempts[row.id], placed)

    def _launch_all(self, launches: list[Launch]) -> None:
        """Launch outside the lock: spawning processes takes milliseconds each, and the API
        must not wait for them. Only this (loop) thread launches or polls exits, so nothing
        but a cancel can touch these attempts meanwhile, and `_launched` squares that."""
        for launch in launches:
            failure = None
            try:
                self.executor.launch(launch)
            except Exception as err:  # the executor could not even start it: a failed attempt
                log.exception("job %s attempt %d: launch failed", launch.job_id, launch.attempt)
                failure = f"launch failed: {err}"
            with self._lock:
                self._launched(launch.job_id, launch.attempt, failure)

    def _launched(self, job_id: str, attempt: int, failure: str | None) -> None:
        att = self.attempts.get(job_id)
        if att is None or att.attempt != attempt:
            return
        if failure is not None:
            ex = AttemptExit(job_id, attempt, FAILED, None, [], time.time())
            self._apply_exit(ex, note=failure)
        elif att.state == "launching":
            self._set_attempt_state(job_id, "running")
        elif att.state == "terminating":
            # Cancelled while launching: that terminate may have found no run dir yet.
            self._terminate(job_id, attempt)

    def _launch_spec(self, row: JobRow, att: AttemptRow, placed: list[PlacementRow]) -> Launch:
        spec = row.spec
        launch = Launch(
            job_id=row.id,
            name=row.name,
            project=row.project,
            user=row.user,
            attempt=att.attempt,
            command=spec.command,
            env=dict(spec.env),
            workers=[WorkerLaunch(p.worker, p.slice_id, p.node, p.gpus) for p in placed],
            workers_per_slice=spec.resources.workers,
            num_slices=spec.resources.slices,
            master_port=att.master_port or 0,
            max_runtime=spec.max_runtime,
            grace=self.quota.scheduler.preempt_grace,
            account=self.run_as.account(row.user, self.quota),
            workdir=spec.workdir,
            crypt_proxy=spec.crypt_proxy,
        )
        if self.interactive is not None and spec.kind == "interactive":
            launch = self.interactive.prepare(launch, self.store.ssh_keys(row.user))
        return launch

    def _set_attempt_state(self, job_id: str, state: str) -> None:
        att = self.attempts[job_id]
        with self.store.tx() as tx:
            tx.update_attempt(job_id, att.attempt, state=state)
        att.state = state

    def _preempt(self, p: Preempt, now: float) -> None:
        row, att = self.live[p.job_id], self.attempts[p.job_id]
        if att.state == "terminating":
            return
        preemptor = self.live.get(p.preemptor)
        by = f"{p.preemptor} ({preemptor.name})" if preemptor else p.preemptor
        with self.store.tx() as tx:
            tx.update_attempt(
                row.id,
                att.attempt,
                state="terminating",
                stop_reason="preempt",
                preemptor=p.preemptor,
            )
            tx.update_job(row.id, message=f"preempted for {by}: {p.reason}")
            tx.event(now, "preempt", row.id, row.project, reason=p.reason, preemptor=p.preemptor)
            if preemptor is not None and not preemptor.first_pick:
                tx.update_job(preemptor.id, first_pick=True)
        att.state, att.stop_reason, att.preemptor = "terminating", "preempt", p.preemptor
        row.message = f"preempted for {by}: {p.reason}"
        self.snap.mark_terminating(row.id, p.preemptor)
        if preemptor is not None:
            preemptor.first_pick = True
            self.stopping_for[row.id] = p.preemptor
        self._terminate(row.id, att.attempt)
        self.metrics.events.labels("preempt").inc()
        self.metrics.preempted(row.project, preempt_reason(p.reason, self.quota.scheduler.policy))

    def _end_first_picks(self) -> None:
        """A preemptor has first pick of what its victims free (DESIGN.md §3.9) while any of
        them is still stopping, and in the cycle that sees the last one gone (this one, or the
        first after a restart). From then on it waits in the policy's order like any job: a
        pick kept longer would let it jump the queue for whatever else frees up later."""
        stopping = set(self.stopping_for.values())
        self._drop_first_picks(sorted(self.snap.preemptors - stopping))

    def _drop_first_picks(self, job_ids: Sequence[str]) -> None:
        if not job_ids:
            return
        with self.store.tx() as tx:
            for job_id in job_ids:
                tx.update_job(job_id, first_pick=False)
        for job_id in job_ids:
            self.snap.preemptors.discard(job_id)
            row = self.live.get(job_id)
            if row is not None:
                row.first_pick = False

    # -- exits -----------------------------------------------------------------------------------

    def _drain_exits(self) -> int:
        exits = self.executor.poll()
        for ex in exits:
            self._apply_exit(ex)
            # Only once the store has it: a crash before this line reports it again, and the
            # attempt, already closed in the store, is then just acknowledged.
            self.executor.ack(ex.job_id, ex.attempt)
        return len(exits)

    def _apply_exit(self, ex: AttemptExit, note: str = "") -> None:
        att = self.attempts.get(ex.job_id)
        if att is None or att.attempt != ex.attempt:
            return  # already recorded before a restart
        row = self.live[ex.job_id]
        v = verdict(row, att, ex)
        message = note or v.message
        job_fields = job_changes(row, att, ex, v) | {"message": message}
        with self.store.tx() as tx:
            tx.update_attempt(
                row.id,
                att.attempt,
                state=ex.outcome,
                finished_at=ex.finished_at,
                exit_code=ex.exit_code,
                worker_codes=ex.worker_codes,
                message=message,
            )
            tx.update_job(row.id, **job_fields)
            if v.event:
                tx.event(
                    ex.finished_at, v.event, row.id, row.project, attempt=att.attempt, **v.data
                )
        for key, value in job_fields.items():
            setattr(row, key, value)
        self._release(row.id)
        if v.event:
            self.metrics.events.labels(v.event).inc()
        if v.event == "preempt":  # not one we asked for: the attempt was lost
            self.metrics.preempted(row.project, "lost")
        if v.state == "pending":
            ran = ex.finished_at - att.started_at
            delay = backoff_delay(self.quota.scheduler, row.restarts, ran) if v.restart else 0
            self._requeue(row, delay)
        else:
            self._forget(row)

    def _terminate(self, job_id: str, attempt: int) -> None:
        """Ask the attempt to stop; if it is still there KILL_AFTER past the grace (its
        supervisor stopped or hung), the executor kills it outright (_escalate)."""
        grace = self.quota.scheduler.preempt_grace
        self._kill_at.setdefault(job_id, (attempt, time.monotonic() + grace + KILL_AFTER))
        self.executor.terminate(job_id, attempt, grace=grace)

    def _escalate(self) -> None:
        now = time.monotonic()
        for job_id, (attempt, due) in list(self._kill_at.items()):
            if now < due:
                continue
            log.warning("job %s attempt %d: not stopped after its grace; killing", job_id, attempt)
            self.executor.kill(job_id, attempt)
            self._kill_at[job_id] = (attempt, now + KILL_AFTER)  # again, should it survive

    def sweep(self) -> int:
        """Forget finished jobs past retention (their rows, events, run dirs and logs), and
        events past it; a bounded batch per call. Returns the number of jobs forgotten."""
        now = time.time()
        keep = self.retention
        gone = self.store.expired_jobs(now - keep.age, keep.finished_jobs, SWEEP_BATCH)
        for job_id in gone:  # files first: a crash in between leaves rows, swept next time
            self.executor.remove(job_id)
        with self._lock, self.store.tx() as tx:
            tx.delete_jobs(gone)
            tx.delete_events_before(now - keep.age, SWEEP_BATCH * 10)
        return len(gone)

    def _requeue(self, row: JobRow, delay: float) -> None:
        """Back to the queue, or, after a failure, held there for its back-off first."""
        if delay <= 0:
            self.snap.submit(core_job(row))
            return
        self.backoff[row.id] = time.time() + delay

    def _end_backoffs(self, now: float) -> bool:
        ended = [job_id for job_id, until in self.backoff.items() if until <= now]
        for job_id in ended:
            del self.backoff[job_id]
            self.snap.submit(core_job(self.live[job_id]))
        return bool(ended)

    def _release(self, job_id: str) -> None:
        if job_id in self.snap.running:
            self.snap.set_time(time.time())  # the end of its use (recent usage)
            self.snap.stop(job_id)
        self._kill_at.pop(job_id, None)
        self.stopping_for.pop(job_id, None)
        self.attempts.pop(job_id, None)
        self.inventory.release(self.placed.pop(job_id, []))

    def _forget(self, row: JobRow) -> None:
        """The job reached a final state."""
        self.metrics.finished(row.project, row.state)
        self.live.pop(row.id, None)
        if self.names.get(row.name) == row.id:
            del self.names[row.name]

    # -- reads used by views and metrics ----------------------------------------------------------

    def _pool_state(self) -> PoolState:
        by_state = self.store.counts_by_state()
        now = time.time()
        with self._lock:
            snap, quota = self.snap, self.quota
            pending: Counter[tuple[str, str]] = Counter()
            waiting: Counter[tuple[str, str]] = Counter()
            for job in snap.pending.jobs.values():
                pending[job.project, job.accelerator] += job.demand
                waiting[job.project, job.accelerator] += 1
            oldest: dict[str, float] = {}
            for row in self.live.values():
                if row.state == "pending":
                    waited = now - row.wait_since
                    oldest[row.project] = max(oldest.get(row.project, 0.0), waited)
            projects = sorted(set(quota.projects) | set(snap.usage) | {p for p, _ in pending})
            types = sorted(set(snap.capacity) | {a for _, a in pending})
            rows = []
            for p in projects:
                limits = quota.limits.get(p, {})
                for a in types:
                    guarantee = round(snap.guarantee_of(p, a), 3)
                    held = snap.held(p, a)
                    rows.append(
                        ProjectRow(
                            p,
                            a,
                            guarantee,
                            limits.get(a, snap.capacity.get(a, 0)),
                            held,
                            max(0.0, round(held - guarantee, 3)),
                            pending[p, a],
                            waiting[p, a],
                        )
                    )
            return PoolState(by_state, dict(snap.capacity), rows, oldest, projects)

    def locked(self) -> threading.RLock:
        return self._lock
