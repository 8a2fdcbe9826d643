"""`corral demo`: a real control plane on a pretend 8-GPU box shared by two teams.

Everything is real but the GPUs: `corral up` runs in this process (in a thread), jobs are
real processes, and the workload is submitted over the HTTP API with each team's token. The
story: nlp (40% of the pool) borrows what vision (60%) leaves idle; when vision submits a
gang, corral preempts nlp's most recent borrowers, which go back to the queue and resume as
attempt 1 once there is room.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from corral.server.inventory import free_port
from corral.server.up import Server, Settings

QUOTA = """
[toml-schema]
version = "1"
[project_membership]
vision = ["alice"]
nlp = ["bob"]
[project_resources.vision]
gpu = 0.6
[project_resources.nlp]
gpu = 0.4
[scheduler]
policy = "fair"
preempt_grace = "{grace}"
preempt_min_runtime = "0s"  # the demo reclaims at once (default 5m)
"""

STATE_STYLE = {
    "pending": "yellow",
    "running": "cyan",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "magenta",
}


@dataclass(frozen=True, slots=True)
class Arrival:
    at: float  # seconds after the start (scaled in --fast)
    user: str
    name: str
    seconds: float  # how long each worker runs
    per_worker: int = 1
    workers: int = 1
    code: int = 0


# nlp fills the idle pool first; vision's finetune gang later reclaims vision's share, from
# nlp's sweeps (each by then well past the first second, when no attempt is preempted).
WORKLOAD = (
    Arrival(0, "bob", "pretrain", 26, per_worker=2, workers=2),
    Arrival(0, "alice", "eval-1", 4),
    Arrival(0, "bob", "tokenize", 6),
    Arrival(2, "bob", "sweep-1", 22),
    Arrival(2, "bob", "sweep-2", 22),
    Arrival(3, "bob", "sweep-3", 22),
    Arrival(10, "alice", "finetune", 10, per_worker=2, workers=2),
    Arrival(11, "alice", "eval-2", 4),
    Arrival(14, "bob", "lint-data", 3, code=1),
    Arrival(16, "alice", "eval-3", 4),
)


def worker_command(seconds: float, code: int) -> list[str]:
    """A pretend training loop: prints a step a second, exits with `code`."""
    script = (
        "import os, sys, time\n"
        f"end = time.time() + {seconds}\n"
        "step = 0\n"
        "while time.time() < end:\n"
        "    print('rank', os.environ['RANK'], 'attempt', os.environ['CORRAL_ATTEMPT'],"
        " 'step', step, flush=True)\n"
        "    step += 1\n"
        "    time.sleep(min(1.0, max(0.0, end - time.time())))\n"
        f"sys.exit({code})\n"
    )
    return [sys.executable, "-c", script]


@dataclass(slots=True)
class Demo:
    url: str
    admin: httpx.Client
    users: dict[str, httpx.Client]
    scale: float
    started: float = field(default_factory=time.monotonic)
    submitted: dict[str, str] = field(default_factory=dict)  # job name -> id
    events: list[dict[str, Any]] = field(default_factory=list)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def submit_due(self) -> None:
        for a in WORKLOAD:
            if a.name in self.submitted or a.at * self.scale > self.elapsed():
                continue
            spec = {
                "name": a.name,
                "command": worker_command(a.seconds * self.scale, a.code),
                "resources": {"per_worker": a.per_worker, "workers": a.workers},
            }
            resp = self.users[a.user].post("/v1/jobs", json=spec)
            resp.raise_for_status()
            self.submitted[a.name] = resp.json()["id"]

    def poll(self) -> tuple[list[dict], dict]:
        jobs = self.admin.get("/v1/jobs", params={"all": True}).json()
        quota = self.admin.get("/v1/quota").json()
        after = self.events[-1]["seq"] if self.events else 0
        self.events += self.admin.get("/v1/events", params={"after": after}).json()
        return jobs, quota

    def done(self, jobs: list[dict]) -> bool:
        live = [j for j in jobs if j["state"] in ("pending", "running")]
        return len(self.submitted) == len(WORKLOAD) and not live


# -- rendering -------------------------------------------------------------------------------------


def _jobs_table(jobs: list[dict]) -> Table:
    table = Table(title="jobs", title_justify="left", box=None, header_style="bold")
    for col in ("ID", "TEAM", "NAME", "GPUS", "STATE", "ATT", "WHY"):
        table.add_column(col, overflow="ellipsis", no_wrap=col != "WHY")
    for j in jobs:
        state = f"[{STATE_STYLE.get(j['state'], '')}]{j['state']}[/]"
        why = j["reason"] if j["state"] == "pending" or j["reason_code"] else ""
        if j["state"] in ("failed", "succeeded") and j["exit_code"]:
            why = f"exit {j['exit_code']}"
        table.add_row(
            j["id"],
            j["project"],
            j["name"],
            f"{j['workers']}x{j['accelerators'] // max(1, j['workers'])}",
            state,
            str(j["attempt"]),
            why,
        )
    return table


def _quota_table(quota: dict) -> Table:
    table = Table(title="quota (gpu)", title_justify="left", box=None, header_style="bold")
    for col in ("TEAM", "GUARANTEE", "IN USE", "BORROWED", "PENDING", "USE"):
        table.add_column(col, justify="left" if col in ("TEAM", "USE") else "right")
    cap = quota["capacity"].get("gpu", 0)
    for p in quota["projects"]:
        use = p["in_use"].get("gpu", 0)
        guarantee = p["guarantee"].get("gpu", 0)
        bar = "█" * use + "·" * max(0, cap - use)
        mark = int(round(guarantee))
        bar = bar[:mark] + "|" + bar[mark:]
        table.add_row(
            p["project"],
            f"{guarantee:g}",
            str(use),
            f"{p['borrowed'].get('gpu', 0):g}",
            str(p["pending"].get("gpu", 0)),
            bar,
        )
    return table


def _events_table(events: list[dict], t0: float) -> Table:
    table = Table(title="events", title_justify="left", box=None, header_style="bold")
    for col in ("T", "EVENT", "JOB", "DETAIL"):
        table.add_column(col, overflow="ellipsis", no_wrap=col != "DETAIL")
    for e in events[-8:]:
        style = {"preempt": "bold red", "fail": "red", "finish": "green"}.get(e["event"], "")
        detail = e.get("reason") or (" ".join(e["nodes"]) if e.get("nodes") else "")
        if e["event"] == "start":
            detail = f"attempt {e.get('attempt', 0)} on {len(e.get('nodes', []))} worker(s)"
        table.add_row(
            f"{e['t'] - t0:5.1f}s",
            f"[{style}]{e['event']}[/]" if style else e["event"],
            e["job"],
            detail,
        )
    return table


def render(demo: Demo, jobs: list[dict], quota: dict, t0: float) -> Panel:
    preempted = sum(1 for e in demo.events if e["event"] == "preempt")
    head = (
        f"t = {demo.elapsed():4.1f}s   jobs {len(jobs)}/{len(WORKLOAD)}   "
        f"preemptions {preempted}   API {demo.url}"
    )
    body = Group(
        head, "", _quota_table(quota), "", _jobs_table(jobs), "", _events_table(demo.events, t0)
    )
    return Panel(body, title="corral demo: vision 60% / nlp 40% of 8 GPUs", expand=False)


def summary(demo: Demo, jobs: list[dict], console: Console) -> None:
    t0 = min(j["submitted_at"] for j in jobs)
    end = max(j["finished_at"] or t0 for j in jobs)
    table = Table(title="summary", title_justify="left", box=None, header_style="bold")
    for col in ("JOB", "TEAM", "STATE", "EXIT", "ATTEMPTS", "WAITED", "RAN"):
        table.add_column(col)
    first_start: dict[str, float] = {}
    for e in demo.events:
        if e["event"] == "start":
            first_start.setdefault(e["job"], e["t"])
    busy = 0.0
    for j in jobs:
        waited = first_start.get(j["id"], end) - j["submitted_at"]
        busy += j["run_time"] * j["accelerators"]
        table.add_row(
            j["name"],
            j["project"],
            j["state"],
            "-" if j["exit_code"] is None else str(j["exit_code"]),
            str(j["attempt"] + 1),
            f"{waited:.1f}s",
            f"{j['run_time']:.1f}s",
        )
    console.print(table)
    preempts = [e for e in demo.events if e["event"] == "preempt"]
    cap = max(1, demo_capacity(demo))
    by_id = {j["id"]: j for j in jobs}
    console.print(
        f"makespan {end - t0:.1f}s, GPU utilisation {busy / (cap * max(end - t0, 1e-9)):.0%}, "
        f"{len(preempts)} preemption(s)"
    )
    for e in preempts:
        victim, winner = by_id[e["job"]], by_id.get(e.get("preemptor", ""), {})
        console.print(
            f"  {victim['project']}/{victim['name']} preempted for "
            f"{winner.get('project', '?')}/{winner.get('name', '?')} (a reclaim), resumed as"
            f" attempt 1"
        )
    for j in jobs:
        if j["state"] == "failed":
            console.print(f"  {j['project']}/{j['name']} failed on purpose (exit {j['exit_code']})")
    console.print()
    console.print(NEXT, highlight=False, markup=False, soft_wrap=True)


# Kept within 78 columns and printed with soft_wrap, so a pipe or a narrow terminal shows
# the lines as written.
INTRO = """\
[bold]corral demo[/]: a real control plane (HTTP API, scheduler, SQLite store, job
processes) on a pretend box with {gpus} GPUs, shared by two teams: [bold]vision[/] is
guaranteed 60% of the GPUs, [bold]nlp[/] 40%. It takes about {seconds:.0f} s. You will see:
  1. nlp submits more than its share: the GPUs vision leaves idle are lent to
     nlp rather than left unused.
  2. At {finetune:.0f} s vision submits [bold]finetune[/], 2 workers x 2 GPUs, within its
     guarantee. corral takes GPUs back by preempting nlp's most recent
     borrowers (SIGTERM, then a grace period): nlp is above its guarantee.
  3. The preempted jobs go back to the queue and resume as attempt 1 when
     GPUs free up.
  4. [bold]lint-data[/] (nlp) exits 1 on purpose: a failed job keeps its exit code
     and reason, and is not retried (its max_restarts is 0).
