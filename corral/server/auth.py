"""Bearer tokens: random secrets handed out once, stored only as SHA-256 digests.

A token is 32 random bytes, so a plain digest (no salt, no slow hash) is enough: nothing about
it can be guessed from a leaked database, and checking one costs microseconds per request.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from corral.server.store import Store

TOKEN_PREFIX = "corral_"
ADMIN_USER = "admin"


@dataclass(frozen=True, slots=True)
class Principal:
    user: str
    admin: bool  # the token was created --admin (quota [admins] is checked separately)


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenBook:
    """Tokens cached in memory (the API checks one per request); the store is the truth."""

    def __init__(self, store: Store):
        self._store = store
        self._lock = threading.Lock()
        self._by_hash: dict[str, Principal] = {}
        self.reload()

    def reload(self) -> None:
        fresh = {t.hash: Principal(t.user, t.admin) for t in self._store.tokens()}
        with self._lock:
            self._by_hash = fresh

    def check(self, token: str) -> Principal | None:
        want = digest(token)
        with self._lock:
            known = list(self._by_hash.items())
        # Compare against every digest with compare_digest rather than a dict lookup, so the
        # time taken never depends on how much of a guess matched. Tokens are few (people, not
        # jobs), so the scan costs microseconds.
        found = None
        for stored, principal in known:
            if hmac.compare_digest(stored, want):
                found = principal
        return found

    def create(self, user: str, admin: bool) -> str:
        token = new_token()
        with self._store.tx() as tx:
            tx.insert_token(digest(token), user, admin, time.time())
        self.reload()
        return token


def write_admin_token(book: TokenBook, path: Path) -> str | None:
    """On first start, create an admin token and write it to `path` (mode 0600).

    Returns the token when one was made, None when the file was already there. The file is
    created with O_EXCL and its mode at open, so it is never readable by others, even briefly.
    """
    if path.exists():
        return None
    token = book.create(ADMIN_USER, admin=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token
