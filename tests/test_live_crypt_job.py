"""A job spec's `crypt_proxy:` on a live `corral up`: the gateway starts beside the workers,
their storage client (boto3) finds it through the environment alone, what reaches the backend
is ciphertext, and the gateway is gone when the job is."""

from __future__ import annotations

import json
import sys

import psutil
import pytest

from corral.crypt import add_key
from corral.crypt.format import MAGIC

pytestmark = pytest.mark.live

CHECKPOINT = """
import boto3
s3 = boto3.client("s3", region_name="us-east-1")  # the endpoint comes from AWS_ENDPOINT_URL
s3.create_bucket(Bucket="ckpt")
s3.put_object(Bucket="ckpt", Key="step_1/model.pt", Body=b"layer weights " * 5000)
body = s3.get_object(Bucket="ckpt", Key="step_1/model.pt", Range="bytes=0-12")["Body"].read()
print("read back", body.decode())
"""


def _spec(tmp_path, backend, keyring) -> str:
    spec = {
        "name": "train",
        "project": "default",
        "resources": {"accelerator": "gpu", "per_worker": 1},
        "command": [sys.executable, "-c", CHECKPOINT],
        "env": {"AWS_ACCESS_KEY_ID": "job", "AWS_SECRET_ACCESS_KEY": "job"},
        "crypt_proxy": {"backend": f"file://{backend}", "keyring": str(keyring)},
    }
    path = tmp_path / "job.yaml"
    path.write_text(json.dumps(spec))
    return str(path)


def _gateways(backend) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if "crypt-proxy" in (proc.info["cmdline"] or []) and str(backend) in " ".join(
            proc.info["cmdline"]
        ):
            found.append(proc)
    return found


@pytest.fixture(scope="module")
def server(module_servers):
    return module_servers()


def test_job_writes_ciphertext_through_its_gateway(server, tmp_path):
    token = server.token("alice")
    backend, keyring = tmp_path / "bucket-store", tmp_path / "keyring"
    add_key(keyring, "team")
    job_id = server.cli("submit", "-f", _spec(tmp_path, backend, keyring), token=token).stdout
    job = server.wait(job_id.strip(), ("succeeded", "failed"), timeout=60)
    logs = server.cli("logs", job["id"], token=token).stdout
    assert job["state"] == "succeeded", logs
    assert "read back layer weights" in logs
    stored = (backend / "ckpt" / "step_1" / "model.pt").read_bytes()
    assert stored.startswith(MAGIC) and b"layer weights" not in stored
    assert not _gateways(backend)


def test_a_gateway_that_cannot_start_fails_the_job_saying_why(server, tmp_path):
    token = server.token("alice")
    backend, keyring = tmp_path / "store", tmp_path / "no-such-keyring"
    job_id = server.cli("submit", "-f", _spec(tmp_path, backend, keyring), token=token).stdout
    job = server.wait(job_id.strip(), ("succeeded", "failed"), timeout=60)
    assert job["state"] == "failed"
    logs = server.cli("logs", job["id"], token=token).stdout
    assert "crypt_proxy did not start" in logs and "no-such-keyring" in logs
