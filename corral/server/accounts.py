"""Which Unix account runs each user's jobs (docs/security.md).

When corral runs as root (`corral up --run-as users`, the default there), every attempt runs as
the account of its submitting user: the quota file's `[accounts]` maps corral users to accounts,
and a user it does not list runs as the account of the same name. A user with no such account
on this machine is refused at submission. Otherwise (`--run-as corral`, the only choice when
unprivileged) every job runs as corral's own user, with the state dir hidden from it.
"""

from __future__ import annotations

import os
import pwd

from corral.formats.types import Quota

USERS, CORRAL = "users", "corral"


class NoAccount(Exception):
    """The user has no Unix account to run jobs as; the text is one line for the API."""


class RunAs:
    def __init__(self, mode: str | None = None):
        """`mode`: USERS or CORRAL; None: USERS when running as root, CORRAL otherwise."""
        root = os.geteuid() == 0
        self.mode = mode or (USERS if root else CORRAL)
        if self.mode not in (USERS, CORRAL):
            raise ValueError(f"--run-as: {self.mode!r} is not one of {USERS}, {CORRAL}")
        if self.mode == USERS and not root:
            raise ValueError(
                "--run-as users: corral must run as root to run jobs as their users' accounts"
            )

    def account(self, user: str, quota: Quota) -> str | None:
        """The account `user`'s jobs run as; None: corral's own."""
        if self.mode == CORRAL:
            return None
        return quota.accounts.get(user, user)

    def check(self, user: str, quota: Quota) -> None:
        """Raise NoAccount if `user`'s jobs could not start here."""
        account = self.account(user, quota)
        if account is None:
            return
        try:
            pwd.getpwnam(account)
        except KeyError:
            mapped = "" if user not in quota.accounts else " (the quota file's [accounts] says so)"
            raise NoAccount(
                f"user {user} runs jobs as Unix account {account}{mapped}, which this machine"
                f" does not have: ask an admin to create it or to map {user} to an account"
                " under [accounts] in the quota file"
            ) from None
