"""The system monitor (observe/performance.py) and the hardware snapshot (observe/hardware.py):
real psutil readings, and a fake ``nvidia-smi`` program on PATH for the GPU parsing."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest
from tests.fakes import nvidia_smi

from modelswap.observe.hardware import cpu_model, hardware_snapshot
from modelswap.observe.performance import (
    GPU_FIELDS,
    RETAINED_SECONDS,
    PerformanceMonitor,
    parse_gpu_lines,
)


@pytest.fixture
def fake_gpu_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory first on PATH; tests install the fake ``nvidia-smi`` there."""
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")
    return directory


@pytest.fixture
def no_gpu_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_a_system_sample_reads_cpu_memory_and_network(no_gpu_tool: None) -> None:
    clock = Clock()
    monitor = PerformanceMonitor(lambda: 5.0, clock=clock)
    await monitor.sample()
    clock.now += 5
    await monitor.sample()
    first, second = monitor.view()["sys_stats"]
    assert len(second["cpu_util_per_core"]) == psutil.cpu_count()
    assert 0 <= second["cpu_percent"] <= 100
    memory = psutil.virtual_memory()
    assert second["mem_total_mb"] == memory.total // 1024**2
    assert 0 < second["mem_used_mb"] <= second["mem_total_mb"]
    assert {n["name"] for n in second["net_io"]} == set(psutil.net_io_counters(pernic=True))
    assert first["net_recv_bps"] is None  # a rate needs two readings
    assert second["net_recv_bps"] >= 0
    assert second["net_sent_bps"] >= 0
    assert second["timestamp"] == "1970-01-12T13:46:45.000Z"  # RFC 3339, UTC
    assert second["load_avg_1"] >= 0


async def test_without_nvidia_smi_it_says_no_gpu(no_gpu_tool: None) -> None:
    monitor = PerformanceMonitor(lambda: 5.0)
    await monitor.sample()
    view = monitor.view()
    assert view["gpu_stats"] == []
    assert view["gpu"] == {
        "available": False,
        "tool": None,
        "reason": "no GPU: nvidia-smi is not on PATH",
    }


async def test_gpus_are_read_through_nvidia_smi_on_path(fake_gpu_path: Path) -> None:
    calls = fake_gpu_path / "calls"
    nvidia_smi.install(fake_gpu_path, "--gpus", "2", "--calls", str(calls))
    monitor = PerformanceMonitor(lambda: 5.0)
    assert monitor.nvidia_smi == str(fake_gpu_path / "nvidia-smi")
    await monitor.sample()
    view = monitor.view()
    assert view["gpu"] == {"available": True, "tool": "nvidia-smi", "reason": None}
    first, second = view["gpu_stats"]
    assert (first["id"], first["name"], first["uuid"]) == (0, "NVIDIA Fake 0", "GPU-fake-0000")
    assert second["gpu_util_pct"] == 38.0
    assert (second["mem_used_mb"], second["mem_total_mb"]) == (2048, 24576)
    assert second["mem_util_pct"] == round(2048 / 24576 * 100, 1)
    assert (second["power_draw_w"], second["temp_c"]) == (123.45, 56.0)
    assert calls.read_text() == (
        f"--query-gpu={','.join(GPU_FIELDS)} --format=csv,noheader,nounits\n"
    )


async def test_unknown_gpu_values_are_null(fake_gpu_path: Path) -> None:
    nvidia_smi.install(fake_gpu_path, "--power", "[N/A]")
    monitor = PerformanceMonitor(lambda: 5.0)
    await monitor.sample()
    (row,) = monitor.view()["gpu_stats"]
    assert row["power_draw_w"] is None
    assert row["temp_c"] == 55.0


async def test_a_failing_nvidia_smi_is_said_in_its_own_words(fake_gpu_path: Path) -> None:
    nvidia_smi.install(fake_gpu_path, "--fail", "NVIDIA-SMI has failed: driver not loaded")
    monitor = PerformanceMonitor(lambda: 5.0)
    await monitor.sample()
    gpu = monitor.view()["gpu"]
    assert gpu["available"] is False
    assert gpu["reason"] == "nvidia-smi failed: NVIDIA-SMI has failed: driver not loaded"
    assert monitor.view()["sys_stats"]  # the rest is still sampled


