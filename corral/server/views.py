"""What the API shows: jobs, the queue, quota use and nodes, as plain JSON-able dicts.

Reads come from the store (the truth) plus, for pending jobs, the last decision's reason.
Visibility rules live here: a user sees their own jobs and their projects' queue and quota;
admins see everything.
"""

from __future__ import annotations

import os
import time
from collections import Counter, defaultdict
from typing import Any

from corral.server.auth import Principal
from corral.server.controlplane import ControlPlane, Refused
from corral.server.store import LIVE_STATES, JobRow

MAX_LOG_CHUNK = 1 << 20  # bytes per logs request; `logs -f` asks again from the new offset


def _spec_dict(row: JobRow) -> dict[str, Any]:
    spec = row.spec
    res = spec.resources
    return {
        "command": spec.command if isinstance(spec.command, str) else list(spec.command),
        "env": dict(spec.env),
        "resources": {
            "accelerator": res.accelerator,
            "per_worker": res.per_worker,
            "workers": res.workers,
            "slices": res.slices,
            "exclusive": res.exclusive,
        },
        "max_restarts": spec.max_restarts,
        "preemptible": spec.preemptible,
        "max_runtime": spec.max_runtime,
        "kind": spec.kind,
        "workdir": spec.workdir,
        "crypt_proxy": spec.crypt_proxy,
    }


