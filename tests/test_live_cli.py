"""The CLI as a shell script drives it: piped (never a terminal), checking stdout line by line
and exit codes against the table in docs/live.md."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import CLI

pytestmark = pytest.mark.live

QUOTA = """
[toml-schema]
version = "1"
[project_membership]
vision = ["alice", "carol"]
nlp = ["bob"]
[project_resources.vision]
gpu = 0.5
[project_resources.nlp]
gpu = 0.5
"""
DOCS = Path(__file__).parents[1] / "docs" / "live.md"


@pytest.fixture(scope="module")
def server(module_servers):
    return module_servers(QUOTA, fake_gpus=4)


@pytest.fixture(scope="module")
def tok(server):
    return {u: server.token(u) for u in ("alice", "bob", "carol")}


def corral(server, *args, token=None, admin=False):
    return server.cli(*args, token=token, admin=admin, check=False)


def post_job(server, token: str, command: str, **spec) -> str:
    """Set-up submissions go over HTTP: the CLI under test is what reads them back."""
    with server.http(token) as c:
        resp = c.post("/v1/jobs", json={"command": command, **spec})
        assert resp.status_code == 201, resp.text
        return resp.json()["id"]


def test_version_and_completion():
    done = subprocess.run([*CLI, "--version"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and re.fullmatch(r"corral \d+\.\d+\.\d+\S*\n", done.stdout)
    env = {**os.environ, "_CORRAL_COMPLETE": "complete_bash", "COMP_WORDS": "corral can"}
    done = subprocess.run(
        ["corral"], env={**env, "COMP_CWORD": "1"}, capture_output=True, text=True, timeout=30
    )
    assert done.stdout.split() == ["cancel"]


def test_ls_piped_is_one_row_per_job_in_every_format(server, tok):
    # Long names and a long reason: on a terminal they fold; piped, each job stays one line.
    ids = []
    for i in range(3):
        name = f"a-rather-long-job-name-that-would-wrap-{i}-" + "x" * 20
        ids.append(post_job(server, tok["alice"], f"echo {i}; exit {i}", name=name))
    for job in ids:
        server.wait(job, ("succeeded", "failed"))
    bob = post_job(server, tok["bob"], "true")
    server.wait(bob, "succeeded")

    table = corral(server, "ls", token=tok["alice"]).stdout.splitlines()
    assert len(table) == len(ids) + 1  # `corral ls | wc -l` is jobs + 1
    assert table[0].split()[:3] == ["ID", "NAME", "PROJECT"]
    assert [line.split()[0] for line in table[1:]] == ids
    assert "a worker exited 2" in table[3]
    assert corral(server, "ls", "-o", "name", token=tok["alice"]).stdout.split() == ids
    bare = corral(server, "ls", "--no-headers", token=tok["alice"]).stdout.splitlines()
    assert [line.split()[0] for line in bare] == ids
    wide = corral(server, "ls", "-o", "wide", token=tok["alice"]).stdout.splitlines()
    assert {"PRIO", "PREEMPTED", "RAN"} <= set(wide[0].split()) and len(wide) == len(table)
    data = json.loads(corral(server, "ls", "-o", "json", token=tok["alice"]).stdout)
    assert [j["id"] for j in data] == ids
    assert (
        corral(server, "ls", "--json", token=tok["alice"]).stdout
        == json.dumps(data, indent=2, sort_keys=True) + "\n"
    )

    def names(*args, token=None, admin=False):
        done = corral(server, "ls", "-o", "name", *args, token=token, admin=admin)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert names("--state", "failed", token=tok["alice"]) == ids[1:]
    assert names("-a", "--project", "nlp", admin=True) == [bob]
    assert names("--user", "bob", admin=True) == [bob]
    assert names("--since", "10m", token=tok["alice"]) == ids
    assert names("--since", "2999-01-01", token=tok["alice"]) == []


def test_exit_codes_match_the_table(server, tok):
    table = DOCS.read_text()
    for code in (2, 3, 4):
        assert re.search(rf"^\| {code} \|", table, re.M), f"docs/live.md lacks exit code {code}"
    bad_output = corral(server, "ls", "-o", "yaml", token=tok["alice"])
    assert bad_output.returncode == 2 and "wide, name, json" in bad_output.stderr
    assert corral(server, "ls", "--since", "someday", token=tok["alice"]).returncode == 2
    assert corral(server, "ls", "--user", "bob", token=tok["alice"]).returncode == 3
    assert corral(server, "ls", token="not-a-token").returncode == 3
    missing = corral(server, "show", "j999", token=tok["alice"])
    assert missing.returncode == 4 and missing.stderr.count("\n") == 1
    assert corral(server, "cancel", token=tok["alice"]).returncode == 2
    unreachable = subprocess.run(
        [*CLI, "ls"],
        env={**server.env(tok["alice"]), "CORRAL_URL": "http://127.0.0.1:9"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert unreachable.returncode == 1 and "cannot reach corral" in unreachable.stderr


def test_spec_errors_name_the_file_and_line(server, tok, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text('name: bad\ncommand: "true"\nresources:\n  per_worker: -1\n')
    done = corral(server, "submit", "-f", str(spec), token=tok["alice"])
    assert done.returncode == 2
    assert done.stderr.startswith(f"corral: error: {spec}:4: resources.per_worker: ")
    spec.write_text("name: bad\ncommand: [unclosed\n")
    done = corral(server, "submit", "-f", str(spec), token=tok["alice"])
    assert done.returncode == 2 and f"{spec}:3:" in done.stderr  # found here, by the parser


def test_cancel_several_by_id_and_by_filter(server, tok):
    def submit(user):
        return post_job(server, tok[user], "sleep 300")

    three = [submit("carol") for _ in range(3)]
    done = corral(server, "cancel", *three, token=tok["carol"])
    assert done.returncode == 0, done.stderr
    assert [line.split()[1] for line in done.stdout.splitlines()] == three
    for job in three:
        server.wait(job, "cancelled")
    again = corral(server, "cancel", "--json", three[0], "j999", token=tok["carol"])
    assert again.returncode == 3 and json.loads(again.stdout) == []  # first failure: refused
    assert "already cancelled" in again.stderr and "no job 'j999'" in again.stderr

    mine = [submit("carol") for _ in range(2)]
    theirs = submit("bob")
    done = corral(server, "cancel", "--project", "vision", "--json", token=tok["carol"])
    assert sorted(j["id"] for j in json.loads(done.stdout)) == sorted(mine)
    assert server.job(theirs)["state"] in ("pending", "running")
    corral(server, "cancel", theirs, token=tok["bob"])
    for job in [*mine, theirs]:
        server.wait(job, "cancelled")


def test_submit_wait_exits_with_the_jobs_code(server, tok):
    failed = corral(server, "submit", "--wait", "--", "echo hi; exit 7", token=tok["alice"])
    assert failed.returncode == 7
    assert re.fullmatch(r"j\d+\n", failed.stdout) and "failed" in failed.stderr
    ok = corral(server, "submit", "--wait", "--json", "--", "true", token=tok["alice"])
    assert ok.returncode == 0 and json.loads(ok.stdout)["state"] == "succeeded"


def test_logs_tail(server, tok):
    job = post_job(server, tok["alice"], "seq 1 50")
    server.wait(job, "succeeded")
    assert corral(server, "logs", "--tail", "3", job, token=tok["alice"]).stdout == "48\n49\n50\n"
    assert corral(server, "logs", "--tail", "0", job, token=tok["alice"]).stdout == ""
    assert len(corral(server, "logs", job, token=tok["alice"]).stdout.split()) == 50


def test_ls_watch_prints_frame_after_frame(server, tok):
    proc = subprocess.Popen(
        [*CLI, "ls", "--watch", "--no-headers", "-o", "name"],
        env=server.env(tok["bob"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        frames = [proc.stdout.readline() for _ in range(6)]
    finally:
        proc.kill()
        proc.wait()
    assert frames.count("\n") >= 2  # piped, frames are apart by an empty line


def test_logs_follow_rides_out_a_restart_of_corral_up(live_servers):
    server = live_servers(QUOTA, fake_gpus=2, name="restart")
    token = server.token("alice")
    script = "for i in $(seq 1 30); do echo line$i; sleep 0.1; done"
    job = server.cli("submit", "--", script, token=token).stdout.strip()
    server.wait(job, "running")
    follow = subprocess.Popen(
        [*CLI, "logs", "-f", job],
        env=server.env(token),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.5)
        server.stop()  # the job runs on: its supervisor outlives the control plane
        time.sleep(1.0)
        server.start()
        out, err = follow.communicate(timeout=60)
    finally:
        follow.kill()
    assert follow.returncode == 0, err
    assert out.split() == [f"line{i}" for i in range(1, 31)]
    assert server.job(job)["state"] == "succeeded"
