"""Jobs run as their users (docs/security.md), on a real `corral up` as root with real Unix
accounts alice and bob (made here with useradd, removed after): alice's job runs as alice, in
its workdir, and cannot read corral's state dir; bob's job can neither signal nor read alice's
processes, nor read her logs; a user with no account is refused at submission. And corral run
by an unprivileged user hides its state dir from its jobs all the same."""

from __future__ import annotations

import contextlib
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import TEAM_QUOTA, LiveServer, free_port

import corral

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: corral up as root, useradd"),
]

MARK = "corral test account"  # the GECOS of the accounts this test makes
# Several test runs may share a machine (and its /etc/passwd): each makes its own alice and bob.
SUFFIX = str(os.getpid())


def make_account(name: str) -> pwd.struct_passwd:
    for _ in range(50):  # another run may hold the lock on /etc/passwd for a moment
        done = subprocess.run(
            ["useradd", "-m", "-c", MARK, "-s", "/bin/sh", name], text=True, capture_output=True
        )
        if done.returncode == 0:
            return pwd.getpwnam(name)
        if done.returncode == 9:  # the name is taken
            pytest.fail(f"a Unix account {name} already exists: not touching it")
        time.sleep(0.1)
    raise AssertionError(f"useradd {name}: {done.stderr}")


def remove_account(account: pwd.struct_passwd) -> None:
    for proc in psutil.process_iter(["uids"]):  # userdel refuses while it has processes
        with contextlib.suppress(psutil.Error):
            if proc.info["uids"] and proc.info["uids"].real == account.pw_uid:
                proc.kill()
    for _ in range(50):
        if subprocess.run(["userdel", "-r", account.pw_name], capture_output=True).returncode in (
            0,
            6,
        ):
            return
        time.sleep(0.1)  # its last processes are going away, or /etc/passwd is locked


@pytest.fixture(scope="module")
def accounts():
    """Corral users alice and bob, each with the Unix account of the same name (the default
    mapping), made for this run: {"alice": passwd entry, "bob": ...}."""
    made = {}
    try:
        for user in ("alice", "bob"):
            made[user] = make_account(user + SUFFIX)
        yield made
    finally:
        for account in made.values():
            remove_account(account)


@pytest.fixture(scope="module")
def server(module_servers, accounts):
    return module_servers(quota=TEAM_QUOTA, fake_gpus=2, run_as=None)  # as root: users


def wait_for(path: Path, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.05)
    return path.read_text().strip()


def submit(server: LiveServer, token: str, workdir: str, script: str) -> str:
    done = server.cli("submit", "--workdir", workdir, "--", "sh", "-c", script, token=token)
    return done.stdout.strip()


def test_jobs_run_as_their_users_and_cannot_touch_each_other(server, accounts):
    alice, bob = accounts["alice"], accounts["bob"]
    state = server.state
    proj = Path(alice.pw_dir) / "proj"
    proj.mkdir(exist_ok=True)
    (proj / "data.txt").write_text("alice's data\n")
    os.chown(proj, alice.pw_uid, alice.pw_gid)
    a_token, b_token = server.token(alice.pw_name), server.token(bob.pw_name)

    alice_job = submit(
        server,
        a_token,
        str(proj),
        "id; pwd; cat data.txt; echo home=$HOME user=$USER logname=$LOGNAME;"
        f" cat {state}/admin.token || echo STATE-DENIED;"
        f" ls {state} || echo LIST-DENIED; echo $$ > pid; sleep 60",
    )
    pid = int(wait_for(proj / "pid"))
    log = server.cli("logs", alice_job, token=a_token).stdout
    assert f"uid={alice.pw_uid}({alice.pw_name}) gid={alice.pw_gid}" in log
    assert f"{proj}\nalice's data\n" in log  # started in its workdir; a relative path works
    assert f"home={alice.pw_dir} user={alice.pw_name} logname={alice.pw_name}" in log
    assert "STATE-DENIED" in log and "LIST-DENIED" in log and "corral_" not in log

    alice_log = state / "logs" / alice_job / "0" / "worker-0.log"
    bob_job = submit(
        server,
        b_token,
        bob.pw_dir,
        f"id; kill -TERM {pid} || echo SIGNAL-DENIED; cat /proc/{pid}/environ || echo"
        f" ENVIRON-DENIED; cat {alice_log} || echo LOG-DENIED",
    )
    server.wait(bob_job, "succeeded")
    log = server.cli("logs", bob_job, token=b_token).stdout
    assert f"uid={bob.pw_uid}({bob.pw_name})" in log
    assert "SIGNAL-DENIED" in log and "ENVIRON-DENIED" in log and "LOG-DENIED" in log
    assert server.job(alice_job)["state"] == "running"  # bob's kill did not reach it
    # Nor can bob read it through the API.
    assert server.cli("logs", alice_job, token=b_token, check=False).returncode == 3  # refused
    server.cli("cancel", alice_job, token=a_token)
    server.wait(alice_job, "cancelled")
    # The state dir and everything in it: 0700 directories, 0600 files.
    for path in [state, *state.rglob("*")]:
        mode = path.lstat().st_mode & 0o777
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))


