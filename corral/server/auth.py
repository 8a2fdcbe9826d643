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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from corral.server.store import Store, TokenRow

TOKEN_PREFIX = "corral_"
TOKEN_ID_PREFIX = "tok-"
TOKEN_ID_HEX = 12
ADMIN_USER = "admin"


@dataclass(frozen=True, slots=True)
class Principal:
    user: str
    admin: bool  # the token was created --admin (quota [admins] is checked separately)


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_id(digest_hex: str) -> str:
    """A token's public name, for listing and revoking: a prefix of its SHA-256 (which says
    nothing usable about a 256-bit random secret)."""
    return TOKEN_ID_PREFIX + digest_hex[:TOKEN_ID_HEX]


class TokenBook:
    """Tokens cached in memory (the API checks one per request); the store is the truth.

    Writes take `write_lock` (the control plane's lock): the store has one writer
    connection, and a transaction must never interleave with another thread's. The cache is
    replaced before create or revoke returns, so a revoked token is refused from the very
    next request on.
    """

    def __init__(self, store: Store, write_lock: threading.RLock | None = None):
        self._store = store
        self._lock = threading.Lock()
        self._write_lock = write_lock or threading.RLock()
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
        with self._write_lock:
            with self._store.tx() as tx:
                tx.insert_token(digest(token), user, admin, time.time())
            self.reload()
        return token

    def rows(self) -> list[TokenRow]:
        return self._store.tokens()

    def revoke(
        self, ref: str, keeps_admin: Callable[[list[TokenRow]], bool] | None = None
    ) -> list[TokenRow]:
        """Delete the token whose id is `ref`, or else every token of the user `ref`.

        Returns what was revoked; raises LookupError if nothing matches, and ValueError if
        `keeps_admin` says the tokens left would let no admin in (revoking the last admin
        token would lock everyone out of the admin API: create another one first).
        """
        with self._write_lock:
            rows = self._store.tokens()
            hit = [t for t in rows if token_id(t.hash) == ref] or [t for t in rows if t.user == ref]
            if not hit:
                raise LookupError(f"no token with id {ref!r} and no tokens of a user {ref!r}")
            gone = {t.hash for t in hit}
            left = [t for t in rows if t.hash not in gone]
            if keeps_admin is not None and not keeps_admin(left):
                raise ValueError(
                    f"revoking {ref!r} would leave no admin token; create another admin token"
                    " first (corral token create NAME --admin)"
                )
            with self._store.tx() as tx:
                tx.delete_tokens(sorted(gone))
            self.reload()
        return hit


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
