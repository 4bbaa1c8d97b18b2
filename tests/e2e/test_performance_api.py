"""GET /api/performance and GET /api/hardware through ``python -m modelswap serve``: llama-swap's
shape, the read scope, the configured interval, a fake ``nvidia-smi`` on PATH."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest
from tests.e2e.conftest import HANG, Gateway, fake_cmd, request
from tests.fakes import nvidia_smi

StartGateway = Callable[..., Gateway]
READ_KEY = "sk-perf-monitor-0123456789abcdef"
INFER_KEY = "sk-perf-client-0123456789abcdef"
KEYS = (
    "apiKeys:\n"
    f"  - {{key: {READ_KEY}, name: monitor, scopes: [read]}}\n"
    f"  - {{key: {INFER_KEY}, name: client, scopes: [inference]}}\n"
)
MODELS = f"  tiny:\n    cmd: {fake_cmd()}\n"
READ = {"Authorization": f"Bearer {READ_KEY}"}


@pytest.fixture
def fake_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "gpu-bin"
    directory.mkdir()
    nvidia_smi.install(directory, "--gpus", "2")
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")
    return directory


def samples(gw: Gateway, count: int, path: str = "/api/performance") -> dict[str, object]:
    """The monitor's view once it holds ``count`` samples."""
    seen: dict[str, object] = {}

    def enough() -> bool:
        reply = request(gw, "GET", path, headers=READ)
        assert reply.status == 200, reply.body
        seen.update(reply.json())
        return len(seen["sys_stats"]) >= count  # type: ignore[arg-type]

    gw.wait_for(enough, timeout=HANG)
    return seen


def test_performance_samples_at_the_configured_interval(
    gateway: StartGateway, fake_gpu: Path
) -> None:
    gw = gateway(MODELS, extra_top=KEYS + "performance: {every: 1s}\n")
    view = samples(gw, 2)
    assert view["enabled"] is True
    assert view["every"] == 1.0
    first, second = view["sys_stats"][:2]  # type: ignore[index]
    assert second["t"] - first["t"] >= 0.5  # one tick apart, not a burst (no upper bound)
    for key in ("cpu_util_per_core", "mem_total_mb", "mem_used_mb", "net_io", "timestamp"):
        assert key in second  # llama-swap's SysStat fields
    assert second["net_recv_bps"] is not None
    assert view["gpu"] == {"available": True, "tool": "nvidia-smi", "reason": None}
    names = {g["name"] for g in view["gpu_stats"]}  # type: ignore[attr-defined]
    assert names == {"NVIDIA Fake 0", "NVIDIA Fake 1"}

    newest = second["timestamp"]
    later = request(gw, "GET", f"/api/performance?after={quote(newest)}", headers=READ).json()
    assert all(s["t"] > second["t"] for s in later["sys_stats"])


def test_performance_needs_the_read_scope_and_checks_after(gateway: StartGateway) -> None:
    gw = gateway(MODELS, extra_top=KEYS)
    assert request(gw, "GET", "/api/performance").status == 401
    infer = {"Authorization": f"Bearer {INFER_KEY}"}
    assert request(gw, "GET", "/api/performance", headers=infer).status == 403
    assert request(gw, "GET", "/api/hardware", headers=infer).status == 403
    bad = request(gw, "GET", "/api/performance?after=yesterday", headers=READ)
    assert bad.status == 400
    error = bad.json()["error"]
    assert error["param"] == "after"
    assert "RFC 3339" in error["message"]


def test_performance_off_says_so(gateway: StartGateway) -> None:
    gw = gateway(MODELS, extra_top="performance: {disabled: true}\n")
    reply = request(gw, "GET", "/api/performance")
    assert reply.status == 503
    assert reply.json() == {
        "enabled": False,
        "reason": "performance.disabled is true in the config",
    }


def test_hardware_lists_cpu_memory_gpus_os_python_and_version(
    gateway: StartGateway, fake_gpu: Path
) -> None:
    gw = gateway(MODELS, extra_top=KEYS)
    reply = request(gw, "GET", "/api/hardware", headers=READ)
    assert reply.status == 200
    hw = reply.json()
    assert hw["cpu"]["logical_thread_count"] == os.cpu_count()
    assert hw["memory"]["capacity_bytes"] > 0
    assert [a["model"] for a in hw["accelerators"]] == ["NVIDIA Fake 0", "NVIDIA Fake 1"]
    assert hw["accelerators"][0]["driver"]["version"] == "550.54.15"
    assert hw["operating_system"]["kernel"] == os.uname().release
    assert hw["python"]["version"]
    assert hw["gateway"]["version"] == request(gw, "GET", "/api/version").json()["version"]


def test_without_nvidia_smi_the_gateway_says_no_gpu(
    gateway: StartGateway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python_dir = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", f"{python_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    if any((Path(d) / "nvidia-smi").exists() for d in (python_dir, "/usr/bin", "/bin")):
        pytest.skip("this machine has a real nvidia-smi")
    gw = gateway(MODELS, extra_top="performance: {every: 1s}\n")
    view = request(gw, "GET", "/api/performance").json()
    assert view["gpu"]["reason"] == "no GPU: nvidia-smi is not on PATH"
    hw = request(gw, "GET", "/api/hardware").json()
    assert hw["accelerators"] == []
    assert hw["gpu"]["reason"] == "no GPU: nvidia-smi is not on PATH"


def test_a_new_interval_applies_on_reload_without_a_restart(gateway: StartGateway) -> None:
    gw = gateway(MODELS, extra_top="performance: {every: 30s}\n")
    assert request(gw, "GET", "/api/performance").json()["every"] == 30.0
    assert gw.config_path is not None
    text = gw.config_path.read_text().replace("every: 30s", "every: 2s")
    gw.config_path.write_text(text)
    os.kill(gw.proc.pid, signal.SIGHUP)
    gw.wait_for(lambda: "config reloaded from" in gw.log())
    assert request(gw, "GET", "/api/performance").json()["every"] == 2.0
    assert "applies when modelswap restarts" not in gw.log()  # read at each sample
