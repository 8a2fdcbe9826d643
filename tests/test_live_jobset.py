"""The Kueue multislice tutorial's JobSets, submitted as files to a live pool of three 2-node
TPU pools in three domains: the 3-slice job runs alone first, then the 1- and 2-slice jobs run
together, each slice in a domain of its own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from conftest import LiveServer, free_port

pytestmark = pytest.mark.live

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "jobset"
POOL = """
- {name: "pool1-{0..1}", accelerator: tpu-v5-lite-podslice, count: 4, domain: pool1}
- {name: "pool2-{0..1}", accelerator: tpu-v5-lite-podslice, count: 4, domain: pool2}
- {name: "pool3-{0..1}", accelerator: tpu-v5-lite-podslice, count: 4, domain: pool3}
"""
QUOTA = """
[toml-schema]
version = "1"
[project_membership]
multislice-queue = [".*"]
[project_resources.multislice-queue]
tpu-v5-lite-podslice = 1.0
"""
# The tutorial's commands install JAX from the internet and sleep 60 s: on the workers' PATH,
# stand-ins that answer at once (pip), as JAX would on 8 chips (python), and "sleep" until the
# test has queued the other jobs (the GO file), then 1 s.
STUBS = {
    "pip": "exit 0",
    "python": 'echo "Global device count: 8"; exec /bin/sleep 1',
    "sleep": 'until [ -e "$(dirname "$0")/GO" ]; do /bin/sleep 0.1; done; exec /bin/sleep 1',
}


@pytest.fixture
def pool(tmp_path, monkeypatch):
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name, body in STUBS.items():
        (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{stubs}:{os.environ['PATH']}")  # corral up's, so the workers'
    (tmp_path / "pool.yaml").write_text(POOL)
    (tmp_path / "quota.toml").write_text(QUOTA)
    args = ["--cluster", str(tmp_path / "pool.yaml"), "--quota", str(tmp_path / "quota.toml")]
    args += ["--run-as", "corral"]
    server = LiveServer(tmp_path / "state", free_port(), args).start()
    try:
        yield server
    finally:
        server.cancel_all()
        server.stop()
        server.kill_leftovers()


def submit(server: LiveServer, slices: int) -> str:
    done = server.cli("submit", "-f", str(EXAMPLES / f"multislice-{slices}slice.yaml"), admin=True)
    assert "image: warning: ignored" in done.stderr  # one line per container-world field
    return done.stdout.strip()


def domains_of(job: dict) -> list[set[str]]:
    """The domains each slice's workers landed in (pool1-0 -> pool1)."""
    slices: dict[int, set[str]] = {}
    for p in job["placement"]:
        slices.setdefault(p["slice"], set()).add(p["node"].rsplit("-", 1)[0])
    return [slices[s] for s in sorted(slices)]


def test_tutorial_jobsets_run_three_slices_alone_then_one_and_two_together(pool):
    three = submit(pool, 3)
    pool.wait(three, "running", what="running")
    one, two = submit(pool, 1), submit(pool, 2)
    assert pool.job(one)["state"] == pool.job(two)["state"] == "pending"  # no pool is free
    (pool.state.parent / "bin" / "GO").touch()
    job3 = pool.wait(three, "succeeded", timeout=60)
    job1 = pool.wait(one, "succeeded", timeout=60)
    job2 = pool.wait(two, "succeeded", timeout=60)
    assert job3["project"] == job1["project"] == "multislice-queue"  # the Kueue queue label
    assert [d for d in domains_of(job3)] == [{"pool1"}, {"pool2"}, {"pool3"}]
    for job in (job1, job2):
        assert job["started_at"] >= job3["finished_at"]
        assert job["resources"] == {
            "accelerator": "tpu-v5-lite-podslice",
            "per_worker": 4,
            "workers": 2,
            "slices": job["resources"]["slices"],
            "exclusive": True,
        }
    # Together: each started before the other finished; between them they hold all 3 pools.
    assert job1["started_at"] < job2["finished_at"] and job2["started_at"] < job1["finished_at"]
    slices = domains_of(job1) + domains_of(job2)
    assert all(len(d) == 1 for d in slices) and set().union(*slices) == {"pool1", "pool2", "pool3"}
    log = pool.cli("logs", one, admin=True).stdout
    assert "Global device count: 8" in log


def test_the_api_takes_a_jobset_too(pool):
    manifest = yaml.safe_load((EXAMPLES / "multislice-2slice.yaml").read_text())
    with pool.http(pool.admin_token) as api:
        job = api.post("/v1/jobs", json=manifest).json()
        assert (job["name"], job["project"], job["accelerators"]) == (
            "multislice-2slice",
            "multislice-queue",
            16,
        )
        pod = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        pod["volumes"] = []
        refused = api.post("/v1/jobs", json=manifest)
        assert refused.status_code == 422
        assert refused.json()["detail"].startswith("JobSet: spec.replicatedJobs[0].template.spec")
