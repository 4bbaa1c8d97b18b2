"""The suite's issue 21 additions still run: an outside gateway joins the relay tables
(``--target NAME=URL``), and the scenarios with their own gateway (silent cold start, a swap
under load) produce their figures and the swap's receipt. Timings are not asserted.

The prefetch scenario is left out: it drops the machine's page cache (root only), which is not
a test's to do on a shared machine; ``bench/suite.py --quick --scenarios prefetch`` runs it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bench.procs import http_status, wait_until
from tests.e2e.conftest import free_port

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e


def _suite(out: Path, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "suite.py"), "--quick", "--json", str(out), *args],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text())


def test_an_outside_gateway_joins_the_relay_tables(tmp_path: Path) -> None:
    backend_port = free_port()
    floor_port = free_port()
    outside = subprocess.Popen(  # any running gateway will do: here the Python floor proxy
        [sys.executable, str(REPO / "bench" / "floor_proxy.py"), "--port", str(floor_port),
         "--upstream", f"http://127.0.0.1:{backend_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # Listening first: the suite skips an outside gateway that nothing answers for.
        wait_until(lambda: http_status(floor_port, "/") is not None, "the floor proxy")
        results = _suite(
            tmp_path / "outside.json",
            "--targets", "direct",
            "--backend-port", str(backend_port),
            "--target", f"theirs=http://127.0.0.1:{floor_port}",
            "--scenarios", "latency,streams",
        )  # fmt: skip
    finally:
        outside.terminate()
        outside.wait(30)
    assert results["problems"] == []
    assert results["targets"]["theirs"]["skipped"] is None
    cell = results["scenarios"]["latency"]["c1"]["theirs"]
    assert cell["checked"] > 0
    assert cell["failed"] == 0
    paced = results["scenarios"]["streams"]["paced c1"]["theirs"]
    assert paced["metrics"]["cpu_per_chunk"][0] >= 0  # its process was found by its port


def test_a_silent_cold_start_and_a_swap_under_load_report_their_figures(tmp_path: Path) -> None:
    results = _suite(tmp_path / "extras.json", "--scenarios", "silent,swap")
    assert results["problems"] == []
    silent = results["extras"]["silent"]
    for figures in (silent, silent["llamacpp"]):  # binds when ready; 503 while it loads
        assert len(figures["share"]) == figures["rounds"]
        assert set(figures["share_parts"]) == {"spawn", "detect", "reply"}
        assert figures["poll_wall"] > 0
        assert figures["first_poll_wall"] > 0
        assert len(figures["poll_shares"]) == len(figures["first_poll_shares"]) == 1  # quick
    swap = results["extras"]["swap"]
    (only,) = swap["rounds"]
    assert only["a_failed"] == 0, only["a_errors"]
    receipt = only["receipt"]
    assert receipt["target"] == "b"
    assert receipt["evict"] == ["a"]
    assert receipt["stop_seconds"] > 0  # a takes its time to stop
    assert receipt["prefetch"]["outcome"] in ("done", "stopped", "skipped")
    goals = {g["goal"]: g["verdict"] for g in results["goals"]}
    assert any("silent backend" in goal for goal in goals)