class Views:
    def __init__(self, cp: ControlPlane):
        self.cp = cp

    # -- jobs --------------------------------------------------------------------------------------

    def _reason(self, row: JobRow) -> tuple[str | None, str]:
        """(code, sentence) saying why the job is where it is."""
        cp = self.cp
        if row.state == "pending":
            until = cp.backoff.get(row.id)
            if until is not None:
                wait = max(0.0, until - time.time())
                return "backoff", f"failed; restart {row.restarts} in {wait:.0f}s (back-off)"
            job = cp.snap.pending.jobs.get(row.id)
            if job is None or job.wait_since >= cp.last_decide:
                return "order", "waiting for the next scheduling cycle"
            why = cp.decision.reason(job)
            return why.code, why.message
        if row.state == "running":
            att = cp.attempts.get(row.id)
            if att is not None and att.state == "terminating":
                code = "cancelling" if row.cancel_requested else "preempting"
                return code, row.message or "stopping"
            return None, ""
        return None, row.message

    def job_summary(self, row: JobRow) -> dict[str, Any]:
        live = self.cp.live.get(row.id)
        if live is not None:
            row = live  # memory may be ahead of a read that raced a commit
        code, reason = self._reason(row)
        predicted, made = (None, None)
        if row.state == "pending":
            predicted, made = self.cp.predicted_start(row.id)
        return {
            "id": row.id,
            "name": row.name,
            "project": row.project,
            "user": row.user,
            "priority": row.priority,
            "state": row.state,
            "reason_code": code,
            "reason": reason,
            "attempt": row.attempt,
            "restarts": row.restarts,
            "preemptions": row.preemptions,
            "exit_code": row.exit_code,
            "submitted_at": row.submitted_at,
            "started_at": row.started_at,
            "finished_at": row.finished_at,
            "run_time": row.run_time,
            "predicted_start": predicted,
            "predicted_at": made,
            "accelerator": row.spec.resources.accelerator,
            "accelerators": row.spec.resources.total,
            "workers": row.spec.resources.gang,
        }

    def job_detail(self, row: JobRow) -> dict[str, Any]:
        cp = self.cp
        with cp.locked():
            out = self.job_summary(row) | _spec_dict(row)
        attempts = cp.store.attempts(row.id)
        out["attempts"] = []
        for att in attempts:
            placed = cp.store.placements(row.id, att.attempt)
            out["attempts"].append(
                {
                    "attempt": att.attempt,
                    "state": att.state,
                    "stop_reason": att.stop_reason,
                    "started_at": att.started_at,
                    "finished_at": att.finished_at,
                    "exit_code": att.exit_code,
                    "worker_codes": att.worker_codes,
                    "master_port": att.master_port,
                    "message": att.message,
                    "placement": [
                        {
                            "worker": p.worker,
                            "slice": p.slice_id,
                            "node": p.node,
                            "gpus": list(p.gpus),
                        }
                        for p in placed
                    ],
                }
            )
        if row.spec.kind == "interactive" and cp.interactive is not None:
            out["template"] = row.spec.template
            out["idle_timeout"] = row.spec.idle_timeout
            out["endpoints"] = cp.interactive.endpoints(cp.live.get(row.id, row))
        last = out["attempts"][-1] if out["attempts"] else None
        out["placement"] = last["placement"] if last else []
        out["master_port"] = last["master_port"] if last else None
        return out

    def find(self, who: Principal, ref: str) -> JobRow:
        """A job by id, or by name (the newest one with it) among the jobs `who` may see."""
        cp = self.cp
        row = cp.store.job(ref)
        if row is None:
            owner = None if cp.is_admin(who) else who.user
            row = cp.store.job_by_name(ref, owner)
        if row is None:
            raise Refused(404, f"no job {ref!r}")
        cp.check_owner(who, row)
        return row

    def jobs(
        self,
        who: Principal,
        states: list[str] | None,
        everyone: bool,
        limit: int,
        *,
        user: str | None = None,
        projects: list[str] | None = None,
        since: float | None = None,
    ) -> list[dict[str, Any]]:
        cp = self.cp
        if (everyone or user not in (None, who.user)) and not cp.is_admin(who):
            raise Refused(403, "only admins may list other users' jobs")
        if user is None and not everyone:
            user = who.user
        rows = cp.store.jobs(user=user, states=states, projects=projects, since=since, limit=limit)
        with cp.locked():
            return [self.job_summary(r) for r in rows]

    # -- queue, quota, nodes ----------------------------------------------------------------------

    def visible_projects(self, who: Principal) -> list[str] | None:
        """The projects `who` may look at; None: all (admins)."""
        return self._projects(who, None)

    def _projects(self, who: Principal, project: str | None) -> list[str] | None:
        """Projects `who` may look at (None: all), narrowed to `project` if given."""
        cp = self.cp
        allowed = None if cp.is_admin(who) else cp.quota.projects_of(who.user)
        if project is None:
            return allowed
        if allowed is not None and project not in allowed:
            raise Refused(403, f"user {who.user} is not a member of project {project!r}")
        return [project]

    def queue(self, who: Principal, project: str | None) -> list[dict[str, Any]]:
        projects = self._projects(who, project)
        out, positions = [], Counter()
        cp = self.cp
        with cp.locked():
            for job in cp.snap.pending.all:
                if projects is not None and job.project not in projects:
                    continue
                positions[job.project] += 1
                row = cp.live[job.id]
                entry = self.job_summary(row)
                entry["position"] = positions[job.project]
                out.append(entry)
        return out

    def quota(self, who: Principal) -> dict[str, Any]:
        cp = self.cp
        projects = self._projects(who, None)
        with cp.locked():
            snap, quota = cp.snap, cp.quota
            pending: dict[str, Counter[str]] = defaultdict(Counter)
            waiting: Counter[str] = Counter()
            for job in snap.pending.jobs.values():
                pending[job.project][job.accelerator] += job.demand
                waiting[job.project] += 1
            names = sorted(set(quota.projects) | set(snap.usage) | set(pending))
            rows = []
            for p in names:
                if projects is not None and p not in projects:
                    continue
                rows.append(self._project_quota(p, pending[p], waiting[p]))
            return {
                "capacity": dict(sorted(snap.capacity.items())),
                "policy": quota.scheduler.policy,
                "preempt_grace": quota.scheduler.preempt_grace,
                "usage_half_life": quota.scheduler.usage_half_life,
                "aging_limit": quota.scheduler.aging_limit,
                "projects": rows,
            }

    def _project_quota(self, p: str, pending: Counter[str], waiting: int) -> dict[str, Any]:
        snap, quota = self.cp.snap, self.cp.quota
        types = sorted(set(snap.capacity) | set(snap.usage.get(p, {})) | set(pending))
        guarantee = {t: round(snap.guarantee_of(p, t), 3) for t in types}
        in_use = {t: snap.held(p, t) for t in types}
        return {
            "project": p,
            "members": list(quota.membership.get(p, ())),
            "guarantee": guarantee,
            "in_use": in_use,
            "borrowed": {t: max(0.0, round(in_use[t] - guarantee[t], 3)) for t in types},
            "limit": dict(quota.limits.get(p, {})),
            "pending": {t: pending.get(t, 0) for t in types},
            "pending_jobs": waiting,
            # accelerator-hours, decayed with usage_half_life: orders borrowers (DESIGN §3.3)
            "recent_usage": round(snap.recent_usage(p) / 3600, 6),
        }

    def nodes(self, who: Principal) -> list[dict[str, Any]]:
        """Every node and its free devices; the jobs on it only where `who` may see them
        (their own, their projects' — as the queue shows — or all for admins)."""
        cp = self.cp
        projects = self._projects(who, None)
        with cp.locked():
            snap = cp.snap
            jobs_on: dict[int, list[str]] = defaultdict(list)
            for job_id, run in snap.running.items():
                row = cp.live.get(job_id)
                if projects is not None and (
                    row is None or (row.project not in projects and row.user != who.user)
                ):
                    continue
                for i in sorted(set(run.nodes)):
                    jobs_on[i].append(job_id)
            free_devices = cp.inventory.free()
            return [
                {
                    "name": node.name,
                    "accelerator": node.accelerator,
                    "count": node.count,
                    "free": snap.free[i],
                    "domain": node.domain,
                    "free_devices": sorted(free_devices.get(node.name, ())),
                    "jobs": sorted(jobs_on[i]),
                }
                for i, node in enumerate(snap.cluster.nodes)
            ]

    # -- logs --------------------------------------------------------------------------------------

    def logs(
        self, row: JobRow, worker: int, attempt: int | None, offset: int, tail: int | None = None
    ) -> tuple[bytes, int, int, bool, int | None]:
        """(data, next offset, attempt, done, latest attempt): done when this attempt has
        ended and all of its log has been read, so `logs -f` knows when to move on or stop.
        With `tail`, from the start of the last `tail` lines instead of `offset`."""
        cp = self.cp
        if not 0 <= worker < row.spec.resources.gang:
            raise Refused(422, f"worker: job {row.id} has workers 0..{row.spec.resources.gang - 1}")
        with cp.locked():
            live = cp.live.get(row.id, row)
            running = cp.attempts.get(row.id)
        latest = _latest_attempt(cp, row)
        chosen = attempt if attempt is not None else latest
        if chosen is None:
            return b"", offset, live.attempt, live.state not in LIVE_STATES, None
        if attempt is not None and attempt > max(latest or 0, live.attempt):
            # live.attempt may not have started yet (a requeued job): `logs -f` waits for it.
            raise Refused(
                404, f"attempt: job {row.id} has attempts 0..{max(latest or 0, live.attempt)}"
            )
        path = cp.executor.log_path(row.id, chosen, worker)
        data = b""
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if tail is not None:
                    offset = _tail_offset(f, size, tail)
                if offset > size:  # the log was capped (truncated) since: start over, as
                    offset = 0  # `tail -F` does (a seek far past the end may be EINVAL)
                f.seek(offset)
                data = f.read(MAX_LOG_CHUNK)
        except FileNotFoundError:
            pass
        attempt_live = running is not None and running.attempt == chosen
        # A job still pending after a requeue may start this attempt number later.
        may_grow = attempt_live or (live.state == "pending" and chosen == live.attempt)
        done = not may_grow and len(data) < MAX_LOG_CHUNK
        return data, offset + len(data), chosen, done, latest


def _tail_offset(f: Any, size: int, lines: int) -> int:
    """Where the last `lines` lines of the file start, looking back at most MAX_LOG_CHUNK."""
    start = max(0, size - MAX_LOG_CHUNK)
    f.seek(start)
    block = f.read(size - start)
    end = len(block) - 1 if block.endswith(b"\n") else len(block)  # a last line unfinished
    for _ in range(lines):
        end = block.rfind(b"\n", 0, end)
        if end < 0:
            return start
    return start + end + 1 if lines else size


def _latest_attempt(cp: ControlPlane, row: JobRow) -> int | None:
    attempts = cp.store.attempts(row.id)
    return attempts[-1].attempt if attempts else None
