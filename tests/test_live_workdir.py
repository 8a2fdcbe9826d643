"""A job's workdir and the submitter's environment: the CLI sends its current directory as the
workdir, a relative path in the job resolves against it, a workdir missing on the node fails
the job with one clear line, and --export sends the submitter's environment only when asked
(ALL, or NAME,NAME=value), never corral's own variables."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from conftest import CLI

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def server(module_servers):
    return module_servers(fake_gpus=2)


def submit(server, *args: str, cwd=None, env=None) -> str:
    done = subprocess.run(
        [*CLI, "submit", *args],
        env={**server.env(server.admin_token), **(env or {})},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_relative_paths_resolve_against_the_submitters_directory(server, tmp_path):
    (tmp_path / "data.txt").write_text("from the workdir\n")
    job = submit(server, "--", "sh", "-c", "pwd; cat data.txt", cwd=tmp_path)
    server.wait(job, "succeeded")
    assert server.job(job)["workdir"] == str(tmp_path)
    assert server.cli("logs", job, admin=True).stdout == f"{tmp_path}\nfrom the workdir\n"


def test_a_workdir_missing_on_the_node_fails_the_job_clearly(server, tmp_path):
    job = submit(server, "--workdir", str(tmp_path / "gone"), "--", "true")
    assert server.wait(job, "failed")["exit_code"] == 127
    log = server.cli("logs", job, admin=True).stdout
    assert log == f"corral: workdir {tmp_path / 'gone'} does not exist on this node\n"


def test_export_is_opt_in_and_never_sends_corrals_variables(server):
    mine = {"MY_SETTING": "on", "OTHER": "x"}
    plain = submit(server, "--", "true", env=mine)
    picked = submit(server, "--export", "MY_SETTING,SEED=7,UNSET_VAR", "--", "true", env=mine)
    everything = submit(server, "--export", "ALL", "-e", "OTHER=y", "--", "true", env=mine)
    env_of = {j: server.job(j)["env"] for j in (plain, picked, everything)}
    assert env_of[plain] == {}
    assert env_of[picked] == {"MY_SETTING": "on", "SEED": "7"}
    assert env_of[everything]["MY_SETTING"] == "on" and env_of[everything]["OTHER"] == "y"
    assert env_of[everything]["PATH"] == os.environ["PATH"]
    assert not [k for k in env_of[everything] if k.startswith("CORRAL_")]  # the token stays
    done = server.cli("submit", "--export", "=x", "--", "true", admin=True, check=False)
    assert done.returncode == 2 and "--export: expected ALL, NONE or NAME[=value]" in done.stderr
    assert json.loads(server.cli("show", plain, "--json", admin=True).stdout)["env"] == {}
