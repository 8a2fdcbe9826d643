"""How long a read command takes, as a user's shell runs it.

    python bench/bench_cli.py [--runs 15] [--jobs 50]

Starts a real `corral up` (8 fake GPUs, temporary state dir), submits --jobs jobs, then runs
each read command --runs times as a subprocess (the installed `corral` script, as a shell
would) and prints the median and best wall time, and the median CPU time the command itself
used (user + system: unlike wall time it does not depend on what else the machine runs).
Last, `python -X importtime` of `corral ls`: the modules that cost most to import.

Target (issue #23): a read command answers in under 0.3 s.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = (["ls"], ["ls", "-o", "name"], ["queue"], ["show", "j1"], ["quota"], ["--version"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _time(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    cpu0, t0 = _children_cpu(), time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0, _children_cpu() - cpu0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--jobs", type=int, default=50)
    args = parser.parse_args()
    corral = shutil.which("corral", path=str(Path(sys.executable).parent)) or "corral"
    root = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    port = _free_port()
    server = subprocess.Popen(
        [
            corral,
            "up",
            "--state",
            str(root),
            "--port",
            str(port),
            "--fake-gpus",
            "8",
            "--run-as",
            "corral",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        env = {**os.environ, "CORRAL_URL": f"http://127.0.0.1:{port}"}
        deadline = time.monotonic() + 30
        while not (root / "admin.token").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        env["CORRAL_TOKEN_FILE"] = str(root / "admin.token")
        for _ in range(args.jobs):
            subprocess.run(
                [corral, "submit", "--", "sleep 600"],
                env=env,
                stdout=subprocess.DEVNULL,
                check=True,
            )
        print(f"{'command':<22} {'median':>8} {'best':>8} {'cpu':>8}   ({args.runs} runs)")
        for cmd in COMMANDS:
            runs = [_time([corral, *cmd], env) for _ in range(args.runs)]
            walls, cpus = [w for w, _ in runs], [c for _, c in runs]
            print(
                f"corral {' '.join(cmd):<15} {statistics.median(walls):7.3f}s"
                f" {min(walls):7.3f}s {statistics.median(cpus):7.3f}s"
            )
        out = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "from corral.cli import main; main()", "ls"],
            env=env,
            capture_output=True,
            text=True,
        ).stderr
        rows = []
        for line in out.splitlines():
            if line.startswith("import time:") and "|" in line:
                _, cumulative, name = line.split("|")
                if cumulative.strip().isdigit() and not name.startswith("   "):
                    rows.append((int(cumulative), name.strip()))
        print("\nslowest top-level imports of `corral ls` (cumulative):")
        for us, name in sorted(rows, reverse=True)[:8]:
            print(f"  {us / 1000:6.1f} ms  {name}")
        subprocess.run(
            [corral, "cancel", "-a", "--state", "pending", "--state", "running"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    finally:
        server.terminate()
        server.wait(timeout=15)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
