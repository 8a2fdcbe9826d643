"""`/metrics` of a real `corral up`, read as Prometheus would: every series an admin graphs,
checked against the state this test makes, with zero rows for a project that did nothing, and
clean under `promtool check metrics`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.live

# 8 GPUs: vision is guaranteed 4, nlp 2 (and may hold at most 3), ops 1, idle 1.
QUOTA = """
[toml-schema]
version = "1"
[project_membership]
vision = ["alice"]
nlp = ["bob"]
ops = ["carol"]
idle = ["dave"]
[project_resources.vision]
gpu = 0.5
[project_resources.nlp]
gpu = 0.25
[project_resources.ops]
gpu = 0.125
[project_resources.idle]
gpu = 0.125
[project_limits.nlp]
gpu = 3
[scheduler]
preempt_grace = "1s"
preempt_min_runtime = "0s"
"""
PROJECTS = ("vision", "nlp", "ops", "idle")


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


def _series(samples, name: str, **labels: str) -> float:
    return samples[name, tuple(sorted(labels.items()))]


@pytest.fixture(scope="module")
def server(module_servers):
    return module_servers(QUOTA, fake_gpus=8)


@pytest.fixture(scope="module")
def scene(server):
    """Finished, running, borrowing, pending, cancelled and preempted jobs, then /metrics."""
    tok = {u: server.token(u) for u in ("alice", "bob", "carol")}

    def submit(user: str, gpus: int, command: str) -> str:
        args = ("submit", "--per-worker", str(gpus), "--", command)
        return server.cli(*args, token=tok[user]).stdout.strip()

    failed, done = submit("alice", 1, "exit 3"), submit("bob", 1, "true")
    server.wait(failed, "failed")
    server.wait(done, "succeeded")
    base = submit("alice", 4, "sleep 300")  # vision's guarantee
    server.wait(base, "running")
    borrow = submit("alice", 2, "sleep 300")  # 2 above it
    server.wait(borrow, "running")
    pair = submit("bob", 2, "sleep 300")
    server.wait(pair, "running")
    queued = submit("bob", 1, "sleep 300")  # the pool is full: it waits
    dropped = submit("alice", 1, "sleep 300")
    server.cli("cancel", dropped, token=tok["alice"])
    # ops takes its one guaranteed GPU back: vision's borrowing job is preempted, and nlp's
    # queued job fits in what that frees (nlp then holds 3, its limit).
    claim = submit("carol", 1, "sleep 300")
    server.wait(claim, "running")
    server.wait(queued, "running")
    server.wait(borrow, lambda j: j["state"] == "pending" and j["preemptions"] == 1)
    time.sleep(0.3)  # the preempted job has now waited a while
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return text, _samples(text)


def test_per_project_gauges_match_the_pool(scene):
    _, m = scene
    assert _series(m, "corral_pool_capacity", accelerator="gpu") == 8
    expected = {
        # project: guarantee, limit, in use, borrowed, pending, pending jobs
        "vision": (4, 8, 4, 0, 2, 1),
        "nlp": (2, 3, 3, 1, 0, 0),
        "ops": (1, 8, 1, 0, 0, 0),
        "idle": (1, 8, 0, 0, 0, 0),
    }
    names = ("guarantee", "limit", "in_use", "borrowed", "pending", "pending_jobs")
    for project, values in expected.items():
        got = tuple(
            _series(m, f"corral_project_{n}", project=project, accelerator="gpu") for n in names
        )
        assert got == values, project
    assert _series(m, "corral_oldest_pending_seconds", project="vision") > 0.2
    for project in ("nlp", "ops", "idle"):
        assert _series(m, "corral_oldest_pending_seconds", project=project) == 0


def test_counters_keep_a_zero_row_for_every_project(scene):
    _, m = scene
    finished = {
        (p, s): _series(m, "corral_jobs_finished_total", project=p, state=s)
        for p in PROJECTS
        for s in ("succeeded", "failed", "cancelled")
    }
    assert {k: v for k, v in finished.items() if v} == {
        ("vision", "failed"): 1,
        ("vision", "cancelled"): 1,
        ("nlp", "succeeded"): 1,
    }
    preempted = {
        (p, r): _series(m, "corral_preemptions_total", project=p, reason=r)
        for p in PROJECTS
        for r in ("reclaim", "priority", "lost")
    }
    assert {k: v for k, v in preempted.items() if v} == {("vision", "reclaim"): 1}
    assert _series(m, "corral_jobs", state="running") == 4
    assert _series(m, "corral_jobs", state="pending") == 1


def test_waits_are_bucketed_up_to_days_and_the_build_is_named(scene):
    text, m = scene
    assert _series(m, "corral_submit_to_running_seconds_bucket", le="604800.0") == 7
    info = [line for line in text.splitlines() if line.startswith("corral_build_info{")]
    assert len(info) == 1 and 'version="' in info[0] and info[0].endswith(" 1.0")
    assert _series(m, "corral_cycle_seconds_count") > 0


def test_promtool_finds_nothing_to_fix(scene):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("needs promtool: apt-get install prometheus (CI installs it)")
    text, _ = scene
    done = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), done


def test_the_grafana_dashboard_draws_only_series_corral_exports(scene):
    text, _ = scene
    exported = {f.name for f in text_string_to_metric_families(text)}
    board = json.loads((Path(__file__).parents[1] / "docs" / "grafana-corral.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    used = {re.sub(r"_(bucket|total)$", "", n) for e in exprs for n in re.findall(r"corral_\w+", e)}
    assert used and used <= exported, used - exported
