"""API routes for interactive jobs: the templates, and users' SSH public keys."""

from __future__ import annotations

import re
import time
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from corral.server.api import User
from corral.server.controlplane import ControlPlane, Refused

# One public key line: type, base64 blob, optional comment. Options (from=..., command=...)
# are refused: the key goes into an authorized_keys file as given.
SSH_KEY = re.compile(
    r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com"
    r"|sk-ecdsa-sha2-nistp256@openssh\.com) [A-Za-z0-9+/]+={0,3}( [^\r\n]{0,200})?"
)


class KeyRequest(BaseModel):
    key: str = Field(min_length=1, max_length=16384, description="one OpenSSH public key line")


def interactive_routes(cp: ControlPlane) -> APIRouter:
    router = APIRouter(tags=["interactive"])

    @router.get("/v1/templates")
    def templates(user: User) -> list[dict[str, Any]]:
        """Templates for interactive jobs (built in, and the admin's templates file)."""
        assert cp.interactive is not None
        return [
            {"name": t.name, "description": t.description, "ports": t.ports, "idle": t.idle}
            for t in sorted(cp.interactive.templates.values(), key=lambda t: t.name)
        ]

    @router.get("/v1/keys")
    def keys(user: User) -> list[str]:
        """Your SSH public keys, given to the sshd of your `ssh` jobs."""
        return cp.store.ssh_keys(user.user)

    @router.post("/v1/keys", status_code=201)
    def add_key(user: User, body: KeyRequest) -> list[str]:
        """Add an SSH public key (one line, as in id_ed25519.pub); it is used by `ssh` jobs
        started from now on."""
        key = body.key.strip()
        if not SSH_KEY.fullmatch(key):
            raise Refused(
                422,
                "key: expected one OpenSSH public key line like 'ssh-ed25519 AAAA... comment'"
                " (types: ssh-ed25519, ssh-rsa, ecdsa-sha2-nistp256/384/521, sk-*)",
            )
        with cp.locked(), cp.store.tx() as tx:
            tx.insert_ssh_key(user.user, key, time.time())
        return cp.store.ssh_keys(user.user)

    return router
