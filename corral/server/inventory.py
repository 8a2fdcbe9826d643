"""This machine as the scheduler sees it (one Node), and which device indices are in use."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from corral.executors.gpus import GpuInfo, assign_devices, detect_gpus, fake_gpus
from corral.formats.types import Node
from corral.server.store import PlacementRow

# Marketing names -> the short accelerator type used in quota files and job specs.
_KNOWN_TYPES = (
    "gb200",
    "b200",
    "h200",
    "h100",
    "a100",
    "a10g",
    "a10",
    "l40s",
    "l40",
    "l4",
    "v100",
    "t4",
    "p100",
    "a6000",
    "a40",
    "a30",
    "mi300x",
    "mi250",
)


def accelerator_type(gpu_name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100'; an unknown model -> 'gpu'."""
    words = re.split(r"[^a-z0-9]+", gpu_name.lower())
    for known in _KNOWN_TYPES:
        if known in words:
            return known
    return "gpu"


@dataclass(slots=True)
class Inventory:
    """The nodes corral hands out, and the device indices currently pinned to workers."""

    nodes: tuple[Node, ...]
    devices: dict[str, tuple[int, ...]]  # node -> its device indices
    used: dict[str, set[int]] = field(default_factory=dict)

    @property
    def types(self) -> list[str]:
        """The accelerator types of the pool, sorted."""
        return sorted({n.accelerator for n in self.nodes})

    def set_nodes(self, nodes: Iterable[Node]) -> None:
        """The pool changed (a node joined or left); devices in use stay claimed until their
        attempts are released, whichever node they are on."""
        self.nodes = tuple(nodes)
        self.devices = {n.name: tuple(range(n.count)) for n in self.nodes}

    def free(self) -> dict[str, set[int]]:
        return {n: set(d) - self.used.get(n, set()) for n, d in self.devices.items()}

    def assign(self, placement: Sequence[str], per_worker: int) -> list[tuple[int, ...]]:
        """Device indices for each worker of a placement (one node name per worker)."""
        return assign_devices(self.free(), list(placement), per_worker)

    def claim(self, placed: Iterable[PlacementRow]) -> None:
        for p in placed:
            self.used.setdefault(p.node, set()).update(p.gpus)

    def release(self, placed: Iterable[PlacementRow]) -> None:
        for p in placed:
            self.used.get(p.node, set()).difference_update(p.gpus)


def local_inventory(
    fake: int | None = None, accelerator: str | None = None, node_name: str | None = None
) -> Inventory:
    """This machine: its GPUs (NVML, then nvidia-smi), or `fake` pretend ones.

    A machine with no GPU and no --fake-gpus yields a node with 0 accelerators: the server
    still runs (and rejects every job with a clear reason), which beats refusing to start.
    """
    gpus: list[GpuInfo] = (
        fake_gpus(fake, accelerator or "gpu") if fake is not None else (detect_gpus())
    )
    kind = accelerator or (accelerator_type(gpus[0].name) if gpus else "gpu")
    name = node_name or socket.gethostname() or "localhost"
    node = Node(name=name, accelerator=kind, count=len(gpus))
    return Inventory(nodes=(node,), devices={name: tuple(g.index for g in gpus)})


def pretend_inventory(nodes: Sequence[Node]) -> Inventory:
    """A pool of `nodes` (a cluster file's) whose workers all run on this machine, each with
    pretend device indices: multi-node, multi-domain scheduling tried out on one machine."""
    return Inventory(nodes=tuple(nodes), devices={n.name: tuple(range(n.count)) for n in nodes})


class RayNodeSource:
    """The Ray pool's nodes as the scheduler sees them; poll() is None while they stay put."""

    def __init__(self, ray_nodes: Any) -> None:
        self.ray_nodes = ray_nodes  # corral.executors.ray_inventory.RayInventory

    @staticmethod
    def as_nodes(ray_nodes: Iterable[Any]) -> tuple[Node, ...]:
        return tuple(Node(n.name, n.accelerator, n.count, n.domain) for n in ray_nodes)

    def first(self, timeout: float) -> Inventory:
        inventory = Inventory(nodes=(), devices={})
        inventory.set_nodes(self.as_nodes(self.ray_nodes.wait(timeout)))
        return inventory

    def poll(self) -> tuple[Node, ...] | None:
        nodes = self.ray_nodes.poll()
        return None if nodes is None else self.as_nodes(nodes)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free right now (the job binds it moments later; a race nobody can close)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