Reading the screen:
  GPUS 2x2  workers x GPUs per worker
  ATT       the attempt: 0 is the first run, 1 the run after a preemption
  USE       █ a GPU the team holds, · one it does not hold; [bold]|[/] marks the
            team's guarantee: blocks right of it are borrowed
"""

NEXT = """\
What to try next:
  corral up --fake-gpus 8      # a pool of your own, in another terminal; then
  export CORRAL_URL=http://127.0.0.1:8642
  export CORRAL_TOKEN_FILE=~/.corral/admin.token
  corral submit -- python -c 'print("hello")'
  corral ls; corral logs j1; corral quota
  corral demo --keep           # keep this run's state dir to look around
  docs/live.md covers quota files, DDP jobs, metrics and accounting.
"""


def _event_line(e: dict, t0: float, by_id: dict[str, dict]) -> str:
    """One event as a line of the story, for a log rather than a screen."""
    job = by_id.get(e["job"], {})
    who = f"{job.get('project', '?')}/{job.get('name', e['job'])}"
    detail = {
        "submit": "submitted",
        "start": f"started, attempt {e.get('attempt', 0)}",
        "finish": "finished",
        "fail": f"failed: {e.get('reason', '')}",
        "preempt": "preempted: its GPUs go back to vision (a reclaim)"
        if e.get("reason", "").startswith("reclaimed")
        else f"preempted: {e.get('reason', '')}",
        "cancel": "cancelled",
    }.get(e["event"], e["event"])
    return f"{e['t'] - t0:5.1f}s  {who:<17} {detail}"


def demo_capacity(demo: Demo) -> int:
    return int(demo.admin.get("/v1/quota").json()["capacity"].get("gpu", 0))


# -- entry point -----------------------------------------------------------------------------------


def run_demo(fast: bool = False, gpus: int = 8, keep: bool = False, console: Console | None = None):
    console = console or Console()
    scale = 0.4 if fast else 1.0
    root = Path(tempfile.mkdtemp(prefix="corral-demo-"))
    quota = root / "quota.toml"
    quota.write_text(QUOTA.format(grace="0.5s" if fast else "1s"))
    settings = Settings(
        state_dir=root / "state",
        port=free_port(),
        proxy_port=free_port(),
        quota=quota,
        fake_gpus=gpus,
        accelerator="gpu",
        node_name="demo-box",
        run_as="corral",  # the demo's users are made up: no Unix accounts to run as
    )
    server = Server(settings)
    server.start()
    try:
        _play(server, scale, console)
    finally:
        server.shutdown()
        if keep:
            console.print(f"state dir kept: {settings.state_dir}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def _narrate(demo: Demo, console: Console, t0: float, deadline: float) -> tuple[list, dict]:
    """Piped, a screen redrawn in place would show only its last frame: tell the story as
    lines instead, one per event, with the teams' GPUs after each preemption."""
    shown = 0
    jobs, quota = demo.poll()
    while not demo.done(jobs) and demo.elapsed() < deadline:
        demo.submit_due()
        jobs, quota = demo.poll()
        by_id = {j["id"]: j for j in jobs}
        new, shown = demo.events[shown:], len(demo.events)
        for e in new:
            console.print(_event_line(e, t0, by_id), highlight=False, markup=False, soft_wrap=True)
        if any(e["event"] == "preempt" for e in new):
            console.print(_quota_table(quota))
            console.print("  (the teams' GPUs just after the preemption)")
        time.sleep(0.25)
    return jobs, quota


