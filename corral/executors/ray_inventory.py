"""The Ray pool as corral's nodes, read by a helper process.

`ray.init()` never runs in the control plane's own process: a Ray driver exits when the GCS is
unreachable for a minute, and the API must outlive any Ray outage. So `RayInventory` starts
`python -m corral.executors.ray_inventory ADDRESS FILE`, a small driver that writes the alive
nodes to FILE whenever they change, and reads that file; it restarts the helper if it dies.
The helper also keeps the pool of warm worker actors full (ray_pool.py).

A node's name, accelerator type and domain come from the labels given at `ray start --labels`
(corral.io/node, corral.io/accelerator, corral.io/domain), else from Ray: its node id, its
`accelerator_type:X` resource, the default domain. Its size is its GPU (else TPU) count.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from corral.executors.rundir import read_json, write_json_atomic

log = logging.getLogger("corral.ray")

LABEL_NODE = "corral.io/node"
LABEL_ACCELERATOR = "corral.io/accelerator"
LABEL_DOMAIN = "corral.io/domain"
POLL_INTERVAL = 0.5  # seconds between ray.nodes() calls in the helper
NAMESPACE = "corral"  # the Ray namespace of corral's drivers and actors


@dataclass(frozen=True, slots=True)
class RayNode:
    name: str  # corral's node name
    node_id: str  # Ray's node id (hex)
    address: str  # the node's IP as Ray knows it: MASTER_ADDR when worker 0 runs there
    accelerator: str
    domain: str
    count: int  # accelerators


def corral_node(info: dict[str, Any]) -> RayNode:
    """One entry of `ray.nodes()` as corral sees it."""
    labels = info.get("Labels") or {}
    resources = info.get("Resources") or {}
    types = sorted(k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:"))
    accelerator = labels.get(LABEL_ACCELERATOR) or (types[0].lower() if types else "gpu")
    count = resources.get("GPU") or resources.get("TPU") or 0
    return RayNode(
        name=labels.get(LABEL_NODE) or info["NodeID"],
        node_id=info["NodeID"],
        address=info.get("NodeManagerAddress", ""),
        accelerator=accelerator,
        domain=labels.get(LABEL_DOMAIN, ""),
        count=int(count),
    )


def alive_nodes(infos: list[dict[str, Any]]) -> list[RayNode]:
    """The alive nodes, sorted by name; of two alive nodes with one name, the first by id."""
    nodes: dict[str, RayNode] = {}
    for info in sorted(infos, key=lambda i: i["NodeID"]):
        if not info.get("Alive"):
            continue
        node = corral_node(info)
        if node.name in nodes:
            log.warning("two Ray nodes are named %s; ignoring %s", node.name, node.node_id)
            continue
        nodes[node.name] = node
    return [nodes[name] for name in sorted(nodes)]


def nodes_file(state_dir: Path) -> Path:
    return Path(state_dir) / "ray" / "nodes.json"


def read_nodes(state_dir: Path) -> list[RayNode]:
    """The alive nodes as the helper last wrote them (what the control plane placed on)."""
    return [RayNode(**n) for n in read_json(nodes_file(state_dir)) or []]


def connect(address: str) -> None:
    """Join the Ray cluster at `address` as a quiet driver."""
    import ray

    ray.init(
        address=address,
        namespace=NAMESPACE,
        log_to_driver=False,
        logging_level=logging.WARNING,
        configure_logging=False,
    )


class RayInventory:
    """The nodes of the Ray pool at `address`, as written by the helper process."""

    def __init__(self, address: str, state_dir: Path) -> None:
        self.address = address
        self.path = nodes_file(state_dir)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)  # a previous run's list is not this pool's
        self._seen: int | None = None
        self._helper: subprocess.Popen[bytes] | None = None
        self._ensure_helper()

    def _ensure_helper(self) -> None:
        if self._helper is not None and self._helper.poll() is None:
            return
        if self._helper is not None:
            log.warning("Ray inventory helper exited %s; restarting", self._helper.returncode)
        with open(self.path.parent / "inventory.log", "ab") as out:
            self._helper = subprocess.Popen(
                [sys.executable, "-m", "corral.executors.ray_inventory", self.address, self.path],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def poll(self) -> list[RayNode] | None:
        """The nodes if they changed since the last call, else None."""
        self._ensure_helper()
        try:
            stamp = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            return None
        if stamp == self._seen:
            return None
        self._seen = stamp
        return read_nodes(self.path.parent.parent)

    def wait(self, timeout: float) -> list[RayNode]:
        """The first list of nodes; raises TimeoutError if Ray does not answer in time."""
        deadline = time.monotonic() + timeout
        while (nodes := self.poll()) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no answer from the Ray cluster at {self.address} in {timeout:g}s "
                    f"(see {self.path.parent / 'inventory.log'})"
                )
            time.sleep(0.05)
        return nodes

    def close(self) -> None:
        if self._helper is not None and self._helper.poll() is None:
            self._helper.terminate()  # it retires the idle pooled actors first
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._helper.wait(timeout=10)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m corral.executors.ray_inventory ADDRESS FILE", file=sys.stderr)
        return 2
    address, path = args[0], Path(args[1])
    state_dir = path.parent.parent
    parent = os.getppid()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import ray

    from corral.executors import ray_pool

    connect(address)
    pool = ray_pool.Keeper(state_dir)
    stopping = []  # after connect: ray.init() may put its own handler in place
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))  # close(): a clean stop
    last = None
    # The control plane died (SIGKILL): so do we, and the pool waits for the next one.
    while os.getppid() == parent and not stopping:
        alive = alive_nodes(ray.nodes())
        nodes = [asdict(n) for n in alive]
        if nodes != last:
            write_json_atomic(path, nodes)
            last = nodes
            print(json.dumps({"t": time.time(), "nodes": [n["name"] for n in nodes]}), flush=True)
        pool.keep([n.node_id for n in alive])
        time.sleep(POLL_INTERVAL)
    if stopping:
        ray_pool.retire(state_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
