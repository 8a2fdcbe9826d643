"""This machine's GPUs, and which device indices each worker of a gang gets."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

NVIDIA_SMI_QUERY = ["--query-gpu=index,name,memory.total", "--format=csv,noheader"]


@dataclass(frozen=True, slots=True)
class GpuInfo:
    index: int
    name: str
    memory_mb: int


def detect_gpus() -> list[GpuInfo]:
    """The GPUs NVML reports, else those nvidia-smi reports, else none."""
    gpus = _detect_nvml()
    if gpus is None:
        gpus = _detect_nvidia_smi()
    return gpus or []


def _detect_nvml() -> list[GpuInfo] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # no driver: the normal case on a machine without GPUs
        return None
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total
            # Older bindings return bytes, newer ones str.
            name = name.decode() if isinstance(name, bytes) else name
            gpus.append(GpuInfo(index, name, memory // 2**20))
        return gpus
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


def _detect_nvidia_smi() -> list[GpuInfo] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run(
            [exe, *NVIDIA_SMI_QUERY], capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_nvidia_smi(done.stdout)


def parse_nvidia_smi(text: str) -> list[GpuInfo] | None:
    """Parse `index, name, 81920 MiB` lines; None if any line is not of that form."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 3:
            return None
        # A name could hold a comma; index and memory are the first and last fields.
        memory = fields[-1].removesuffix("MiB").strip()
        if not fields[0].isdigit() or not memory.isdigit():
            return None
        gpus.append(GpuInfo(int(fields[0]), ", ".join(fields[1:-1]), int(memory)))
    return gpus


def fake_gpus(n: int, name: str = "fake", memory_mb: int = 0) -> list[GpuInfo]:
    """`n` pretend devices for a machine without GPUs (`corral up --fake-gpus N`)."""
    return [GpuInfo(index, name, memory_mb) for index in range(n)]


def assign_devices(
    free_by_node: dict[str, set[int]], placement: list[str], per_worker: int
) -> list[tuple[int, ...]]:
    """Device indices for each worker, in worker order: the lowest free ones on its node,
    never the same device twice. `placement` names the node of each worker. Raises
    ValueError if a node has too few free devices (the scheduler placed wrongly)."""
    remaining = {node: sorted(free) for node, free in free_by_node.items()}
    assigned = []
    for worker, node in enumerate(placement):
        free = remaining.get(node, [])
        if len(free) < per_worker:
            raise ValueError(
                f"worker {worker} needs {per_worker} devices on {node!r}, "
                f"{len(free)} are free there"
            )
        assigned.append(tuple(free[:per_worker]))
        remaining[node] = free[per_worker:]
    return assigned
