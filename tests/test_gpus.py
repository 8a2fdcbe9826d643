"""GPU discovery and the device allocator."""

from __future__ import annotations

import pytest

from corral.executors.gpus import (
    GpuInfo,
    assign_devices,
    detect_gpus,
    fake_gpus,
    parse_nvidia_smi,
)


def test_detect_gpus_returns_gpu_infos_or_nothing() -> None:
    # Whatever this machine has (none, on CI): detection must not raise.
    gpus = detect_gpus()
    assert all(isinstance(gpu, GpuInfo) for gpu in gpus)
    assert [gpu.index for gpu in gpus] == list(range(len(gpus)))


def test_fake_gpus() -> None:
    assert fake_gpus(2, "h100", 81920) == [GpuInfo(0, "h100", 81920), GpuInfo(1, "h100", 81920)]
    assert fake_gpus(0) == []


def test_parse_nvidia_smi() -> None:
    text = "0, NVIDIA H100 80GB HBM3, 81559 MiB\n1, NVIDIA H100 80GB HBM3, 81559 MiB\n\n"
    assert parse_nvidia_smi(text) == [
        GpuInfo(0, "NVIDIA H100 80GB HBM3", 81559),
        GpuInfo(1, "NVIDIA H100 80GB HBM3", 81559),
    ]
    assert parse_nvidia_smi("0, Odd, Name, 16 MiB") == [GpuInfo(0, "Odd, Name", 16)]
    assert parse_nvidia_smi("NVIDIA-SMI has failed because it couldn't communicate") is None
    assert parse_nvidia_smi("0, T4, [N/A]") is None


def test_assign_devices_takes_lowest_free_and_never_repeats() -> None:
    free = {"a": {3, 0, 5, 1}, "b": {7, 6}}
    placement = ["a", "b", "a"]
    assert assign_devices(free, placement, 2) == [(0, 1), (6, 7), (3, 5)]
    assert free == {"a": {3, 0, 5, 1}, "b": {7, 6}}  # pure: the input is untouched
    assert assign_devices(free, ["a"] * 4, 1) == [(0,), (1,), (3,), (5,)]
    assert assign_devices(free, ["b"], 0) == [()]


def test_assign_devices_rejects_overcommit() -> None:
    with pytest.raises(ValueError, match="worker 2 needs 2 devices on 'a', 0 are free"):
        assign_devices({"a": {0, 1, 2, 3}}, ["a", "a", "a"], 2)
    with pytest.raises(ValueError, match="on 'zz'"):
        assign_devices({"a": {0}}, ["zz"], 1)
