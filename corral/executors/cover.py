"""The wrapper that starts a worker running as corral's own user (runas.py, docs/security.md):

    python -I -S cover.py [--hide=PATH]... --cd=DIR -- ARGV...

It enters a new mount namespace (inside a new user namespace when not root), lays an empty,
read-only tmpfs over each PATH, changes to DIR and execs ARGV. It imports nothing but the
standard library, so it starts quickly and no module the job could plant runs before the cover.
"""

import ctypes
import os
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REC, MS_PRIVATE = 1 << 14, 1 << 18


def _call(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def cover(paths):
    """Hide `paths` from this process and what it execs, under an empty read-only tmpfs in a
    mount namespace of its own (and a user namespace of its own when not root)."""
    paths = [p for p in paths if os.path.exists(p)]
    if not paths:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.geteuid(), os.getegid()
    _call(libc.unshare(CLONE_NEWNS | (0 if uid == 0 else CLONE_NEWUSER)), "unshare")
    if uid != 0:  # the same ids inside: files keep their owners, `id` says the same
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"{gid} {gid} 1")
    # Private first, so the cover never propagates back to the host's mount namespace.
    _call(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
    for path in paths:
        _call(libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs", flags, b"size=0,mode=000"), path)


def main(args):
    if "--" not in args:
        print("usage: python -I -S cover.py [--hide=PATH]... --cd=DIR -- ARGV...")
        return 2
    split = args.index("--")
    options, command = args[:split], args[split + 1 :]
    hide = [o.removeprefix("--hide=") for o in options if o.startswith("--hide=")]
    workdir = next((o.removeprefix("--cd=") for o in options if o.startswith("--cd=")), "/")
    try:
        cover(hide)
    except OSError as err:
        print(
            f"corral: cannot hide corral's state dir from the job ({err}); jobs run as corral's"
            " own user need user namespaces (sysctl user.max_user_namespaces > 0), or run corral"
            " as root",
            file=sys.stderr,
        )
        return 126
    try:
        os.chdir(workdir)
        os.execvp(command[0], command)
    except OSError as err:
        print(f"corral: cannot start {command[0]!r} in {workdir}: {err.strerror}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