def test_a_user_without_an_account_is_refused_at_submission(server):
    carol = "carol" + SUFFIX  # no such account
    done = server.cli("submit", "--", "true", token=server.token(carol), check=False)
    assert done.returncode == 3  # refused (docs/live.md's exit codes)
    assert (
        f"Unix account {carol}, which this machine does not have" in done.stderr
        and "(HTTP 403)" in done.stderr
    )
    assert len(done.stderr.strip().splitlines()) == 1


def python_for(account: str, monkeypatch) -> list[str]:
    """An interpreter `account` can run corral with: this one, or (when it lives in a home
    only root may enter, as pyenv's under /root does) the system's of the same version, with
    corral and its packages on PYTHONPATH."""
    site = [p for p in sys.path if p.endswith("site-packages")]
    path = os.pathsep.join([str(Path(corral.__file__).parents[1]), *site])
    check = ["-c", "import corral.cli.live, fastapi, uvicorn, psutil"]
    version = "python{}.{}".format(*sys.version_info[:2])
    others = [(f"{d}/{version}", {"PYTHONPATH": path}) for d in ("/usr/bin", "/usr/local/bin")]
    for python, env in [(sys.executable, {}), *others]:
        try:
            runs = subprocess.run([python, *check], user=account, env=env).returncode == 0
        except OSError:  # no such interpreter, or not one it may run
            runs = False
        if runs:
            for key, value in env.items():
                monkeypatch.setenv(key, value)
            return [python]
    pytest.skip(f"needs a {version} that {account} can run (this one: {sys.executable})")


def test_unprivileged_corral_hides_its_state_dir_from_jobs(accounts, tmp_path, monkeypatch):
    bob = accounts["bob"]
    state = Path(bob.pw_dir) / "corral-state"
    state.mkdir(mode=0o755, exist_ok=True)  # made by hand, too open: corral tightens it
    (state / "notes").write_text("x")
    subprocess.run(["chown", "-R", f"{bob.pw_uid}:{bob.pw_gid}", str(state)], check=True)
    args = ["--fake-gpus", "1", "--accelerator", "gpu"]
    python = python_for(bob.pw_name, monkeypatch)
    server = LiveServer(state, free_port(), args, user=bob.pw_name, python=python)
    server.log_path = tmp_path / "server.log"
    server.start()
    try:
        assert (state.stat().st_mode & 0o777, (state / "notes").stat().st_mode & 0o777) == (
            0o700,
            0o600,
        )
        job = submit(
            server,
            server.admin_token,
            bob.pw_dir,
            f"id -un; cat {state}/admin.token || echo TOKEN-DENIED;"
            f" ls -A {state} | wc -l; touch {state}/x || echo WRITE-DENIED;"
            f" ls /proc/{server.proc.pid}/fd || echo FD-DENIED",
        )
        server.wait(job, "succeeded")
        log = server.cli("logs", job, admin=True).stdout
        assert log.startswith(f"{bob.pw_name}\n")
        assert "TOKEN-DENIED" in log and "WRITE-DENIED" in log and "corral_" not in log
        assert "FD-DENIED" in log  # nor through corral's open files (it is not dumpable)
        assert "\n0\n" in log  # the state dir looks empty from inside the job
    finally:
        server.cancel_all()
        server.stop()
        server.kill_leftovers()
