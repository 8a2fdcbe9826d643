"""Who a worker runs as, where it starts, and what it can never see (docs/security.md).

Every executor starts workers through `worker_process()`, so they all keep the same rules:

- The launch names a Unix account and this process is root: the worker gets the account's
  uid, gid and supplementary groups, and its HOME, USER, LOGNAME and SHELL. Popen switches to
  them between fork and exec. corral's state dir (0700, root's) is out of its reach by plain
  permissions, and so are other users' workers and logs.
- Otherwise the worker runs as this process's own user, which owns the state dir. It is then
  started through the wrapper `cover.py`, which enters a new mount namespace (inside
  a new user namespace when unprivileged), lays an empty, read-only tmpfs over each hidden path,
  changes to the workdir and only then execs the command. The command runs with no
  capabilities (a non-root uid drops them at exec), so it cannot unmount the cover, and mounts
  it inherits into any namespace of its own are locked by the kernel.

If the cover cannot be laid (user namespaces disabled), the worker does not start: a job that
could read the admin token must not run at all.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.executors.base import Launch

# The wrapper is a file of its own that imports nothing but the standard library, run with
# -I -S: quick to start, and the job's env (its PYTHONPATH above all) cannot choose the code
# that runs before the state dir is covered.
COVER = Path(__file__).with_name("cover.py")
WORKER_UMASK = 0o022  # corral itself runs with 077; a user's job gets the usual default
PR_SET_DUMPABLE = 4


class WorkerSetupError(Exception):
    """The worker cannot be started as asked; the text is one line for the worker's log."""


@dataclass(frozen=True, slots=True)
class Account:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    shell: str

    @classmethod
    def named(cls, name: str) -> Account:
        """The account from the node's user database; KeyError if it has none."""
        pw = pwd.getpwnam(name)
        groups = tuple(os.getgrouplist(pw.pw_name, pw.pw_gid))
        return cls(pw.pw_name, pw.pw_uid, pw.pw_gid, groups, pw.pw_dir, pw.pw_shell)

    @classmethod
    def current(cls) -> Account:
        uid = os.geteuid()
        try:
            pw = pwd.getpwuid(uid)
        except KeyError:  # a container's arbitrary uid: no entry, but it still runs
            home = os.environ.get("HOME", "/")
            return cls(str(uid), uid, os.getegid(), tuple(os.getgroups()), home, "/bin/sh")
        return cls(pw.pw_name, uid, pw.pw_gid, tuple(os.getgroups()), pw.pw_dir, pw.pw_shell)

    def login_env(self) -> dict[str, str]:
        return {
            "HOME": self.home,
            "USER": self.name,
            "LOGNAME": self.name,
            "SHELL": self.shell or "/bin/sh",
        }


@dataclass(slots=True)
class WorkerProcess:
    """What to hand subprocess.Popen for one worker, besides its stdio and session."""

    args: list[str]
    env: dict[str, str]
    cwd: str
    user: int | None = None
    group: int | None = None
    extra_groups: list[int] | None = None

    def popen_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"env": self.env, "cwd": self.cwd, "umask": WORKER_UMASK}
        if self.user is not None:
            kwargs |= {"user": self.user, "group": self.group, "extra_groups": self.extra_groups}
        return kwargs


def _argv(command: str | tuple[str, ...]) -> list[str]:
    return ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)


def _workdir(launch: Launch, account: Account) -> str:
    workdir = launch.workdir or account.home
    if not os.path.isdir(workdir):
        raise WorkerSetupError(f"workdir {workdir} does not exist on this node")
    return workdir


def worker_process(
    launch: Launch,
    index: int,
    hide: Sequence[str],
    base_env: Mapping[str, str] | None = None,
) -> WorkerProcess:
    """How to start worker `index` of `launch`: as its account, in its workdir, with `hide`
    (corral's state dir) out of its sight. `base_env` (default: this process's environment)
    is what the user's env and the contract's variables are added on top of (DESIGN §4)."""
    base = dict(os.environ if base_env is None else base_env)
    me = Account.current()
    if launch.account is None or launch.account == me.name:
        return _as_corral(launch, {**base, **launch.env, **launch.contract_env(index)}, me, hide)
    if me.uid != 0:
        raise WorkerSetupError(
            f"cannot run as account {launch.account}: corral does not run as root here"
        )
    try:
        account = Account.named(launch.account)
    except KeyError:
        raise WorkerSetupError(f"no Unix account {launch.account} on this node") from None
    env = {**base, **account.login_env(), **launch.env, **launch.contract_env(index)}
    workdir = _workdir(launch, account)
    groups = list(account.groups)
    return WorkerProcess(_argv(launch.command), env, workdir, account.uid, account.gid, groups)


def _as_corral(
    launch: Launch, env: dict[str, str], me: Account, hide: Sequence[str]
) -> WorkerProcess:
    """Corral's own user, through the wrapper that covers `hide` first."""
    argv, workdir = _argv(launch.command), _workdir(launch, me)
    # Found here, as exec will look for it, so a command that cannot start fails the same way
    # (no worker started) whether or not it goes through the wrapper.
    program = os.path.join(workdir, argv[0]) if os.sep in argv[0] else argv[0]
    if shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        raise WorkerSetupError(f"cannot start {argv[0]!r} in {workdir}: no such executable file")
    args = [sys.executable, "-I", "-S", str(COVER)]
    args += [f"--hide={path}" for path in hide]
    args += [f"--cd={workdir}", "--", *argv]
    return WorkerProcess(args, env, "/")


def not_dumpable() -> None:
    """Make /proc/PID of this process root's and refuse ptrace: a job that runs as the same
    user must not reach corral's open files (the database, logs) through /proc/PID/fd."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: nothing to do
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
