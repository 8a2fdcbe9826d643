"""Schemathesis against a live `corral up`: the OpenAPI document and the server agree.

Property-based requests for every documented operation, with a user's token and then an
admin's, each for a bounded time: no 5xx, every status and body as documented, 405s with a
true Allow header, no traceback in the server's log (issue 20).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.live

QUOTA = """
[toml-schema]
version = "1"
[project_membership]
team = [".*"]
[project_resources.team]
gpu = 1.0
"""
SECONDS_EACH = 22  # a minute for both runs with start-up
# Left out, as not properties of this API: "positive data acceptance" (business rules refuse
# schema-valid requests: quota, admission, a name taken, with a 4xx and the reason) and
# "negative data rejection" (a query string has no types: `?project=false` is the string
# "false", which a string parameter rightly accepts).
# The admin's run leaves out cancelling: it reuses ids from answers, and would cancel the hog.
ADMIN_ONLY = ["--exclude-path-regex", "/cancel$"]
CHECKS = ["--checks", "all", "--exclude-checks", "positive_data_acceptance,negative_data_rejection"]


@pytest.fixture(scope="module")
def server(module_servers):
    server = module_servers(QUOTA, fake_gpus=1)
    # Holds the only GPU for the whole run: what the fuzzer submits stays pending, and no
    # generated command is ever run.
    with server.http(server.admin_token) as c:
        hog = {"command": "sleep 3600", "preemptible": False, "name": "hog"}
        job = c.post("/v1/jobs", json=hog).json()["id"]
    server.wait(job, "running")
    return server


def schemathesis(
    server, token: str, workdir: Path, extra: list[str]
) -> subprocess.CompletedProcess[str]:
    st = shutil.which("st", path=str(Path(sys.executable).parent)) or "st"
    return subprocess.run(
        [st, "run", f"{server.url}/openapi.json", "-H", f"Authorization: Bearer {token}"]
        + [*CHECKS, "--max-time", str(SECONDS_EACH), "--workers", "1", "--seed", "20"]
        + ["--generation-database", "none", "--no-color", *extra],
        capture_output=True,
        text=True,
        timeout=SECONDS_EACH * 4,
        cwd=workdir,
    )


@pytest.mark.parametrize("who", ["user", "admin"])
def test_the_api_agrees_with_its_openapi_document(server, who, tmp_path):
    # The user's run cancels what it can (its own jobs, not the admin's hog).
    admin = who == "admin"
    token = server.admin_token if admin else server.token("fuzzer")
    done = schemathesis(server, token, tmp_path, ADMIN_ONLY if admin else [])
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "Traceback" not in server.log(), server.log()[-4000:]
    assert server.live_jobs()[0]["name"] == "hog", "the fuzzer cancelled the hog"