def _client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def _play(server: Server, scale: float, console: Console) -> None:
    tokens = {u: server.cp.tokens.create(u, admin=False) for u in ("alice", "bob")}
    admin_token = server.token_path.read_text().strip()
    users = {u: _client(server.url, t) for u, t in tokens.items()}
    demo = Demo(server.url, _client(server.url, admin_token), users, scale)
    t0 = time.time()
    deadline = 120 * scale + 30
    finetune = next(a.at for a in WORKLOAD if a.name == "finetune") * scale
    gpus = server.cp.inventory.nodes[0].count
    intro = INTRO.format(gpus=gpus, seconds=50 * scale, finetune=finetune)
    console.print(intro, highlight=False, soft_wrap=True)
    jobs, quota = demo.poll()
    if console.is_terminal:
        with Live(render(demo, jobs, quota, t0), console=console, refresh_per_second=4) as live:
            while not demo.done(jobs) and demo.elapsed() < deadline:
                demo.submit_due()
                jobs, quota = demo.poll()
                live.update(render(demo, jobs, quota, t0))
                time.sleep(0.25)
    else:
        jobs, quota = _narrate(demo, console, t0, deadline)
        console.print(render(demo, jobs, quota, t0))
    console.print()
    for job in jobs:  # past the deadline: don't leave processes behind
        if job["state"] in ("pending", "running"):
            demo.admin.post(f"/v1/jobs/{job['id']}/cancel")
    summary(demo, jobs, console)