async def test_nvidia_smi_with_no_device(fake_gpu_path: Path) -> None:
    nvidia_smi.install(fake_gpu_path, "--gpus", "0")
    monitor = PerformanceMonitor(lambda: 5.0)
    await monitor.sample()
    assert monitor.view()["gpu"]["reason"] == "no GPU: nvidia-smi listed none"


async def test_the_ring_buffer_keeps_an_hour_and_no_more(no_gpu_tool: None) -> None:
    every = RETAINED_SECONDS / 3
    clock = Clock()
    monitor = PerformanceMonitor(lambda: every, clock=clock)
    for _ in range(5):
        await monitor.sample()
        clock.now += every
    stats = monitor.view()["sys_stats"]
    assert len(stats) == 3
    assert [s["t"] for s in stats] == [1_000_000.0 + every * i for i in (2, 3, 4)]


async def test_a_new_interval_resizes_the_buffer_keeping_the_newest(no_gpu_tool: None) -> None:
    interval = [RETAINED_SECONDS / 4]
    clock = Clock()
    monitor = PerformanceMonitor(lambda: interval[0], clock=clock)
    for _ in range(4):
        await monitor.sample()
        clock.now += 1
    interval[0] = RETAINED_SECONDS / 2  # a reload: two samples now span the hour
    await monitor.sample()
    assert [s["t"] for s in monitor.view()["sys_stats"]] == [1_000_003.0, 1_000_004.0]


async def test_after_keeps_only_newer_samples(fake_gpu_path: Path) -> None:
    nvidia_smi.install(fake_gpu_path)
    clock = Clock()
    monitor = PerformanceMonitor(lambda: 5.0, clock=clock)
    for _ in range(3):
        await monitor.sample()
        clock.now += 5
    view = monitor.view(after=1_000_005.0)
    assert [s["t"] for s in view["sys_stats"]] == [1_000_010.0]
    assert [g["t"] for g in view["gpu_stats"]] == [1_000_010.0]


def test_gpu_lines_that_lack_fields_are_skipped() -> None:
    text = "0, A, GPU-1, 5, 10, 100, 50.5, 40\nNo devices were found\n1, B, GPU-2, , 1, 2, 3, 4\n"
    rows = parse_gpu_lines(text, 0.0)
    assert [r["name"] for r in rows] == ["A", "B"]
    assert rows[1]["gpu_util_pct"] is None


def test_cpu_model_from_cpuinfo() -> None:
    text = (
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654\n"
        "physical id\t: 0\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 9654\nphysical id\t: 1\n"
    )
    assert cpu_model(text) == ("AuthenticAMD", "AMD EPYC 9654", 2)
    assert cpu_model("") == (None, None, None)


async def test_the_hardware_snapshot_names_gpus_with_driver_and_memory(
    fake_gpu_path: Path,
) -> None:
    nvidia_smi.install(fake_gpu_path, "--gpus", "1")
    snap = await hardware_snapshot(str(fake_gpu_path / "nvidia-smi"), 0.0)
    (gpu,) = snap["accelerators"]
    assert gpu["model"] == "NVIDIA Fake 0"
    assert gpu["driver"] == {"name": "nvidia", "version": "550.54.15"}
    assert gpu["memory"] == {"kind": "dedicated", "capacity_bytes": 24576 * 1024**2}
    assert gpu["power_limit_watts"] == 350.0
    assert snap["gpu"] == {"available": True, "reason": None}
    assert snap["cpu"]["logical_thread_count"] == psutil.cpu_count()
    assert snap["memory"]["capacity_bytes"] == psutil.virtual_memory().total
    assert snap["gateway"]["name"] == "modelswap"


async def test_the_hardware_snapshot_without_a_gpu_tool() -> None:
    snap = await hardware_snapshot(None, 0.0)
    assert snap["accelerators"] == []
    assert snap["gpu"] == {"available": False, "reason": "no GPU: nvidia-smi is not on PATH"}
    assert snap["python"]["version"]
